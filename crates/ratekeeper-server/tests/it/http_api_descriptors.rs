//! The JSON API takes descriptors in the shape Envoy users paste
//! (`{"entries": [..]}`) as well as its own (a list of entries), and a
//! descriptor in neither shape gets an error that shows both.

use crate::common;

use common::{TestService, LISTEN_ANY};
use serde_json::json;

const EDGE: &str = r#"
[[limits]]
name = "edge-ip"
rate = "2/minute"
key = ["descriptor:remote_address"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }]
"#;

#[tokio::test]
async fn envoys_descriptor_shape_counts_as_the_list_shape_does() {
    let service = TestService::start(&format!("{LISTEN_ANY}{EDGE}")).await;
    let envoy = json!({"domain": "edge", "descriptors": [
        {"entries": [{"key": "remote_address", "value": "192.0.2.9"}]}
    ]});
    let list = json!({"domain": "edge", "descriptors": [
        [{"key": "remote_address", "value": "192.0.2.9"}]
    ]});
    let (status, _, answer) = service.post("/v1/check", envoy.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["limits"][0]["name"], "edge-ip");
    assert_eq!(answer["limits"][0]["key"], "192.0.2.9");
    assert_eq!(answer["limits"][0]["remaining"], 1);
    // The same key, in the other shape: one count.
    let (_, _, answer) = service.post("/v1/check", list).await;
    assert_eq!(answer["limits"][0]["remaining"], 0);
    let (_, _, answer) = service.post("/v1/check", envoy).await;
    assert_eq!(answer["allowed"], false);
    service.stop().await;
}

#[tokio::test]
async fn a_descriptor_in_neither_shape_is_answered_with_both() {
    let service = TestService::start(&format!("{LISTEN_ANY}{EDGE}")).await;
    for descriptor in [
        json!({"key": "remote_address", "value": "192.0.2.9"}),
        json!({"entries": [{"key": "remote_address", "value": "192.0.2.9"}], "hits_addend": 2}),
        json!("remote_address=192.0.2.9"),
    ] {
        let body = json!({"domain": "edge", "descriptors": [descriptor]});
        let (status, _, problem) = service.post("/v1/check", body).await;
        assert_eq!(status, 400, "{descriptor}");
        let detail = problem["detail"].as_str().expect("a detail");
        assert!(detail.contains("descriptors[0]"), "{detail}");
        assert!(detail.contains(r#"{"entries": [{"key""#), "{detail}");
        assert!(detail.contains(r#"[{"key": "remote_address""#), "{detail}");
    }
    service.stop().await;
}

/// The JSON API's descriptors are planned as Envoy's are: a domain of
/// envoyproxy/ratelimit's files is matched by its tree (counted per value,
/// shown by the file's name), and a limit of zero refuses, naming it.
#[tokio::test]
async fn descriptors_meet_envoyproxy_ratelimits_files() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("edge.yaml"),
        "domain: files\ndescriptors:\n  - key: user\n    rate_limit:\n      name: per-user\n      \
         unit: minute\n      requests_per_unit: 2\n  - key: blocked\n    rate_limit:\n      \
         name: blocked\n      unit: hour\n      requests_per_unit: 0\n",
    )
    .unwrap();
    let toml = format!(
        "{LISTEN_ANY}[envoy]\nconfig_dir = {:?}\n{EDGE}",
        dir.path().display().to_string()
    );
    let service = TestService::start(&toml).await;
    let user = |value: &str| json!({"domain": "files", "descriptors": [[{"key": "user", "value": value}]]});
    for remaining in [1, 0] {
        let (status, _, answer) = service.post("/v1/check", user("alice")).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(answer["limits"][0]["remaining"], remaining, "{answer}");
    }
    let (_, _, answer) = service.post("/v1/check", user("alice")).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    // Each value has its own count.
    let (_, _, answer) = service.post("/v1/check", user("bob")).await;
    assert_eq!(answer["allowed"], true, "{answer}");

    let blocked = json!({"domain": "files", "descriptors": [[{"key": "blocked", "value": "x"}]]});
    let (status, headers, answer) = service.post("/v1/check", blocked).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["denied_by"], "blocked", "{answer}");
    assert_eq!(answer["retry_after"], 3600, "{answer}");
    assert_eq!(headers["retry-after"], "3600");
    service.stop().await;
}
