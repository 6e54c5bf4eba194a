//! Token limits for an LLM-style API: 10,000 tokens a minute per API key,
//! counted from what each answer cost.
//!
//! The "model" answers `POST /v1/chat` with the
//! tokens it used in `x-llm-tokens` (the prompt's, given in
//! `x-prompt-tokens`, and 200 of its own). ratekeeper-tower's
//! `ResponseCostLayer` holds an estimate of 1,000 tokens for each request
//! before it runs (a reservation), refuses a key that has not that many
//! left, and when the answer comes settles the reservation with its real
//! count: the rest comes back, or the excess is charged past the limit,
//! and the key waits for that debt. So a burst of concurrent requests can
//! pass the budget by at most one estimate's worth, never by the whole
//! burst's answers.
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example llm_tokens
//! cargo run -p ratekeeper-examples --example llm_tokens -- --serve 127.0.0.1:3000
//! ```
//!
//! Without `--serve`, it starts the app on a free port, sends itself a few
//! requests, prints what came back and exits.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{HeaderMap, HeaderName, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use ratekeeper::{clock::MonotonicClock, Clock, Limit, MemoryStore, TokenBucket};
use ratekeeper_examples::Server;
use ratekeeper_tower::{Cost, Key, ResponseCostLayer};

/// The header the budget is kept per.
pub(crate) const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The header the model's answers say their tokens in.
pub(crate) const TOKENS: HeaderName = HeaderName::from_static("x-llm-tokens");

/// What each request is estimated at before it runs.
pub(crate) const ESTIMATE: u64 = 1_000;

/// The budget: 10,000 tokens a minute per key, a token bucket (a debt
/// carries over into the next minute).
pub(crate) fn budget() -> Limit {
    let bucket = TokenBucket::per_minute(10_000).expect("a valid bucket");
    Limit::new("llm-tokens", bucket).expect("a valid name")
}

/// The app on `store`: the model behind the token budget.
pub(crate) fn app<C: Clock + Clone + 'static>(store: MemoryStore<C>) -> Router {
    let layer = ResponseCostLayer::builder(store)
        .limit(budget(), Key::header(API_KEY))
        .cost(Cost::header(TOKENS))
        .estimate(ESTIMATE, Duration::from_secs(120))
        .build()
        .expect("a valid layer");
    Router::new().route("/v1/chat", post(answer)).layer(layer)
}

/// The "model": says what the answer cost.
async fn answer(headers: HeaderMap) -> impl IntoResponse {
    let prompt: u64 = headers
        .get("x-prompt-tokens")
        .and_then(|value| value.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let used = prompt.saturating_add(200);
    (StatusCode::OK, [(TOKENS, used.to_string())], "an answer")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let serve = std::env::args()
        .skip_while(|arg| arg != "--serve")
        .nth(1)
        .map(|addr| addr.parse::<SocketAddr>())
        .transpose()?;
    let store = MemoryStore::builder()
        .clock(MonotonicClock::new())
        .build()?;
    let router = app(store);
    if let Some(addr) = serve {
        let server = Server::start(router, addr).await?;
        println!("listening on http://{} (Ctrl-C stops)", server.addr());
        tokio::signal::ctrl_c().await?;
        return Ok(server.shutdown().await?);
    }
    let server = Server::start(router, "127.0.0.1:0".parse()?).await?;
    let client = reqwest::Client::new();
    println!("10,000 tokens a minute per key; each answer costs its prompt and 200");
    for prompt in [800, 3_000, 4_000, 1_500, 900] {
        let response = client
            .post(server.url("/v1/chat"))
            .header(API_KEY, "k-1")
            .header("x-prompt-tokens", prompt.to_string())
            .send()
            .await?;
        let status = response.status();
        let used = response
            .headers()
            .get(TOKENS)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("-")
            .to_owned();
        let wait = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .map(|secs| format!(", retry after {secs} s"))
            .unwrap_or_default();
        println!("prompt {prompt:>5}: {status}, tokens {used}{wait}");
    }
    Ok(server.shutdown().await?)
}
