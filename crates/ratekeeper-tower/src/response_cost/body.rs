//! A response body charged when it ends, with the cost its trailers say.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use ratekeeper::Store;

use super::cost::Cost;
use super::service::Charge;

type Settling = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The charge of a response, its store type erased: run with the cost.
type Settle = Box<dyn FnOnce(u64) -> Settling + Send>;

pin_project_lite::pin_project! {
    /// The body of a [`ResponseCost`](super::ResponseCost) response: the
    /// inner service's, a refusal, or a body whose trailers say what it
    /// cost, charged when it ends (its end waits for the charge). Dropped
    /// before its end, it charges nothing more: a reservation stays at its
    /// estimate, which its ttl settles.
    pub struct CostedBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Passed { #[pin] body: B },
        Counting {
            #[pin] body: B,
            cost: Cost,
            // What is charged when no trailer says.
            otherwise: u64,
            said: Option<u64>,
            settle: Option<Settle>,
            settling: Option<Settling>,
        },
        Refused { #[pin] body: Full<Bytes> },
    }
}

impl<B> CostedBody<B> {
    pub(super) fn passed(body: B) -> Self {
        CostedBody {
            kind: Kind::Passed { body },
        }
    }

    pub(super) fn refused(body: Full<Bytes>) -> Self {
        CostedBody {
            kind: Kind::Refused { body },
        }
    }

    pub(super) fn counting<S: Store + 'static>(body: B, cost: Cost, charge: Charge<S>) -> Self {
        let otherwise = charge.otherwise();
        let settle: Settle = Box::new(move |units| Box::pin(charge.settle(units)));
        CostedBody {
            kind: Kind::Counting {
                body,
                cost,
                otherwise,
                said: None,
                settle: Some(settle),
                settling: None,
            },
        }
    }
}

impl<B> Body for CostedBody<B>
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
            KindProjection::Passed { body } => body.poll_frame(cx),
            KindProjection::Refused { body } => body.poll_frame(cx).map_err(|never| match never {}),
            KindProjection::Counting {
                mut body,
                cost,
                otherwise,
                said,
                settle,
                settling,
            } => loop {
                if let Some(running) = settling {
                    ready!(running.as_mut().poll(cx));
                    *settling = None;
                    return Poll::Ready(None);
                }
                if settle.is_none() {
                    return Poll::Ready(None);
                }
                match ready!(body.as_mut().poll_frame(cx)) {
                    Some(Ok(frame)) => {
                        if let Some(trailers) = frame.trailers_ref() {
                            *said = cost.read_trailers(trailers).or(*said);
                        }
                        return Poll::Ready(Some(Ok(frame)));
                    }
                    Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                    None => {
                        let units = said.unwrap_or(*otherwise);
                        if let Some(start) = settle.take() {
                            *settling = Some(start(units));
                        }
                    }
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Passed { body } => body.is_end_stream(),
            Kind::Refused { body } => body.is_end_stream(),
            // Not until charged.
            Kind::Counting {
                settle, settling, ..
            } => settle.is_none() && settling.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Passed { body } => body.size_hint(),
            Kind::Refused { body } => body.size_hint(),
            Kind::Counting { body, .. } => body.size_hint(),
        }
    }
}
