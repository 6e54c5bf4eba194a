//! The HTTP decision API: `POST /v1/check`, `/v1/peek`, `/v1/refund` and
//! `GET /v1/limits`, as JSON; and Limitador's `POST /check`, `/report`,
//! `/check_and_report` and `GET /limits/{namespace}` for the limits of
//! `[limitador]` (see [Limitador's routes](#limitadors-routes) below).
//!
//! A check names its limits, or gives the method and path so the limits
//! whose `match` fits are chosen, and gives the key parts by their names in
//! the configuration:
//!
//! ```text
//! POST /v1/check
//! {"limits": ["per-user"], "key": {"header:x-user": "alice"}, "cost": 1}
//!
//! 200 OK
//! RateLimit-Policy: "per-user";q=100;w=60
//! RateLimit: "per-user";r=99;t=1
//! {"allowed": true, "denied_by": null, "retry_after": 0,
//!  "limits": [{"name": "per-user", "key": "alice", "allowed": true, "shadow": false,
//!              "saturated": false, "limit": 100, "remaining": 99, "reset_ms": 600,
//!              "retry_after_ms": 0}],
//!  "headers": {"ratelimit": "\"per-user\";r=99;t=1",
//!              "ratelimit-policy": "\"per-user\";q=100;w=60"}}
//! ```
//!
//! The answer is 200 whether the request is allowed or not (`allowed`
//! says); a refused check also carries `Retry-After` (and the field of the
//! same name in `headers`). A limit whose in-memory table had no room for a
//! new key says `"saturated": true`, and the answer carries
//! `X-RateKeeper-Saturated` naming such limits (`"per-user"`), whether they
//! refused it (`on_saturated = "deny"`, the default, with `Retry-After` the
//! time until room can return) or let it through uncounted (`"allow"`);
//! `/v1/auth` and the proxy send the same header. Errors are RFC 9457 problem details: 400 for a
//! body that is not the API's JSON or lacks a key part a limit needs, 404
//! for an unknown limit, 403 for a refund of a limit with
//! `allow_refunds = false` (naming it; nothing is given back), 413 for a body over a cap of `[requests]` (more
//! than `max_descriptors` descriptors or `"limits"` names, more than
//! `max_entries` entries in a descriptor or parts in `"key"`, a key, value,
//! domain, method or path over `max_value_bytes`; the message names the
//! cap), 503 when the store failed and fails closed. With
//! `[access.decisions]` tokens, a request without one (`Authorization:
//! Bearer TOKEN`; at `/v1/auth` also `X-RateKeeper-Token: TOKEN`) is
//! answered 401 before anything else (see [`crate::access`]).
//!
//! # Limitador's routes
//!
//! For the limits of a Kuadrant Limitador limits file (`[limitador]`, see
//! [`ratekeeper_formats::limitador`]), the routes of Limitador's own HTTP API,
//! so that its callers need no change:
//!
//! ```text
//! POST /check_and_report
//! {"namespace": "test_namespace", "values": {"req.method": "POST", "user_id": "alice"},
//!  "delta": 1, "response_headers": "DraftVersion03"}
//!
//! 200 OK                                (429 Too Many Requests when a limit is over)
//! X-RateLimit-Limit: 5, 5;w=60, 1000000;w=60
//! X-RateLimit-Remaining: 4
//! X-RateLimit-Reset: 37                (seconds to the end of the window)
//! null
//! ```
//!
//! `values` are Limitador's `descriptors[0]`. `POST /check` answers the
//! same without counting (429 with the text `Too many requests`, as
//! Limitador's), `POST /report` counts without refusing, all or nothing
//! is `/check_and_report`'s, and `GET /limits/{namespace}` lists the
//! namespace's limits in Limitador's JSON. Their bodies have the caps of
//! the routes above, and the same tokens guard them.
//!
//! ```
//! use std::sync::Arc;
//! use ratekeeper::clock::MonotonicClock;
//! use ratekeeper_server::{engine::Engine, http, Config};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let engine = Engine::builder(&Config::default()).clock(Arc::new(MonotonicClock::new())).start().await?;
//! let app: axum::Router = http::router(engine);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! # drop((app, listener));
//! // axum::serve(listener, app.into_make_service_with_connect_info::<std::net::SocketAddr>()).await?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod api;
mod auth;
mod body;
mod descriptors;
mod error;
mod in_flight;
mod json;
mod limitador;

use axum::routing::{get, post};
use axum::Router;

pub use error::ApiError;
pub use json::{
    DecisionRequest, DecisionResponse, DescriptorEntry, LimitStatus, RefundResponse, Refunded,
    ReleaseRequest, ReleaseResponse, SettleRequest, DEFAULT_RESERVATION_TTL,
};

use crate::access::Door;
use crate::engine::Engine;

/// The decision API's routes on `engine`, taking bodies up to its
/// `requests.max_body_bytes` (read now: a reload does not change it),
/// behind the engine's `[access.decisions]` tokens when it has some (see
/// [`crate::access`]).
pub fn router(engine: Engine) -> Router {
    let max_body_bytes = engine.request_caps().max_body_bytes;
    let guard = engine.access().layer(Door::Http);
    routes()
        .layer(axum::extract::DefaultBodyLimit::max(max_body_bytes))
        .with_state(engine)
        .layer(guard)
}

/// The routes, before the engine is given.
pub(crate) fn routes() -> Router<Engine> {
    Router::new()
        .route("/v1/check", post(api::check))
        .route("/v1/peek", post(api::peek))
        .route("/v1/refund", post(api::refund))
        .route("/v1/report", post(api::report))
        .route("/v1/reserve", post(api::reserve))
        .route("/v1/commit", post(api::commit))
        .route("/v1/cancel", post(api::cancel))
        .route("/v1/acquire", post(in_flight::acquire))
        .route("/v1/release", post(in_flight::release))
        .route("/v1/limits", get(api::limits))
        .merge(auth::routes())
        .merge(limitador::routes())
}
