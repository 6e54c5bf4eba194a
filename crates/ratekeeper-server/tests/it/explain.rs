//! Limits that do not apply are told: `ratekeeper explain`, the admin
//! port's `POST /v1/explain`, the count of requests no limit applied to,
//! and `check`'s warnings.

use std::process::Output;

use ratekeeper_server::envoy::proto::{RateLimitRequest, RateLimitResponse};
use serde_json::{json, Value};

use crate::common::{descriptor, metrics, rls_client, sample, TestService};

const LISTEN: &str =
    "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n";

/// A limit for HTTP requests (no `match`), and one on Envoy's
/// `remote_address` in domain `edge`.
const LIMITS: &str = r#"
[[limits]]
name = "everyone"
rate = "2/minute"
key = ["global"]

[[limits]]
name = "per-ip"
rate = "2/minute"
key = ["peer"]
match = { domain = "edge", descriptors = [{ key = "remote_address" }] }
"#;

async fn should_rate_limit(
    service: &TestService,
    domain: &str,
    pairs: &[(&str, &str)],
) -> RateLimitResponse {
    let mut client = rls_client(service.service.addrs().grpc.expect("grpc is on")).await;
    client
        .should_rate_limit(RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: vec![descriptor(pairs)],
            hits_addend: 0,
        })
        .await
        .expect("an answer")
        .into_inner()
}

async fn explain(service: &TestService, body: Value) -> (u16, Value) {
    let response = service
        .client
        .post(service.admin("/v1/explain"))
        .json(&body)
        .send()
        .await
        .expect("the admin port answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn verdict<'a>(explanation: &'a Value, limit: &str) -> &'a Value {
    explanation["limits"]
        .as_array()
        .expect("limits")
        .iter()
        .find(|v| v["limit"] == limit)
        .unwrap_or_else(|| panic!("no verdict for {limit}: {explanation}"))
}

#[tokio::test]
async fn grpc_requests_no_limit_applies_to_are_counted_shown_and_explained() {
    let service = TestService::start(&format!("{LISTEN}{LIMITS}")).await;
    // "everyone" has no match: it is for HTTP requests, never for these,
    // however many come.
    for _ in 0..3 {
        let response = should_rate_limit(&service, "web", &[("remote_address", "10.0.0.1")]).await;
        assert_eq!(response.overall_code, 1, "OK: {response:?}");
    }
    // A longer descriptor than per-ip's, in its domain; and its domain in
    // another case.
    should_rate_limit(
        &service,
        "edge",
        &[("remote_address", "10.0.0.1"), ("path", "/")],
    )
    .await;
    should_rate_limit(&service, "Edge", &[("remote_address", "10.0.0.1")]).await;
    // One that applies, which is not counted as unmatched.
    should_rate_limit(&service, "edge", &[("remote_address", "10.0.0.1")]).await;

    let text = metrics(&service).await;
    let unmatched = |domain: &str| {
        sample(
            &text,
            &format!("ratekeeper_unmatched_requests_total{{door=\"grpc\",domain=\"{domain}\"}}"),
        )
    };
    assert_eq!(unmatched("(unknown)"), Some(4), "{text}");
    assert_eq!(unmatched("edge"), Some(1), "{text}");

    let stats = service.get_json(service.admin("/v1/stats")).await;
    let grpc = &stats["unmatched"][0];
    assert_eq!(grpc["door"], "grpc", "{stats}");
    assert_eq!(grpc["requests"], 5, "{stats}");
    let last = grpc["last"]["request"].as_str().expect("a sample");
    assert!(last.contains("remote_address=10.0.0.1"), "{last}");

    let (status, web) = explain(
        &service,
        json!({"domain": "web", "descriptors": [[{"key": "remote_address", "value": "10.0.0.1"}]]}),
    )
    .await;
    assert_eq!(status, 200, "{web}");
    assert_eq!(
        verdict(&web, "everyone")["reason"]["reason"],
        "for_http",
        "{web}"
    );
    assert_eq!(
        verdict(&web, "per-ip")["reason"]["reason"],
        "domain",
        "{web}"
    );

    // Envoy's own shape of a descriptor is read too.
    let (_, longer) = explain(
        &service,
        json!({"domain": "edge", "descriptors": [{"entries": [
            {"key": "remote_address", "value": "10.0.0.1"}, {"key": "path", "value": "/"}]}]}),
    )
    .await;
    let per_ip = verdict(&longer, "per-ip");
    assert_eq!(
        per_ip["reason"],
        json!({"reason": "length", "want": 1, "got": 2})
    );
    assert!(per_ip["why"]
        .as_str()
        .unwrap()
        .contains("descriptors match whole"));

    let (_, case) = explain(
        &service,
        json!({"domain": "Edge", "descriptors": [[{"key": "remote_address", "value": "10.0.0.1"}]]}),
    )
    .await;
    assert!(
        verdict(&case, "per-ip")["why"]
            .as_str()
            .unwrap()
            .contains("case included"),
        "{case}"
    );

    let (_, applies) = explain(
        &service,
        json!({"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "10.0.0.1"}]]}),
    )
    .await;
    assert_eq!(verdict(&applies, "per-ip")["applies"], true, "{applies}");
    assert_eq!(verdict(&applies, "per-ip")["key"], "10.0.0.1", "{applies}");

    let (status, _) = explain(&service, json!({"domain": "edge"})).await;
    assert_eq!(status, 400);
    service.stop().await;
}

#[tokio::test]
async fn json_api_requests_no_limit_applies_to_are_counted() {
    let toml = format!(
        "{LISTEN}[[limits]]\nname = \"login\"\nrate = \"2/minute\"\nkey = [\"global\"]\n\
         match = {{ path_prefix = \"/login\" }}\n"
    );
    let service = TestService::start(&toml).await;
    let (status, _, answer) = service
        .post("/v1/check", json!({"method": "GET", "path": "/home"}))
        .await;
    assert_eq!(
        (status, &answer["allowed"]),
        (200, &json!(true)),
        "{answer}"
    );
    service
        .post("/v1/check", json!({"method": "GET", "path": "/login"}))
        .await;
    let text = metrics(&service).await;
    assert_eq!(
        sample(
            &text,
            "ratekeeper_unmatched_requests_total{door=\"http_api\",domain=\"\"}"
        ),
        Some(1),
        "{text}"
    );
    service.stop().await;
}

fn ratekeeper(args: &[&str], stdin: Option<&str>) -> Output {
    crate::common::run_ratekeeper(args, &[], stdin.unwrap_or_default())
}

/// `ratekeeper explain` with `config` and `args`: its exit code and stdout.
fn explain_with(config: &[&str], args: &[&str]) -> (Option<i32>, String) {
    let output = ratekeeper(&[&["explain"], config, args].concat(), None);
    (output.status.code(), text(&output.stdout))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_explain_command_says_which_limits_apply_and_why_not_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, LIMITS).unwrap();
    let config = ["-c", path.to_str().unwrap()];
    let edge =
        |descriptor: &str| explain_with(&config, &["--domain", "edge", "--descriptor", descriptor]);

    let (code, out) = edge("remote_address=10.0.0.1");
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("applies:\n  limit per-ip (descriptor 0), key \"10.0.0.1\""),
        "{out}"
    );
    assert!(
        out.contains("limit everyone (descriptor 0): it has no match.domain"),
        "{out}"
    );

    let (code, out) = edge("remote_address=10.0.0.1,path=/login");
    assert_eq!(code, Some(1), "nothing applies: {out}");
    assert!(
        out.contains("nothing: the request is allowed and counted nowhere"),
        "{out}"
    );
    assert!(
        out.contains("it matches descriptors of 1 entry, this one has 2"),
        "{out}"
    );

    let (code, out) = explain_with(&config, &["--path", "/login"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("limit everyone, key \"*\""), "{out}");
    assert!(
        out.contains("limit per-ip: it names an Envoy domain"),
        "{out}"
    );

    let request = r#"{"domain": "edge", "descriptors": [[{"key": "user", "value": "u"}]]}"#;
    let json = ratekeeper(
        &[&["explain"], &config[..], &["--json", "--request", "-"]].concat(),
        Some(request),
    );
    assert_eq!(json.status.code(), Some(1));
    let answer: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(
        verdict(&answer, "per-ip")["reason"],
        json!({"reason": "key", "index": 0, "want": "remote_address", "got": "user"})
    );

    let bad = ratekeeper(
        &[
            &["explain"],
            &config[..],
            &["--domain", "edge", "--descriptor", "x"],
        ]
        .concat(),
        None,
    );
    assert_eq!(bad.status.code(), Some(2));
    let stderr = text(&bad.stderr);
    assert!(stderr.contains("is not KEY=VALUE"), "{stderr}");
}

#[test]
fn the_explain_command_reads_envoyproxy_ratelimit_files() {
    let dir = tempfile::tempdir().unwrap();
    let files = dir.path().join("envoy");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(
        files.join("edge.yaml"),
        "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n",
    )
    .unwrap();
    let config = [
        "--envoy-config",
        files.to_str().unwrap(),
        "--domain",
        "edge",
    ];

    let (code, out) = explain_with(&config, &["--descriptor", "remote_address=1.2.3.4"]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("envoy files edge.remote_address"), "{out}");

    let (code, out) = explain_with(&config, &["--descriptor", "remote_address=1.2.3.4,path=/"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("though one matches its first 1 entry"),
        "{out}"
    );
}

#[test]
fn check_warns_of_limits_and_doors_nothing_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &config,
        "[listen]\ngrpc = \"127.0.0.1:8081\"\n\n[[limits]]\nname = \"everyone\"\nrate = \"2/minute\"\n\
         key = [\"global\"]\n\n[[limits]]\nname = \"lost\"\nrate = \"2/minute\"\nkey = [\"global\"]\n\
         match = { domain = \"edge\" }\n",
    )
    .unwrap();
    let output = ratekeeper(&["check", "-c", config.to_str().unwrap()], None);
    assert!(output.status.success(), "warnings are not errors");
    let stdout = text(&output.stdout);
    assert!(stdout.contains("limit everyone: token_bucket 2/minute, key global, match every HTTP request\n  applies to HTTP requests"), "{stdout}");
    assert!(
        stdout.contains("  applies to no door: it names a domain but no descriptors"),
        "{stdout}"
    );
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("warning: limit lost never applies"),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: listen.grpc is on, but no limit matches Envoy descriptors"),
        "{stderr}"
    );
}

#[test]
fn check_warns_where_after_response_is_not_applied() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &config,
        "[[limits]]\nname = \"tokens\"\nrate = \"10000/minute\"\nkey = [\"header:x-api-key\"]\n\
         after_response = { cost = \"header:x-llm-tokens\" }\n\n\
         [[limits]]\nname = \"envoy-tokens\"\nrate = \"10000/minute\"\nkey = [\"descriptor:api_key\"]\n\
         after_response = { cost = \"header:x-llm-tokens\" }\n\
         match = { domain = \"llm\", descriptors = [{ key = \"api_key\" }] }\n",
    )
    .unwrap();
    let path = config.to_str().unwrap();
    // For serve: neither limit reads a response.
    let output = ratekeeper(&["check", "-c", path], None);
    assert!(output.status.success(), "warnings are not errors");
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "warning: limit tokens has after_response, which only ratekeeper proxy applies: \
             on serve's doors"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: limit envoy-tokens has after_response, which only ratekeeper proxy applies, but it matches Envoy descriptors"),
        "{stderr}"
    );
    // For the proxy: the HTTP limit is applied, the descriptors' one never.
    let output = ratekeeper(
        &[
            "check",
            "proxy",
            "--upstream",
            "http://127.0.0.1:3000",
            "-c",
            path,
        ],
        None,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(!stderr.contains("limit tokens has"), "{stderr}");
    assert!(
        stderr.contains("warning: limit envoy-tokens has after_response"),
        "{stderr}"
    );
}
