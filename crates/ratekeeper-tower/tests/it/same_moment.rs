//! On a refusal, `RateLimit`'s `t` and `Retry-After` name the same moment
//! (the draft: when a response has both, they should), over real HTTP, on
//! the layer's synchronous path and on its asynchronous one.

use crate::common;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{serve, Reply, Waiting};
use http::StatusCode;
use ratekeeper::clock::ManualClock;
use ratekeeper::{Limit, MemoryStore, Store, Timestamp, TokenBucket};
use ratekeeper_tower::headers::{HeaderStyle, ResetStyle};
use ratekeeper_tower::{Key, RateLimitLayer};

fn store(clock: &ManualClock) -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap()
}

fn bucket(name: &str, per_minute: u64) -> Limit {
    Limit::new(name, TokenBucket::per_minute(per_minute).unwrap()).unwrap()
}

/// The `t` of the `RateLimit` field.
fn t(reply: &Reply) -> &str {
    let value = reply.header("ratelimit").expect("a RateLimit field");
    value
        .split(';')
        .find_map(|param| param.strip_prefix("t="))
        .expect("a t parameter")
}

/// A 5/minute bucket, emptied: the refusal waits 12 s for one token, and
/// both fields say 12 (not the 60 s until the bucket is full again).
async fn five_a_minute_refuses_with_one_moment<S: Store + Clone + 'static>(store: S) {
    let layer = RateLimitLayer::builder(store)
        .limit(bucket("per-ip", 5), Key::peer())
        .headers(HeaderStyle::Both)
        .reset_style(ResetStyle::DeltaSeconds)
        .build()
        .unwrap();
    let http = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    for _ in 0..5 {
        let allowed = http.get("/", &[]).await;
        assert_eq!(allowed.status, StatusCode::OK);
    }
    let refused = http.get("/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("12"));
    assert_eq!(t(&refused), "12");
    assert_eq!(refused.header("x-ratelimit-reset"), Some("12"));
}

#[tokio::test]
async fn a_refusal_names_one_moment_in_both_fields() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    five_a_minute_refuses_with_one_moment(store(&clock)).await;
}

#[tokio::test]
async fn a_refusal_names_one_moment_on_the_asynchronous_path() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    five_a_minute_refuses_with_one_moment(Waiting(store(&clock))).await;
}

/// An allowed answer's `t` is the time until the quota is whole again.
#[tokio::test]
async fn an_allowed_answer_counts_to_a_whole_quota() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let layer = RateLimitLayer::builder(store(&clock))
        .limit(bucket("per-ip", 5), Key::peer())
        .build()
        .unwrap();
    let http = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    for expected in ["12", "24", "36"] {
        let allowed = http.get("/", &[]).await;
        assert_eq!(allowed.status, StatusCode::OK);
        assert_eq!(t(&allowed), expected);
    }
}

/// Under several limits, the field reports a limit that refused, the one
/// whose wait `Retry-After` gives, even when a limit that did not refuse
/// has less left.
#[tokio::test]
async fn several_limits_report_the_one_that_refused() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let layer = RateLimitLayer::builder(store(&clock))
        .limit(bucket("per-minute", 5), Key::peer())
        .limit(
            Limit::new(
                "per-hour",
                TokenBucket::new(4, Duration::from_secs(3_600), 4).unwrap(),
            )
            .unwrap(),
            Key::global(),
        )
        .cost(|parts| {
            parts
                .headers
                .get("x-cost")
                .and_then(|value| value.to_str().ok()?.parse().ok())
                .unwrap_or(1)
        })
        .build()
        .unwrap();
    let http = serve(
        Router::new()
            .route("/", get(|| async { "hello" }))
            .layer(layer),
    )
    .await;
    assert_eq!(
        http.get("/", &[("x-cost", "3")]).await.status,
        StatusCode::OK
    );
    // per-minute has 2 left and would allow 2 more (leaving 0); per-hour
    // has 1 and refuses, for the 15 minutes its next token takes.
    let refused = http.get("/", &[("x-cost", "2")]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("900"));
    assert!(refused
        .header("ratelimit")
        .unwrap()
        .starts_with(r#""per-hour";"#));
    assert_eq!(t(&refused), "900");
}
