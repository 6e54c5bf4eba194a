//! The admin port: `/healthz` (the process runs), `/readyz` (the service
//! answers decisions as configured), `/readyz?store` (the store itself
//! answers), `/metrics` (Prometheus), `/v1/stats` (JSON), `POST
//! /v1/explain` (which limits apply to a request, and why not the others)
//! and the dashboard at `/`.
//!
//! # Readiness
//!
//! `/readyz` answers 200 when the service answers decisions as its
//! configuration says: always while the store answers, and while it does
//! not, when the failure policy answers for it (`on_failure = "open"` or
//! `fallback = true`). A replica failing open during a Redis outage stays
//! ready, so a readiness probe does not pull every replica at once and
//! turn a degraded service into an outage. A store failing closed is 503:
//! its replicas refuse every request.
//!
//! `/readyz?store` asks about the store alone, past its failure policy:
//! 200 when it answers, 503 with the reason when not, whatever the
//! policy. Both bodies name the store and say how long it has been up or
//! down:
//!
//! ```text
//! GET /readyz                      200 ready (redis store down since 2026-01-01T00:00:00Z, for 42 s, answered by the failure policy: ...)
//! GET /readyz?store                503 store down since 2026-01-01T00:00:00Z, for 42 s: the rate-limit store is unavailable: ... (store: redis://10.0.0.5:6379)
//! ```
//!
//! The same state is in `/v1/stats` (`store.state`: `up`,
//! `since_unix_secs`, `last_error`), in `/metrics`
//! (`ratekeeper_store_up`, `ratekeeper_store_state_since_seconds`,
//! `ratekeeper_ready`) and, on the gRPC port, in the standard
//! `grpc.health.v1.Health` service (the Envoy door's module says how).
//!
//! The pieces, one per file: `recorder` (what the engine records on the
//! decision path for the metrics: latencies and near-limit counts),
//! `metrics` (`/metrics`), `stats` (`/v1/stats`), `explain`
//! (`/v1/explain`) and `dashboard` (`/`, the page in `dashboard.html`).

mod dashboard;
mod explain;
mod metrics;
mod operations;
mod since;
mod stats;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;

pub use crate::listen::ConnectionStats;
pub use dashboard::DASHBOARD_HTML;
pub use metrics::{render as render_metrics, CONTENT_TYPE as METRICS_CONTENT_TYPE};
pub use stats::{
    AfterTheFact, FailureCounts, LimitReport, ReloadReport, ServiceStats, StoreHealth,
    UnmatchedReport, MAX_KEYS_SHOWN, MAX_LIMITS_SHOWN, READY_TIMEOUT,
};

use crate::access::Door;
use crate::engine::Engine;

/// The admin routes on `engine`, behind the engine's `[access.admin]`
/// tokens when it has some, but for `/healthz`, `/readyz` and the
/// dashboard's page (see [`crate::access`]). `/metrics` counts the
/// connections of the doors that count into `connections` (the ones
/// `serve` starts share one).
pub fn router(engine: Engine, connections: ConnectionStats) -> Router {
    let guard = engine.access().layer(Door::Admin);
    Router::new()
        .route("/", get(dashboard::dashboard))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(metrics::metrics).with_state((engine.clone(), connections)),
        )
        .route("/v1/explain", axum::routing::post(explain::explain))
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

/// `/readyz`: 200 when decisions are answered as configured (see the
/// module docs); `/readyz?store`: 200 when the store itself answers. 503
/// with the reason otherwise.
async fn readyz(State(engine): State<Engine>, RawQuery(query): RawQuery) -> (StatusCode, String) {
    let state = engine.probe_store().await;
    let kind = engine.store().kind();
    let store_only = query.is_some_and(|query| query.split('&').any(|part| part == "store"));
    let reason = state.last_error.as_deref().unwrap_or("no error");
    if state.up {
        let what = if store_only { "store up" } else { "ready" };
        return (StatusCode::OK, format!("{what} ({kind} store)\n"));
    }
    let now = engine.wall_now().as_duration().as_secs();
    let since = since::since_and_for(state.since_unix_secs, now);
    if store_only {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store down since {since}: {reason}\n"),
        );
    }
    if engine.serves(&state) {
        (
            StatusCode::OK,
            format!(
                "ready ({kind} store down since {since}, answered by the failure policy: {reason})\n"
            ),
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready ({kind} store down since {since}, failing closed): {reason}\n"),
        )
    }
}
