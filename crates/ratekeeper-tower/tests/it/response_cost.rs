//! `ResponseCostLayer`: costs read from responses, charged once known, and
//! estimates held before requests, over real loopback HTTP (axum) and as
//! a tower service (trailers, dropped streams, expired reservations).

use crate::common;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use common::serve;
use http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use ratekeeper::{clock::ManualClock, Clock, Limit, MemoryStore, Store, Timestamp, TokenBucket};
use ratekeeper_tower::{Cost, Key, ResponseCostLayer};
use tower::{service_fn, Layer, Service, ServiceExt};

fn clocked_store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    (clock, store)
}

fn tokens() -> Limit {
    Limit::new("llm-tokens", TokenBucket::per_minute(10_000).unwrap()).unwrap()
}

fn api_key() -> Key {
    Key::header(HeaderName::from_static("x-api-key"))
}

#[tokio::test]
async fn concurrent_requests_pass_the_budget_by_one_estimates_excess_at_most() {
    let (clock, store) = clocked_store();
    // Every answer costs 1,100 tokens, a little over the estimate, and
    // waits until all twenty requests have been decided.
    let gate = Arc::new(tokio::sync::Barrier::new(11));
    let answer = {
        let gate = gate.clone();
        move || {
            let gate = gate.clone();
            async move {
                gate.wait().await;
                ([("x-llm-tokens", "1100")], "an answer")
            }
        }
    };
    let layer = ResponseCostLayer::builder(store.clone())
        .limit(tokens(), api_key())
        .cost(Cost::header(HeaderName::from_static("x-llm-tokens")))
        .estimate(1_000, Duration::from_secs(60))
        .build()
        .unwrap();
    let http = Arc::new(serve(Router::new().route("/v1/chat", post(answer)).layer(layer)).await);
    let mut asks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let http = http.clone();
        asks.spawn(async move {
            http.send(http::Method::POST, "/v1/chat", &[("x-api-key", "k-1")])
                .await
                .status
        });
    }
    // Ten estimates fit 10,000 tokens; the other ten are refused at once.
    let mut refused = 0;
    while refused < 10 {
        let status = asks.join_next().await.unwrap().unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        refused += 1;
    }
    gate.wait().await;
    let passed = asks.join_all().await;
    assert_eq!(passed, vec![StatusCode::OK; 10]);
    // 11,000 tokens charged of 10,000: one estimate's excess per request,
    // 1,000 over in all, no more.
    assert_eq!(clock.now(), Timestamp::from_secs(1_000));
    let over = store.check(&tokens(), b"k-1", 1).await.unwrap();
    assert!(!over.is_allowed());
    // 1,000 in debt and one token: 6.006 s.
    assert_eq!(
        over.retry_after().duration(),
        Some(Duration::from_millis(6_006))
    );
    assert_eq!(store.open_reservations(), 0);
}

#[tokio::test]
async fn only_failed_responses_count() {
    let (_, store) = clocked_store();
    let logins = Limit::new("failed-logins", TokenBucket::per_minute(3).unwrap()).unwrap();
    let login = |headers: HeaderMap| async move {
        match headers.get("x-password").map(|v| v.as_bytes()) {
            Some(b"right") => StatusCode::OK,
            _ => StatusCode::UNAUTHORIZED,
        }
    };
    let layer = ResponseCostLayer::builder(store.clone())
        .limit(
            logins.clone(),
            Key::header(HeaderName::from_static("x-user")),
        )
        .cost(Cost::failures())
        .build()
        .unwrap();
    let http = serve(Router::new().route("/login", post(login)).layer(layer)).await;
    let try_with = |password: &'static str| {
        let http = &http;
        async move {
            http.send(
                http::Method::POST,
                "/login",
                &[("x-user", "alice"), ("x-password", password)],
            )
            .await
            .status
        }
    };
    // Successes cost nothing.
    for _ in 0..5 {
        assert_eq!(try_with("right").await, StatusCode::OK);
    }
    for _ in 0..3 {
        assert_eq!(try_with("wrong").await, StatusCode::UNAUTHORIZED);
    }
    // Three failures: refused, even with the right password.
    assert_eq!(try_with("right").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.peek(&logins, b"alice").await.unwrap().remaining(), 0);
}

/// A streamed answer's body: its frames, one after another.
type Streamed =
    StreamBody<tokio_stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

/// A streamed answer whose count comes in a trailer.
fn streamed(tokens: Option<&'static str>) -> Response<Streamed> {
    let mut frames = vec![Ok(Frame::data(Bytes::from("an answer")))];
    if let Some(tokens) = tokens {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-llm-tokens", tokens.parse().unwrap());
        frames.push(Ok(Frame::trailers(trailers)));
    }
    Response::new(StreamBody::new(tokio_stream::iter(frames)))
}

#[tokio::test]
async fn a_trailer_is_charged_when_the_stream_ends_and_a_dropped_stream_keeps_its_estimate() {
    let (_, store) = clocked_store();
    let layer = ResponseCostLayer::builder(store.clone())
        .limit(tokens(), api_key())
        .cost(Cost::trailer(HeaderName::from_static("x-llm-tokens")))
        .estimate(500, Duration::from_secs(60))
        .build()
        .unwrap();
    let request = || {
        Request::builder()
            .header("x-api-key", "k-2")
            .body(())
            .unwrap()
    };

    let model = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(streamed(Some("2000"))) });
    let response = layer.layer(model).oneshot(request()).await.unwrap();
    // Held until the end: the estimate only.
    assert_eq!(
        store.peek(&tokens(), b"k-2").await.unwrap().remaining(),
        9_500
    );
    let body = response.into_body().collect().await.unwrap();
    assert_eq!(body.trailers().unwrap()["x-llm-tokens"], "2000");
    assert_eq!(
        store.peek(&tokens(), b"k-2").await.unwrap().remaining(),
        8_000
    );

    // No trailer: the estimate.
    let model = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(streamed(None)) });
    let response = layer.layer(model).oneshot(request()).await.unwrap();
    response.into_body().collect().await.unwrap();
    assert_eq!(
        store.peek(&tokens(), b"k-2").await.unwrap().remaining(),
        7_500
    );

    // Dropped before its end: the estimate stays held.
    let model = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(streamed(Some("9"))) });
    let response = layer.layer(model).oneshot(request()).await.unwrap();
    drop(response);
    assert_eq!(
        store.peek(&tokens(), b"k-2").await.unwrap().remaining(),
        7_000
    );
    assert_eq!(store.open_reservations(), 1);
}

#[tokio::test]
async fn a_request_that_outlives_its_reservation_is_charged_its_cost() {
    let (clock, store) = clocked_store();
    let window = Limit::new(
        "window",
        ratekeeper::FixedWindow::new(10_000, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let slow = {
        let clock = clock.clone();
        service_fn(move |_: Request<()>| {
            let clock = clock.clone();
            async move {
                // The answer takes longer than the reservation's ttl.
                clock.advance(Duration::from_secs(61));
                let mut response = Response::new(http_body_util::Full::new(Bytes::new()));
                response
                    .headers_mut()
                    .insert("x-llm-tokens", "300".parse().unwrap());
                Ok::<_, Infallible>(response)
            }
        })
    };
    let layer = ResponseCostLayer::builder(store.clone())
        .limit(window.clone(), api_key())
        .cost(Cost::header(HeaderName::from_static("x-llm-tokens")))
        .estimate(1_000, Duration::from_secs(60))
        .build()
        .unwrap();
    let request = Request::builder()
        .header("x-api-key", "k-3")
        .body(())
        .unwrap();
    layer.layer(slow).oneshot(request).await.unwrap();
    // The expired reservation stayed at 1,000; 700 came back.
    assert_eq!(
        store.peek(&window, b"k-3").await.unwrap().remaining(),
        9_700
    );
}

#[test]
fn bad_layers_are_refused() {
    let build = |ttl| {
        ResponseCostLayer::builder(MemoryStore::new())
            .limit(tokens(), api_key())
            .estimate(1, ttl)
            .build()
    };
    assert!(build(Duration::ZERO).is_err());
    assert!(build(Duration::from_secs(3_601)).is_err());
    assert!(ResponseCostLayer::builder(MemoryStore::new())
        .build()
        .is_err());
}

#[tokio::test]
async fn a_rule_charges_only_the_requests_it_applies_to_and_a_shadow_rule_never_refuses() {
    let (_, store) = clocked_store();
    let one = Limit::new("one-a-minute", TokenBucket::per_minute(1).unwrap()).unwrap();
    let watched = Limit::new("watched", TokenBucket::per_minute(1).unwrap()).unwrap();
    let layer = ResponseCostLayer::builder(store.clone())
        .rule(ratekeeper_tower::Rule::new(one.clone(), api_key()).path_prefix("/v1/chat"))
        .rule(ratekeeper_tower::Rule::new(watched.clone(), api_key()).shadow(true))
        .build()
        .unwrap();
    let ok = service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::new())))
    });
    let mut service = layer.layer(ok);
    let request = |path: &str| {
        Request::builder()
            .uri(path)
            .header("x-api-key", "k-4")
            .body(())
            .unwrap()
    };
    let status = |response: Response<_>| response.status();
    // Outside the rule's path: the shadow rule only.
    for _ in 0..3 {
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request("/health"))
            .await;
        assert_eq!(status(response.unwrap()), StatusCode::OK);
    }
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request("/v1/chat"))
        .await;
    assert_eq!(status(response.unwrap()), StatusCode::OK);
    let response = service
        .ready()
        .await
        .unwrap()
        .call(request("/v1/chat"))
        .await;
    assert_eq!(status(response.unwrap()), StatusCode::TOO_MANY_REQUESTS);
    // Each charged one unit; the shadow limit is overdrawn by the requests
    // it never refused.
    assert_eq!(store.peek(&one, b"k-4").await.unwrap().remaining(), 0);
    assert!(!store.peek(&watched, b"k-4").await.unwrap().is_allowed());
}
