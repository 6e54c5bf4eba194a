//! The loader on Limitador's fixtures, each condition form, and errors.

use std::path::{Path, PathBuf};

use proptest::prelude::*;

use super::*;

/// `shared/compat/limitador`, found as `envoy`'s tests find theirs:
/// under `RATEKEEPER_COMPAT_DIR`, above the crate, or in `/work/shared`.
/// Missing is a failure, not a skip.
fn compat_dir() -> PathBuf {
    const FIXTURES: &str = "limitador";
    if let Some(dir) = std::env::var_os("RATEKEEPER_COMPAT_DIR") {
        let candidate = PathBuf::from(dir).join(FIXTURES);
        assert!(candidate.is_dir(), "no {}", candidate.display());
        return candidate;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|dir| dir.join("shared/compat"))
        .chain([PathBuf::from("/work/shared/compat")])
        .map(|compat| compat.join(FIXTURES))
        .find(|candidate| candidate.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/compat/limitador above {}; set RATEKEEPER_COMPAT_DIR",
                crate_dir.display()
            )
        })
}

fn descriptors<'a>(request: &'a [Vec<(&'a str, &'a str)>]) -> Descriptors<'a> {
    Descriptors::new(request.iter().map(|d| d.iter().copied()))
}

fn load(text: &str) -> LimitadorConfig {
    LimitadorConfig::from_yaml_str(text, "limits.yaml").unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> LimitadorConfigError {
    LimitadorConfig::from_yaml_str(text, "limits.yaml").unwrap_err()
}

#[test]
fn every_fixture_loads() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(compat_dir())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        let config = LimitadorConfig::load(&file).unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.limits().is_empty(), "{}", file.display());
        assert!(config.warnings().is_empty(), "{:?}", config.warnings());
    }
}

#[test]
fn the_examples_fixture_reads_as_written() {
    let config = LimitadorConfig::load(compat_dir().join("examples-limits.yaml")).unwrap();
    let [open, posts] = config.limits() else {
        panic!("{:?}", config.limits())
    };
    assert_eq!(
        (open.namespace(), open.max_value(), open.seconds()),
        ("test_namespace", 1_000_000, 60)
    );
    assert!(open.conditions().is_empty() && open.variables().is_empty());
    assert_eq!(posts.max_value(), 5);
    assert_eq!(
        posts.conditions()[0].source(),
        "descriptors[0]['req.method'] == 'POST'"
    );
    assert_eq!(posts.variables()[0].source(), "descriptors[0]['user_id']");
    let post = [vec![("req.method", "POST"), ("user_id", "u1")]];
    assert_eq!(
        posts.variable_values(&descriptors(&post)),
        Some(vec!["u1".to_owned()])
    );
    assert!(open.applies(&descriptors(&post)));
    let get = [vec![("req.method", "GET"), ("user_id", "u1")]];
    assert!(!posts.applies(&descriptors(&get)));
    let no_user = [vec![("req.method", "POST")]];
    assert!(!posts.applies(&descriptors(&no_user)));
}

#[test]
fn the_sandbox_fixture_splits_by_method_and_path() {
    let config = LimitadorConfig::load(compat_dir().join("sandbox-limits.yaml")).unwrap();
    let applying = |request: &[Vec<(&str, &str)>]| -> Vec<u64> {
        let d = descriptors(request);
        config
            .namespace("test_namespace")
            .filter(|limit| limit.applies(&d))
            .map(|limit| limit.max_value())
            .collect()
    };
    assert_eq!(
        applying(&[vec![("req.method", "GET"), ("req.path", "/")]]),
        [10]
    );
    assert_eq!(
        applying(&[vec![("req.method", "POST"), ("req.path", "/")]]),
        [5]
    );
    assert_eq!(
        applying(&[vec![("req.path", "/json"), ("req.method", "GET")]]),
        [50_000]
    );
    assert!(applying(&[vec![("req.method", "GET")]]).is_empty());
    assert_eq!(config.namespace("other").count(), 0);
}

/// The examples of Limitador's "how it works" page, with its request of
/// one descriptor `KEY_A: VALUE_A, OTHER_KEY: OTHER_VALUE`.
#[test]
fn how_it_works_examples() {
    let request = [vec![("KEY_A", "VALUE_A"), ("OTHER_KEY", "OTHER_VALUE")]];
    let applies = |conditions: &str, variables: &str| {
        let text = format!(
            "- namespace: example.org\n  max_value: 1\n  seconds: 60\n  conditions: {conditions}\n  variables: {variables}\n"
        );
        load(&text).limits()[0].applies(&descriptors(&request))
    };
    assert!(applies(r#"["descriptors[0].KEY_A == 'VALUE_A'"]"#, "[]"));
    assert!(!applies(r#"["descriptors[0].KEY_B == 'VALUE_B'"]"#, "[]"));
    assert!(!applies(
        r#"["descriptors[0].KEY_A == 'VALUE_A'", "descriptors[0].OTHER_KEY == 'WRONG_VALUE'"]"#,
        "[]"
    ));
    assert!(!applies("[]", r#"["descriptors[0].MY_VAR"]"#));
    assert!(!applies(
        r#"["descriptors[0].KEY_B == 'VALUE_B'"]"#,
        r#"["descriptors[0].MY_VAR"]"#
    ));
    assert!(applies(
        "[]",
        r#"["descriptors[0].KEY_A", "descriptors[0].OTHER_KEY"]"#
    ));
}

#[test]
fn each_condition_form() {
    let request = [
        vec![("method", "GET"), ("path", "/a"), ("user.id", "7")],
        vec![("tier", "gold")],
    ];
    let cases = [
        ("descriptors[0]['method'] == 'GET'", true),
        ("descriptors[0].method == \"GET\"", true),
        ("descriptors[0]['method'] != 'GET'", false),
        ("descriptors[0].path != '/b'", true),
        (
            "descriptors[0].method == 'GET' && descriptors[0].path == '/a'",
            true,
        ),
        (
            "descriptors[0].method == 'GET' && descriptors[0].path == '/b'",
            false,
        ),
        (
            "descriptors[0].method == 'POST' || descriptors[1].tier == 'gold'",
            true,
        ),
        ("!(descriptors[0].method == 'POST')", true),
        ("descriptors[0]['user.id'] == '7'", true),
        ("descriptors[1].tier == 'gold'", true),
        ("'GET' == descriptors[0].method", true),
        ("descriptors[2].tier == 'gold'", false),
        ("descriptors[0].absent != 'x'", false),
        ("true", true),
    ];
    for (condition, expected) in cases {
        let text = format!(
            "- namespace: n\n  max_value: 1\n  seconds: 1\n  conditions: [{condition:?}]\n  variables: []\n"
        );
        let config = load(&text);
        assert_eq!(
            config.limits()[0].applies(&descriptors(&request)),
            expected,
            "{condition}"
        );
    }
}

#[test]
fn counters_follow_the_variables_in_their_texts_order() {
    let config = load(
        "- namespace: n\n  max_value: 1\n  seconds: 1\n  conditions: []\n  variables: [\"descriptors[0].b\", \"descriptors[0].a\", \"descriptors[0].b\"]\n",
    );
    let request = [vec![("a", "1"), ("b", "2")]];
    assert_eq!(
        config.limits()[0].variable_values(&descriptors(&request)),
        Some(vec!["1".to_owned(), "2".to_owned()])
    );
}

#[test]
fn duplicate_limits_keep_the_first_with_a_warning() {
    let config = load(
        "- {namespace: n, max_value: 1, seconds: 60, conditions: [\"descriptors[0].a == 'x'\", \"descriptors[0].b == 'y'\"], variables: []}\n\
         - {namespace: n, max_value: 9, seconds: 60, conditions: [\"descriptors[0].b == 'y'\", \"descriptors[0].a == 'x'\"], variables: [], name: other}\n\
         - {namespace: n, max_value: 9, seconds: 61, conditions: [], variables: []}\n",
    );
    assert_eq!(config.limits().len(), 2);
    assert_eq!(config.limits()[0].max_value(), 1);
    assert_eq!(config.warnings().len(), 1);
    assert_eq!(config.warnings()[0].at.line, 2);
    assert!(config.warnings()[0].message.contains("limits.yaml:1:3"));
}

#[test]
fn nulls_are_empty_lists_and_optional_fields_may_be_absent() {
    let config = load("- namespace: n\n  max_value: 0\n  seconds: 1\n  conditions:\n  variables: ~\n  name: null\n  id: abc\n");
    let limit = &config.limits()[0];
    assert_eq!(
        (limit.name(), limit.id(), limit.max_value()),
        (None, Some("abc"), 0)
    );
    assert!(load("").limits().is_empty());
    assert!(load("---\n[]\n").limits().is_empty());
}

#[test]
fn errors_name_the_place() {
    let base = |extra: &str| {
        format!("- namespace: n\n  max_value: 5\n  seconds: 60\n  conditions: []\n  variables: []\n{extra}")
    };
    let cases: Vec<(String, &str)> = vec![
        (base("  condtions: []\n"), "limits.yaml:6:3: unknown field `condtions`"),
        (base("  seconds: 5\n"), "limits.yaml:6:3: duplicate field `seconds`"),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 0\n  conditions: []\n  variables: []\n".to_owned(),
            "limits.yaml:3:12: `seconds` is 0",
        ),
        (
            "- namespace: n\n  seconds: 5\n  conditions: []\n  variables: []\n".to_owned(),
            "limits.yaml:1:3: the limit has no `max_value`",
        ),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  variables: []\n".to_owned(),
            "limits.yaml:1:3: the limit has no `conditions`",
        ),
        (
            "- namespace: n\n  max_value: -1\n  seconds: 5\n  conditions: []\n  variables: []\n".to_owned(),
            "limits.yaml:2:14: `max_value` is -1",
        ),
        (
            "- namespace: n\n  max_value: lots\n  seconds: 5\n  conditions: []\n  variables: []\n".to_owned(),
            "limits.yaml:2:14: `max_value` must be a whole number",
        ),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  conditions:\n    - \"descriptors[0].a = 'x'\"\n  variables: []\n".to_owned(),
            "limits.yaml:5:7: conditions[0]: at character 18 of the expression",
        ),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  conditions: [\"descriptors[0].a\"]\n  variables: []\n".to_owned(),
            "limits.yaml:4:16: conditions[0]: `descriptors[0].a` is not a boolean",
        ),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  conditions: []\n  variables: [\"descriptors[0].a && true\"]\n".to_owned(),
            "limits.yaml:5:15: variables[0]: `descriptors[0].a && true` gives",
        ),
        (
            "- namespace: ''\n  max_value: 5\n  seconds: 5\n  conditions: []\n  variables: []\n".to_owned(),
            "limits.yaml:1:14: the namespace is empty",
        ),
        ("namespace: n\n".to_owned(), "limits.yaml:1:1: the file must be a list"),
        ("- [1]\n".to_owned(), "limits.yaml:1:3: `a limit` must be a map"),
        ("- []\n---\n- []\n".to_owned(), "limits.yaml:2:1: a second YAML document"),
        ("- {namespace: [\n".to_owned(), "limits.yaml:"),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  conditions: 'x'\n  variables: []\n".to_owned(),
            "limits.yaml:4:15: `conditions` must be a list of strings",
        ),
        (
            "- namespace: n\n  max_value: 5\n  seconds: 5\n  conditions: [7]\n  variables: []\n".to_owned(),
            "limits.yaml:4:16: `conditions[0]` must be a string",
        ),
    ];
    for (text, expected) in cases {
        let Err(error) = LimitadorConfig::from_yaml_str(&text, "limits.yaml") else {
            panic!("{text} loaded");
        };
        let message = error.to_string();
        assert!(
            message.starts_with(expected),
            "{message}\nexpected {expected}"
        );
    }
}

#[test]
fn sizes_are_capped() {
    let many = "- {namespace: n, max_value: 1, seconds: 1, conditions: [], variables: []}\n"
        .repeat(MAX_LIMITS + 1);
    assert!(matches!(
        error(&many),
        LimitadorConfigError::TooManyLimits { .. }
    ));
    let conditions = vec!["'a' == 'a'"; MAX_EXPRESSIONS + 1];
    let text = format!(
        "- {{namespace: n, max_value: 1, seconds: 1, conditions: {conditions:?}, variables: []}}\n"
    );
    assert!(matches!(
        error(&text),
        LimitadorConfigError::TooManyExpressions { .. }
    ));
    let long = "n".repeat(MAX_TEXT_BYTES + 1);
    let text = format!(
        "- {{namespace: {long}, max_value: 1, seconds: 1, conditions: [], variables: []}}\n"
    );
    assert!(matches!(error(&text), LimitadorConfigError::TooLong { .. }));
}

fn fragments() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop::sample::select(vec![
            "- ",
            "namespace: ",
            "max_value: ",
            "seconds: ",
            "conditions: ",
            "variables: ",
            "name: ",
            "\n  ",
            "\n",
            "[",
            "]",
            "{",
            "}",
            ", ",
            "\"",
            "'",
            "descriptors",
            "[0]",
            "['k']",
            ".k",
            " == ",
            " != ",
            " && ",
            " || ",
            "!",
            "(",
            ")",
            "1",
            "0",
            "-1",
            "~",
            "&a",
            "*a",
            "é",
            "\\",
            "99999999999999999999",
        ]),
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,300}") {
        let _ = LimitadorConfig::from_yaml_str(&text, "any.yaml");
        let _ = Expression::parse(&text);
    }

    #[test]
    fn shaped_text_loads_or_names_a_place(text in fragments()) {
        match LimitadorConfig::from_yaml_str(&text, "any.yaml") {
            Ok(config) => {
                let request = [vec![("k", "v"), ("k", "w")], vec![("k", "1")]];
                let d = descriptors(&request);
                for limit in config.limits() {
                    let _ = limit.variable_values(&d);
                    let _ = limit.first_descriptor();
                }
            }
            Err(error) => prop_assert!(error.position().is_some(), "{}", error),
        }
    }

    #[test]
    fn expressions_never_panic(text in fragments()) {
        if let Ok(expression) = Expression::parse(&text) {
            let request = [vec![("k", "v")]];
            let d = descriptors(&request);
            let _ = expression.test(&d);
            let _ = expression.value(&d);
        }
    }
}
