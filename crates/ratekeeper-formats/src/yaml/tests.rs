//! The reader's own cases, then properties over arbitrary input.

use super::*;

#[test]
fn plain_scalars_resolve_as_yaml_1_1() {
    assert_eq!(resolve_plain("yes"), ScalarKind::Bool(true));
    assert_eq!(resolve_plain("Off"), ScalarKind::Bool(false));
    assert_eq!(resolve_plain("~"), ScalarKind::Null);
    assert_eq!(resolve_plain("0x1f"), ScalarKind::Int(31));
    assert_eq!(resolve_plain("1_000"), ScalarKind::Int(1000));
    assert_eq!(resolve_plain("-12"), ScalarKind::Int(-12));
    assert_eq!(resolve_plain("0.25"), ScalarKind::OtherNumber);
    assert_eq!(resolve_plain("1e3"), ScalarKind::OtherNumber);
    assert_eq!(
        resolve_plain("99999999999999999999"),
        ScalarKind::OtherNumber
    );
    assert_eq!(resolve_plain("minute"), ScalarKind::Str);
    assert_eq!(resolve_plain("1.2.3"), ScalarKind::Str);
    assert_eq!(resolve_plain("-"), ScalarKind::Str);
    assert_eq!(resolve_plain(".5"), ScalarKind::OtherNumber);
    assert_eq!(resolve_plain(".5_0"), ScalarKind::Str);
    assert_eq!(resolve_plain("_1"), ScalarKind::Str);
    assert_eq!(resolve_plain("09"), ScalarKind::OtherNumber);
    assert_eq!(resolve_plain("012"), ScalarKind::Int(10));
    assert_eq!(resolve_plain("0b101"), ScalarKind::Int(5));
    assert_eq!(resolve_plain("2001-12-14"), ScalarKind::Str);
}

#[test]
fn positions_are_one_based() {
    let doc = parse("a:\n  b: c\n", "f.yaml").unwrap();
    let root = doc.root.unwrap();
    let Value::Map(entries) = &root.value else {
        panic!("not a map")
    };
    let (_, inner) = &entries[0];
    let Value::Map(inner) = &inner.value else {
        panic!("not a map")
    };
    assert_eq!((inner[0].1.line, inner[0].1.column), (2, 6));
}

#[test]
fn aliases_are_counted_not_copied() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..30 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let error = parse(&text, "bomb.yaml").unwrap_err();
    assert!(matches!(error, YamlError::TooManyNodes { .. }), "{error}");
}

#[test]
fn node_count_is_capped() {
    let text = format!("[{}]", "a,".repeat(1_000));
    assert!(parse_capped(&text, "wide.yaml", 1_001).is_ok());
    let error = parse_capped(&text, "wide.yaml", 1_000).unwrap_err();
    assert!(
        matches!(error, YamlError::TooManyNodes { max: 1_000, .. }),
        "{error}"
    );
}

#[test]
fn deep_nesting_is_refused() {
    // Flow collections: saphyr's own cap may come first; either way an
    // error, not a stack overflow.
    let text = "[".repeat(100_000);
    let error = parse(&text, "deep.yaml").unwrap_err();
    assert!(
        matches!(error, YamlError::TooDeep { .. } | YamlError::Syntax { .. }),
        "{error}"
    );
    let mut text = String::new();
    for depth in 0..200 {
        text.push_str(&" ".repeat(depth));
        text.push_str("- \n");
    }
    let error = parse(&text, "deep.yaml").unwrap_err();
    assert!(matches!(error, YamlError::TooDeep { .. }), "{error}");
    assert_eq!(error.position().line, MAX_DEPTH + 1);
}

#[test]
fn chained_aliases_cannot_nest_deeper_than_the_cap() {
    let mut text = String::from("a0: &a0 x\n");
    for i in 1..200 {
        text.push_str(&format!("a{i}: &a{i} [[[*a{}]]]\n", i - 1));
    }
    let error = parse(&text, "chain.yaml").unwrap_err();
    assert!(matches!(error, YamlError::TooDeep { .. }), "{error}");
}

#[test]
fn merge_keys_expand() {
    let doc = parse("base: &b {x: 1}\nm:\n  <<: *b\n  y: 2\n", "m.yaml").unwrap();
    let root = doc.root.unwrap();
    let Value::Map(entries) = &root.value else {
        panic!()
    };
    let Value::Map(m) = &entries[1].1.value else {
        panic!()
    };
    let keys: Vec<_> = m.iter().map(|(k, _)| k.scalar().unwrap().0).collect();
    assert_eq!(keys, ["x", "y"]);
}

/// Pieces of YAML's syntax, anchors, aliases and merge keys among them,
/// joined at random: texts that get past the first character far more
/// often than arbitrary ones do.
fn fragments() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    proptest::collection::vec(
        prop::sample::select(vec![
            "- ",
            ": ",
            "\n",
            "  ",
            "\t",
            "[",
            "]",
            "{",
            "}",
            ", ",
            "? ",
            "&a ",
            "&b ",
            "*a",
            "*b",
            "<<: ",
            "key",
            "domain",
            "descriptors",
            "namespace",
            "'q'",
            "\"q\"",
            "|\n",
            ">\n",
            "---\n",
            "...\n",
            "!!str ",
            "#c",
            "é",
            "\u{feff}",
            "\r",
            "0x1f",
            "yes",
            "~",
            "1_000",
            ".5",
        ]),
        0..60,
    )
    .prop_map(|parts| parts.concat())
}

/// The largest line an error may name in `text`: one past its last line
/// break, of any kind YAML knows.
fn last_line(text: &str) -> usize {
    text.chars()
        .filter(|c| matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}'))
        .count()
        + 2
}

/// What `parse` promises of any text: no panic; a tree within the caps
/// (nodes, aliases expanded, at most twice the text's length plus a
/// constant; nesting at most [`MAX_DEPTH`]), or an error placed in the
/// file.
fn check_bounded(text: &str) -> Result<(), proptest::test_runner::TestCaseError> {
    match parse(text, "any.yaml") {
        Ok(document) => {
            if let Some(root) = &document.root {
                let budget = text.len().saturating_mul(2).saturating_add(10_000);
                proptest::prop_assert!(root.size <= budget.min(MAX_NODES), "{}", root.size);
                proptest::prop_assert!(root.height <= MAX_DEPTH, "{}", root.height);
            }
        }
        Err(error) => {
            let at = error.position();
            proptest::prop_assert_eq!(at.file.as_str(), "any.yaml");
            proptest::prop_assert!(at.line <= last_line(text), "{} in {:?}", error, text);
            proptest::prop_assert!(at.column >= 1);
        }
    }
    Ok(())
}

proptest::proptest! {
    #[test]
    fn arbitrary_text_is_read_within_bounds(text in ".{0,400}") {
        check_bounded(&text)?;
    }

    #[test]
    fn arbitrary_bytes_are_read_within_bounds(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        check_bounded(&String::from_utf8_lossy(&bytes))?;
    }

    #[test]
    fn yaml_shaped_text_is_read_within_bounds(text in fragments()) {
        check_bounded(&text)?;
    }

    /// Both formats on the same texts: no panic, and a refusal names a
    /// place in the file (the text is far below the size caps).
    #[test]
    fn both_formats_read_yaml_shaped_text(text in fragments()) {
        if let Err(error) = crate::envoy::EnvoyConfig::from_yaml_str(&text, "any.yaml") {
            proptest::prop_assert!(error.position().is_some(), "{}", error);
        }
        if let Err(error) = crate::limitador::LimitadorConfig::from_yaml_str(&text, "any.yaml") {
            proptest::prop_assert!(error.position().is_some(), "{}", error);
        }
    }
}
