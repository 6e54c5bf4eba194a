//! Envoy's token limits over gRPC, in the sequence Envoy sends them
//! (`apply_on_stream_done`): at the request, the descriptor with
//! `hits_addend: 0`, refused only when the key is already over; when the
//! stream ends, the same descriptor with the tokens it cost, charged past
//! the limit on a limit with `count_refused = true`.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
use ratekeeper_server::Config;
use tonic::transport::Channel;

use crate::common::{descriptor, serve_rls};

const LIMITS: &str = r#"
[[limits]]
name = "llm-tokens"
rate = "10000/minute"
key = ["descriptor:api_key"]
count_refused = true
match = { domain = "ai-gateway", descriptors = [{ key = "api_key" }] }

[[limits]]
name = "counted-when-allowed"
rate = "10000/minute"
key = ["descriptor:tenant"]
match = { domain = "ai-gateway", descriptors = [{ key = "tenant" }] }
"#;

fn call(key: &str, value: &str, hits: u64) -> RateLimitRequest {
    let mut descriptor: RateLimitDescriptor = descriptor(&[(key, value)]);
    // Envoy sets the descriptor's own hits_addend, 0 included.
    descriptor.hits_addend = Some(hits);
    RateLimitRequest {
        domain: "ai-gateway".to_owned(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    }
}

async fn ask(client: &mut RateLimitServiceClient<Channel>, request: RateLimitRequest) -> Code {
    let response = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    Code::try_from(response.overall_code).unwrap()
}

#[tokio::test]
async fn the_stream_done_count_is_charged_past_the_limit() {
    let config = Config::from_toml_str(LIMITS, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (mut client, _stop) = serve_rls(engine).await;

    // The request: nothing taken, the key is not over.
    assert_eq!(ask(&mut client, call("api_key", "k-1", 0)).await, Code::Ok);
    // The stream ends: 12,000 tokens, 2,000 more than the budget.
    assert_eq!(
        ask(&mut client, call("api_key", "k-1", 12_000)).await,
        Code::OverLimit
    );
    // The next requests are refused until the debt is paid off: 2,000
    // tokens at 10,000 a minute, 12 s.
    assert_eq!(
        ask(&mut client, call("api_key", "k-1", 0)).await,
        Code::OverLimit
    );
    clock.advance(Duration::from_millis(11_999));
    assert_eq!(
        ask(&mut client, call("api_key", "k-1", 0)).await,
        Code::OverLimit
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(ask(&mut client, call("api_key", "k-1", 0)).await, Code::Ok);

    // A limit that counts only what it lets through refuses the same count
    // and takes nothing: the next request passes.
    assert_eq!(
        ask(&mut client, call("tenant", "t-1", 12_000)).await,
        Code::OverLimit
    );
    assert_eq!(ask(&mut client, call("tenant", "t-1", 0)).await, Code::Ok);
    assert_eq!(
        ask(&mut client, call("tenant", "t-1", 10_000)).await,
        Code::Ok
    );
}

#[tokio::test]
async fn negative_hits_give_tokens_back() {
    let config = Config::from_toml_str(LIMITS, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
    let (mut client, _stop) = serve_rls(engine).await;
    assert_eq!(
        ask(&mut client, call("api_key", "k-2", 10_500)).await,
        Code::OverLimit
    );
    // An estimate charged ahead, returned in part: 600 back leaves 100.
    let mut back = call("api_key", "k-2", 600);
    back.descriptors[0].is_negative_hits = true;
    assert_eq!(ask(&mut client, back).await, Code::Ok);
    assert_eq!(
        ask(&mut client, call("api_key", "k-2", 100)).await,
        Code::Ok
    );
    assert_eq!(
        ask(&mut client, call("api_key", "k-2", 1)).await,
        Code::OverLimit
    );
}

#[tokio::test]
async fn an_overdrawn_report_refuses_the_request_and_the_other_limits_take_nothing() {
    let config = Config::from_toml_str(LIMITS, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
    let (mut client, _stop) = serve_rls(engine).await;
    let mut both = call("api_key", "k-3", 12_000);
    let mut tenant = descriptor(&[("tenant", "t-3")]);
    tenant.hits_addend = Some(1);
    both.descriptors.push(tenant);
    let response = client.should_rate_limit(both).await.unwrap().into_inner();
    assert_eq!(response.overall_code, Code::OverLimit as i32);
    assert_eq!(response.statuses[0].code, Code::OverLimit as i32);
    // The tenant's limit allowed, but the request was refused: nothing taken.
    assert_eq!(response.statuses[1].limit_remaining, 10_000);
    assert_eq!(
        ask(&mut client, call("tenant", "t-3", 10_000)).await,
        Code::Ok
    );
}
