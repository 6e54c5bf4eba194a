//! The admin port: `/healthz` (the process runs) and `/readyz` (the store
//! answers).
//!
//! `/readyz` asks the store itself, past its failure policy: a Redis store
//! failing open still decides requests, but the service is not ready.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

use crate::engine::Engine;

/// The admin routes on `engine`.
pub fn router(engine: Engine) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(engine)
}

/// Always 200: the process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// 200 when the store answers, 503 with the reason when it does not.
async fn readyz(State(engine): State<Engine>) -> (StatusCode, String) {
    match engine.ready().await {
        Ok(()) => (
            StatusCode::OK,
            format!("ready ({} store)\n", engine.store().kind()),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {error}\n"),
        ),
    }
}
