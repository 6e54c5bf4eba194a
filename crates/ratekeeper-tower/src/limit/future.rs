//! The future of a rate-limited call: the inner service's, with the
//! rate-limit headers to add, a ready refusal, or the whole asynchronous
//! decision.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use crate::headers::HeaderStyle;

pub(crate) type BoxedResponse<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The future of a [`RateLimit`] call.
    ///
    /// With a store that decides at once (the in-memory one), the decision
    /// is made in `call` and this future is the inner service's, or a
    /// ready refusal; with a store that waits (SQLite, Redis), it is the
    /// whole asynchronous decision, boxed.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F, B, E> {
        // The inner service's future alone (no headers to add): the usual
        // allowed request, as small and as direct as the inner future.
        Plain { #[pin] future: F },
        Inner { #[pin] future: F, headers: PendingHeaders },
        // Boxed: a refusal is rarer than a pass, and an inline response
        // would make every future (moved through each layer above) larger.
        Ready { response: Option<Box<Response<B>>> },
        Waiting { future: BoxedResponse<B, E> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Plain { future } => future.poll(cx),
            StateProjection::Inner { future, headers } => {
                let mut response = std::task::ready!(future.poll(cx))?;
                headers.add_to(response.headers_mut());
                Poll::Ready(Ok(response))
            }
            StateProjection::Ready { response } => Poll::Ready(Ok(*response
                .take()
                .expect("a ResponseFuture polled after it completed"))),
            StateProjection::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's future alone.
    #[inline]
    pub(crate) fn plain(future: F) -> Self {
        ResponseFuture {
            state: State::Plain { future },
        }
    }

    /// The inner service's future, and the headers to add to its response.
    #[inline]
    pub(crate) fn inner(future: F, headers: PendingHeaders) -> Self {
        ResponseFuture {
            state: State::Inner { future, headers },
        }
    }

    /// A response made already (a refusal).
    pub(crate) fn ready(response: Response<B>) -> Self {
        ResponseFuture {
            state: State::Ready {
                response: Some(Box::new(response)),
            },
        }
    }

    /// The whole asynchronous decision and call.
    pub(crate) fn waiting(future: BoxedResponse<B, E>) -> Self {
        ResponseFuture {
            state: State::Waiting { future },
        }
    }
}

/// The rate-limit headers of an allowed request, kept beside the inner
/// service's future until its response comes, so an allowed request makes
/// no header map of its own.
#[derive(Default)]
pub(crate) struct PendingHeaders {
    // A plain `Vec`: it allocates only when there are headers, and keeps
    // the future (moved through every layer above) small when there are
    // none; inline room for the fields made every future 170 bytes larger,
    // which cost more in copies than the allocation does.
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

impl PendingHeaders {
    /// Room for the fields `style` writes (`RateLimit-Policy` and
    /// `RateLimit`; the three legacy ones; or all five), so that pushing
    /// them allocates once.
    pub(crate) fn for_style(style: HeaderStyle) -> PendingHeaders {
        let fields = match style {
            HeaderStyle::None => 0,
            HeaderStyle::Draft => 2,
            HeaderStyle::Legacy => 3,
            HeaderStyle::Both => 5,
        };
        PendingHeaders {
            headers: Vec::with_capacity(fields),
        }
    }

    pub(crate) fn push(&mut self, name: http::HeaderName, value: http::HeaderValue) {
        self.headers.push((name, value));
    }

    #[inline]
    fn add_to(&mut self, headers: &mut http::HeaderMap) {
        if self.headers.is_empty() {
            return;
        }
        for (name, value) in self.headers.drain(..) {
            headers.insert(name, value);
        }
    }
}
