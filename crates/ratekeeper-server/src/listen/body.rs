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
use super::room::Room;
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
        open: Option<BodyOpen>,
        // The door's room, where it counts bodies' bytes.
        room: Option<Arc<Room>>,
        // The bytes counted there.
        held: usize,
    }

    impl PinnedDrop for RequestBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(room) = this.room {
                room.release_body_bytes(*this.held);
            }
        }
    }
}

impl RequestBody {
    /// `body`, arriving on the connection of `activity`, its bytes counted
    /// in `room` if that door counts them.
    pub(crate) fn new(body: Incoming, activity: &Arc<Activity>, room: &Arc<Room>) -> RequestBody {
        let open = (!body.is_end_stream()).then(|| activity.start_body());
        let room = (open.is_some() && room.counts_bodies()).then(|| Arc::clone(room));
        RequestBody {
            body,
            open,
            room,
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
            this.open.take();
            if let Some(room) = this.room.take() {
                room.release_body_bytes(std::mem::take(this.held));
            }
            return Poll::Ready(frame);
        };
        if let (Some(room), Some(data)) = (this.room.as_ref(), arrived.data_ref()) {
            if !room.hold_body_bytes(data.len()) {
                this.open.take();
                room.release_body_bytes(std::mem::take(this.held));
                this.room.take();
                return Poll::Ready(Some(Err(Box::new(BodyRefused))));
            }
            *this.held += data.len();
        }
        if body.is_end_stream() {
            // Readers may stop at the frame that ends the stream: its bytes
            // are theirs now.
            this.open.take();
            if let Some(room) = this.room.take() {
                room.release_body_bytes(std::mem::take(this.held));
            }
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
