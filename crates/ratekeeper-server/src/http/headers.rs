//! The response headers of a verdict, shared by every HTTP door.

use axum::http::{HeaderMap, HeaderValue};
use ratekeeper_tower::headers::{insert_headers, insert_retry_after, HeaderStyle, ResetStyle};

use crate::engine::Verdict;

/// The IETF draft's `RateLimit-Policy` and `RateLimit` fields for every
/// limit of `verdict`, and when it refuses, `Retry-After` (whole seconds,
/// rounded up, at least 1) and `Cache-Control: no-store`.
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
    if !verdict.is_allowed() {
        insert_retry_after(&mut headers, verdict.retry_after());
        headers.insert(
            axum::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
    }
    headers
}
