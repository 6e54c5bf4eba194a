//! `ratekeeper import envoy`: the TOML it prints loads, `check` accepts
//! it, and its limits match the requests envoyproxy/ratelimit's tree
//! gives each limit, with the same counters.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use ratekeeper_formats::envoy::{import_dir, import_files, EnvoyConfig, Imported, LoadOptions};
use ratekeeper_server::engine::matching::{applicable, key_parts, DescriptorSource, Entry};
use ratekeeper_server::engine::{compose_key, LimitSet, OrUnknown};
use ratekeeper_server::Config;

/// `shared/compat/envoy-ratelimit`: under `RATEKEEPER_COMPAT_DIR`, above
/// the crate, or in /work/shared (as the loader's own tests find it).
pub(crate) fn compat_dir() -> PathBuf {
    const FIXTURES: &str = "envoy-ratelimit";
    if let Some(dir) = std::env::var_os("RATEKEEPER_COMPAT_DIR") {
        return PathBuf::from(dir).join(FIXTURES);
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    crate_dir
        .ancestors()
        .map(|dir| dir.join("shared/compat"))
        .chain([PathBuf::from("/work/shared/compat")])
        .map(|compat| compat.join(FIXTURES))
        .find(|candidate| candidate.is_dir())
        .expect("no shared/compat/envoy-ratelimit; set RATEKEEPER_COMPAT_DIR")
}

/// Every fixture file, by path relative to the fixtures, with its text.
fn fixtures() -> Vec<(String, String)> {
    let root = compat_dir();
    let mut files = Vec::new();
    for dir in ["examples", "test-config"] {
        let mut names: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let text = std::fs::read_to_string(root.join(dir).join(&name)).unwrap();
            files.push((format!("{dir}/{name}"), text));
        }
    }
    files
}

fn native(imported: &Imported) -> Config {
    Config::from_toml_str(&imported.toml, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml))
}

#[test]
fn every_loadable_fixture_imports_to_a_loadable_configuration() {
    let mut imported_any = 0;
    for (name, text) in fixtures() {
        let loaded = EnvoyConfig::from_yaml_str(&text, &name);
        let imported = import_files([(name.as_str(), text.as_str())], &LoadOptions::default());
        match (loaded, imported) {
            // Nothing a native limit can express: a native file needs one,
            // and the output says so.
            (Ok(_), Ok(imported)) if imported.limits.is_empty() => {
                assert!(imported.toml.contains("# Nothing to write"), "{name}");
                let config = Config::from_toml_str(&imported.toml, "imported.toml").unwrap();
                assert!(config.limits.is_empty(), "{name}");
            }
            (Ok(_), Ok(imported)) => {
                let config = native(&imported);
                assert_eq!(config.limits.len(), imported.limits.len(), "{name}");
                imported_any += 1;
            }
            // The import refuses what the loader refuses, with its error.
            (Err(loaded), Err(imported)) => assert_eq!(loaded.to_string(), imported.to_string()),
            (loaded, imported) => panic!("{name}: loaded {loaded:?}, imported {imported:?}"),
        }
    }
    assert!(imported_any >= 8, "only {imported_any} fixtures load");
    // The two files of one domain, merged.
    let texts: Vec<(String, String)> = fixtures()
        .into_iter()
        .filter(|(name, _)| name.contains("merge_domain_key"))
        .collect();
    assert_eq!(texts.len(), 2);
    let files = texts.iter().map(|(n, t)| (n.as_str(), t.as_str()));
    let imported = import_files(files, &LoadOptions::default().merge_domains(true)).unwrap();
    assert_eq!(native(&imported).limits.len(), 2);
}

#[test]
fn the_command_prints_what_check_accepts() {
    let dir = compat_dir().join("examples");
    // The example's `replaces` and `quota_mode` decide differently: printed
    // only when asked to go on.
    let output = Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["import", "envoy", "--allow-differences"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let toml = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        toml,
        import_dir(&dir, &LoadOptions::default()).unwrap().toml
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &toml).unwrap();
    let check = Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["check", "--config"])
        .arg(file.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // The explanation shows the new fields.
    assert!(stdout.contains("except"), "{stdout}");

    // A directory that does not load: its error, and no output.
    let bad = tempfile::tempdir().unwrap();
    std::fs::write(
        bad.path().join("a.yaml"),
        "domain: d\ndescriptors:\n  - key: ''\n",
    )
    .unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["import", "envoy"])
        .arg(bad.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("a.yaml:3:"), "{stderr}");
}

#[test]
fn dot_files_are_skipped_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: { unit: second, requests_per_unit: 1 }\n";
    std::fs::create_dir(dir.path().join("..data")).unwrap();
    std::fs::write(dir.path().join("..data/limits.yaml"), yaml).unwrap();
    std::fs::write(dir.path().join("limits.yaml"), yaml).unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
            .args(["import", "envoy"])
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    assert!(run(&[]).status.success());
    assert!(run(&["--ignore-dot-files"]).status.success());
    // Read twice: one domain in two files.
    assert_eq!(run(&["--ignore-dot-files=false"]).status.code(), Some(2));
    // Merged, its descriptor is then defined twice.
    assert_eq!(
        run(&["--ignore-dot-files=false", "--merge-domains"])
            .status
            .code(),
        Some(2)
    );
}

/// A descriptor entry of a generated request.
#[derive(Clone, Debug)]
struct Pair(String, String);

impl Entry for Pair {
    fn key(&self) -> &str {
        &self.0
    }
    fn value(&self) -> &str {
        &self.1
    }
}

/// An entry a request is modelled on: its key, and the values worth
/// trying.
type Model = (String, Vec<String>);

/// A limit's domain and, per entry, its key and the values worth trying.
pub(crate) type Template = (String, Vec<Model>);

/// A configuration of the equivalence test: envoyproxy/ratelimit's, the
/// native import of it, and what requests are made of.
struct Case {
    name: String,
    envoy: EnvoyConfig,
    limits: LimitSet,
    /// The native limit of each envoyproxy/ratelimit limit, by the place
    /// of its `rate_limit` (`FILE:LINE:COLUMN`).
    by_place: HashMap<String, String>,
    /// Per native limit: its domain, and per entry its key and the values
    /// worth trying (its own, its `except` ones).
    templates: Vec<Template>,
    keys: Vec<String>,
    /// Values, a `*` standing for a generated run.
    values: Vec<String>,
}

/// A configuration written for this test, with each kind of node at
/// several depths: exact values, wildcards before and after each other,
/// bare keys beside them, shared thresholds, a key twice in one path, and
/// nodes without limits that still take precedence.
const MIXED: &str = "domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 100 }
    descriptors:
      - key: path
        value: /login
        rate_limit: { unit: minute, requests_per_unit: 5 }
      - key: path
        value: /api/v*/items
        rate_limit: { unit: minute, requests_per_unit: 7 }
      - key: path
        value: /api/*
        share_threshold: true
        rate_limit: { unit: minute, requests_per_unit: 50 }
      - key: path
        rate_limit: { unit: minute, requests_per_unit: 20 }
  - key: remote_address
    value: 10.*
    descriptors:
      - key: path
        rate_limit: { unit: second, requests_per_unit: 3 }
  - key: remote_address
    value: 10.0.0.1
  - key: user
    value: '*a'
    rate_limit: { unit: hour, requests_per_unit: 9 }
    descriptors:
      - key: user
        rate_limit: { unit: hour, requests_per_unit: 8 }
      - key: user
        value: b*
        share_threshold: true
        rate_limit: { unit: hour, requests_per_unit: 6 }
  - key: user
    value: '*'
    share_threshold: true
    rate_limit: { unit: hour, requests_per_unit: 4 }
  - key: plan
    value: free
    descriptors:
      - key: user
        rate_limit: { unit: day, requests_per_unit: 1000 }
";

fn case(name: &str, files: &[(&str, &str)]) -> Case {
    let options = LoadOptions::default().merge_domains(true);
    let envoy = EnvoyConfig::from_files(files.iter().copied(), &options).unwrap();
    let imported = import_files(files.iter().copied(), &options).unwrap();
    let config = native(&imported);
    let by_place = imported
        .limits
        .iter()
        .map(|limit| (limit.at.to_string(), limit.name.clone()))
        .collect();
    let (templates, keys, values) = descriptor_templates(&config, &["other"], &["x", "", "*"]);
    // The test's premise: no key is another's with `_` and more, nor has
    // a `*`, so that envoyproxy/ratelimit's KEY_VALUE texts cannot
    // collide across keys (a difference the import comments on).
    for a in &keys {
        assert!(!a.contains('*'), "{name}: key {a}");
        for b in &keys {
            assert!(!b.starts_with(&format!("{a}_")), "{name}: keys {a} and {b}");
        }
    }
    Case {
        name: name.to_owned(),
        envoy,
        limits: LimitSet::new(&config.limits),
        by_place,
        templates,
        keys,
        values,
    }
}

/// Per limit of `config` (each of a domain and descriptors): its domain
/// and, per entry, its key and the values worth trying (its own, its
/// `except` ones); and every key and value they name beside `keys` and
/// `values`, sorted, each once.
pub(crate) fn descriptor_templates(
    config: &Config,
    keys: &[&str],
    values: &[&str],
) -> (Vec<Template>, Vec<String>, Vec<String>) {
    let mut templates = Vec::new();
    let mut keys: BTreeSet<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    let mut values: BTreeSet<String> = values.iter().map(|v| (*v).to_owned()).collect();
    for limit in &config.limits {
        let mut template = Vec::new();
        for entry in &limit.matcher.descriptors {
            keys.insert(entry.key.clone());
            let tries: Vec<String> = std::iter::once(&entry.value)
                .chain(&entry.except)
                .map(ToString::to_string)
                .collect();
            values.extend(tries.iter().cloned());
            template.push((entry.key.clone(), tries));
        }
        templates.push((limit.matcher.domain.clone().unwrap(), template));
    }
    (
        templates,
        keys.into_iter().collect(),
        values.into_iter().collect(),
    )
}

fn cases() -> &'static [Case] {
    static CASES: std::sync::OnceLock<Vec<Case>> = std::sync::OnceLock::new();
    CASES.get_or_init(|| {
        let fixture = |path: &str| std::fs::read_to_string(compat_dir().join(path)).unwrap();
        let mut cases = vec![case("mixed", &[("mixed.yaml", MIXED)])];
        for path in [
            "examples/config.yaml",
            "examples/example.yaml",
            "test-config/basic_config.yaml",
            "test-config/wildcard.yaml",
            "test-config/share_threshold.yaml",
        ] {
            let text = fixture(path);
            cases.push(case(path, &[(path, &text)]));
        }
        cases
    })
}

/// What a request is given: `(limit, counter)` or nothing, per side. The
/// counter is envoyproxy/ratelimit's key on its side and the native key
/// on the other; each side's are compared only with its own.
type Outcome = Option<(String, String)>;

/// The envoyproxy/ratelimit side: the limit `get_limit` picks, named by its
/// native counterpart (none for an unlimited one, which has none).
fn envoy_side(case: &Case, domain: &str, request: &[(String, String)]) -> Outcome {
    let matched = case.envoy.get_limit(domain, request)?;
    if matched.limit.unlimited {
        return None;
    }
    let name = case
        .by_place
        .get(&matched.limit.at.to_string())
        .unwrap_or_else(|| panic!("{}: no native limit for {}", case.name, matched.limit.at))
        .clone();
    Some((name, format!("{:?}", matched.counter_key)))
}

fn native_side(case: &Case, domain: &str, request: &[(String, String)]) -> Outcome {
    let entries: Vec<Pair> = request
        .iter()
        .map(|(k, v)| Pair(k.clone(), v.clone()))
        .collect();
    let limits: Vec<_> = applicable(&case.limits, domain, &entries).collect();
    assert!(
        limits.len() <= 1,
        "{}: {request:?} matches {} limits",
        case.name,
        limits.len()
    );
    let limit = limits.first()?;
    let parts = key_parts(limit.config());
    let key = compose_key(&parts, &OrUnknown(DescriptorSource(&entries))).unwrap();
    Some((
        limit.name().to_owned(),
        String::from_utf8_lossy(&key).into_owned(),
    ))
}

/// How a request is generated: which limit it is modelled on, its
/// length, and per entry whether it keeps the model's key and which value
/// it takes (the model's, one of its `except` values, or any value of the
/// configuration), with what fills a `*`. The fill has no `*`: a value
/// that is a wildcard's own text is a difference the import comments on.
type Picks = (usize, usize, Vec<(usize, usize, String)>);

/// The request `picks` make for `case`: its domain and entries. Most keep
/// their model's keys and length, so that every limit, however deep, is
/// reached; the rest stray, so that near misses are tried too.
fn request(case: &Case, picks: &Picks) -> (String, Vec<(String, String)>) {
    let (model, length, entries) = picks;
    let (domain, template) = &case.templates[model % case.templates.len()];
    let length = if length % 4 != 0 {
        template.len().min(entries.len())
    } else {
        1 + length / 4 % entries.len()
    };
    let entries = entries[..length]
        .iter()
        .enumerate()
        .map(|(at, (k, v, fill))| {
            let model = template.get(at);
            let key = match model {
                Some((key, _)) if k % 6 != 0 => key.clone(),
                _ => case.keys[k % case.keys.len()].clone(),
            };
            let value = match model {
                Some((_, tries)) if v % 4 != 0 => &tries[v % tries.len()],
                _ => &case.values[v % case.values.len()],
            };
            (key, value.replace('*', fill))
        })
        .collect();
    (domain.clone(), entries)
}

/// What stands for a `*`: from a few texts rather than a regex, which
/// costs a debug build more than the whole check.
fn fill() -> impl Strategy<Value = String> {
    prop::sample::select(&["", "a", "0", "/", "/x", "v1", "b.c", "ab/cd", "x/items"][..])
        .prop_map(str::to_owned)
}

fn picks() -> impl Strategy<Value = Picks> {
    (
        any::<usize>(),
        any::<usize>(),
        prop::collection::vec((any::<usize>(), any::<usize>(), fill()), 4),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// For each configuration, a batch of requests: each gets the same
    /// limit on both sides, and two requests share a counter on one side
    /// exactly when they do on the other.
    #[test]
    fn the_import_picks_the_limit_and_counter_envoy_ratelimit_does(
        which in any::<usize>(),
        batch in prop::collection::vec(picks(), 1..24),
    ) {
        let case = &cases()[which % cases().len()];
        let mut seen: Vec<(Outcome, Outcome, String)> = Vec::new();
        for picks in &batch {
            let (domain, entries) = request(case, picks);
            let envoy = envoy_side(case, &domain, &entries);
            let native = native_side(case, &domain, &entries);
            let shown = format!("{}: {domain} {entries:?}", case.name);
            prop_assert_eq!(
                envoy.as_ref().map(|(name, _)| name),
                native.as_ref().map(|(name, _)| name),
                "{}", shown
            );
            for (other_envoy, other_native, other) in &seen {
                let same_envoy = envoy.is_some() && envoy == *other_envoy;
                let same_native = native.is_some() && native == *other_native;
                prop_assert_eq!(same_envoy, same_native, "{} and {}", shown, other);
            }
            seen.push((envoy, native, shown));
        }
    }
}

/// The generated requests reach every limit of every case, so that the
/// property above is about all of them (a pool that missed a value would
/// leave its limit untested).
#[test]
fn the_generated_requests_reach_every_limit() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for case in cases() {
        let mut reached = BTreeSet::new();
        for _ in 0..20_000 {
            let picks = picks().new_tree(&mut runner).unwrap().current();
            let (domain, entries) = request(case, &picks);
            if let Some((name, _)) = native_side(case, &domain, &entries) {
                reached.insert(name);
            }
        }
        let all: BTreeSet<String> = case.by_place.values().cloned().collect();
        let missed: Vec<_> = all.difference(&reached).collect();
        // Dead limits (a wildcard an earlier one covers) are never reached
        // by any request; the cases have none.
        assert!(missed.is_empty(), "{}: never reached {missed:?}", case.name);
    }
}
