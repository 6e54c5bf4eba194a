//! `GET /`: the dashboard, one self-contained HTML page (inline CSS and
//! JavaScript, no outside assets) that polls `/v1/stats` every second and
//! draws, per limit, the allowed and denied requests of the last hour, the
//! four calendar windows and the keys denied most, with the store's health.

use axum::http::header;
use axum::response::IntoResponse;

/// The page.
pub const DASHBOARD_HTML: &str = include_str!("dashboard.html");

/// `GET /`.
pub(super) async fn dashboard() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src 'self' data:",
            ),
        ],
        DASHBOARD_HTML,
    )
}
