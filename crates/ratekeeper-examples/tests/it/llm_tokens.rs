//! The LLM token example's promise, over real loopback HTTP: a burst of
//! concurrent requests passes the 10,000-token budget by at most one
//! estimate, each answer is charged what it cost, and a key in debt waits
//! for it.

#[path = "../../examples/llm_tokens.rs"]
#[allow(dead_code)]
mod example;

use std::time::Duration;

use ratekeeper::{clock::ManualClock, MemoryStore, Store, Timestamp};
use ratekeeper_examples::Server;
use reqwest::StatusCode;

async fn start() -> (ManualClock, MemoryStore<ManualClock>, Server) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let server = Server::start(example::app(store.clone()), "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    (clock, store, server)
}

async fn ask(client: &reqwest::Client, server: &Server, key: &str, prompt: u64) -> StatusCode {
    client
        .post(server.url("/v1/chat"))
        .header(example::API_KEY, key)
        .header("x-prompt-tokens", prompt.to_string())
        .send()
        .await
        .unwrap()
        .status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_passes_the_budget_by_one_estimate_at_most() {
    let (_, store, server) = start().await;
    let client = reqwest::Client::new();
    // Twenty answers of 1,100 tokens each (900 of prompt and 200), asked at
    // once.
    let asks = (0..20).map(|_| ask(&client, &server, "k-1", 900));
    let statuses = futures_util::future::join_all(asks).await;
    let passed = statuses.iter().filter(|s| **s == StatusCode::OK).count() as u64;
    let refused = statuses
        .iter()
        .filter(|s| **s == StatusCode::TOO_MANY_REQUESTS)
        .count() as u64;
    assert_eq!(passed + refused, 20, "{statuses:?}");
    // However the requests overlap: ten at most (ten estimates fill the
    // budget), nine at least (a refusal means more than 9,000 tokens held
    // or charged, and each passed request holds or charges at most 1,100).
    assert!((9..=10).contains(&passed), "{passed} passed");
    let charged = passed * 1_100;
    assert!(charged <= 10_000 + example::ESTIMATE, "{charged} tokens");
    // What they cost is what was charged: the key is over by the excess.
    let budget = example::budget();
    let status = store.peek(&budget, b"k-1").await.unwrap();
    match charged.checked_sub(10_000) {
        Some(debt) if debt > 0 => assert!(!status.is_allowed(), "{debt} in debt: {status:?}"),
        _ => assert_eq!(status.remaining(), 10_000 - charged),
    }
    assert_eq!(store.open_reservations(), 0);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_that_overspent_waits_for_its_debt() {
    let (clock, store, server) = start().await;
    let client = reqwest::Client::new();
    // 800 + 200: 1,000, within the estimate.
    assert_eq!(ask(&client, &server, "k-2", 800).await, StatusCode::OK);
    // 11,800 more than the 9,000 left: the estimate fitted, the answer
    // overdraws by 3,000.
    assert_eq!(ask(&client, &server, "k-2", 11_800).await, StatusCode::OK);
    assert_eq!(
        ask(&client, &server, "k-2", 0).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // 3,000 of debt and 1,000 of estimate: 4,000 tokens, 24 s.
    clock.advance(Duration::from_millis(23_999));
    assert_eq!(
        ask(&client, &server, "k-2", 0).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(ask(&client, &server, "k-2", 0).await, StatusCode::OK);
    // Another key has a budget of its own.
    assert_eq!(ask(&client, &server, "k-3", 5_000).await, StatusCode::OK);
    let _ = store;
    server.shutdown().await.unwrap();
}
