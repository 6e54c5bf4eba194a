//! A full in-memory table on every door: a new key is refused
//! (`on_saturated = "deny"`) or let through uncounted (`"allow"`), the
//! answer says so (`saturated: true`, `X-RateKeeper-Saturated`, gRPC's
//! `response_headers_to_add`), `/metrics` counts it, and room returns as
//! soon as the known keys are fresh again.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{TestService, LISTEN_ANY};
use prometheus_parse::{Scrape, Value as Sample};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use ratekeeper_server::envoy::EnvoyService;
use ratekeeper_server::Config;
use serde_json::{json, Value};

const HEADER: &str = "x-ratekeeper-saturated";

/// Two keys per table; 100/minute GCRA, so a key with one request is
/// fresh again after 600 ms.
const LIMITS: &str = r#"
[store]
max_keys = 2

[[limits]]
name = "strict"
rate = "100/minute"
policy = "gcra"
key = ["header:x-user"]
match = { path_prefix = "/strict" }

[[limits]]
name = "lenient"
rate = "100/minute"
policy = "gcra"
key = ["header:x-user"]
on_saturated = "allow"
match = { path_prefix = "/lenient" }

[[limits]]
name = "global"
rate = "1000/minute"
key = ["global"]
match = { path_prefix = "/none" }
"#;

async fn check(
    service: &TestService,
    limits: &[&str],
    user: &str,
) -> (reqwest::header::HeaderMap, Value) {
    let body = json!({"limits": limits, "key": {"header:x-user": user, "global": "*"}});
    let (status, headers, answer) = service.post("/v1/check", body).await;
    assert_eq!(status, 200, "{answer}");
    (headers, answer)
}

async fn auth(service: &TestService, path: &str, user: &str) -> reqwest::Response {
    service
        .client
        .get(service.http("/v1/auth"))
        .header("x-original-uri", path)
        .header("x-user", user)
        .send()
        .await
        .expect("/v1/auth answers")
}

async fn saturated_total(service: &TestService, limit: &str) -> f64 {
    let text = service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("a body");
    let lines = text.lines().map(|line| Ok(line.to_owned()));
    let scrape = Scrape::parse(lines).expect("Prometheus text");
    scrape
        .samples
        .iter()
        .find(|s| s.metric == "ratekeeper_saturated_total" && s.labels.get("limit") == Some(limit))
        .map(|s| match s.value {
            Sample::Counter(v) | Sample::Untyped(v) => v,
            ref other => panic!("{other:?}"),
        })
        .unwrap_or_else(|| panic!("no ratekeeper_saturated_total for {limit}:\n{text}"))
}

#[tokio::test]
async fn the_json_api_and_auth_request_tell_a_saturated_answer_apart() {
    let service = TestService::start(&format!("{LISTEN_ANY}{LIMITS}")).await;
    for user in ["a", "b"] {
        for limit in ["strict", "lenient"] {
            let (headers, answer) = check(&service, &[limit], user).await;
            assert_eq!(answer["allowed"], true);
            assert!(headers.get(HEADER).is_none());
        }
    }

    // "deny": refused, saying so, with the wait until room can return.
    let (headers, answer) = check(&service, &["strict"], "c").await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["denied_by"], "strict");
    assert_eq!(answer["limits"][0]["saturated"], true);
    assert_eq!(answer["limits"][0]["retry_after_ms"], 600);
    assert_eq!(answer["retry_after"], 1);
    assert_eq!(headers[HEADER], "\"strict\"");
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(answer["headers"][HEADER], "\"strict\"");

    // "allow": through, uncounted, saying so; the other limit counts it.
    let (headers, answer) = check(&service, &["lenient", "global"], "c").await;
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["limits"][0]["saturated"], true);
    assert_eq!(answer["limits"][1]["remaining"], 999);
    assert_eq!(headers[HEADER], "\"lenient\"");
    assert!(headers.get("retry-after").is_none());

    // nginx's auth_request: the same answers, the same header.
    let refused = auth(&service, "/strict/x", "d").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()[HEADER], "\"strict\"");
    assert_eq!(refused.headers()["retry-after"], "1");
    let passed = auth(&service, "/lenient/x", "d").await;
    assert_eq!(passed.status(), 204);
    assert_eq!(passed.headers()[HEADER], "\"lenient\"");

    assert_eq!(saturated_total(&service, "strict").await, 2.0);
    assert_eq!(saturated_total(&service, "lenient").await, 2.0);
    assert_eq!(saturated_total(&service, "global").await, 0.0);

    // Once "a" and "b" are fresh again, there is room at once.
    service.clock.advance(Duration::from_millis(600));
    let (headers, answer) = check(&service, &["strict"], "c").await;
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["limits"][0]["saturated"], false);
    assert!(headers.get(HEADER).is_none());
    let passed = auth(&service, "/strict/x", "e").await;
    assert_eq!(passed.status(), 204);
    assert!(passed.headers().get(HEADER).is_none());
    service.stop().await;
}

const GRPC_LIMITS: &str = r#"
[store]
max_keys = 2

[[limits]]
name = "strict"
rate = "100/minute"
policy = "gcra"
key = ["descriptor:user"]
match = { domain = "edge", descriptors = [{ key = "user" }] }

[[limits]]
name = "lenient"
rate = "100/minute"
policy = "gcra"
key = ["descriptor:member"]
on_saturated = "allow"
match = { domain = "edge", descriptors = [{ key = "member" }] }
"#;

fn ask(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn grpc_answers_over_limit_or_ok_with_the_header() {
    let config = Config::from_toml_str(GRPC_LIMITS, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let service = EnvoyService::new(
        Engine::builder(&config)
            .clock(clock.clone())
            .start()
            .await
            .unwrap(),
    );
    for value in ["a", "b"] {
        for key in ["user", "member"] {
            let response = service.decide(&ask(key, value)).await.unwrap();
            assert_eq!(response.overall_code, Code::Ok as i32);
            assert_eq!(header(&response, HEADER), None);
        }
    }
    let refused = service.decide(&ask("user", "c")).await.unwrap();
    assert_eq!(refused.overall_code, Code::OverLimit as i32);
    let status = &refused.statuses[0];
    assert_eq!(status.limit_remaining, 0);
    assert_eq!(
        status.duration_until_reset,
        Some(prost_types::Duration {
            seconds: 0,
            nanos: 600_000_000
        })
    );
    assert_eq!(header(&refused, HEADER), Some("\"strict\""));
    assert_eq!(header(&refused, "retry-after"), Some("1"));

    let passed = service.decide(&ask("member", "c")).await.unwrap();
    assert_eq!(passed.overall_code, Code::Ok as i32);
    assert_eq!(header(&passed, HEADER), Some("\"lenient\""));
    assert_eq!(header(&passed, "retry-after"), None);

    clock.advance(Duration::from_millis(600));
    let after = service.decide(&ask("user", "c")).await.unwrap();
    assert_eq!(after.overall_code, Code::Ok as i32);
    assert_eq!(header(&after, HEADER), None);
}

#[tokio::test]
async fn the_proxy_refuses_or_forwards_with_the_header() {
    let toml = r#"
[store]
max_keys = 2

[[limits]]
name = "strict"
rate = "100/minute"
policy = "gcra"
key = ["header:x-user"]
match = { path_prefix = "/strict" }

[[limits]]
name = "lenient"
rate = "100/minute"
policy = "gcra"
key = ["header:x-user"]
on_saturated = "allow"
match = { path_prefix = "/lenient" }
"#;
    let config = Config::from_toml_str(toml, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let app = axum::Router::new().fallback(|| async { "upstream" });
    let upstream = common::serve_app(app).await;
    let router =
        ratekeeper_server::proxy::router(engine, &format!("http://{upstream}").parse().unwrap())
            .unwrap();
    let proxy = common::serve_app(router).await;
    let client = reqwest::Client::new();
    let get = |path: &str, user: &str| {
        client
            .get(format!("http://{proxy}{path}"))
            .header("x-user", user)
            .timeout(Duration::from_secs(10))
            .send()
    };
    for user in ["a", "b"] {
        for path in ["/strict", "/lenient"] {
            let response = get(path, user).await.unwrap();
            assert_eq!(response.status(), 200);
            assert!(response.headers().get(HEADER).is_none());
        }
    }
    let refused = get("/strict", "c").await.unwrap();
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()[HEADER], "\"strict\"");
    assert_eq!(refused.headers()["retry-after"], "1");
    let passed = get("/lenient", "c").await.unwrap();
    assert_eq!(passed.status(), 200);
    assert_eq!(passed.headers()[HEADER], "\"lenient\"");
    assert_eq!(passed.text().await.unwrap(), "upstream");

    clock.advance(Duration::from_millis(600));
    let after = get("/strict", "c").await.unwrap();
    assert_eq!(after.status(), 200);
    assert!(after.headers().get(HEADER).is_none());
}
