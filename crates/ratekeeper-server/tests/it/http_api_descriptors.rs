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
