//! A cap on the requests the proxy has at the upstream at once.
//!
//! The client side is capped by connections, but one HTTP/2 connection
//! carries up to `max_concurrent_streams` requests, each of which may open
//! its own connection to an HTTP/1 upstream: without a cap of its own, a
//! few clients could hold thousands of upstream connections open (a slow
//! upstream makes that easy). Past the cap a request is answered at once
//! with `503 Service Unavailable` and `Retry-After: 1`, as Envoy's circuit
//! breakers answer an overflow, instead of queueing where its client's
//! timeout cannot be seen. A request holds its place until its response
//! body has been sent (or dropped), so streamed downloads count.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The upstream requests in flight, up to a cap.
#[derive(Clone, Debug)]
pub(crate) struct InFlight {
    permits: Arc<Semaphore>,
}

impl InFlight {
    /// At most `max` at once (at least 1).
    pub(crate) fn new(max: usize) -> InFlight {
        InFlight {
            permits: Arc::new(Semaphore::new(max.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// A place for one more request, or `None` at the cap.
    pub(crate) fn try_take(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.permits).try_acquire_owned().ok()
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request's place until it ends or is
    /// dropped.
    pub(crate) struct Held<B> {
        #[pin]
        body: B,
        place: Option<OwnedSemaphorePermit>,
    }
}

impl<B> Held<B> {
    pub(crate) fn new(body: B, place: OwnedSemaphorePermit) -> Held<B> {
        Held {
            body,
            place: Some(place),
        }
    }
}

impl<B: Body<Data = Bytes>> Body for Held<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let frame = this.body.as_mut().poll_frame(cx);
        // Done (ended, failed, or its last frame out): the place is free
        // before that frame is written, so a client that has read the
        // whole response finds it free.
        let done = match &frame {
            Poll::Ready(None | Some(Err(_))) => true,
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            Poll::Pending => false,
        };
        if done {
            this.place.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, Full};

    #[tokio::test]
    async fn a_place_is_held_until_the_body_ends() {
        let in_flight = InFlight::new(1);
        let place = in_flight.try_take().expect("a place");
        assert!(in_flight.try_take().is_none(), "the cap is 1");
        let mut body = Held::new(Full::new(Bytes::from_static(b"hello")), place);
        assert!(in_flight.try_take().is_none(), "held by the body");
        // The last frame frees it, before anyone polls for the end.
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), "hello");
        assert!(in_flight.try_take().is_some(), "free with the last frame");
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn a_dropped_body_frees_its_place() {
        let in_flight = InFlight::new(1);
        let body = Held::new(Full::new(Bytes::new()), in_flight.try_take().unwrap());
        drop(body);
        assert!(in_flight.try_take().is_some());
        assert!(InFlight::new(0).try_take().is_some(), "at least one place");
    }
}
