//! The caller's trace context, from a request's headers to the decision
//! span: the listeners put it in a task-local for the time of the request
//! ([`scope_request`]), where [`decision_span`](super::decision_span)
//! finds it, so that no door has to carry it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;

/// What a decision span takes from the request it decides.
#[derive(Clone, Debug)]
pub(crate) struct RequestTrace {
    /// The door, as the span's `ratekeeper.door` names it.
    pub(crate) door: &'static str,
    /// The caller's span, from `traceparent` and `tracestate`; empty
    /// without them (or when they do not parse).
    pub(crate) parent: opentelemetry::Context,
}

tokio::task_local! {
    static REQUEST: RequestTrace;
}

/// The request being decided on this task, if a listener said.
pub(crate) fn current() -> Option<RequestTrace> {
    REQUEST.try_with(Clone::clone).ok()
}

/// The trace context of a request to the listener `door`, when traces
/// are exported (`None`, without reading the request, when not).
pub(crate) fn request_trace<B>(
    door: &'static str,
    request: &http::Request<B>,
) -> Option<RequestTrace> {
    if !super::is_exporting() {
        return None;
    }
    Some(RequestTrace {
        door: door_of(door, request.uri().path()),
        parent: TraceContextPropagator::new().extract(&Headers(request.headers())),
    })
}

/// `call`, the handling of a request, with its `trace` in reach of the
/// decision span; `call` itself without one.
pub(crate) fn scope_request<F: Future>(trace: Option<RequestTrace>, call: F) -> RequestScoped<F> {
    match trace {
        None => RequestScoped::Plain { call },
        Some(trace) => RequestScoped::Scoped {
            call: REQUEST.scope(trace, call),
        },
    }
}

/// The door a span names: nginx's `auth_request` is a path of the HTTP
/// listener.
fn door_of(listener: &'static str, path: &str) -> &'static str {
    if listener == "http" && (path == "/v1/auth" || path.starts_with("/v1/auth/")) {
        "nginx"
    } else {
        listener
    }
}

pin_project! {
    /// A request's handling, in its trace context when traces are
    /// exported.
    #[project = RequestScopedProjection]
    pub(crate) enum RequestScoped<F> {
        /// Traces are not exported: nothing is added.
        Plain { #[pin] call: F },
        /// In the request's trace context.
        Scoped { #[pin] call: TaskLocalFuture<RequestTrace, F> },
    }
}

impl<F: Future> Future for RequestScoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.project() {
            RequestScopedProjection::Plain { call } => call.poll(cx),
            RequestScopedProjection::Scoped { call } => call.poll(cx),
        }
    }
}

/// Headers (HTTP, or gRPC metadata) as the propagator reads them.
struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt as _;

    #[test]
    fn the_caller_span_comes_from_traceparent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        headers.insert("tracestate", "vendor=x".parse().unwrap());
        let parent = TraceContextPropagator::new().extract(&Headers(&headers));
        let span = parent.span();
        let caller = span.span_context();
        assert!(caller.is_remote() && caller.is_sampled());
        assert_eq!(
            caller.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(caller.span_id().to_string(), "b7ad6b7169203331");
        assert_eq!(caller.trace_state().get("vendor"), Some("x"));
    }

    #[test]
    fn a_broken_traceparent_gives_no_parent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            "traceparent",
            "00-nothex-b7ad6b7169203331-01".parse().unwrap(),
        );
        let parent = TraceContextPropagator::new().extract(&Headers(&headers));
        assert!(!parent.span().span_context().is_valid());
    }

    #[test]
    fn nginx_is_the_auth_path_of_the_http_listener() {
        assert_eq!(door_of("http", "/v1/auth"), "nginx");
        assert_eq!(door_of("http", "/v1/check"), "http");
        assert_eq!(door_of("http", "/v1/authx"), "http");
        assert_eq!(door_of("proxy", "/v1/auth"), "proxy");
        assert_eq!(
            door_of(
                "grpc",
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
            ),
            "grpc"
        );
    }
}
