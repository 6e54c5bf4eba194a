//! `POST /v1/explain`: which limits in force apply to a request, and why
//! the others do not (the admin port's form of `ratekeeper explain`).
//!
//! ```text
//! POST /v1/explain
//! {"domain": "Edge", "descriptors": [[{"key": "remote_address", "value": "10.0.0.1"}]]}
//!
//! 200 OK
//! {"request": "domain \"Edge\", descriptors [remote_address=10.0.0.1]",
//!  "limits": [{"limit": "per-ip", "from": "config", "descriptor": 0, "applies": false,
//!              "reason": {"reason": "domain", "want": "edge", "got": "Edge"},
//!              "why": "its domain is \"edge\", the request's \"Edge\": ..."}],
//!  "notes": [...]}
//! ```
//!
//! The body is [`ExplainRequest`]: an HTTP request (`method`, `path`,
//! `headers`, `peer`) or descriptors (`domain`, `descriptors`), read
//! within the `[requests]` caps; anything else is a 400 that says what.

use axum::body::{to_bytes, Body};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::engine::explain::ExplainRequest;
use crate::engine::Engine;

/// `POST /v1/explain`.
pub(super) async fn explain(State(engine): State<Engine>, body: Body) -> Response {
    let caps = engine.request_caps();
    let bytes = match to_bytes(body, caps.max_body_bytes).await {
        Ok(bytes) => bytes,
        Err(_) => {
            let message = format!(
                "the body is over requests.max_body_bytes ({}) or did not arrive\n",
                caps.max_body_bytes
            );
            return (StatusCode::PAYLOAD_TOO_LARGE, message).into_response();
        }
    };
    let request: ExplainRequest = match serde_json::from_slice(&bytes) {
        Ok(request) => request,
        Err(error) => return bad_request(format!("invalid explain request: {error}")),
    };
    match request.into_probe(&caps) {
        Ok(probe) => Json(engine.explain(&probe)).into_response(),
        Err(error) => bad_request(error.to_string()),
    }
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, message + "\n").into_response()
}
