//! The door's service as one connection calls it: each request is counted
//! in flight until its response body ends, carries the peer's address, and
//! is reset if it takes longer than the door's request timeout.

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use thiserror::Error;
use tower::util::Oneshot;
use tower::ServiceExt;

use super::activity::{Activity, InFlight};
use super::stats::DoorStats;
use crate::telemetry::{request_trace, scope_request, RequestScoped};

/// The error type the doors' services give hyper.
pub(crate) type BoxError = Box<dyn StdError + Send + Sync>;

/// A request took longer than the door's `request_timeout`.
#[derive(Debug, Error)]
#[error("the request took longer than listen.connections.request_timeout ({0:?})")]
pub(crate) struct RequestTimedOut(Duration);

/// One connection's view of its door's service.
#[derive(Debug)]
pub(crate) struct Tracked<S> {
    pub(crate) service: S,
    pub(crate) activity: Arc<Activity>,
    pub(crate) stats: Arc<DoorStats>,
    /// The door's name, for the decision spans.
    pub(crate) door: &'static str,
    /// Given to axum's `ConnectInfo` extractor; `None` where no handler
    /// reads it (the gRPC door), which spares an allocation per request.
    pub(crate) peer: Option<SocketAddr>,
    pub(crate) timeout: Option<Duration>,
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Tracked<S>
where
    S: tower::Service<Request<Incoming>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = Response<Guarded<B>>;
    type Error = BoxError;
    type Future = TrackedFuture<RequestScoped<Oneshot<S, Request<Incoming>>>>;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        if let Some(peer) = self.peer {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        let guard = self.activity.start_request();
        let trace = request_trace(self.door, &request);
        let call = scope_request(trace, self.service.clone().oneshot(request));
        TrackedFuture {
            timeout: self.timeout.unwrap_or_default(),
            sleep: self.timeout.map(tokio::time::sleep),
            call,
            guard: Some(guard),
            stats: Arc::clone(&self.stats),
        }
    }
}

pin_project! {
    /// A request's response, with its deadline.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        call: F,
        timeout: Duration,
        #[pin]
        sleep: Option<tokio::time::Sleep>,
        guard: Option<InFlight>,
        stats: Arc<DoorStats>,
    }
}

impl<F, B, E> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<Guarded<B>>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(result) = this.call.poll(cx) {
            let response = result.map_err(Into::into)?;
            let guard = this.guard.take();
            return Poll::Ready(Ok(response.map(|body| Guarded { body, guard })));
        }
        if let Some(sleep) = this.sleep.as_pin_mut() {
            ready!(sleep.poll(cx));
            this.stats.request_timed_out();
            return Poll::Ready(Err(Box::new(RequestTimedOut(*this.timeout))));
        }
        Poll::Pending
    }
}

pin_project! {
    /// A response body that keeps its request counted in flight until it
    /// ends (or is dropped).
    pub(crate) struct Guarded<B> {
        #[pin]
        body: B,
        guard: Option<InFlight>,
    }
}

impl<B> Body for Guarded<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        if let Poll::Ready(None) = polled {
            // The end: the connection is idle from now, not from when
            // hyper drops the body.
            this.guard.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
