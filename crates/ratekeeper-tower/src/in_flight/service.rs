//! The service: take the slots before the request, hold them until its
//! response ends.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use ratekeeper::store::in_flight::Slot;
use ratekeeper::store::reservation::ReservationError;
use ratekeeper::store::StoreError;
use ratekeeper::Store;
use tower::Service;

use super::body::{Held, InFlightBody, Releasing};
use super::layer::Shared;
use crate::limit::response::{is_grpc, refusal_response};
use crate::Refusal;

/// The service of an [`InFlightLayer`](super::InFlightLayer).
pub struct InFlightService<Inner, S> {
    inner: Inner,
    shared: Arc<Shared<S>>,
}

impl<Inner: Clone, S> Clone for InFlightService<Inner, S> {
    fn clone(&self) -> Self {
        InFlightService {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Inner: std::fmt::Debug, S> std::fmt::Debug for InFlightService<Inner, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightService")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<Inner, S> InFlightService<Inner, S> {
    pub(super) fn new(inner: Inner, shared: Arc<Shared<S>>) -> Self {
        InFlightService { inner, shared }
    }
}

/// The future of an [`InFlightService`] call.
pub type InFlightFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<InFlightBody<B>>, E>> + Send>>;

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for InFlightService<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    Inner::Error: Send + 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<InFlightBody<ResBody>>;
    type Error = Inner::Error;
    type Future = InFlightFuture<ResBody, Inner::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The ready service answers this request; its clone waits for the
        // next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            release_unreleased(&shared).await;
            let (parts, body) = request.into_parts();
            // Each cap that applies, with the request's key under it.
            let keys: Vec<(usize, Vec<u8>)> = shared
                .caps
                .iter()
                .enumerate()
                .filter(|(_, rule)| rule.applies_to(&parts.method, parts.uri.path()))
                .map(|(index, rule)| {
                    let key = rule.key().extract(&parts, shared.without_peer).key;
                    (index, key.to_vec())
                })
                .collect();
            let grpc = is_grpc(&parts.headers);
            // Held until the response ends; dropped with this future (the
            // request abandoned) or on the inner service's error, they are
            // given back then.
            let slots = match acquire_all(&shared, &keys).await {
                Ok(slots) => slots,
                Err(refusal) => {
                    let response = refusal_response(&refusal, shared.format, grpc);
                    return Ok(response.map(InFlightBody::refused));
                }
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            Ok(response.map(|body| InFlightBody::holding(body, Box::new(slots))))
        })
    }
}

/// One slot of every cap for its key, all or none: the slots, or the
/// refusal (429 naming the caps that were full, or 503 for a store that
/// failed).
async fn acquire_all<S: Store + 'static>(
    shared: &Arc<Shared<S>>,
    keys: &[(usize, Vec<u8>)],
) -> Result<Slots<S>, Refusal> {
    let mut slots = Slots {
        shared: Arc::clone(shared),
        held: Vec::with_capacity(keys.len()),
    };
    for (index, key) in keys {
        let (index, rule) = (*index, &shared.caps[*index]);
        match shared.store.acquire(rule.cap(), key).await {
            Ok(acquired) => match acquired.slot {
                Some(slot) => slots.held.push((index, slot)),
                None => {
                    slots.release().await;
                    return Err(Refusal::Limited {
                        violated: vec![rule.cap().name().to_owned()],
                        retry_after: acquired.outcome.retry_after(),
                    });
                }
            },
            Err(error) => {
                slots.release().await;
                return Err(Refusal::StoreUnavailable {
                    reason: error.to_string(),
                });
            }
        }
    }
    Ok(slots)
}

/// Gives back what earlier responses could not.
async fn release_unreleased<S: Store>(shared: &Shared<S>) {
    let pending = std::mem::take(
        &mut *shared
            .unreleased
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for (index, slot) in pending {
        logged(shared.store.release(shared.caps[index].cap(), &slot).await);
    }
}

/// A release's failure, logged: a slot not taken any more (its lease
/// ended) is no failure.
fn logged(result: Result<(), StoreError>) {
    match result {
        Ok(()) => {}
        Err(error) if error.reservation() == Some(&ReservationError::Unknown) => {}
        Err(error) => {
            tracing::warn!(%error, "an in-flight slot could not be given back; its lease frees it")
        }
    }
}

/// A request's slots, given back once: by [`Held::release`] when its
/// response ends, or when dropped.
pub(super) struct Slots<S: Store + 'static> {
    shared: Arc<Shared<S>>,
    /// Each slot with its cap's place in the layer.
    held: Vec<(usize, Slot)>,
}

impl<S: Store + 'static> Slots<S> {
    async fn release(&mut self) {
        for (index, slot) in std::mem::take(&mut self.held) {
            let cap = self.shared.caps[index].cap();
            logged(self.shared.store.release(cap, &slot).await);
        }
    }
}

impl<S: Store + 'static> Held for Slots<S> {
    fn release(mut self: Box<Self>) -> Releasing {
        Box::pin(async move { Slots::release(&mut self).await })
    }
}

impl<S: Store + 'static> Drop for Slots<S> {
    /// Given back at once where the store answers at once (the in-memory
    /// store); otherwise before the layer's next request.
    fn drop(&mut self) {
        for (index, slot) in std::mem::take(&mut self.held) {
            let cap = self.shared.caps[index].cap();
            let answered = {
                let mut release = pin!(self.shared.store.release(cap, &slot));
                match release
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()))
                {
                    Poll::Ready(result) => Some(result),
                    Poll::Pending => None,
                }
            };
            match answered {
                Some(result) => logged(result),
                None => self
                    .shared
                    .unreleased
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((index, slot)),
            }
        }
    }
}
