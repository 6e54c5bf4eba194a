//! The admin port: `/healthz` (the process runs), `/readyz` (the store
//! answers), `/metrics` (Prometheus), `/v1/stats` (JSON) and the dashboard
//! at `/`.
//!
//! `/readyz` asks the store itself, past its failure policy: a Redis store
//! failing open still decides requests, but the service is not ready.
//!
//! The pieces, one per file: `recorder` (what the engine records on the
//! decision path for the metrics: latencies and near-limit counts),
//! `metrics` (`/metrics`), `stats` (`/v1/stats`) and `dashboard` (`/`, the
//! page in `dashboard.html`).

mod dashboard;
mod metrics;
mod operations;
mod stats;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

pub use dashboard::DASHBOARD_HTML;
pub use metrics::{render as render_metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
pub use stats::{
    FailureCounts, LimitReport, ReloadReport, ServiceStats, StoreHealth, MAX_KEYS_SHOWN,
    MAX_LIMITS_SHOWN, READY_TIMEOUT,
};

use crate::access::Door;
use crate::engine::Engine;

/// The admin routes on `engine`, behind the engine's `[access.admin]`
/// tokens when it has some, but for `/healthz`, `/readyz` and the
/// dashboard's page (see [`crate::access`]).
pub fn router(engine: Engine) -> Router {
    let guard = engine.access().layer(Door::Admin);
    Router::new()
        .route("/", get(dashboard::dashboard))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::metrics))
        .merge(stats_routes())
        .with_state(engine)
        .layer(guard)
}

/// `GET /v1/stats` alone, to serve on another port too (the HTTP decision
/// API's), behind the admin port's tokens: its top denied keys may be
/// clients' addresses or API keys.
pub fn stats_router(engine: Engine) -> Router {
    let guard = engine.access().layer(Door::Admin);
    stats_routes().with_state(engine).layer(guard)
}

fn stats_routes() -> Router<Engine> {
    Router::new().route("/v1/stats", get(stats::stats))
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
