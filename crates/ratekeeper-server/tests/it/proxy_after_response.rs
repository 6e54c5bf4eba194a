//! The reverse proxy charging what responses cost (`after_response`),
//! before a real upstream over loopback: an LLM-style upstream's token
//! header, a burst of concurrent requests against the budget, and failed
//! logins counted by status.

use crate::common;

use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use ratekeeper_server::engine::Engine;
use tokio::sync::oneshot;

const LIMITS: &str = r#"
[[limits]]
name = "llm-tokens"
rate = "10000/minute"
key = ["header:x-api-key"]
after_response = { cost = "header:x-llm-tokens", estimate = 1000, ttl = "2m" }
match = { path_prefix = "/v1/chat" }

[[limits]]
name = "failed-logins"
rate = "3/minute"
key = ["header:x-user"]
after_response = { cost = "failures" }
match = { path_prefix = "/login" }
"#;

/// The upstream: a "model" whose answers cost their prompt and 200 tokens,
/// and a login that takes one password.
async fn upstream() -> std::net::SocketAddr {
    let chat = |headers: HeaderMap| async move {
        let prompt: u64 = headers
            .get("x-prompt-tokens")
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .unwrap_or(0);
        ([("x-llm-tokens", (prompt + 200).to_string())], "an answer")
    };
    let login = |headers: HeaderMap| async move {
        match headers.get("x-password").map(|value| value.as_bytes()) {
            Some(b"right") => StatusCode::OK,
            _ => StatusCode::UNAUTHORIZED,
        }
    };
    let app = axum::Router::new()
        .route("/v1/chat", post(chat))
        .route("/login", post(login));
    common::serve_app(app).await
}

async fn proxy(
    upstream: std::net::SocketAddr,
) -> (std::net::SocketAddr, Engine, oneshot::Sender<()>) {
    common::start_proxy(LIMITS, upstream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_through_the_proxy_passes_the_token_budget_by_one_estimate_at_most() {
    let (addr, engine, _stop) = proxy(upstream().await).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ask = |prompt: u64| {
        client
            .post(format!("http://{addr}/v1/chat"))
            .header("x-api-key", "k-1")
            .header("x-prompt-tokens", prompt.to_string())
            .send()
    };
    // Twenty answers of 1,100 tokens, asked at once.
    let answers = futures_util::future::join_all((0..20).map(|_| ask(900))).await;
    let statuses: Vec<u16> = answers
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let passed = statuses.iter().filter(|s| **s == 200).count() as u64;
    assert_eq!(
        passed + statuses.iter().filter(|s| **s == 429).count() as u64,
        20
    );
    // However they overlap: ten estimates fill the budget, and a refusal
    // means more than 9,000 tokens held or charged, 1,100 at most each.
    assert!((9..=10).contains(&passed), "{statuses:?}");
    // What the answers cost was charged: at most one estimate over.
    let charged = passed * 1_100;
    assert!(charged <= 11_000);
    let metrics = engine.decision_metrics();
    assert_eq!(
        metrics.reservations(
            "llm-tokens",
            ratekeeper_server::engine::Reservations::Committed
        ),
        passed
    );
    // The key is over now (or exactly at its budget): the next is refused.
    assert_eq!(ask(0).await.unwrap().status(), 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_failed_logins_count_through_the_proxy() {
    let (addr, _engine, _stop) = proxy(upstream().await).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let login = |password: &'static str| {
        client
            .post(format!("http://{addr}/login"))
            .header("x-user", "alice")
            .header("x-password", password)
            .send()
    };
    for _ in 0..5 {
        assert_eq!(login("right").await.unwrap().status(), 200);
    }
    for _ in 0..3 {
        assert_eq!(login("wrong").await.unwrap().status(), 401);
    }
    assert_eq!(login("right").await.unwrap().status(), 429);
}
