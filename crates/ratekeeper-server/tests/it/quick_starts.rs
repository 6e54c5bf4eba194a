//! The quick starts under `examples/`, as shipped: the Envoy ones
//! (`examples/envoy`, and `examples/envoy-llm` for token budgets) checked
//! against Envoy's own schema and sent through Envoy's own generated RLS
//! stubs (each one's `check.py`) to a real `ratekeeper serve`.
//!
//! Without python3 and its packages (xds-protos, grpcio, pyyaml) the test
//! says so loudly and passes, except under `CI=true`, where it fails
//! (`.ci/run` installs them).

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::ServeProcess;
use ratekeeper_server::Config;

/// The repository's `examples/` folder.
fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// What a test needs from Python to run check.py.
const PYTHON_PROBE: &str = "import yaml, grpc, envoy.config.bootstrap.v3.bootstrap_pb2, \
     envoy.service.ratelimit.v3.rls_pb2_grpc";

/// Whether python3 can run check.py; when it cannot, the test is a
/// [`skip`](ratekeeper_test_support::skip), a failure under `CI=true`.
fn python_ready() -> bool {
    let ready = Command::new("python3")
        .args(["-c", PYTHON_PROBE])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if !ready {
        ratekeeper_test_support::skip::program_missing(
            "python3 with xds-protos, grpcio and pyyaml",
            "pip install xds-protos==1.85.0 grpcio==1.85.3 pyyaml==6.0.3",
        );
    }
    ready
}

/// Runs `example`'s check.py with `args`; its combined output, and
/// whether it passed.
fn check_py(example: &str, args: &[&str]) -> (bool, String) {
    let output = Command::new("python3")
        .arg(examples().join(example).join("check.py"))
        .args(args)
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

#[test]
fn the_envoy_quick_start_limits_are_1000_a_second_overall_and_10_per_key() {
    let text = std::fs::read_to_string(examples().join("envoy/ratekeeper.toml"))
        .expect("the example's ratekeeper.toml");
    let config = Config::from_toml_str(&text, "examples/envoy/ratekeeper.toml")
        .expect("the example's config is valid");
    // check.py runs them per day instead (the same numbers): here the
    // shipped units, and the domain and descriptor keys envoy.yaml sends.
    let limits: Vec<_> = config
        .limits
        .iter()
        .map(|limit| {
            let keys: Vec<_> = limit
                .matcher
                .descriptors
                .iter()
                .map(|d| d.key.as_str())
                .collect();
            (
                limit.limit.name(),
                limit.rate.amount(),
                limit.rate.period(),
                limit.matcher.domain.as_deref(),
                keys,
            )
        })
        .collect();
    let second = std::time::Duration::from_secs(1);
    assert_eq!(
        limits,
        [
            (
                "overall",
                1000,
                second,
                Some("quickstart"),
                vec!["generic_key"]
            ),
            (
                "per-api-key",
                10,
                second,
                Some("quickstart"),
                vec!["api_key"]
            ),
        ]
    );
    assert_eq!(
        config.listen.grpc.map(|addr| addr.port()),
        Some(8081),
        "envoy.yaml's ratekeeper cluster points at port 8081"
    );
}

#[test]
fn the_envoy_quick_start_passes_envoys_schema_and_ratekeeper_decides_its_descriptors() {
    if !python_ready() {
        return;
    }
    let config = examples().join("envoy/ratekeeper.toml");
    // The example's numbers per day instead of per second: the same
    // limits, counted the same way, and no token comes back while the
    // test runs, however slow the machine (see check.py's docstring).
    let process = ServeProcess::start(
        &["--config", config.to_str().expect("a UTF-8 path")],
        &[
            ("RATEKEEPER_LIMITS__OVERALL__RATE", "1000/day"),
            ("RATEKEEPER_LIMITS__PER_API_KEY__RATE", "10/day"),
        ],
    );
    let grpc = process.grpc.expect("the gRPC door is on").to_string();
    let (passed, output) = check_py("envoy", &["--grpc", &grpc]);
    assert!(passed, "check.py failed:\n{output}");
    assert!(
        output.contains("decides the route's descriptors as expected"),
        "{output}"
    );
}

#[test]
fn the_envoy_check_refuses_a_field_envoy_does_not_know() {
    if !python_ready() {
        return;
    }
    let shipped = std::fs::read_to_string(examples().join("envoy/envoy.yaml"))
        .expect("the example's envoy.yaml");
    let dir = tempfile::tempdir().expect("a directory");
    for (from, to) in [
        (
            "stat_prefix: ingress",
            "stat_prefix: ingress\n          stat_prefx: typo",
        ),
        (
            "#     sni: ratekeeper.internal",
            "#     server_name: ratekeeper.internal",
        ),
    ] {
        assert!(shipped.contains(from), "envoy.yaml no longer has {from:?}");
        let path = dir.path().join("envoy.yaml");
        std::fs::write(&path, shipped.replacen(from, to, 1)).expect("written");
        let (passed, output) = check_py("envoy", &["--envoy", path.to_str().expect("UTF-8")]);
        assert!(!passed, "check.py accepted {to:?}:\n{output}");
        assert!(
            output.contains("is not a valid Envoy bootstrap"),
            "{output}"
        );
    }
}

#[test]
fn the_envoy_llm_quick_start_is_10000_tokens_a_minute_and_4_generations_at_once() {
    let text = std::fs::read_to_string(examples().join("envoy-llm/ratekeeper.toml"))
        .expect("the example's ratekeeper.toml");
    let config = Config::from_toml_str(&text, "examples/envoy-llm/ratekeeper.toml")
        .expect("the example's config is valid");
    let [limit] = config.limits.as_slice() else {
        panic!("one limit: {:#?}", config.limits)
    };
    assert_eq!(limit.limit.name(), "tokens-per-api-key");
    assert_eq!(
        (limit.rate.amount(), limit.rate.period()),
        (10_000, std::time::Duration::from_secs(60))
    );
    assert!(
        limit.count_refused,
        "the stream-done count must be charged past the budget"
    );
    assert_eq!(limit.matcher.domain.as_deref(), Some("llm"));
    let [cap] = config.in_flight.as_slice() else {
        panic!("one cap on generations in flight: {:#?}", config.in_flight)
    };
    assert_eq!(cap.cap.name(), "generations-per-api-key");
    assert_eq!(cap.cap.max(), 4);
    assert_eq!(cap.matcher.domain.as_deref(), Some("llm"));
}

#[test]
fn the_token_page_shows_the_envoy_llm_quick_starts_route() {
    let page = std::fs::read_to_string(examples().join("../docs/llm-token-limits.md"))
        .expect("docs/llm-token-limits.md");
    let shipped = std::fs::read_to_string(examples().join("envoy-llm/envoy.yaml"))
        .expect("the example's envoy.yaml");
    // The page's YAML, line for line, is in the example at some indent.
    let shipped: Vec<&str> = shipped.lines().collect();
    let blocks: Vec<&str> = page
        .split("```yaml\n")
        .skip(1)
        .map(|block| &block[..block.find("```").expect("a closed block")])
        .collect();
    assert!(!blocks.is_empty(), "the page shows no YAML");
    for block in blocks {
        let lines: Vec<&str> = block.lines().collect();
        let found = shipped.windows(lines.len()).any(|window| {
            let indent = window[0].len() - window[0].trim_start().len();
            window
                .iter()
                .zip(&lines)
                .all(|(shipped, shown)| shipped.get(indent..) == Some(*shown))
        });
        assert!(found, "not in examples/envoy-llm/envoy.yaml:\n{block}");
    }
}

#[test]
fn the_envoy_llm_quick_start_passes_envoys_schema_and_ratekeeper_charges_and_frees_at_stream_done()
{
    if !python_ready() {
        return;
    }
    let config = examples().join("envoy-llm/ratekeeper.toml");
    // The budget per day instead of per minute: no token comes back while
    // the test runs, however slow the machine (see check.py's docstring).
    let process = ServeProcess::start(
        &["--config", config.to_str().expect("a UTF-8 path")],
        &[("RATEKEEPER_LIMITS__TOKENS_PER_API_KEY__RATE", "10000/day")],
    );
    let grpc = process.grpc.expect("the gRPC door is on").to_string();
    let (passed, output) = check_py("envoy-llm", &["--grpc", &grpc]);
    assert!(passed, "check.py failed:\n{output}");
    assert!(
        output.contains("charges the stream-done counts and frees the slots as expected"),
        "{output}"
    );
}
