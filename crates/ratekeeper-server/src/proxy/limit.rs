//! The proxy's rate limit: a tower layer that decides every request through
//! the [`Engine`] before the inner service sees it.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use ratekeeper_tower::headers::{insert_headers, HeaderStyle, ResetStyle};
use ratekeeper_tower::{Refusal, ResponseFormat};
use tower::{Layer, Service};

use crate::engine::{Check, Engine, HttpSource, OrUnknown, Verdict, UNKNOWN};

/// Decides each request through the engine: the limits whose `match` fits
/// its method and path, keyed from its peer, headers and route.
#[derive(Clone, Debug)]
pub(crate) struct LimitLayer {
    engine: Engine,
}

impl LimitLayer {
    pub(crate) fn new(engine: Engine) -> LimitLayer {
        LimitLayer { engine }
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            engine: self.engine.clone(),
        }
    }
}

/// The service of [`LimitLayer`].
#[derive(Clone, Debug)]
pub(crate) struct Limited<S> {
    inner: S,
    engine: Engine,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<S> Service<Request<Body>> for Limited<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> BoxFuture {
        // The inner service that was polled ready goes with the request;
        // a clone stays for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let engine = self.engine.clone();
        Box::pin(async move {
            let checks = checks(&engine, &request);
            if checks.is_empty() {
                return inner.call(request).await;
            }
            let verdict = match engine.check(checks).await {
                Ok(verdict) => verdict,
                Err(error) => {
                    tracing::warn!(%error, "proxy: the rate-limit store failed closed");
                    let refusal = Refusal::StoreUnavailable {
                        reason: error.to_string(),
                    };
                    let response = refusal.response(ResponseFormat::Text, request.headers());
                    return Ok(response.map(Body::new));
                }
            };
            if verdict.is_allowed() {
                let mut response = inner.call(request).await?;
                insert_fields(response.headers_mut(), &verdict);
                return Ok(response);
            }
            let refusal = Refusal::Limited {
                violated: verdict
                    .results
                    .iter()
                    .filter(|result| !result.check.limit.is_shadow() && result.refused())
                    .map(|result| result.check.limit.name().to_owned())
                    .collect(),
                retry_after: verdict.retry_after(),
            };
            let mut response = refusal
                .response(ResponseFormat::Text, request.headers())
                .map(Body::new);
            insert_fields(response.headers_mut(), &verdict);
            Ok(response)
        })
    }
}

/// The checks of the limits that apply to `request`, one unit each.
fn checks(engine: &Engine, request: &Request<Body>) -> Vec<Check> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let source = HttpSource {
        method: request.method(),
        path: request.uri().path(),
        headers: request.headers(),
        peer,
    };
    engine
        .limits()
        .for_http(request.method(), request.uri().path())
        .map(|limit| {
            engine.watch_forwarding(limit, request.headers(), peer, &[]);
            // `OrUnknown` gives every part, so `key` cannot fail; the
            // shared "unknown" key is the safe answer if it ever did.
            let key = limit
                .key(&OrUnknown(source))
                .unwrap_or_else(|_| UNKNOWN.as_bytes().to_vec());
            Check::new(limit.clone(), key, 1)
        })
        .collect()
}

/// The draft's `RateLimit-Policy` and `RateLimit` fields of `verdict`.
fn insert_fields(headers: &mut axum::http::HeaderMap, verdict: &Verdict) {
    let decisions = verdict.decisions();
    let reports = verdict.reports(&decisions);
    insert_headers(
        headers,
        HeaderStyle::Draft,
        ResetStyle::DeltaSeconds,
        &reports,
    );
    crate::engine::headers::insert_saturated(headers, verdict);
}
