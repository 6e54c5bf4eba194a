//! A request's body as the doors' services read it: hyper's, telling the
//! connection's [`Activity`] while it has not ended and when its frames
//! arrive, so that a connection whose requests only wait for bodies that
//! do not come is known as stalled (closed at `body_timeout`, and the first
//! to give way when its door is full), and counting its bytes in the
//! door's [`Room`] until it has all arrived.

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
/// `[listen.connections] max_body_bytes_total`: its request fails.
#[derive(Debug, Error)]
#[error(
    "the door holds listen.connections.max_body_bytes_total of request bodies arriving; \
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
    /// `body`, arriving on the connection of `activity`, its bytes counted
    /// in its door's room if that door counts them.
    pub(crate) fn new(body: Incoming, activity: &Arc<Activity>) -> RequestBody {
        let open = (!body.is_end_stream()).then(|| activity.start_body());
        RequestBody {
            body,
            open,
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
            Poll::Pending => return Poll::Pending,
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
        // A body that arrives whole in its first frame (gRPC's unary calls,
        // most JSON) is read at once: nothing to count, and no counter of
        // the door's touched.
        if !(ends && *this.held == 0) {
            let room = this.open.as_ref().and_then(BodyOpen::room);
            if let (Some(room), Some(data)) = (room, arrived.data_ref()) {
                if !room.hold_body_bytes(data.len()) {
                    release(this.open.take(), this.held);
                    return Poll::Ready(Some(Err(Box::new(BodyRefused))));
                }
                *this.held += data.len();
            }
        }
        if ends {
            // Readers may stop at the frame that ends the stream: its bytes
            // are theirs now.
            release(this.open.take(), this.held);
        } else if let Some(open) = this.open {
            open.arrived();
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
