//! `ratekeeper import envoy`'s output (ratekeeper_formats::envoy::import_files)
//! loaded as the native configuration it is written for: precedence as
//! `except` lists, rates, policies, flags, names and comments.

use std::collections::HashSet;

use ratekeeper::policy::{Algorithm, PolicyKind};
use ratekeeper::store::MAX_LIMIT_NAME;
use ratekeeper_formats::envoy::{import_files, Imported, LoadOptions, NoteKind};

use crate::config::{KeyPart, ValueMatch};
use crate::Config;

fn import(yaml: &str) -> Imported {
    import_files([("inline.yaml", yaml)], &LoadOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn load(imported: &Imported) -> Config {
    Config::from_toml_str(&imported.toml, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml))
}

/// `(key, value as written, except as written, share_threshold)` of
/// each entry of the limit named `name`.
fn entries(config: &Config, name: &str) -> Vec<(String, String, Vec<String>, bool)> {
    let limit = config
        .limits
        .iter()
        .find(|l| l.limit.name() == name)
        .unwrap_or_else(|| panic!("no limit {name}"));
    limit
        .matcher
        .descriptors
        .iter()
        .map(|d| {
            let value = match &d.value {
                ValueMatch::Any => String::new(),
                other => other.to_string(),
            };
            let except = d.except.iter().map(ToString::to_string).collect();
            (d.key.clone(), value, except, d.share_threshold)
        })
        .collect()
}

fn entry(
    key: &str,
    value: &str,
    except: &[&str],
    share: bool,
) -> (String, String, Vec<String>, bool) {
    (
        key.to_owned(),
        value.to_owned(),
        except.iter().map(|e| (*e).to_owned()).collect(),
        share,
    )
}

const PRECEDENCE: &str = "domain: d
descriptors:
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: /api/*
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    value: /login
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    value: /api/v*
    share_threshold: true
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: user
    descriptors:
      - key: path
        value: '*'
        rate_limit: { unit: hour, requests_per_unit: 5 }
";

#[test]
fn precedence_becomes_except_lists() {
    let imported = import(PRECEDENCE);
    let config = load(&imported);
    assert_eq!(config.limits.len(), 5);
    assert_eq!(
        entries(&config, "d.path"),
        [entry("path", "", &["/api/*", "/login", "/api/v*"], false)]
    );
    assert_eq!(
        entries(&config, "d.path_/api/*"),
        [entry("path", "/api/*", &["/login"], false)]
    );
    assert_eq!(
        entries(&config, "d.path_/login"),
        [entry("path", "/login", &[], false)]
    );
    // A later wildcard steps aside for the earlier one, which takes
    // every value it could have had: it never matches, here as there.
    assert_eq!(
        entries(&config, "d.path_/api/v*"),
        [entry("path", "/api/v*", &["/api/*", "/login"], true)]
    );
    assert_eq!(
        entries(&config, "d.user.path_*"),
        [
            entry("user", "", &[], false),
            entry("path", "", &[], false) // `*` alone: any value
        ]
    );
    let names: Vec<&str> = imported.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "d.path",
            "d.path_/api/*",
            "d.path_/login",
            "d.path_/api/v*",
            "d.user.path_*"
        ]
    );
    assert!(imported.limits.iter().all(|l| !l.differs));
}

#[test]
fn rates_policies_and_flags_are_kept() {
    let imported = import(
        "domain: d
descriptors:
  - key: a
    rate_limit: { unit: Month, requests_per_unit: 7 }
  - key: b
    rate_limit: { unit: YEAR, requests_per_unit: 8, policy: sliding_window }
  - key: c
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 9, policy: gcra }
",
    );
    let config = load(&imported);
    let [a, b, c] = &config.limits[..] else {
        panic!("{:?}", config.limits);
    };
    assert_eq!(
        a.rate.to_string(),
        "7/30d".parse::<ratekeeper::Rate>().unwrap().to_string()
    );
    assert_eq!(
        a.limit.policy().window(),
        std::time::Duration::from_secs(30 * 86_400)
    );
    assert_eq!(a.limit.policy().kind(), PolicyKind::FixedWindow);
    assert_eq!(
        b.limit.policy().window(),
        std::time::Duration::from_secs(365 * 86_400)
    );
    assert_eq!(b.limit.policy().kind(), PolicyKind::SlidingWindow);
    assert_eq!(c.limit.policy().kind(), PolicyKind::Gcra);
    assert!(!a.shadow && !b.shadow && c.shadow);
    // Each value of a bare key is counted on its own: the key says so.
    let keys: Vec<&[KeyPart]> = config.limits.iter().map(|l| &l.key[..]).collect();
    assert_eq!(
        keys,
        [
            &[KeyPart::Descriptor("a".into())][..],
            &[KeyPart::Descriptor("b".into())][..],
            &[KeyPart::Descriptor("c".into())][..]
        ]
    );
    assert!(config
        .limits
        .iter()
        .all(|l| l.matcher.domain.as_deref() == Some("d")));
}

/// The `# differs:` and `# note:` comments written before the limit
/// from `path`, each on one line again (as `differs: ...`, `note: ...`).
fn notes(toml: &str, path: &str) -> Vec<String> {
    let head = format!("# {path} (rate_limit at ");
    let start = toml
        .find(&head)
        .unwrap_or_else(|| panic!("no {path} in\n{toml}"));
    let mut notes: Vec<String> = Vec::new();
    for line in toml[start..].lines().skip(1) {
        if line.starts_with("# differs: ") || line.starts_with("# note: ") {
            notes.push(line[2..].to_owned());
        } else if let (Some(more), Some(last)) = (line.strip_prefix("#   "), notes.last_mut()) {
            last.push(' ');
            last.push_str(more);
        } else {
            break;
        }
    }
    notes
}

#[test]
fn every_change_of_meaning_is_commented() {
    let imported = import(
        "domain: d
descriptors:
  - key: free
    rate_limit: { unlimited: true, name: free, replaces: [{ name: per_user }] }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 10, name: per_user }
  - key: banned
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: quota
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: stats
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tagged
    value_to_metric: true
    descriptors:
      - key: x
        rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: meta
    metadata: { team: a }
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: plain
    value: a_b
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: monthly
    rate_limit: { unit: month, requests_per_unit: 1 }
  - key: clean
    rate_limit: { unit: minute, requests_per_unit: 1 }
",
    );
    let config = load(&imported);
    let toml = &imported.toml;
    // No native limit for the unlimited one; the rest are written.
    assert_eq!(config.limits.len(), 10);
    assert!(!toml.contains("name = \"d.free\""));
    let one = |path: &str, words: &str| {
        let notes = notes(toml, path);
        assert!(
            notes.iter().any(|note| note.contains(words)),
            "{path}: {notes:?} lacks {words:?}"
        );
    };
    one("d.free", "note: unlimited");
    one("d.free", "differs: replaces");
    one("d.user", "differs: named per_user");
    one("d.quota", "differs: quota_mode");
    one("d.stats", "note: detailed_metric");
    one("d.tagged.x", "note: detailed_metric/value_to_metric");
    one("d.meta", "note: metadata");
    one(
        "d.monthly",
        "note: a status's current_limit shows this rate per WEEK",
    );
    // A ban is a ban: written as one, nothing differs.
    for clean in ["d.banned", "d.clean", "d.remote_address", "d.plain_a_b"] {
        assert!(notes(toml, clean).is_empty(), "{clean}");
    }
    let banned = config
        .limits
        .iter()
        .find(|l| l.limit.name() == "d.banned")
        .unwrap();
    assert!(banned.ban);
    assert_eq!(banned.rate_text(), "0/minute");
    let differs: Vec<&str> = imported
        .limits
        .iter()
        .filter(|l| l.differs)
        .map(|l| l.name.as_str())
        .collect();
    assert_eq!(differs, ["d.user", "d.quota"]);
    assert!(imported.differs());
    // On stderr too: every note, the unlimited one's included.
    let kinds = |kind| {
        imported
            .notes
            .iter()
            .filter(|n| n.kind == kind)
            .map(|n| n.subject.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(NoteKind::Difference), ["d.free", "d.user", "d.quota"]);
    assert!(kinds(NoteKind::Warning).contains(&"d.monthly"));
    assert!(kinds(NoteKind::Warning).contains(&"matching"));
    // Every comment line is a comment: wrapped notes included.
    assert!(toml
        .lines()
        .all(|line| line.is_empty() || line.starts_with('#') || !line.contains("differs")));
}

#[test]
fn texts_that_meet_across_keys_differ() {
    let imported = import(
        "domain: d
descriptors:
  - key: a
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: a_b
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: /a*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: /api/*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: k*
    rate_limit: { unit: minute, requests_per_unit: 1 }
",
    );
    let differences: Vec<&str> = imported
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Difference)
        .map(|n| n.message.as_str())
        .collect();
    assert_eq!(differences.len(), 3, "{differences:?}");
    assert!(differences[0].contains(r#""a" and "a_b""#));
    assert!(differences[1].contains(r#"literally "/api/*""#));
    assert!(differences[2].contains(r#"the key "k*""#));
    // Wildcards that never cover one another's text, and keys that do
    // not extend one another: nothing differs.
    let clean = import(
        "domain: d
descriptors:
  - key: path
    value: /api/*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: path
    value: /a*
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 1 }
",
    );
    assert!(!clean.differs(), "{:?}", clean.notes);
}

#[test]
fn a_domain_without_written_limits_is_commented() {
    let files = [
            (
                "a.yaml",
                "domain: open\ndescriptors:\n  - key: k\n    rate_limit: { unlimited: true }\n",
            ),
            ("b.yaml", "domain: empty\n"),
            (
                "c.yaml",
                "domain: kept\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n",
            ),
        ];
    let imported = import_files(files, &LoadOptions::default()).unwrap();
    let subjects: Vec<&str> = imported
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Difference)
        .map(|n| n.subject.as_str())
        .collect();
    assert_eq!(subjects, ["open", "empty"]);
    assert!(imported
        .notes
        .iter()
        .filter(|n| n.kind == NoteKind::Difference)
        .all(|n| n.message.contains("override")));
    let toml = imported.toml.replace("\n#  ", " ");
    assert_eq!(
        toml.matches("no limit of this domain is written").count(),
        2
    );
    assert_eq!(load(&imported).limits.len(), 1);
}

#[test]
fn names_are_valid_unique_and_stable() {
    let long = "v".repeat(80);
    let yaml = format!(
        "domain: d
descriptors:
  - key: k
    value: \"{long}\"
    rate_limit: {{ unit: minute, requests_per_unit: 1 }}
  - key: k
    value: \"{long}w\"
    rate_limit: {{ unit: minute, requests_per_unit: 1 }}
  - key: 'a b'
    value: 'x:\\\"{{}}\\\\é'
    rate_limit: {{ unit: minute, requests_per_unit: 1 }}
  - key: a.b
    rate_limit: {{ unit: minute, requests_per_unit: 1 }}
  - key: a
    descriptors:
      - key: b
        rate_limit: {{ unit: minute, requests_per_unit: 1 }}
"
    );
    let imported = import(&yaml);
    let config = load(&imported);
    let names: Vec<&str> = config.limits.iter().map(|l| l.limit.name()).collect();
    assert_eq!(names.len(), 5);
    let unique: HashSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), 5, "{names:?}");
    assert!(names.iter().all(|n| n.len() <= MAX_LIMIT_NAME));
    assert!(names[0].starts_with("d.k_vvv") && names[0].contains('~'));
    assert!(names[2].starts_with("d.a_b_x_") && names[2].contains('~'));
    // `d.a.b` twice: the one the door names second gets a digest (the
    // door takes each level in its KEY_VALUE order, `a` before `a.b`).
    assert!(names[3].starts_with("d.a.b~"), "{names:?}");
    assert_eq!(names[4], "d.a.b");
    // The same files, the same names.
    assert_eq!(import(&yaml).toml, imported.toml);
    // Values are kept as written, quotes and all.
    let odd = &config.limits[2].matcher.descriptors[0];
    assert_eq!(odd.key, "a b");
    // (single-quoted YAML: its backslashes are characters)
    assert_eq!(odd.value, ValueMatch::Exact(r#"x:\"{}\\é"#.to_owned()));
}

#[test]
fn merged_domains_keep_the_files_order() {
    let options = LoadOptions::default().merge_domains(true);
    let files = [
            ("1.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n"),
            ("2.yaml", "domain: e\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n"),
            ("3.yaml", "domain: d\ndescriptors:\n  - key: k\n    value: '*'\n    rate_limit: { unit: second, requests_per_unit: 1 }\n"),
        ];
    let imported = import_files(files, &options).unwrap();
    let names: Vec<&str> = imported.limits.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["d.k", "d.k_*", "e.k"]);
    let config = load(&imported);
    assert_eq!(
        config.limits[0].matcher.descriptors[0].except,
        [ValueMatch::Any]
    );
    // Without merging, the loader's error.
    let error = import_files(files, &LoadOptions::default()).unwrap_err();
    assert!(error.to_string().starts_with("3.yaml:1:"), "{error}");
}
