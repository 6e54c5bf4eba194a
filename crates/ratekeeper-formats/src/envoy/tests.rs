//! The fixtures of envoyproxy/ratelimit (shared/compat/envoy-ratelimit):
//! each loads or fails as its own tests expect, and the lookups its tests
//! make give the same limits here; then properties over arbitrary input.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use ratekeeper::policy::PolicyKind;

use super::*;

/// `shared/compat/envoy-ratelimit`: under `RATEKEEPER_COMPAT_DIR` when
/// set, else found by walking up from the crate (a worktree, the
/// checkout beside `shared/`), else the machines' `/work/shared` (a clone
/// made elsewhere). Missing is a failure, not a skip.
fn compat_dir() -> PathBuf {
    const FIXTURES: &str = "envoy-ratelimit";
    if let Some(dir) = std::env::var_os("RATEKEEPER_COMPAT_DIR") {
        let candidate = PathBuf::from(dir).join(FIXTURES);
        assert!(candidate.is_dir(), "no {}", candidate.display());
        return candidate;
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let above = crate_dir.ancestors().map(|dir| dir.join("shared/compat"));
    above
        .chain([PathBuf::from("/work/shared/compat")])
        .map(|compat| compat.join(FIXTURES))
        .find(|candidate| candidate.is_dir())
        .unwrap_or_else(|| {
            panic!(
                "no shared/compat/{FIXTURES} above {} or in /work/shared; \
                 set RATEKEEPER_COMPAT_DIR to the compat directory",
                crate_dir.display()
            )
        })
}

fn fixture_text(path: &str) -> String {
    let file = compat_dir().join(path);
    std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn fixture_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn load(path: &str) -> EnvoyConfig {
    let text = fixture_text(path);
    EnvoyConfig::from_yaml_str(&text, fixture_name(path))
        .unwrap_or_else(|e| panic!("{path} should load: {e}"))
}

fn load_err(path: &str) -> EnvoyConfigError {
    let text = fixture_text(path);
    match EnvoyConfig::from_yaml_str(&text, fixture_name(path)) {
        Ok(_) => panic!("{path} should fail"),
        Err(e) => e,
    }
}

fn load_all(paths: &[&str], merge: bool) -> Result<EnvoyConfig, EnvoyConfigError> {
    let texts: Vec<(String, String)> = paths
        .iter()
        .map(|p| (fixture_name(p).to_owned(), fixture_text(p)))
        .collect();
    EnvoyConfig::from_files(
        texts.iter().map(|(n, t)| (n.as_str(), t.as_str())),
        &LoadOptions::default().merge_domains(merge),
    )
}

fn at(error: &EnvoyConfigError) -> (String, usize, usize) {
    let p = error.position().expect("a position");
    (p.file.clone(), p.line, p.column)
}

fn get<'a>(
    config: &'a EnvoyConfig,
    domain: &str,
    entries: &'a [(&'a str, &'a str)],
) -> Option<Matched<'a>> {
    config.get_limit(domain, entries)
}

fn limit_of(
    config: &EnvoyConfig,
    domain: &str,
    entries: &[(&str, &str)],
) -> Option<(u32, Option<Unit>)> {
    config
        .get_limit(domain, entries)
        .map(|m| (m.limit.requests_per_unit, m.limit.unit))
}

fn stats_key(config: &EnvoyConfig, domain: &str, entries: &[(&str, &str)]) -> String {
    config
        .get_limit(domain, entries)
        .unwrap_or_else(|| panic!("{entries:?} should match"))
        .stats_key()
}

/// Every fixture, and what envoyproxy/ratelimit's config_test.go expects
/// of it alone: `true` loads.
const FIXTURES: &[(&str, bool)] = &[
    ("test-config/bad_limit_unit.yaml", false),
    ("test-config/bad_yaml.yaml", false),
    ("test-config/basic_config.yaml", true),
    ("test-config/duplicate_domain.yaml", true),
    ("test-config/duplicate_key.yaml", false),
    ("test-config/empty_domain.yaml", false),
    ("test-config/empty_key.yaml", false),
    ("test-config/merge_domain_key1.yaml", true),
    ("test-config/merge_domain_key2.yaml", true),
    ("test-config/metadata.yaml", true),
    ("test-config/misspelled_key.yaml", false),
    ("test-config/misspelled_key2.yaml", false),
    ("test-config/non_map_list.yaml", false),
    ("test-config/non_string_key.yaml", false),
    ("test-config/replaces_empty.yaml", false),
    ("test-config/replaces_self.yaml", false),
    ("test-config/shadowmode_config.yaml", true),
    ("test-config/share_threshold.yaml", true),
    ("test-config/unlimited_with_unit.yaml", false),
    ("test-config/wildcard.yaml", true),
    ("examples/config.yaml", true),
    ("examples/example.yaml", true),
];

#[test]
fn every_fixture_is_classified() {
    let dir = compat_dir();
    let mut found = Vec::new();
    for sub in ["test-config", "examples"] {
        let entries = std::fs::read_dir(dir.join(sub))
            .unwrap_or_else(|e| panic!("{}/{sub}: {e}", dir.display()));
        for entry in entries {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            found.push(format!("{sub}/{name}"));
        }
    }
    found.sort();
    let mut known: Vec<String> = FIXTURES.iter().map(|(p, _)| (*p).to_owned()).collect();
    known.sort();
    assert_eq!(found, known, "a fixture was added or removed: classify it");
    for (path, loads) in FIXTURES {
        let text = fixture_text(path);
        let result = EnvoyConfig::from_yaml_str(&text, fixture_name(path));
        assert_eq!(result.is_ok(), *loads, "{path}: {:?}", result.err());
    }
}

#[test]
fn failing_fixtures_fail_for_envoys_reason_with_a_position() {
    let e = load_err("test-config/bad_limit_unit.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::BadUnit { unit, .. } if unit == "foo"),
        "{e}"
    );
    assert_eq!(at(&e), ("bad_limit_unit.yaml".to_owned(), 6, 13));

    let e = load_err("test-config/bad_yaml.yaml");
    assert!(
        matches!(e, EnvoyConfigError::Yaml(YamlError::Syntax { .. })),
        "{e}"
    );
    // The unterminated quote's start (yaml.v2 names the end of the stream).
    assert_eq!(at(&e), ("bad_yaml.yaml".to_owned(), 1, 1));
    assert!(e.to_string().contains("end of stream"), "{e}");

    let e = load_err("test-config/duplicate_key.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::DuplicateDescriptor { path, .. } if path == "test-domain.key1_value1"),
        "{e}"
    );
    assert_eq!(at(&e), ("duplicate_key.yaml".to_owned(), 6, 10));

    let e = load_err("test-config/empty_domain.yaml");
    assert!(matches!(e, EnvoyConfigError::EmptyDomain { .. }), "{e}");
    assert_eq!(at(&e), ("empty_domain.yaml".to_owned(), 1, 1));

    let e = load_err("test-config/empty_key.yaml");
    assert!(matches!(e, EnvoyConfigError::EmptyKey { .. }), "{e}");
    assert_eq!(at(&e), ("empty_key.yaml".to_owned(), 3, 5));

    let e = load_err("test-config/misspelled_key.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::UnknownField { key, .. } if key == "ratelimit"),
        "{e}"
    );
    assert_eq!(at(&e), ("misspelled_key.yaml".to_owned(), 5, 5));
    assert!(e.to_string().contains("did you mean `rate_limit`"), "{e}");

    let e = load_err("test-config/misspelled_key2.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::UnknownField { key, .. } if key == "requestsperunit"),
        "{e}"
    );
    assert_eq!(at(&e), ("misspelled_key2.yaml".to_owned(), 7, 7));

    let e = load_err("test-config/non_map_list.yaml");
    assert!(matches!(e, EnvoyConfigError::NonMapListEntry { .. }), "{e}");
    assert_eq!(at(&e), ("non_map_list.yaml".to_owned(), 3, 5));

    let e = load_err("test-config/non_string_key.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::NonStringKey { found, .. } if found.contains("0.25")),
        "{e}"
    );
    assert_eq!(at(&e), ("non_string_key.yaml".to_owned(), 1, 1));

    let e = load_err("test-config/replaces_empty.yaml");
    assert!(matches!(e, EnvoyConfigError::EmptyReplaces { .. }), "{e}");
    assert_eq!(at(&e), ("replaces_empty.yaml".to_owned(), 10, 15));

    let e = load_err("test-config/replaces_self.yaml");
    assert!(
        matches!(&e, EnvoyConfigError::ReplacesSelf { name, .. } if name == "self"),
        "{e}"
    );
    assert_eq!(at(&e), ("replaces_self.yaml".to_owned(), 10, 15));

    let e = load_err("test-config/unlimited_with_unit.yaml");
    assert!(
        matches!(e, EnvoyConfigError::UnlimitedWithUnit { .. }),
        "{e}"
    );
    assert_eq!(at(&e), ("unlimited_with_unit.yaml".to_owned(), 6, 13));
    assert!(
        e.to_string().starts_with("unlimited_with_unit.yaml:6:13: "),
        "{e}"
    );
}

#[test]
fn duplicate_domains_fail_unless_merged() {
    let e = load_all(
        &[
            "test-config/basic_config.yaml",
            "test-config/duplicate_domain.yaml",
        ],
        false,
    )
    .unwrap_err();
    assert!(
        matches!(&e, EnvoyConfigError::DuplicateDomain { domain, first, .. }
            if domain == "test-domain" && first.file == "basic_config.yaml"),
        "{e}"
    );
    assert_eq!(at(&e), ("duplicate_domain.yaml".to_owned(), 1, 9));

    let both = [
        "test-config/merge_domain_key1.yaml",
        "test-config/merge_domain_key2.yaml",
    ];
    assert!(matches!(
        load_all(&both, false),
        Err(EnvoyConfigError::DuplicateDomain { .. })
    ));
    let merged = load_all(&both, true).unwrap();
    assert!(get(&merged, "foo_domain", &[]).is_none());
    assert!(get(&merged, "test-domain", &[]).is_none());
    assert_eq!(
        limit_of(&merged, "test-domain", &[("key1", "value1")]),
        Some((10, Some(Unit::Minute)))
    );
    assert_eq!(
        limit_of(&merged, "test-domain", &[("key2", "value2")]),
        Some((20, Some(Unit::Minute)))
    );

    let twice = [
        "test-config/merge_domain_key1.yaml",
        "test-config/merge_domain_key1.yaml",
    ];
    let e = load_all(&twice, true).unwrap_err();
    assert!(
        matches!(&e, EnvoyConfigError::DuplicateDescriptor { path, .. } if path == "test-domain.key1_value1"),
        "{e}"
    );
}

#[test]
fn basic_config_lookups() {
    let c = load("test-config/basic_config.yaml");
    assert!(!c.is_empty());
    let d = "test-domain";
    assert!(get(&c, "foo_domain", &[]).is_none());
    assert!(get(&c, d, &[]).is_none());
    assert!(get(&c, d, &[("key1", "something")]).is_none());
    assert!(get(&c, d, &[("key1", "value1")]).is_none());
    assert!(get(&c, d, &[("key2", "value2"), ("subkey", "subvalue")]).is_none());
    assert!(get(&c, d, &[("key5", "value5"), ("subkey5", "subvalue")]).is_none());

    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "something")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (5, Some(Unit::Second))
    );
    assert_eq!(m.stats_key(), "test-domain.key1_value1.subkey1");
    assert_eq!(
        m.counter_key.parts,
        [("key1", "value1"), ("subkey1", "something")]
    );
    assert_eq!(
        m.counter_key.envoy_cache_key(""),
        "test-domain_key1_value1_subkey1_something_"
    );

    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (10, Some(Unit::Second))
    );
    assert_eq!(m.stats_key(), "test-domain.key1_value1.subkey1_subvalue1");

    let m = get(&c, d, &[("key2", "something")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (20, Some(Unit::Minute))
    );
    assert_eq!(m.stats_key(), "test-domain.key2");
    assert_eq!(m.counter_key.parts, [("key2", "something")]);

    let m = get(&c, d, &[("key2", "value2")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (30, Some(Unit::Minute))
    );
    assert_eq!(m.stats_key(), "test-domain.key2_value2");

    // A value listed without a limit exempts it from the key's default.
    assert!(get(&c, d, &[("key2", "value3")]).is_none());

    let m = get(&c, d, &[("key3", "foo")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (1, Some(Unit::Hour))
    );
    assert_eq!(m.limit.name, None);
    assert_eq!(m.stats_key(), "test-domain.key3");

    let m = get(&c, d, &[("key4", "foo")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (1, Some(Unit::Day))
    );
    assert_eq!(m.limit.name.as_deref(), Some("key4_rate_limit"));
    assert_eq!(m.stats_key(), "test-domain.key4");

    let m = get(&c, d, &[("key6", "foo")]).unwrap();
    assert!(m.limit.unlimited);
    assert_eq!(m.limit.unit, None);
    assert_eq!(m.stats_key(), "test-domain.key6");

    let m = get(&c, d, &[("key7", "unspecified_value")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (70, Some(Unit::Minute))
    );
    assert!(m.limit.detailed_metric);
    assert_eq!(m.stats_key(), "test-domain.key7_unspecified_value");
    let m = get(&c, d, &[("key7", "another_value")]).unwrap();
    assert_eq!(m.stats_key(), "test-domain.key7_another_value");

    // Every default: fixed windows, as envoyproxy/ratelimit counts.
    assert_eq!(m.limit.policy, PolicyKind::FixedWindow);
    assert!(!m.limit.shadow_mode && !m.limit.quota_mode);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn shadow_mode_config_lookups() {
    let c = load("test-config/shadowmode_config.yaml");
    let d = "test-domain";
    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "something")]).unwrap();
    assert!(!m.limit.shadow_mode);
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (5, Some(Unit::Second))
    );
    assert_eq!(m.stats_key(), "test-domain.key1_value1.subkey1");
    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]).unwrap();
    assert!(m.limit.shadow_mode);
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (10, Some(Unit::Second))
    );
    let m = get(&c, d, &[("key2", "something")]).unwrap();
    assert!(m.limit.shadow_mode);
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (20, Some(Unit::Minute))
    );
    let m = get(&c, d, &[("key2", "value2")]).unwrap();
    assert!(!m.limit.shadow_mode);
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (30, Some(Unit::Minute))
    );
}

#[test]
fn wildcard_config_lookups() {
    let c = load("test-config/wildcard.yaml");
    let d = "test-domain";
    let a = get(&c, d, &[("noVal", "foo1")]).unwrap();
    let b = get(&c, d, &[("noVal", "foo2")]).unwrap();
    assert!(std::ptr::eq(a.limit, b.limit));
    assert_eq!(a.stats_key(), "test-domain.noVal");

    let w1 = get(&c, d, &[("wild", "foo1")]).unwrap();
    let w2 = get(&c, d, &[("wild", "foo2")]).unwrap();
    assert!(std::ptr::eq(w1.limit, w2.limit));
    assert_eq!(w1.stats_key(), "test-domain.wild_foo*");
    assert_eq!(w2.stats_key(), "test-domain.wild_foo*");
    // Without share_threshold, each value keeps its own counter.
    assert_eq!(w1.counter_key.parts, [("wild", "foo1")]);
    assert_eq!(w2.counter_key.parts, [("wild", "foo2")]);
    let w3 = get(&c, d, &[("nestedWild", "val1"), ("wild", "goo2")]).unwrap();
    assert_eq!(w3.stats_key(), "test-domain.nestedWild_val1.wild_goo*");

    assert!(get(&c, d, &[("wild", "bar")]).is_none());
    assert!(get(&c, d, &[("noWild", "foo1")]).is_none());

    let m1 = get(&c, d, &[("midWild", "barab")]).unwrap();
    let m2 = get(&c, d, &[("midWild", "bar123b")]).unwrap();
    assert!(std::ptr::eq(m1.limit, m2.limit));
    assert_eq!(m1.stats_key(), "test-domain.midWild_bar*b");
    assert!(get(&c, d, &[("midWild", "barb")]).is_some());
    assert!(get(&c, d, &[("midWild", "bara")]).is_none());
    assert!(get(&c, d, &[("midWild", "xbarb")]).is_none());

    let x1 = get(&c, d, &[("multiWild", "foo123bar456baz")]).unwrap();
    let x2 = get(&c, d, &[("multiWild", "foobarbaz")]).unwrap();
    assert!(std::ptr::eq(x1.limit, x2.limit));
    assert_eq!(x1.limit.requests_per_unit, 10);
    assert_eq!(x1.stats_key(), "test-domain.multiWild_foo*bar*baz");
    assert!(get(&c, d, &[("multiWild", "foo123baz")]).is_none());
    assert!(get(&c, d, &[("multiWild", "bar456baz")]).is_none());
}

#[test]
fn share_threshold_lookups() {
    let c = load("test-config/share_threshold.yaml");
    let d = "test-domain";
    for value in ["files/a.pdf", "files/b.csv", "files/c.txt"] {
        let entries = [("files", value)];
        let m = get(&c, d, &entries).unwrap();
        assert_eq!(m.limit.requests_per_unit, 100);
        assert_eq!(m.counter_key.parts, [("files", "files/*")]);
        assert_eq!(m.stats_key(), "test-domain.files_files/*");
        assert_eq!(
            m.counter_key.envoy_cache_key("prefix_"),
            "prefix_test-domain_files_files/*_"
        );
    }

    let m = get(&c, d, &[("route", "api/v1"), ("method", "GET")]).unwrap();
    assert_eq!(m.counter_key.parts, [("route", "api/*"), ("method", "GET")]);
    assert_eq!(m.stats_key(), "test-domain.route_api/*.method");

    let m = get(&c, d, &[("service", "svc/user"), ("endpoint", "get")]).unwrap();
    assert!(m.limit.detailed_metric);
    assert_eq!(m.counter_key.parts[0], ("service", "svc/*"));
    assert_eq!(m.stats_key(), "test-domain.service_svc/*.endpoint_get");

    let m = get(
        &c,
        d,
        &[("nested", "parent"), ("files", "nested/file1.txt")],
    )
    .unwrap();
    assert_eq!(m.limit.requests_per_unit, 200);
    assert_eq!(
        m.counter_key.parts,
        [("nested", "parent"), ("files", "nested/*")]
    );
    assert_eq!(m.stats_key(), "test-domain.nested_parent.files_nested/*");

    let m = get(
        &c,
        d,
        &[("files", "top/file1.txt"), ("files", "nested/file1.txt")],
    )
    .unwrap();
    assert_eq!(m.limit.requests_per_unit, 300);
    assert_eq!(
        m.counter_key.parts,
        [("files", "top/*"), ("files", "nested/*")]
    );
    assert_eq!(m.stats_key(), "test-domain.files_top/*.files_nested/*");

    let m = get(
        &c,
        d,
        &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
    )
    .unwrap();
    assert_eq!(m.limit.requests_per_unit, 120);
    assert_eq!(
        m.counter_key.parts,
        [("path", "path/*"), ("file", "file/doc1"), ("type", "pdf")]
    );
    assert_eq!(m.stats_key(), "test-domain.path_path/*.file_file/*.type");

    let m = get(
        &c,
        d,
        &[
            ("user", "user/alice"),
            ("resource", "res/x"),
            ("action", "read"),
        ],
    )
    .unwrap();
    assert_eq!(m.limit.requests_per_unit, 150);
    assert_eq!(
        m.counter_key.parts,
        [
            ("user", "user/*"),
            ("resource", "res/*"),
            ("action", "read")
        ]
    );

    // The exact value wins over a wildcard that also matches it.
    let m = get(&c, d, &[("file", "test1")]).unwrap();
    assert_eq!(m.limit.requests_per_unit, 50);
    assert_eq!(m.counter_key.parts, [("file", "test1")]);
    let m = get(&c, d, &[("file", "test2")]).unwrap();
    assert_eq!(m.limit.requests_per_unit, 100);
    assert_eq!(m.counter_key.parts, [("file", "test*")]);

    for value in ["/api/v1", "/api-v1", "/apiv1"] {
        let entries = [("midpath", value)];
        let m = get(&c, d, &entries).unwrap();
        assert_eq!(m.limit.requests_per_unit, 100);
        assert_eq!(m.counter_key.parts, [("midpath", "/api*v1")]);
        assert_eq!(m.stats_key(), "test-domain.midpath_/api*v1");
    }
    assert!(get(&c, d, &[("midpath", "/api/v2")]).is_none());

    for value in ["svcAepBrpc", "svc-ep-rpc", "svceprpc"] {
        let entries = [("multiroute", value)];
        let m = get(&c, d, &entries).unwrap();
        assert_eq!(m.limit.requests_per_unit, 50);
        assert_eq!(m.stats_key(), "test-domain.multiroute_svc*ep*rpc");
    }
    assert!(get(&c, d, &[("multiroute", "svcABCrpc")]).is_none());

    let a = get(&c, d, &[("midroute", "/api/v2")]).unwrap();
    let b = get(&c, d, &[("midroute", "/api-beta-v2")]).unwrap();
    assert_eq!(a.stats_key(), "test-domain.midroute_/api*v2");
    assert_eq!(a.counter_key, b.counter_key);

    let m = get(&c, d, &[("tenant", "t1prod"), ("resource", "resAv2")]).unwrap();
    assert_eq!(
        m.counter_key.parts,
        [("tenant", "t*prod"), ("resource", "res*v2")]
    );
    assert_eq!(m.stats_key(), "test-domain.tenant_t*prod.resource_res*v2");
    let n = get(&c, d, &[("tenant", "t99prod"), ("resource", "resBBBv2")]).unwrap();
    assert_eq!(m.counter_key, n.counter_key);
}

#[test]
fn metadata_lookups() {
    let c = load("test-config/metadata.yaml");
    let d = "test-domain";
    assert!(get(&c, d, &[]).is_none());
    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "something")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (5, Some(Unit::Second))
    );
    assert_eq!(
        m.limit.metadata,
        Some(Metadata::Map(vec![(
            "name".to_owned(),
            Metadata::String("service_1".to_owned())
        )]))
    );
    let m = get(&c, d, &[("key2", "something")]).unwrap();
    assert_eq!(
        (m.limit.requests_per_unit, m.limit.unit),
        (20, Some(Unit::Minute))
    );
    assert_eq!(
        m.limit.metadata,
        Some(Metadata::Map(vec![(
            "service_with_quota".to_owned(),
            Metadata::Map(vec![(
                "name".to_owned(),
                Metadata::String("service_2".to_owned())
            )])
        )]))
    );
    let m = get(&c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]).unwrap();
    assert_eq!(m.limit.metadata, None);
}

#[test]
fn examples_lookups() {
    let c = load("examples/config.yaml");
    assert_eq!(
        limit_of(&c, "mongo_cps", &[("database", "users")]),
        Some((500, Some(Unit::Second)))
    );
    assert!(get(&c, "mongo_cps", &[("database", "other")]).is_none());

    let c = load("examples/example.yaml");
    let m = get(&c, "rl", &[("category", "account")]).unwrap();
    assert_eq!(m.limit.replaces, ["bkthomps", "fake_name"]);
    let m = get(&c, "rl", &[("foo", "x"), ("bar", "banned")]).unwrap();
    assert_eq!(m.limit.requests_per_unit, 0);
    assert_eq!(m.limit.name.as_deref(), Some("banned_limit"));
    let m = get(&c, "rl", &[("foo", "x"), ("baz", "shady")]).unwrap();
    assert!(m.limit.shadow_mode);
    let m = get(&c, "rl", &[("foo", "x"), ("bay", "y")]).unwrap();
    assert!(m.limit.unlimited);
    // The parent's own limit, for a request that stops there.
    assert_eq!(
        limit_of(&c, "rl", &[("foo", "x")]),
        Some((2, Some(Unit::Minute)))
    );
    let m = get(&c, "rl", &[("service", "service_1")]).unwrap();
    assert!(m.limit.quota_mode);
    assert!(m.limit.metadata.is_some());
}

/// A configuration written inline, as envoyproxy/ratelimit's tests build
/// theirs in Go.
fn inline(text: &str) -> EnvoyConfig {
    EnvoyConfig::from_yaml_str(text, "inline.yaml").unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn full_depth_is_required() {
    let c = inline(
        "domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: leaf
    rate_limit: {unit: second, requests_per_unit: 2}
",
    );
    // Shorter than the tree: `a` has no limit of its own.
    assert!(get(&c, "d", &[("a", "1")]).is_none());
    assert_eq!(
        limit_of(&c, "d", &[("a", "1"), ("b", "2")]),
        Some((1, Some(Unit::Second)))
    );
    // Longer than the tree: nothing.
    assert!(get(&c, "d", &[("a", "1"), ("b", "2"), ("c", "3")]).is_none());
    assert!(get(&c, "d", &[("leaf", "1"), ("x", "2")]).is_none());
    // The second entry must match at the second level.
    assert!(get(&c, "d", &[("a", "1"), ("x", "2")]).is_none());
    assert!(get(&c, "d", &[("b", "2")]).is_none());
    assert!(get(&c, "nope", &[("leaf", "1")]).is_none());
}

#[test]
fn precedence_is_exact_then_wildcards_in_order_then_key() {
    let c = inline(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: ab*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
",
    );
    let n = |v: &str| limit_of(&c, "d", &[("k", v)]).map(|(n, _)| n);
    assert_eq!(n("abc"), Some(4));
    assert_eq!(n("abd"), Some(2));
    assert_eq!(n("ax"), Some(3));
    assert_eq!(n("zz"), Some(1));
    assert_eq!(n(""), Some(1));
}

#[test]
fn a_matched_node_without_limit_does_not_fall_back() {
    let c = inline(
        "domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: free*
",
    );
    assert!(get(&c, "d", &[("k", "freebie")]).is_none());
    assert!(get(&c, "d", &[("k", "paid")]).is_some());
}

#[test]
fn detailed_metric_and_value_to_metric_stats_keys() {
    let c = inline(
        "domain: nested
descriptors:
  - key: key-1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
",
    );
    assert_eq!(
        stats_key(&c, "nested", &[("key-1", "value-1")]),
        "nested.key-1_value-1"
    );
    assert_eq!(
        stats_key(&c, "nested", &[("key-1", "value-1"), ("key-2", "value-2")]),
        "nested.key-1_value-1.key-2_value-2"
    );

    let c = inline(
        "domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 60}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 100}
",
    );
    assert_eq!(
        stats_key(
            &c,
            "domain",
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123")
            ]
        ),
        "domain.route_draw.http_method_GET.subject_id"
    );
    assert_eq!(
        stats_key(
            &c,
            "domain",
            &[("route", ""), ("http_method", ""), ("subject_id", "123")]
        ),
        "domain.route.http_method.subject_id"
    );
    assert_eq!(
        stats_key(
            &c,
            "domain",
            &[
                ("user", "alice"),
                ("action", "readfile"),
                ("resource", "documents")
            ]
        ),
        "domain.user_alice.action_readfile.resource"
    );
}

#[test]
fn types_and_yaml_1_1_scalars_follow_yaml_v2() {
    // Booleans as YAML 1.1 spells them; scalars as strings where a string
    // is wanted.
    let c = inline(
        "domain: 42
descriptors:
  - key: yes
    value: 0x10
    shadow_mode: on
    rate_limit: {unit: Second, requests_per_unit: 0x10}
",
    );
    let m = get(&c, "42", &[("yes", "0x10")]).unwrap();
    assert!(m.limit.shadow_mode);
    assert_eq!(m.limit.requests_per_unit, 16);

    let bad = |text: &str| EnvoyConfig::from_yaml_str(text, "t.yaml").unwrap_err();
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n");
    assert!(matches!(e, EnvoyConfigError::WrongType { .. }), "{e}");
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    value: 1.5\n");
    assert!(matches!(e, EnvoyConfigError::WrongType { .. }), "{e}");
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n");
    assert!(matches!(e, EnvoyConfigError::WrongType { .. }), "{e}");
    let e = bad("domain: d\ndescriptors: nope\n");
    assert!(matches!(e, EnvoyConfigError::WrongType { .. }), "{e}");
    let e = bad("- a\n");
    assert!(matches!(e, EnvoyConfigError::WrongType { .. }), "{e}");
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n");
    assert_eq!(at(&e), ("t.yaml".to_owned(), 4, 24));
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n");
    assert!(
        matches!(e, EnvoyConfigError::ShareThresholdWithoutWildcard { .. }),
        "{e}"
    );
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, policy: leaky}\n");
    assert!(matches!(e, EnvoyConfigError::BadPolicy { .. }), "{e}");
    // A missing unit is an invalid one.
    let e = bad("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}\n");
    assert!(
        matches!(&e, EnvoyConfigError::BadUnit { unit, .. } if unit.is_empty()),
        "{e}"
    );
}

#[test]
fn accepted_oddities_warn() {
    let c = inline(
        "domain: d
descriptors:
  - key: k
    unit: second
    rate_limit:
      unlimited: true
      unit: forever
      shadow_mode: true
---
domain: other
",
    );
    let m = get(&c, "d", &[("k", "v")]).unwrap();
    assert!(m.limit.unlimited);
    // shadow_mode inside rate_limit is not where envoyproxy/ratelimit reads it.
    assert!(!m.limit.shadow_mode);
    assert!(c.domain("other").is_none());
    let text: Vec<String> = c.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 4, "{text:?}");
    assert!(text[0].starts_with("inline.yaml:4:5: `unit`"), "{text:?}");
}

#[test]
fn policy_extension_and_units() {
    let c = inline(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: WEEK, requests_per_unit: 3, policy: sliding_window}
  - key: b
    rate_limit: {unit: month, requests_per_unit: 3, policy: gcra}
  - key: c
    rate_limit: {unit: year, requests_per_unit: 3, policy: Token-Bucket}
",
    );
    let m = get(&c, "d", &[("a", "")]).unwrap();
    assert_eq!(
        (m.limit.unit, m.limit.policy),
        (Some(Unit::Week), PolicyKind::SlidingWindow)
    );
    let m = get(&c, "d", &[("b", "")]).unwrap();
    assert_eq!(m.limit.unit.map(Unit::seconds), Some(30 * 86_400));
    assert_eq!(m.limit.policy, PolicyKind::Gcra);
    let m = get(&c, "d", &[("c", "")]).unwrap();
    assert_eq!(m.limit.policy, PolicyKind::TokenBucket);
    assert_eq!(Unit::parse("ſecond"), Some(Unit::Second));
    assert_eq!(Unit::parse("seconds"), None);
    assert_eq!(Unit::parse("unknown"), None);
}

#[test]
fn composite_keys_collide_as_in_envoy() {
    let e = EnvoyConfig::from_yaml_str(
        "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n  - key: a_b\n    value: c\n",
        "c.yaml",
    )
    .unwrap_err();
    assert!(
        matches!(&e, EnvoyConfigError::DuplicateDescriptor { path, .. } if path == "d.a_b_c"),
        "{e}"
    );
}

#[test]
fn anchors_and_merge_keys_load() {
    let c = inline(
        "domain: d
descriptors:
  - key: a
    rate_limit: &per_minute {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit:
      <<: *per_minute
      requests_per_unit: 7
",
    );
    assert_eq!(
        limit_of(&c, "d", &[("a", "x")]),
        Some((5, Some(Unit::Minute)))
    );
    assert_eq!(
        limit_of(&c, "d", &[("b", "x")]),
        Some((7, Some(Unit::Minute)))
    );
    // Overriding a merged key is what merges are for: no warning.
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());

    // A key written twice by hand: the last wins, with a warning.
    let c = inline(
        "domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5, requests_per_unit: 6}
",
    );
    assert_eq!(
        limit_of(&c, "d", &[("a", "x")]),
        Some((6, Some(Unit::Minute)))
    );
    let text: Vec<String> = c.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(text.len(), 1, "{text:?}");
    assert!(
        text[0].starts_with("inline.yaml:4:54: `requests_per_unit` is repeated"),
        "{text:?}"
    );
}

#[test]
fn load_dir_reads_files_as_the_runtime_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir(root.join("sub")).unwrap();
    let limit = |domain: &str| {
        format!("domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n")
    };
    std::fs::write(root.join("a.yaml"), limit("a")).unwrap();
    std::fs::write(root.join("b.conf"), limit("b")).unwrap();
    std::fs::write(root.join("sub/c.yml"), limit("c")).unwrap();
    std::fs::write(root.join(".hidden"), limit("h")).unwrap();
    let c = EnvoyConfig::load_dir(root).unwrap();
    let mut names: Vec<&str> = c.domains().map(Domain::name).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "c", "h"]);
    let c =
        EnvoyConfig::load_dir_with(root, &LoadOptions::default().ignore_dot_files(true)).unwrap();
    assert!(c.domain("h").is_none());

    std::fs::write(root.join("sub/dup.yaml"), limit("a")).unwrap();
    let e = EnvoyConfig::load_dir(root).unwrap_err();
    assert!(matches!(e, EnvoyConfigError::DuplicateDomain { .. }), "{e}");
    assert!(e.to_string().contains("dup.yaml:1:9: "), "{e}");
    let merge = LoadOptions::default().merge_domains(true);
    let e = EnvoyConfig::load_dir_with(root, &merge).unwrap_err();
    assert!(
        matches!(e, EnvoyConfigError::DuplicateDescriptor { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("dup.yaml:3:10: "), "{e}");
    std::fs::write(
        root.join("sub/dup.yaml"),
        "domain: a\ndescriptors:\n  - key: other\n    rate_limit: {unit: day, requests_per_unit: 2}\n",
    )
    .unwrap();
    let c = EnvoyConfig::load_dir_with(root, &merge).unwrap();
    assert_eq!(
        limit_of(&c, "a", &[("k", "1")]),
        Some((1, Some(Unit::Second)))
    );
    assert_eq!(
        limit_of(&c, "a", &[("other", "1")]),
        Some((2, Some(Unit::Day)))
    );

    let missing = EnvoyConfig::load_dir(root.join("nope")).unwrap_err();
    assert!(
        matches!(missing, EnvoyConfigError::Read { .. }),
        "{missing}"
    );
}

/// The fixtures' texts, for mutation, read once.
fn fixture_texts() -> &'static [String] {
    static TEXTS: OnceLock<Vec<String>> = OnceLock::new();
    TEXTS.get_or_init(|| FIXTURES.iter().map(|(p, _)| fixture_text(p)).collect())
}

/// The fixtures with wildcards and nesting, loaded once.
fn matching_configs() -> &'static [EnvoyConfig] {
    static CONFIGS: OnceLock<Vec<EnvoyConfig>> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        [
            "test-config/share_threshold.yaml",
            "test-config/wildcard.yaml",
            "test-config/basic_config.yaml",
        ]
        .into_iter()
        .map(load)
        .collect()
    })
}

/// A small edit: characters YAML gives meaning to, at a place.
fn edit() -> impl Strategy<Value = (usize, usize, String)> {
    (
        any::<usize>(),
        0usize..4,
        proptest::collection::vec(
            prop::sample::select(vec![
                ":", "-", " ", "\n", "*", "&a", "*a", "<<", "[", "]", "{", "}", "'", "\"", "#",
                "!", "|", ">", "?", ",", "\t", "~", "0.5", "yes", "key", "value", "é", "\u{feff}",
            ]),
            0..4,
        )
        .prop_map(|parts| parts.concat()),
    )
}

fn apply(text: &str, edits: &[(usize, usize, String)]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for (at, delete, insert) in edits {
        let at = at % (chars.len() + 1);
        let end = (at + delete).min(chars.len());
        chars.splice(at..end, insert.chars());
    }
    chars.into_iter().collect()
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let _ = EnvoyConfig::from_yaml_str(&text, "any.yaml");
    }

    #[test]
    fn mutated_fixtures_never_panic(index in 0usize..22, edits in proptest::collection::vec(edit(), 1..6)) {
        let texts = fixture_texts();
        let text = apply(&texts[index % texts.len()], &edits);
        if let Ok(config) = EnvoyConfig::from_yaml_str(&text, "mutated.yaml") {
            for domain in config.domains() {
                let _ = domain.get_limit(&[("key1", "value1"), ("subkey1", "x")]);
            }
        }
    }

    #[test]
    fn matching_never_panics(
        entries in proptest::collection::vec(
            (
                prop::sample::select(vec!["files", "route", "wild", "midWild", "multiWild", "nested", "key1", "subkey1", "x", ""]),
                ".{0,12}",
            ),
            0..5,
        ),
    ) {
        let entries: Vec<(&str, &str)> = entries.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for config in matching_configs() {
            if let Some(m) = config.get_limit("test-domain", &entries) {
                prop_assert_eq!(m.counter_key.parts.len(), entries.len());
                let _ = m.stats_key();
                let _ = m.counter_key.envoy_cache_key("p");
            }
        }
    }
}

#[test]
fn many_siblings_load_and_match() {
    let mut text = String::from("domain: big\ndescriptors:\n");
    for i in 0..5_000 {
        text.push_str(&format!(
            "  - key: user\n    value: u{i}\n    rate_limit: {{unit: second, requests_per_unit: {i}}}\n"
        ));
    }
    text.push_str(
        "  - key: user\n    value: admin*\n    rate_limit: {unit: hour, requests_per_unit: 1}\n",
    );
    let c = EnvoyConfig::from_yaml_str(&text, "big.yaml").unwrap();
    assert_eq!(
        limit_of(&c, "big", &[("user", "u4999")]),
        Some((4_999, Some(Unit::Second)))
    );
    assert_eq!(
        limit_of(&c, "big", &[("user", "admin-7")]),
        Some((1, Some(Unit::Hour)))
    );
    assert!(get(&c, "big", &[("user", "nobody")]).is_none());
}

#[test]
fn stats_keys_of_detailed_and_value_to_metric_as_envoy_names_them() {
    let realistic = inline(
        "domain: nested
descriptors:
  - key: key_1
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_1
    value: some-value-for-key-1
    rate_limit: {unit: minute, requests_per_unit: 500}
  - key: key_2
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50000}
    descriptors:
      - key: key_3
        detailed_metric: true
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
",
    );
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("key_1", "value-for-key-1")],
            "nested.key_1_value-for-key-1",
        ),
        (&[("key_2", "key-2-value")], "nested.key_2_key-2-value"),
        (
            &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
            "nested.key_2_key-2-value.key_3_requested-key3-value",
        ),
    ];
    for (entries, expected) in cases {
        assert_eq!(stats_key(&realistic, "nested", entries), *expected);
    }
    assert_eq!(
        limit_of(
            &realistic,
            "nested",
            &[("key_2", "specific-id"), ("key_3", "requested-key3-value")]
        ),
        Some((100, Some(Unit::Minute)))
    );
    // key_3 alone has no limit: the request ends on it.
    assert!(get(&realistic, "nested", &[("key_2", "x"), ("key_3", "y")]).is_none());

    let flags = inline(
        "domain: d
descriptors:
  - key: k1
    value_to_metric: true
    descriptors:
      - key: k2
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: m1
    descriptors:
      - key: m2
        value_to_metric: true
        descriptors:
          - key: m3
            rate_limit: {unit: minute, requests_per_unit: 1}
  - key: n1
    descriptors:
      - key: n2
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            detailed_metric: true
            rate_limit: {unit: minute, requests_per_unit: 1}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit: {unit: minute, requests_per_unit: 30}
",
    );
    assert_eq!(
        stats_key(&flags, "d", &[("k1", "A"), ("k2", "foo")]),
        "d.k1_A.k2"
    );
    assert_eq!(
        stats_key(&flags, "d", &[("m1", "X"), ("m2", "Y"), ("m3", "Z")]),
        "d.m1.m2_Y.m3"
    );
    assert_eq!(
        stats_key(&flags, "d", &[("n1", "X"), ("n2", "Y")]),
        "d.n1.n2"
    );
    assert_eq!(
        stats_key(
            &flags,
            "d",
            &[
                ("route", "draw"),
                ("http_method", "GET"),
                ("subject_id", "123")
            ]
        ),
        "d.route_draw.http_method_GET.subject_id_123"
    );
    let post = [
        ("route", "api"),
        ("http_method", "POST"),
        ("subject_id", "user456"),
    ];
    assert_eq!(limit_of(&flags, "d", &post), Some((30, Some(Unit::Minute))));
    assert_eq!(
        stats_key(&flags, "d", &post),
        "d.route_api.http_method_POST.subject_id"
    );
}

#[test]
fn load_runtime_selects_files_as_the_watch_root_filter_does() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("ratelimit");
    std::fs::create_dir_all(sub.join("config/nested")).unwrap();
    std::fs::create_dir_all(sub.join("other")).unwrap();
    let limit = |domain: &str| {
        format!("domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n")
    };
    std::fs::write(sub.join("config/a.yaml"), limit("a")).unwrap();
    std::fs::write(sub.join("config/nested/b.yaml"), limit("b")).unwrap();
    std::fs::write(sub.join("config.extra.yaml"), limit("beside")).unwrap();
    std::fs::write(sub.join("other/c.yaml"), limit("c")).unwrap();
    std::fs::write(sub.join("configuration.yaml"), limit("d")).unwrap();
    let c = EnvoyConfig::load_runtime(dir.path(), "ratelimit", "config", &LoadOptions::default())
        .unwrap();
    let mut names: Vec<&str> = c.domains().map(Domain::name).collect();
    names.sort_unstable();
    assert_eq!(names, ["a", "b", "beside"]);
}
