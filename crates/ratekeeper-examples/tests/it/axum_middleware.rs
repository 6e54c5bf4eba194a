//! Seed 000's promises, over real loopback HTTP: a fixed window of 100 per
//! 60 s per client address on every route, a bucket of 10 refilled 1 per
//! second per API key on `POST /`, a `max_keys` cap that refuses new keys
//! while known keys keep being limited, and a window shared by two nodes
//! through a real `redis-server`, failing open when Redis goes away.

#[path = "../../examples/axum_middleware.rs"]
#[allow(dead_code)]
mod example;

use ratekeeper_test_support::redis as harness;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratekeeper::{clock::ManualClock, Clock, MemoryStore, Timestamp};
use ratekeeper_examples::Server;
use reqwest::{Response, StatusCode};

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// A client whose connections come from `local` (any 127.0.0.0/8 address
/// is this host on Linux, so each is a distinct client address).
fn client_from(local: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(local))
        .build()
        .expect("a client")
}

fn header(response: &Response, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// A clock at the start of a 60 s window.
fn window_start_clock() -> ManualClock {
    ManualClock::new(Timestamp::from_secs(60_000))
}

#[tokio::test]
async fn every_route_has_100_per_60_s_per_client_address() {
    let clock = window_start_clock();
    let server = Server::start(
        example::in_memory(clock.clone(), 1_000, false).unwrap(),
        loopback(),
    )
    .await
    .unwrap();
    let client = client_from([127, 0, 0, 1]);
    for i in 0..100 {
        let path = if i % 2 == 0 { "/" } else { "/other" };
        let response = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "request {i} to {path}");
    }
    let refused = client.get(server.url("/other")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("60"));
    assert_eq!(
        header(&refused, "ratelimit").as_deref(),
        Some(r#""per-address";r=0;t=60"#)
    );
    // Another address has its own window.
    let other = client_from([127, 0, 0, 2]);
    assert_eq!(
        other.get(server.url("/")).send().await.unwrap().status(),
        StatusCode::OK
    );
    // The next window starts whole.
    clock.advance(Duration::from_secs(60));
    let back = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(back.status(), StatusCode::OK);
    assert_eq!(
        header(&back, "ratelimit").as_deref(),
        Some(r#""per-address";r=99;t=60"#)
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn post_has_a_bucket_of_10_refilled_1_per_second_per_api_key() {
    let clock = window_start_clock();
    let server = Server::start(
        example::in_memory(clock.clone(), 1_000, false).unwrap(),
        loopback(),
    )
    .await
    .unwrap();
    let client = client_from([127, 0, 0, 1]);
    let post = |key: &str| client.post(server.url("/")).header("x-api-key", key).send();
    for i in 0..10 {
        assert_eq!(
            post("k1").await.unwrap().status(),
            StatusCode::CREATED,
            "post {i}"
        );
    }
    let refused = post("k1").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    // Another key has its own bucket; GET is not under the bucket at all.
    assert_eq!(post("k2").await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(
        client.get(server.url("/")).send().await.unwrap().status(),
        StatusCode::OK
    );
    // One second brings back exactly one token.
    clock.advance(Duration::from_secs(1));
    assert_eq!(post("k1").await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(
        post("k1").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    // Five seconds, five tokens.
    clock.advance(Duration::from_secs(5));
    for _ in 0..5 {
        assert_eq!(post("k1").await.unwrap().status(), StatusCode::CREATED);
    }
    assert_eq!(
        post("k1").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn max_keys_refuses_new_keys_and_keeps_limiting_known_ones() {
    let clock = window_start_clock();
    let server = Server::start(
        example::in_memory(clock.clone(), 2, false).unwrap(),
        loopback(),
    )
    .await
    .unwrap();
    let client = client_from([127, 0, 0, 1]);
    let post = |key: &str| client.post(server.url("/")).header("x-api-key", key).send();
    assert_eq!(post("a").await.unwrap().status(), StatusCode::CREATED);
    assert_eq!(post("b").await.unwrap().status(), StatusCode::CREATED);
    // A third key finds the table full: saturated, which the layer answers
    // like a denial, 429 with a Retry-After.
    let saturated = post("c").await.unwrap();
    assert_eq!(saturated.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&saturated, "retry-after").is_some());
    // Known keys are still limited, not switched off: a drains its bucket.
    for _ in 0..9 {
        assert_eq!(post("a").await.unwrap().status(), StatusCode::CREATED);
    }
    assert_eq!(
        post("a").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    // The same cap on client addresses: 127.0.0.1 and .2 fit, .3 does not.
    let second = client_from([127, 0, 0, 2]);
    assert_eq!(
        second.get(server.url("/")).send().await.unwrap().status(),
        StatusCode::OK
    );
    let third = client_from([127, 0, 0, 3]);
    let refused = third.get(server.url("/")).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    server.shutdown().await.unwrap();
}

/// A manual Unix clock at the start of a 60 s window that begins after the
/// real time, so Redis keys (which expire at the window's end, by Redis's
/// real clock) outlive the test.
fn future_window_clock() -> ManualClock {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    ManualClock::new(Timestamp::from_secs((now / 60 + 1) * 60))
}

#[tokio::test]
async fn two_nodes_share_one_window_through_redis_and_fail_open() {
    let Some(mut redis) = harness::RedisServer::start() else {
        return;
    };
    let clock = future_window_clock();
    // Not under test: a slow machine must not turn a count into failing open.
    let timeout = harness::UNHURRIED;
    let node = |counter| {
        example::shared(
            counter,
            clock.clone(),
            MemoryStore::builder()
                .max_keys(1_000)
                .clock(clock.clone())
                .background_sweep(false)
                .build()
                .expect("a valid store"),
        )
        .unwrap()
    };
    let a = Server::start(
        node(
            example::RedisCounter::connect(&redis.url(), timeout)
                .await
                .unwrap(),
        ),
        loopback(),
    )
    .await
    .unwrap();
    let b = Server::start(
        node(
            example::RedisCounter::connect(&redis.url(), timeout)
                .await
                .unwrap(),
        ),
        loopback(),
    )
    .await
    .unwrap();
    let client = client_from([127, 0, 0, 1]);
    let mut admitted = [0u32; 2];
    for i in 0..160 {
        let server = if i % 2 == 0 { &a } else { &b };
        let response = client.get(server.url("/")).send().await.unwrap();
        match response.status() {
            StatusCode::OK => admitted[i % 2] += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(header(&response, "retry-after").as_deref(), Some("60"));
            }
            other => panic!("unexpected {other}"),
        }
    }
    // One window of 100 for both nodes together, not 100 each.
    assert_eq!(admitted, [50, 50]);

    // The count is one Redis key per window, expiring with the window.
    let window = clock.now().as_millis() / 60_000;
    let key = format!("seed000:per-address:127.0.0.1:{window}");
    let mut connection = redis.connection();
    let count: u64 = redis::cmd("GET").arg(&key).query(&mut connection).unwrap();
    assert_eq!(count, 160, "denied requests are counted too");
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&key).query(&mut connection).unwrap();
    assert!(ttl_ms > 0 && ttl_ms <= 120_000, "PTTL {ttl_ms}");

    // The next window starts whole on both nodes.
    clock.advance(Duration::from_secs(60));
    for server in [&a, &b] {
        let response = client.get(server.url("/")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }

    // Redis goes away: the shared limit fails open, as the seed's does.
    redis.kill();
    for server in [&a, &b] {
        let response = client.get(server.url("/")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
