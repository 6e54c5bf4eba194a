//! The API's errors, answered as RFC 9457 problem details.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use ratekeeper::store::reservation::ReservationError;
use ratekeeper::store::StoreError;
use thiserror::Error;

use crate::config::CapError;

/// Why an API request failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ApiError {
    /// The body was not the JSON the endpoint takes.
    #[error("invalid request body: {0}")]
    Body(String),
    /// A limit named in the request does not exist.
    #[error("no limit is named {0:?}")]
    UnknownLimit(String),
    /// A limit's key needs a part the request did not give.
    #[error("limit {limit:?} needs the key part {part:?} in \"key\"")]
    MissingPart {
        /// The limit.
        limit: String,
        /// The part, as the configuration writes it.
        part: String,
    },
    /// A refund of a limit that accepts none (`allow_refunds = false`).
    #[error("limit {0:?} accepts no refunds (allow_refunds = false); nothing was given back")]
    RefundForbidden(String),
    /// A report to a limit that accepts none (`allow_reports = false`).
    #[error("limit {0:?} accepts no reports (allow_reports = false); nothing was charged")]
    ReportForbidden(String),
    /// A reservation could not be made or settled: unknown (never made,
    /// settled, expired), too many open, a bad ttl or token.
    #[error("{0}")]
    Reservation(#[from] ReservationError),
    /// Slots of caps on requests in flight could not be given back: not
    /// taken (released already, or freed at the end of their lease), or
    /// not a slot token.
    #[error("{}", slot_message(.0))]
    Slot(ReservationError),
    /// The request holds more than `[requests]` allows.
    #[error("{0}")]
    OverCap(#[from] CapError),
    /// The body is longer than `requests.max_body_bytes`.
    #[error("the request body is longer than requests.max_body_bytes ({max} bytes)")]
    BodyTooLarge {
        /// The cap.
        max: usize,
    },
    /// The store failed and fails closed.
    #[error("the rate-limit store failed: {0}")]
    Store(StoreError),
}

/// The store's answers about reservations are the caller's to fix; the
/// rest, the store's failures.
impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error.without_store() {
            StoreError::Reservation(reservation) => ApiError::Reservation(reservation.clone()),
            _ => ApiError::Store(error),
        }
    }
}

impl ApiError {
    /// The status the error is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Body(_) | ApiError::MissingPart { .. } => StatusCode::BAD_REQUEST,
            ApiError::UnknownLimit(_) => StatusCode::NOT_FOUND,
            ApiError::RefundForbidden(_) | ApiError::ReportForbidden(_) => StatusCode::FORBIDDEN,
            ApiError::Reservation(error) => match error {
                ReservationError::Unknown => StatusCode::NOT_FOUND,
                ReservationError::TooMany => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::BAD_REQUEST,
            },
            ApiError::Slot(ReservationError::Unknown) => StatusCode::NOT_FOUND,
            ApiError::Slot(_) => StatusCode::BAD_REQUEST,
            ApiError::OverCap(_) | ApiError::BodyTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A slot's error in the words of slots, not reservations.
fn slot_message(error: &ReservationError) -> String {
    match error {
        ReservationError::Unknown => {
            "no slot taken with this token: released already, or freed at the end of its lease"
                .to_owned()
        }
        ReservationError::Malformed => "not a slot token from /v1/acquire".to_owned(),
        other => other.to_string(),
    }
}

impl ApiError {
    /// A release's failure: the slot's own errors in the words of slots.
    pub(crate) fn from_release(error: crate::engine::PlanError) -> ApiError {
        match error {
            crate::engine::PlanError::Store(store) => match store.without_store() {
                ratekeeper::store::StoreError::Reservation(reservation) => {
                    ApiError::Slot(reservation.clone())
                }
                _ => ApiError::Store(store),
            },
            other => ApiError::from(other),
        }
    }
}

/// The engine's reasons, as the JSON API names them.
impl From<crate::engine::PlanError> for ApiError {
    fn from(error: crate::engine::PlanError) -> ApiError {
        use crate::engine::PlanError;
        match error {
            PlanError::MissingPart { limit, part } => ApiError::MissingPart { limit, part },
            PlanError::RefundForbidden { limit, .. } => ApiError::RefundForbidden(limit),
            PlanError::UnknownLimit(name) => ApiError::UnknownLimit(name),
            PlanError::OverCap(cap) => ApiError::OverCap(cap),
            PlanError::Store(store) => ApiError::from(store),
            // The API has no overrides; an empty domain or list is the
            // body's fault.
            other => ApiError::Body(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = serde_json::json!({
            "type": "about:blank",
            "title": status.canonical_reason().unwrap_or("Error"),
            "status": status.as_u16(),
            "detail": self.to_string(),
        });
        let mut response = (status, axum::Json(body)).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

impl ApiError {
    /// The error for a body axum's JSON extractor refused: too long for
    /// `max_body_bytes` (413), or not the API's JSON (400).
    pub(crate) fn from_json(
        rejection: axum::extract::rejection::JsonRejection,
        max_body_bytes: usize,
    ) -> ApiError {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::BodyTooLarge {
                max: max_body_bytes,
            };
        }
        ApiError::Body(rejection.body_text())
    }
}
