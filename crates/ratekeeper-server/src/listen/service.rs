//! The door's service as one connection calls it: each request is counted
//! in flight until its response body ends, carries the peer's address, and
//! is reset if it takes longer than the door's request timeout. On HTTP/2
//! each stream is counted in the door's [`Room`], and refused
//! (`REFUSED_STREAM`, which clients retry elsewhere or later) when the door
//! holds all the streams it may; its body and its answer tell the
//! connection's [`Activity`] when they wait for the peer.

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

use super::activity::{Activity, Answering, InFlight};
use super::body::RequestBody;
use super::room::Room;
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
    /// The door's room, where request bodies are counted, and streams on
    /// HTTP/2 (see `count_streams`).
    pub(crate) room: Arc<Room>,
    pub(crate) count_streams: bool,
}

impl<S> Tracked<S> {
    /// The same service on a connection that turned out to speak HTTP/2:
    /// its streams count in the door's room.
    pub(crate) fn counting_streams(self) -> Tracked<S> {
        Tracked {
            count_streams: true,
            ..self
        }
    }
}

impl<S, B> hyper::service::Service<Request<Incoming>> for Tracked<S>
where
    S: tower::Service<Request<RequestBody>, Response = Response<B>> + Clone,
    S::Error: Into<BoxError>,
{
    type Response = Response<Guarded<B>>;
    type Error = BoxError;
    type Future = TrackedFuture<RequestScoped<Oneshot<S, Request<RequestBody>>>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let timeout = self.timeout.unwrap_or_default();
        let stats = Arc::clone(&self.stats);
        if self.count_streams && !self.room.take_stream(&self.activity) {
            self.stats.stream_refused();
            return TrackedFuture {
                timeout,
                sleep: None,
                call: None,
                guard: None,
                stats,
            };
        }
        let head = (!request.body().is_end_stream()).then(|| head_bytes(&request));
        let mut request = request.map(|body| RequestBody::new(body, head, &self.activity));
        if let Some(peer) = self.peer {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
        }
        let guard = self.activity.start_request();
        let trace = request_trace(self.door, &request);
        let call = scope_request(trace, self.service.clone().oneshot(request));
        TrackedFuture {
            timeout,
            sleep: self.timeout.map(tokio::time::sleep),
            call: Some(call),
            guard: Some(guard),
            stats,
        }
    }
}

/// What a request's head holds, as HTTP/2 counts a header list (each
/// field's name and value, and 32 bytes).
fn head_bytes<B>(request: &Request<B>) -> usize {
    let fields: usize = request
        .headers()
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len() + 32)
        .sum();
    fields + request.uri().path().len() + request.uri().query().map_or(0, str::len)
}

pin_project! {
    /// A request's response, with its deadline; no call at all for a
    /// stream refused for want of room.
    pub(crate) struct TrackedFuture<F> {
        #[pin]
        call: Option<F>,
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
        let Some(call) = this.call.as_pin_mut() else {
            // hyper resets the stream with the reason of an h2 error.
            let refused = h2::Error::from(h2::Reason::REFUSED_STREAM);
            return Poll::Ready(Err(Box::new(refused)));
        };
        if let Poll::Ready(result) = call.poll(cx) {
            let response = result.map_err(Into::into)?;
            let guard = this.guard.take();
            let answering = guard.as_ref().map(InFlight::answer);
            return Poll::Ready(Ok(response.map(|body| Guarded {
                body,
                answering,
                guard,
            })));
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
    /// ends (or is dropped), and tells the connection when its frames are
    /// taken to be sent.
    pub(crate) struct Guarded<B> {
        #[pin]
        body: B,
        answering: Option<Answering>,
        guard: Option<InFlight>,
    }

    impl<B> PinnedDrop for Guarded<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let (Some(guard), Some(answering)) = (this.guard.as_ref(), this.answering.as_mut()) {
                guard.waiting_for_source(answering);
            }
        }
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
        if let (Some(guard), Some(answering)) = (this.guard.as_ref(), this.answering.as_mut()) {
            match &polled {
                Poll::Ready(Some(_)) => guard.frame_taken(answering),
                Poll::Ready(None) => {
                    // The end: the connection is idle from now, not from
                    // when hyper drops the body.
                    guard.waiting_for_source(answering);
                    this.guard.take();
                }
                Poll::Pending => guard.waiting_for_source(answering),
            }
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
