//! The response headers of a verdict, shared by every HTTP door.

use axum::http::{HeaderMap, HeaderValue};
use ratekeeper::store::AnsweredBy;
use ratekeeper_tower::headers::{insert_headers, insert_retry_after, HeaderStyle, ResetStyle};

use super::{Verdict, SATURATED_HEADER, STORE_HEADER};

/// The IETF draft's `RateLimit-Policy` and `RateLimit` fields for every
/// limit of `verdict`, and when it refuses, `Retry-After` (whole seconds,
/// rounded up, at least 1) and `Cache-Control: no-store`; with
/// `X-RateKeeper-Saturated` when a limit's store had no room for the key,
/// and `X-RateKeeper-Store` when the failure policy answered.
pub(crate) fn verdict_headers(verdict: &Verdict) -> HeaderMap {
    let mut headers = HeaderMap::new();
    let decisions = verdict.decisions();
    let reports = verdict.reports(&decisions);
    insert_headers(
        &mut headers,
        HeaderStyle::Draft,
        ResetStyle::DeltaSeconds,
        &reports,
    );
    insert_saturated(&mut headers, verdict);
    insert_answered_by(&mut headers, verdict);
    if !verdict.is_allowed() {
        insert_retry_after(&mut headers, verdict.retry_after());
        headers.insert(
            axum::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
    }
    headers
}

/// Adds `X-RateKeeper-Saturated` (see
/// [`SATURATED_HEADER`](crate::engine::SATURATED_HEADER)) when a limit of
/// `verdict` found its store full.
pub(crate) fn insert_saturated(headers: &mut HeaderMap, verdict: &Verdict) {
    if let Some(value) = verdict.saturated_header() {
        // Limit names are printable ASCII, so this cannot fail; leaving
        // the header out beats a panic if it somehow did.
        if let Ok(value) = HeaderValue::try_from(value) {
            headers.insert(SATURATED_HEADER, value);
        }
    }
}

/// Adds `X-RateKeeper-Store: fail-open` or `fallback` (see
/// [`STORE_HEADER`](crate::engine::STORE_HEADER)) when the failure policy
/// answered `verdict` while the store failed.
pub(crate) fn insert_answered_by(headers: &mut HeaderMap, verdict: &Verdict) {
    insert_store_header(headers, verdict.answered_by());
}

/// Adds `X-RateKeeper-Store` when `by` is the failure policy.
pub(crate) fn insert_store_header(headers: &mut HeaderMap, by: AnsweredBy) {
    if by.is_failover() {
        headers.insert(STORE_HEADER, HeaderValue::from_static(by.as_str()));
    }
}
