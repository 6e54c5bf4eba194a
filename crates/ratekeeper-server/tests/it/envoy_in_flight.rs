//! Caps on requests in flight at Envoy's gRPC door, in the sequence Envoy
//! sends: the request's call takes a slot and answers its token in
//! `request_headers_to_add`; Envoy adds it to the request, and the
//! stream-done call (a `request_headers` action on that header) sends it
//! back as a `ratekeeper_slot` entry, which gives the slot back.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::clock::ManualClock;
use ratekeeper_server::engine::{Engine, Slots, SLOT_ENTRY, SLOT_HEADER};
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitRequest, RateLimitResponse};
use ratekeeper_server::Config;
use tonic::transport::Channel;

use crate::common::{descriptor, engine_at, serve_rls, TestService, LISTEN_ANY};

/// Two generations in flight per API key, and 3 requests a minute.
const LIMITS: &str = r#"
[[limits]]
name = "generations"
policy = "concurrency"
max_in_flight = 2
lease = "10m"
key = ["descriptor:api_key"]
match = { domain = "llm", descriptors = [{ key = "in_flight", value = "generations" }, { key = "api_key" }] }

[[limits]]
name = "per-key"
rate = "3/minute"
key = ["descriptor:api_key"]
match = { domain = "llm", descriptors = [{ key = "api_key" }] }
"#;

/// A client, the engine, its clock, and what keeps the service up.
type Served = (
    RateLimitServiceClient<Channel>,
    Engine,
    Arc<ManualClock>,
    tokio::sync::oneshot::Sender<()>,
);

async fn serve(toml: &str) -> Served {
    let (engine, clock) = engine_at(toml).await;
    let (client, stop) = serve_rls(engine.clone()).await;
    (client, engine, clock, stop)
}

/// The request's call: the cap's descriptor, and the rate limit's when
/// `rated`.
fn request(key: &str, rated: bool) -> RateLimitRequest {
    let mut descriptors = vec![descriptor(&[
        ("in_flight", "generations"),
        ("api_key", key),
    ])];
    if rated {
        descriptors.push(descriptor(&[("api_key", key)]));
    }
    RateLimitRequest {
        domain: "llm".to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

/// The stream-done call of a request that Envoy gave `slot_header`.
fn stream_done(slot_header: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "llm".to_owned(),
        descriptors: vec![descriptor(&[(SLOT_ENTRY, slot_header)])],
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    call: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(call).await.unwrap().into_inner()
}

/// The slot header an answer asks Envoy to add to the request.
fn slot_header(answer: &RateLimitResponse) -> Option<&str> {
    answer
        .request_headers_to_add
        .iter()
        .find(|header| header.key == SLOT_HEADER)
        .map(|header| header.value.as_str())
}

#[tokio::test]
async fn envoy_holds_a_slot_from_the_request_to_its_stream_done_call() {
    let (mut client, engine, _clock, _stop) = serve(LIMITS).await;
    let mut held = Vec::new();
    for remaining in [1, 0] {
        let answer = ask(&mut client, request("k-1", false)).await;
        assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
        let status = &answer.statuses[0];
        assert_eq!(status.current_limit.as_ref().unwrap().name, "generations");
        assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 2);
        assert_eq!(status.limit_remaining, remaining);
        held.push(slot_header(&answer).expect("a slot header").to_owned());
    }
    // Two generations run: the third is refused, with no slot to give
    // back, and Retry-After.
    let answer = ask(&mut client, request("k-1", false)).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32, "{answer:?}");
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(slot_header(&answer), None, "{answer:?}");
    let retry = answer
        .response_headers_to_add
        .iter()
        .find(|header| header.key == "retry-after");
    assert_eq!(retry.map(|header| header.value.as_str()), Some("1"));
    // Another key has its own two.
    let answer = ask(&mut client, request("k-2", false)).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);

    // The first generation ends: its stream-done call gives the slot back.
    let answer = ask(&mut client, stream_done(&held[0])).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(answer.statuses.len(), 1);
    assert!(answer.statuses[0].current_limit.is_none());
    let answer = ask(&mut client, request("k-1", false)).await;
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    // The same call again, or a token a client made up, frees nothing.
    ask(&mut client, stream_done(&held[0])).await;
    ask(&mut client, stream_done("rk1_made-up")).await;
    let answer = ask(&mut client, request("k-1", false)).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32, "{answer:?}");

    let metrics = engine.decision_metrics();
    assert_eq!(metrics.slots("generations", Slots::Taken), 4);
    assert_eq!(metrics.slots("generations", Slots::Refused), 2);
    assert_eq!(metrics.slots("generations", Slots::Released), 1);
    assert_eq!(metrics.slots("generations", Slots::Unknown), 1);
}

#[tokio::test]
async fn a_rate_limits_refusal_gives_the_slot_back() {
    let (mut client, _engine, _clock, _stop) = serve(LIMITS).await;
    for _ in 0..3 {
        let answer = ask(&mut client, request("k-3", true)).await;
        assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
        ask(&mut client, stream_done(slot_header(&answer).unwrap())).await;
    }
    // The rate limit refuses the fourth: it will not run, and its slot
    // goes back at once (both slots are free for requests the rate limit
    // does not see).
    let answer = ask(&mut client, request("k-3", true)).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32, "{answer:?}");
    assert_eq!(answer.statuses[0].code, Code::Ok as i32);
    assert_eq!(answer.statuses[1].code, Code::OverLimit as i32);
    assert_eq!(slot_header(&answer), None);
    let answer = ask(&mut client, request("k-3", false)).await;
    assert_eq!(answer.statuses[0].limit_remaining, 1, "{answer:?}");
}

#[tokio::test]
async fn a_full_cap_takes_nothing_from_the_rate_limits() {
    let (mut client, _engine, _clock, _stop) = serve(LIMITS).await;
    for _ in 0..2 {
        let answer = ask(&mut client, request("k-4", false)).await;
        assert_eq!(answer.overall_code, Code::Ok as i32);
    }
    let answer = ask(&mut client, request("k-4", true)).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32, "{answer:?}");
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    // The rate limit allowed, and counted nothing: 3 are left.
    assert_eq!(answer.statuses[1].code, Code::Ok as i32);
    assert_eq!(answer.statuses[1].limit_remaining, 3, "{answer:?}");
}

#[tokio::test]
async fn a_slot_envoy_never_gives_back_is_freed_at_its_lease() {
    let (mut client, _engine, clock, _stop) = serve(LIMITS).await;
    for _ in 0..2 {
        ask(&mut client, request("k-5", false)).await;
    }
    let answer = ask(&mut client, request("k-5", false)).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    // Envoy restarted mid-stream: ten minutes on, the slots are free.
    clock.advance(Duration::from_secs(600));
    let answer = ask(&mut client, request("k-5", false)).await;
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    assert_eq!(answer.statuses[0].limit_remaining, 1);
}

#[tokio::test]
async fn a_descriptor_that_only_reports_takes_no_slot() {
    let (mut client, engine, _clock, _stop) = serve(LIMITS).await;
    let mut call = request("k-6", false);
    call.descriptors[0].hits_addend = Some(0);
    for _ in 0..3 {
        let answer = ask(&mut client, call.clone()).await;
        assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
        assert_eq!(slot_header(&answer), None);
    }
    let metrics = engine.decision_metrics();
    assert_eq!(metrics.slots("generations", Slots::Taken), 0);
}

#[tokio::test]
async fn in_shadow_mode_a_full_cap_refuses_nothing() {
    let (mut client, _engine, _clock, _stop) =
        serve(&format!("[envoy]\nshadow_mode = true\n{LIMITS}")).await;
    for _ in 0..2 {
        ask(&mut client, request("k-7", false)).await;
    }
    let answer = ask(&mut client, request("k-7", true)).await;
    // The status says the cap is full; the request goes on, holding the
    // slots it could take (none of the full cap).
    assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(slot_header(&answer), None);
}

#[tokio::test]
async fn the_json_door_takes_and_gives_back_a_descriptors_slot() {
    let service = TestService::start(&format!("{LISTEN_ANY}{LIMITS}")).await;
    let generation = serde_json::json!({
        "domain": "llm",
        "descriptors": [[{"key": "in_flight", "value": "generations"}, {"key": "api_key", "value": "k-8"}]],
    });
    let mut slots = Vec::new();
    for remaining in [1, 0] {
        let (status, _, answer) = service.post("/v1/acquire", generation.clone()).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(answer["limits"][0]["name"], "generations");
        assert_eq!(answer["limits"][0]["remaining"], remaining);
        slots.push(answer["slot"].as_str().unwrap().to_owned());
    }
    let (_, headers, answer) = service.post("/v1/acquire", generation.clone()).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["denied_by"], "generations");
    assert!(answer.get("slot").is_none(), "{answer}");
    assert_eq!(headers["retry-after"], "1");
    // /v1/check leaves caps alone: nothing is taken or refused by them.
    let (_, _, answer) = service.post("/v1/check", generation.clone()).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    // The slot goes back through /v1/release, or a `ratekeeper_slot`
    // descriptor as Envoy's stream-done call sends it.
    let (status, _, answer) = service
        .post("/v1/release", serde_json::json!({"slot": slots[0]}))
        .await;
    assert_eq!(
        (status, answer["released"].as_u64()),
        (200, Some(1)),
        "{answer}"
    );
    let back = serde_json::json!({
        "domain": "llm",
        "descriptors": [[{"key": SLOT_ENTRY, "value": slots[1]}]],
    });
    let (status, _, answer) = service.post("/v1/acquire", back).await;
    assert_eq!(status, 200, "{answer}");
    let (_, _, answer) = service.post("/v1/acquire", generation.clone()).await;
    assert_eq!(answer["limits"][0]["remaining"], 1, "{answer}");
    let listed = service.get_json(service.http("/v1/limits")).await;
    assert_eq!(listed["in_flight"][0]["match"]["domain"], "llm", "{listed}");
    service.stop().await;
}

#[test]
fn a_cap_on_descriptors_is_keyed_by_what_descriptors_have() {
    let error = |toml: &str| {
        Config::from_toml_str(toml, "ratekeeper.toml")
            .unwrap_err()
            .to_string()
    };
    let cap = "[[limits]]\nname = \"c\"\npolicy = \"concurrency\"\nmax_in_flight = 2\n";
    let by_header = format!(
        "{cap}key = [\"header:x-api-key\"]\nmatch = {{ domain = \"llm\", descriptors = [{{ key = \"api_key\" }}] }}\n"
    );
    assert!(
        error(&by_header).contains("limits[0].key: header:x-api-key is read from HTTP requests"),
        "{}",
        error(&by_header)
    );
    let on_http =
        format!("{cap}key = [\"descriptor:api_key\"]\nmatch = {{ path_prefix = \"/v1\" }}\n");
    assert!(
        error(&on_http)
            .contains("limits[0].key: descriptor:api_key is read from Envoy descriptors"),
        "{}",
        error(&on_http)
    );
    let both = format!(
        "{cap}key = [\"global\"]\nmatch = {{ domain = \"llm\", descriptors = [{{ key = \"k\" }}], path_prefix = \"/v1\" }}\n"
    );
    assert!(error(&both).contains("limits[0].match: no request can meet this cap"));
    // A cap on descriptors loads, without the warnings of an HTTP key.
    let config = Config::from_toml_str(LIMITS, "ratekeeper.toml").unwrap();
    assert_eq!(config.in_flight.len(), 1);
    assert!(!config.in_flight[0].applies_to_http());
    assert!(config.warnings().is_empty(), "{:?}", config.warnings());
}
