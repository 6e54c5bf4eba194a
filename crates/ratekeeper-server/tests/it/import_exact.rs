//! `ratekeeper import envoy` decides as `serve --envoy-config` on the same
//! directory: generated envoyproxy/ratelimit directories and the
//! compat fixtures, each loaded both ways on a manual clock, the same
//! requests sent through both, compared request by request (codes, the
//! limit shown, remaining counts, resets). The only requests left out are
//! those the import names as decided differently (a `replaces` that drops
//! a limit of the request, a `quota_mode` limit, a value that is a
//! wildcard's own text where the import says so).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_formats::envoy::{import_dir, EnvoyConfig, LoadOptions, NoteKind};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_response::rate_limit::Unit;
use ratekeeper_server::envoy::proto::rate_limit_response::DescriptorStatus;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use ratekeeper_server::envoy::EnvoyService;
use ratekeeper_server::Config;

use crate::common::descriptor;
use crate::envoy_import::{descriptor_templates, Template};

/// A whole second, 20 s into a minute: windows aligned to the epoch show.
const T0: u64 = 1_700_000_000;

/// One directory, served both ways.
struct Sides {
    files: EnvoyService,
    native: EnvoyService,
    clocks: [Arc<ManualClock>; 2],
    envoy: EnvoyConfig,
    /// Whether the import says a value that is a wildcard's own text is
    /// decided differently.
    literal_differs: bool,
    /// Per native limit: its domain and, per entry, its key and the values
    /// worth trying (its own, its `except` ones).
    templates: Vec<Template>,
    keys: Vec<String>,
    values: Vec<String>,
    _dir: tempfile::TempDir,
}

/// The directory of `files` served by `--envoy-config` and by its
/// import; `None` when the import has no limit to write (a native file
/// needs one).
async fn sides(files: &[(String, String)], merge: bool) -> Option<Sides> {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let options = LoadOptions::default()
        .merge_domains(merge)
        .ignore_dot_files(true);
    let imported = import_dir(dir.path(), &options).unwrap();
    if imported.limits.is_empty() {
        return None;
    }
    let native = Config::from_toml_str(&imported.toml, "imported.toml")
        .unwrap_or_else(|e| panic!("{e}\n{}", imported.toml));
    let text = format!(
        "[envoy]\nconfig_dir = {:?}\nmerge_domains = {merge}\n",
        dir.path().display().to_string()
    );
    let by_files = Config::from_toml_str(&text, "files.toml").unwrap();
    let start = |config: Config| async move {
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(T0)));
        let engine = Engine::builder(&config)
            .clock(clock.clone())
            .start()
            .await
            .unwrap();
        (EnvoyService::new(engine), clock)
    };
    let (files_service, files_clock) = start(by_files).await;
    let (templates, keys, values) = descriptor_templates(&native, &["other"], &["x", "", "q_r"]);
    let (native_service, native_clock) = start(native).await;
    let envoy = EnvoyConfig::load_dir_with(dir.path(), &options).unwrap();
    let literal_differs = imported
        .notes
        .iter()
        .any(|n| n.kind == NoteKind::Difference && n.message.contains("literally"));
    Some(Sides {
        files: files_service,
        native: native_service,
        clocks: [files_clock, native_clock],
        envoy,
        literal_differs,
        templates,
        keys,
        values,
        _dir: dir,
    })
}

/// A set of files of the fixtures: its name, the files, whether domains
/// merge.
type FileSet = (String, Vec<(String, String)>, bool);

/// A status as compared: code, the limit shown (requests per unit, unit),
/// remaining, reset in seconds.
type Shown = (i32, Option<(u32, i32)>, u32, Option<i64>);

/// The files' status as the import must show it. What only reports
/// differently (the import's warnings) is mapped: an unlimited
/// descriptor (no native limit: OK, nothing left, no limit) and a rate
/// per month or year (shown per week natively) are compared by code and
/// counts.
fn shown(status: &DescriptorStatus, files: bool) -> Shown {
    let limit = status
        .current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit));
    if files && limit.is_none() && status.limit_remaining == u32::MAX {
        return (status.code, None, 0, None);
    }
    let long = [Unit::Week, Unit::Month, Unit::Year].map(|unit| unit as i32);
    let limit = limit.map(|(rpu, unit)| match rpu > 0 && long.contains(&unit) {
        true => (u32::MAX, Unit::Week as i32),
        false => (rpu, unit),
    });
    (
        status.code,
        limit,
        status.limit_remaining,
        status.duration_until_reset.map(|d| d.seconds),
    )
}

fn compared(response: &RateLimitResponse, files: bool) -> (i32, Vec<Shown>) {
    let statuses = response.statuses.iter().map(|s| shown(s, files)).collect();
    (response.overall_code, statuses)
}

/// Whether the import claims `request` is decided as the files decide
/// it: no `replaces` of a matched limit drops another matched one, no
/// matched limit is in quota mode, and no value is a wildcard's own text
/// where the import says that differs.
fn comparable(sides: &Sides, request: &RateLimitRequest) -> bool {
    let matched: Vec<_> = request
        .descriptors
        .iter()
        .filter_map(|d| {
            let pairs: Vec<(&str, &str)> = d
                .entries
                .iter()
                .map(|e| (e.key.as_str(), e.value.as_str()))
                .collect();
            sides
                .envoy
                .get_limit(&request.domain, &pairs)
                .map(|m| m.limit.clone())
        })
        .collect();
    let names: Vec<&str> = matched.iter().filter_map(|l| l.name.as_deref()).collect();
    let dropped = matched
        .iter()
        .any(|l| l.replaces.iter().any(|r| names.contains(&r.as_str())));
    let quota = matched.iter().any(|l| l.quota_mode);
    let literal = sides.literal_differs
        && request
            .descriptors
            .iter()
            .any(|d| d.entries.iter().any(|e| e.value.contains('*')));
    !(dropped || quota || literal)
}

/// How a request is made: per descriptor the limit it is modelled on,
/// whether it keeps the model's length, and per entry whether it keeps
/// the model's key and value; then the request's hits, a descriptor's own
/// hits, and how far the clocks move after it.
type Picks = (
    Vec<(usize, bool, Vec<(usize, usize, usize)>, Option<u64>)>,
    u32,
    Option<u64>,
);

fn picks() -> impl Strategy<Value = Picks> {
    (
        prop::collection::vec(
            (
                any::<usize>(),
                prop::bool::weighted(0.85),
                prop::collection::vec((any::<usize>(), any::<usize>(), 0usize..3), 3),
                prop::option::weighted(0.15, 0u64..4),
            ),
            1..4,
        ),
        0u32..4,
        prop::option::weighted(
            0.3,
            prop::sample::select(&[1u64, 30, 61, 3_600, 2_592_000][..]),
        ),
    )
}

/// The request `picks` make for `sides`.
fn request(sides: &Sides, picks: &Picks) -> (RateLimitRequest, Option<u64>) {
    let (descriptors, hits, wait) = picks;
    let mut domain = String::new();
    let descriptors: Vec<RateLimitDescriptor> = descriptors
        .iter()
        .map(|(model, keep_length, entries, own_hits)| {
            let (d, template) = &sides.templates[model % sides.templates.len()];
            domain = d.clone();
            let length = match keep_length {
                true => template.len().min(entries.len()),
                false => 1 + model / 7 % entries.len(),
            };
            let pairs: Vec<(String, String)> = entries[..length]
                .iter()
                .enumerate()
                .map(|(at, &(k, v, fill))| {
                    let model = template.get(at);
                    let key = match model {
                        Some((key, _)) if k % 8 != 0 => key.clone(),
                        _ => sides.keys[k % sides.keys.len()].clone(),
                    };
                    let value = match model {
                        Some((_, tries)) if v % 4 != 0 => tries[v % tries.len()].clone(),
                        _ => sides.values[v % sides.values.len()].clone(),
                    };
                    (key, value.replace('*', ["", "z", "x_y"][fill]))
                })
                .collect();
            let refs: Vec<(&str, &str)> = pairs
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut made = descriptor(&refs);
            made.hits_addend = *own_hits;
            made
        })
        .collect();
    let request = RateLimitRequest {
        domain,
        descriptors,
        hits_addend: *hits,
    };
    (request, *wait)
}

/// Sends every request of `batch` both ways; the first that is decided
/// differently is the error. Says how many were compared.
async fn run(sides: &Sides, batch: &[Picks]) -> Result<usize, String> {
    let mut compared_count = 0;
    for picks in batch {
        let (asked, wait) = request(sides, picks);
        // One the import names as decided differently is not sent at all:
        // the two sides' counts would part.
        if comparable(sides, &asked) {
            let by_files = sides.files.decide(&asked).await;
            let by_import = sides.native.decide(&asked).await;
            compared_count += 1;
            let parted = match (&by_files, &by_import) {
                (Ok(files), Ok(native)) => compared(files, true) != compared(native, false),
                (files, native) => files.is_err() != native.is_err(),
            };
            if parted {
                return Err(format!(
                    "{asked:?}\nfiles:  {by_files:?}\nimport: {by_import:?}"
                ));
            }
        }
        if let Some(secs) = wait {
            for clock in &sides.clocks {
                clock.advance(Duration::from_secs(secs));
            }
        }
    }
    Ok(compared_count)
}

/// One generated descriptor: its level (0 top, 1 under the last top one,
/// 2 under the last of level 1), key, value, limit and flags.
type GenNode = (usize, usize, usize, usize, usize, u8);

const KEYS: [&str; 3] = ["a", "b", "c"];
const VALUES: [&str; 8] = ["", "x", "y", "x_y", "x*", "*", "*y", "x*y"];
const UNITS: [&str; 4] = ["second", "minute", "hour", "month"];

/// The YAML of `nodes` in domain `domain`: duplicates at a level dropped,
/// `share_threshold` only on wildcards, a `name` and `replaces` now and
/// then, `quota_mode` rarely.
fn yaml(domain: &str, nodes: &[GenNode]) -> String {
    let mut out = format!("domain: {domain}\ndescriptors:\n");
    // The (key, value) pairs at each open level, to skip duplicates.
    let mut open: Vec<Vec<(usize, usize)>> = vec![Vec::new()];
    for &(level, key, value, limit, unit, flags) in nodes {
        let level = level.min(open.len() - 1);
        open.truncate(level + 1);
        if open[level].contains(&(key, value)) {
            continue;
        }
        open[level].push((key, value));
        open.push(Vec::new());
        let pad = "  ".repeat(2 * level + 1);
        let value_text = VALUES[value];
        out.push_str(&format!("{pad}- key: {}\n", KEYS[key]));
        if !value_text.is_empty() {
            out.push_str(&format!("{pad}  value: '{value_text}'\n"));
        }
        if value_text.contains('*') && flags & 1 != 0 {
            out.push_str(&format!("{pad}  share_threshold: true\n"));
        }
        if flags & 2 != 0 {
            out.push_str(&format!("{pad}  shadow_mode: true\n"));
        }
        if flags & 0x30 == 0x30 {
            out.push_str(&format!("{pad}  quota_mode: true\n"));
        }
        if limit < 6 {
            out.push_str(&format!("{pad}  rate_limit:\n"));
            match limit {
                5 => out.push_str(&format!("{pad}    unlimited: true\n")),
                n => out.push_str(&format!(
                    "{pad}    unit: {}\n{pad}    requests_per_unit: {}\n",
                    UNITS[unit],
                    n.min(3)
                )),
            }
            if flags & 4 != 0 {
                out.push_str(&format!("{pad}    name: n{key}\n"));
            }
            if flags & 0xc0 == 0xc0 {
                out.push_str(&format!(
                    "{pad}    replaces:\n{pad}      - name: n{}\n",
                    (key + 1) % 3
                ));
            }
        }
        out.push_str(&format!("{pad}  descriptors:\n"));
    }
    // A level left with `descriptors:` and nothing under it is null: the
    // loader takes it as no children.
    out
}

fn nodes() -> impl Strategy<Value = Vec<GenNode>> {
    prop::collection::vec(
        (
            0usize..3,
            0usize..3,
            0usize..8,
            0usize..8,
            0usize..4,
            any::<u8>(),
        ),
        1..9,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Generated directories (one or two domains, nested up to three
    /// levels, exact values, wildcards, bare keys, bans, unlimited and
    /// shadow descriptors, shared thresholds, `replaces`, `quota_mode`,
    /// units up to a month) decide as their import does, request by
    /// request, over generated requests with their hits and a clock that
    /// moves on.
    #[test]
    fn generated_directories_decide_as_their_import(
        first in nodes(),
        second in prop::option::of(nodes()),
        batch in prop::collection::vec(picks(), 1..24),
    ) {
        let mut files = vec![("d.yaml".to_owned(), yaml("d", &first))];
        if let Some(second) = &second {
            files.push(("e.yaml".to_owned(), yaml("e", second)));
        }
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = runtime.block_on(async {
            match sides(&files, false).await {
                Some(sides) => run(&sides, &batch).await,
                None => Ok(0),
            }
        });
        if let Err(error) = outcome {
            let texts: Vec<&str> = files.iter().map(|(_, t)| t.as_str()).collect();
            return Err(TestCaseError::fail(format!("{}\n{error}", texts.join("---\n"))));
        }
    }
}

/// envoyproxy/ratelimit's own example and test configurations, each
/// that loads and has a limit to write, with requests modelled on its
/// limits: the example with a ban, `replaces` and `quota_mode` included
/// (the requests where those two change the answer are the import's
/// named differences, left out).
#[test]
fn the_compat_fixtures_decide_as_their_import() {
    let root = crate::envoy_import::compat_dir();
    let mut sets: Vec<FileSet> = Vec::new();
    for dir in ["examples", "test-config"] {
        let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for name in names {
            let text = std::fs::read_to_string(root.join(dir).join(&name)).unwrap();
            if EnvoyConfig::from_yaml_str(&text, &name).is_ok() {
                sets.push((format!("{dir}/{name}"), vec![(name, text)], false));
            }
        }
    }
    let merged: Vec<(String, String)> = ["merge_domain_key1.yaml", "merge_domain_key2.yaml"]
        .iter()
        .map(|name| {
            let text = std::fs::read_to_string(root.join("test-config").join(name)).unwrap();
            ((*name).to_owned(), text)
        })
        .collect();
    sets.push(("merged".to_owned(), merged, true));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut checked = 0;
    for (name, files, merge) in &sets {
        let batch: Vec<Picks> = (0..300)
            .map(|_| picks().new_tree(&mut runner).unwrap().current())
            .collect();
        let outcome = runtime.block_on(async {
            match sides(files, *merge).await {
                Some(sides) => run(&sides, &batch).await,
                None => Ok(0),
            }
        });
        match outcome {
            Ok(count) => checked += usize::from(count > 0),
            Err(error) => panic!("{name}: {error}"),
        }
    }
    assert!(checked >= 8, "only {checked} fixtures compared");
}

/// A descriptor with `requests_per_unit: 0` refuses every request, and a
/// request it refuses takes nothing from the other descriptors' limits:
/// the same through the import as through the files.
#[test]
fn a_ban_stays_a_ban() {
    let yaml = "domain: d
descriptors:
  - key: banned
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 2 }
";
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let sides = sides(&[("d.yaml".to_owned(), yaml.to_owned())], false)
            .await
            .unwrap();
        let ban = RateLimitRequest {
            domain: "d".into(),
            descriptors: vec![descriptor(&[("banned", "x")]), descriptor(&[("user", "u")])],
            hits_addend: 1,
        };
        for service in [&sides.files, &sides.native] {
            for _ in 0..3 {
                let answer = service.decide(&ban).await.unwrap();
                assert_eq!(answer.overall_code, 2, "{answer:?}");
                assert_eq!(answer.statuses[0].limit_remaining, 0);
                // Refused: nothing taken from the user's limit.
                assert_eq!(answer.statuses[1].limit_remaining, 2, "{answer:?}");
            }
        }
    });
}

/// The command names each difference on stderr and refuses (exit 1,
/// nothing printed) unless `--allow-differences`; what only reports
/// differently is a warning on stderr, and the import goes on.
#[test]
fn the_command_refuses_differences_unless_allowed() {
    let run = |dir: &Path, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
            .args(["import", "envoy"])
            .arg(dir)
            .args(args)
            .output()
            .unwrap()
    };
    let differs = tempfile::tempdir().unwrap();
    std::fs::write(
        differs.path().join("d.yaml"),
        "domain: d
descriptors:
  - key: vip
    rate_limit: { unit: minute, requests_per_unit: 10, replaces: [{ name: per_user }] }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 1, name: per_user }
",
    )
    .unwrap();
    let refused = run(differs.path(), &[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(refused.stdout.is_empty());
    assert!(stderr.contains("difference: d.vip: replaces"), "{stderr}");
    assert!(stderr.contains("--allow-differences"), "{stderr}");
    let allowed = run(differs.path(), &["--allow-differences"]);
    assert_eq!(allowed.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&allowed.stdout).contains("# differs: replaces"));

    let warned = tempfile::tempdir().unwrap();
    std::fs::write(
        warned.path().join("d.yaml"),
        "domain: d
descriptors:
  - key: banned
    rate_limit: { unit: minute, requests_per_unit: 0 }
  - key: free
    rate_limit: { unlimited: true }
",
    )
    .unwrap();
    let output = run(warned.path(), &[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning: d.free: unlimited"), "{stderr}");
    let toml = String::from_utf8_lossy(&output.stdout);
    assert!(toml.contains("rate = \"0/minute\""), "{toml}");
}
