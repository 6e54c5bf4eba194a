//! The responses the middleware sends instead of calling the service.

use bytes::Bytes;
use http::header::{HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::Full;
use ratekeeper::RetryAfter;

use crate::headers::{insert_retry_after, retry_after_secs};

/// How a refusal is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ResponseFormat {
    /// A short text body.
    #[default]
    Text,
    /// RFC 9457 `application/problem+json`, with the problem types of the
    /// rate-limit headers draft and the violated policies.
    ProblemJson,
}

/// Why a request was refused, for a custom response.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// Over a limit: 429.
    Limited {
        /// The names of the limits that denied.
        violated: Vec<String>,
        /// When to retry.
        retry_after: RetryAfter,
    },
    /// The store failed closed: 503.
    StoreUnavailable {
        /// The store's error, for logs (not sent to the client).
        reason: String,
    },
}

impl Refusal {
    /// The response the middleware sends for this refusal to a request with
    /// `request_headers`, without the rate-limit fields: for services that
    /// decide elsewhere (a proxy deciding through its own engine) and want
    /// the middleware's refusals. gRPC requests (by their `content-type`)
    /// get a trailers-only response with `grpc-status` 8 or 14; others a
    /// 429 or a 503 in `format`, with `Retry-After` and
    /// `Cache-Control: no-store`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::{HeaderMap, StatusCode};
    /// use ratekeeper::RetryAfter;
    /// use ratekeeper_tower::{Refusal, ResponseFormat};
    ///
    /// let refusal = Refusal::Limited {
    ///     violated: vec!["per-ip".into()],
    ///     retry_after: RetryAfter::After(Duration::from_millis(1500)),
    /// };
    /// let response = refusal.response(ResponseFormat::Text, &HeaderMap::new());
    /// assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    /// assert_eq!(response.headers()["retry-after"], "2");
    /// assert_eq!(response.headers()["cache-control"], "no-store");
    /// ```
    pub fn response(
        &self,
        format: ResponseFormat,
        request_headers: &HeaderMap,
    ) -> Response<Full<Bytes>> {
        refusal_response(self, format, is_grpc(request_headers))
    }
}

/// Whether the request is gRPC, whose errors travel in `grpc-status`.
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/grpc"))
}

/// The response for `refusal`.
///
/// gRPC requests get a trailers-only response, status 200 with
/// `grpc-status` 8 (`RESOURCE_EXHAUSTED`) when limited or 14
/// (`UNAVAILABLE`) when the store is down, as gRPC clients expect; others a
/// 429 or a 503 with `Retry-After` and `Cache-Control: no-store`.
pub(crate) fn refusal_response(
    refusal: &Refusal,
    format: ResponseFormat,
    grpc: bool,
) -> Response<Full<Bytes>> {
    let (status, retry) = match refusal {
        Refusal::Limited { retry_after, .. } => (StatusCode::TOO_MANY_REQUESTS, *retry_after),
        Refusal::StoreUnavailable { .. } => (
            StatusCode::SERVICE_UNAVAILABLE,
            RetryAfter::After(std::time::Duration::from_secs(1)),
        ),
    };
    let mut response = if grpc {
        let (code, message) = match refusal {
            Refusal::Limited { .. } => ("8", "rate limit exceeded"),
            Refusal::StoreUnavailable { .. } => ("14", "rate limiter unavailable"),
        };
        let mut response = Response::new(Full::new(Bytes::new()));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert("grpc-status", HeaderValue::from_static(code));
        headers.insert("grpc-message", HeaderValue::from_static(message));
        response
    } else {
        let (content_type, body) = match format {
            ResponseFormat::Text => ("text/plain; charset=utf-8", text_body(refusal, retry)),
            ResponseFormat::ProblemJson => (
                "application/problem+json",
                problem_body(refusal, status, retry),
            ),
        };
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        response
    };
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    insert_retry_after(response.headers_mut(), retry);
    response
}

fn text_body(refusal: &Refusal, retry: RetryAfter) -> String {
    match (refusal, retry_after_secs(retry)) {
        (Refusal::Limited { .. }, Some(secs)) => format!("Too Many Requests: retry in {secs} s\n"),
        (Refusal::Limited { .. }, None) => {
            "Too Many Requests: this request is larger than the limit allows\n".into()
        }
        (Refusal::StoreUnavailable { .. }, _) => {
            "Service Unavailable: the rate limiter cannot decide right now\n".into()
        }
    }
}

fn problem_body(refusal: &Refusal, status: StatusCode, retry: RetryAfter) -> String {
    let body = match refusal {
        Refusal::Limited { violated, .. } => serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#quota-exceeded",
            "title": "Too Many Requests",
            "status": status.as_u16(),
            "detail": match retry_after_secs(retry) {
                Some(secs) => format!("Request quota exceeded; retry in {secs} s."),
                None => "The request is larger than the quota allows.".to_owned(),
            },
            "violated-policies": violated,
        }),
        Refusal::StoreUnavailable { .. } => serde_json::json!({
            "type": "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity",
            "title": "Service Unavailable",
            "status": status.as_u16(),
            "detail": "The rate limiter cannot decide right now.",
        }),
    };
    body.to_string()
}
