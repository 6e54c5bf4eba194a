//! A request's body as the doors' services read it: hyper's, telling the
//! connection's [`Activity`] while it has not ended and when its frames
//! arrive, so that a connection whose requests only wait for bodies that
//! do not come is known as stalled (closed at `body_timeout`, and the first
//! to give way when its door is full), and counting its bytes, with its
//! request's head, in the door's room until it has all arrived (a body
//! that comes whole at once is never counted).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;
use thiserror::Error;

use super::activity::{Activity, BodyOpen};
use super::service::BoxError;

/// A body that would have taken its door past
/// `[listen.connections] max_request_bytes_total`: its request fails.
#[derive(Debug, Error)]
#[error(
    "the door holds listen.connections.max_request_bytes_total of requests arriving; \
     this one was refused"
)]
pub(crate) struct BodyRefused;

pin_project! {
    /// A request body arriving on one of the doors' connections.
    #[derive(Debug)]
    pub(crate) struct RequestBody {
        #[pin]
        body: Incoming,
        // Its connection's, until the body has arrived; through it, the
        // door's room, where the body's bytes are counted.
        open: Option<BodyOpen>,
        // The request's head, in bytes: counted with the body's own once
        // the body has not come whole in one go (until then 0 is counted).
        head: usize,
        // The bytes counted there.
        held: usize,
    }

    impl PinnedDrop for RequestBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            release(this.open.take(), this.held);
        }
    }
}

/// Counts `bytes` more of a body still arriving, and its request's head
/// the first time; `false` when the door would hold more than it may.
fn charge(open: &Option<BodyOpen>, head: &mut usize, held: &mut usize, bytes: usize) -> bool {
    let Some(room) = open.as_ref().and_then(BodyOpen::room) else {
        return true;
    };
    let bytes = bytes + std::mem::take(head);
    if bytes == 0 {
        return true;
    }
    if !room.hold_body_bytes(bytes) {
        return false;
    }
    *held += bytes;
    true
}

/// The body has arrived or gone: its connection stops waiting for it,
/// and its bytes are given back to the door.
fn release(open: Option<BodyOpen>, held: &mut usize) {
    if let (Some(open), bytes @ 1..) = (&open, std::mem::take(held)) {
        if let Some(room) = open.room() {
            room.release_body_bytes(bytes);
        }
    }
}

impl RequestBody {
    /// `body` of a request whose head holds `head` bytes, arriving on the
    /// connection of `activity`, its bytes counted in its door's room if
    /// that door counts them; `head` is `None` for a body that has already
    /// ended (or has none).
    pub(crate) fn new(
        body: Incoming,
        head: Option<usize>,
        activity: &Arc<Activity>,
    ) -> RequestBody {
        RequestBody {
            open: head.map(|_| activity.start_body()),
            head: head.unwrap_or(0),
            body,
            held: 0,
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let mut body = this.body;
        let frame = match body.as_mut().poll_frame(cx) {
            Poll::Pending => {
                // The body has not come whole: from now on it and its
                // request's head count against the door.
                if !charge(this.open, this.head, this.held, 0) {
                    release(this.open.take(), this.held);
                    return Poll::Ready(Some(Err(Box::new(BodyRefused))));
                }
                return Poll::Pending;
            }
            Poll::Ready(None) => None,
            Poll::Ready(Some(Err(error))) => Some(Err(error.into())),
            Poll::Ready(Some(Ok(frame))) => Some(Ok(frame)),
        };
        let Some(Ok(arrived)) = &frame else {
            // The end, or an error: nothing more arrives.
            release(this.open.take(), this.held);
            return Poll::Ready(frame);
        };
        let ends = body.is_end_stream();
        if ends {
            // Readers may stop at the frame that ends the stream: its bytes
            // are theirs now. A body that arrives whole in its first frame
            // (gRPC's unary calls, most JSON) touches no counter of the
            // door's.
            release(this.open.take(), this.held);
        } else {
            let bytes = arrived.data_ref().map_or(0, |data| data.len());
            if !charge(this.open, this.head, this.held, bytes) {
                release(this.open.take(), this.held);
                return Poll::Ready(Some(Err(Box::new(BodyRefused))));
            }
            if let Some(open) = this.open {
                open.arrived();
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
