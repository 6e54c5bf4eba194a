//! A request's body as the doors' services read it: hyper's, telling the
//! connection's [`Activity`] while it has not ended and when its frames
//! arrive, so that a connection whose requests only wait for bodies that
//! do not come is known as stalled (closed at `body_timeout`, and the first
//! to give way when its door is full).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use super::activity::{Activity, BodyOpen};

pin_project! {
    /// A request body arriving on one of the doors' connections.
    #[derive(Debug)]
    pub(crate) struct RequestBody {
        #[pin]
        body: Incoming,
        open: Option<BodyOpen>,
    }
}

impl RequestBody {
    /// `body`, arriving on the connection of `activity`.
    pub(crate) fn new(body: Incoming, activity: &Arc<Activity>) -> RequestBody {
        let open = (!body.is_end_stream()).then(|| activity.start_body());
        RequestBody { body, open }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let mut body = this.body;
        let polled = body.as_mut().poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(_))) => {
                if body.is_end_stream() {
                    // Readers may stop at the frame that ends the stream.
                    this.open.take();
                } else if let Some(open) = this.open {
                    open.arrived();
                }
            }
            Poll::Ready(None | Some(Err(_))) => {
                this.open.take();
            }
            Poll::Pending => {}
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
