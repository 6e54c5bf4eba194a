//! A response body that holds its request's slots until it ends.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

/// Slots being given back.
pub(super) type Releasing = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A request's slots, their store's type erased: given back when its
/// response ends, or when dropped.
pub(super) trait Held: Send {
    fn release(self: Box<Self>) -> Releasing;
}

pin_project_lite::pin_project! {
    /// The body of an [`InFlightService`](super::InFlightService)
    /// response: the inner service's, holding the request's slots until
    /// it ends (its end waits for them to be given back) or is dropped;
    /// or a refusal.
    pub struct InFlightBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Holding {
            #[pin] body: B,
            slots: Option<Box<dyn Held>>,
            releasing: Option<Releasing>,
        },
        Refused { #[pin] body: Full<Bytes> },
    }
}

impl<B> InFlightBody<B> {
    pub(super) fn holding(body: B, slots: Box<dyn Held>) -> Self {
        InFlightBody {
            kind: Kind::Holding {
                body,
                slots: Some(slots),
                releasing: None,
            },
        }
    }

    pub(super) fn refused(body: Full<Bytes>) -> Self {
        InFlightBody {
            kind: Kind::Refused { body },
        }
    }
}

impl<B> Body for InFlightBody<B>
where
    B: Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProjection::Refused { body } => body.poll_frame(cx).map_err(|never| match never {}),
            KindProjection::Holding {
                mut body,
                slots,
                releasing,
            } => loop {
                if let Some(running) = releasing {
                    ready!(running.as_mut().poll(cx));
                    *releasing = None;
                    return Poll::Ready(None);
                }
                let Some(held) = slots.take() else {
                    return Poll::Ready(None);
                };
                match body.as_mut().poll_frame(cx) {
                    Poll::Ready(None) => *releasing = Some(held.release()),
                    other => {
                        *slots = Some(held);
                        return other;
                    }
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            // Not until the slots are given back.
            Kind::Holding {
                slots, releasing, ..
            } => slots.is_none() && releasing.is_none(),
            Kind::Refused { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Holding { body, .. } => body.size_hint(),
            Kind::Refused { body } => body.size_hint(),
        }
    }
}
