//! The service: hold or check before the request, charge after it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use ratekeeper::store::{Reservation, StoreError};
use ratekeeper::Store;
use tower::Service;

use super::body::CostedBody;
use super::layer::Shared;
use crate::limit::response::{is_grpc, refusal_response};
use crate::Refusal;

/// The service of a [`ResponseCostLayer`](super::ResponseCostLayer).
pub struct ResponseCost<Inner, S> {
    inner: Inner,
    shared: Arc<Shared<S>>,
}

impl<Inner: Clone, S> Clone for ResponseCost<Inner, S> {
    fn clone(&self) -> Self {
        ResponseCost {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Inner: std::fmt::Debug, S> std::fmt::Debug for ResponseCost<Inner, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCost")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<Inner, S> ResponseCost<Inner, S> {
    pub(super) fn new(inner: Inner, shared: Arc<Shared<S>>) -> Self {
        ResponseCost { inner, shared }
    }
}

/// The future of a [`ResponseCost`] call.
pub type ResponseCostFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<CostedBody<B>>, E>> + Send>>;

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for ResponseCost<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    Inner::Error: Send + 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: Body<Data = Bytes> + Send + 'static,
{
    type Response = Response<CostedBody<ResBody>>;
    type Error = Inner::Error;
    type Future = ResponseCostFuture<ResBody, Inner::Error>;

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
            let (parts, body) = request.into_parts();
            let keys: Vec<Vec<u8>> = shared
                .limits
                .iter()
                .map(|(_, key)| key.extract(&parts, shared.without_peer).key.to_vec())
                .collect();
            let grpc = is_grpc(&parts.headers);
            let held = match before(&shared, &keys).await {
                Ok(Ok(held)) => held,
                Ok(Err(refusal)) | Err(refusal) => {
                    let response = refusal_response(&refusal, shared.format, grpc);
                    return Ok(response.map(CostedBody::refused));
                }
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let charge = Charge { shared, keys, held };
            let otherwise = charge.shared.estimate.units;
            match charge
                .shared
                .cost
                .read_head(response.status(), response.headers(), otherwise)
            {
                Some(units) => {
                    charge.settle(units).await;
                    Ok(response.map(CostedBody::passed))
                }
                None => {
                    let cost = charge.shared.cost.clone();
                    Ok(response.map(|body| CostedBody::counting(body, cost, charge)))
                }
            }
        })
    }
}

/// Before the request: the estimate held on every limit, all or none. The
/// reservations held; a refusal; or the store's failure as a refusal (503).
async fn before<S: Store>(
    shared: &Shared<S>,
    keys: &[Vec<u8>],
) -> Result<Result<Vec<Reservation>, Refusal>, Refusal> {
    let store = &shared.store;
    let failed = |error: StoreError| Refusal::StoreUnavailable {
        reason: error.to_string(),
    };
    let mut held = Vec::with_capacity(keys.len());
    for ((limit, _), key) in shared.limits.iter().zip(keys) {
        let estimate = shared.estimate;
        let outcome = match store
            .reserve(limit, key, estimate.units, estimate.ttl)
            .await
        {
            Ok(reserved) => {
                held.extend(reserved.reservation);
                Ok(reserved.outcome)
            }
            Err(error) => Err(error),
        };
        let refusal = match outcome {
            Ok(outcome) if outcome.is_allowed() => continue,
            Ok(outcome) => Refusal::Limited {
                violated: vec![limit.name().to_owned()],
                retry_after: outcome.retry_after(),
            },
            Err(error) => failed(error),
        };
        // All or none: what the limits before it hold goes back.
        cancel(shared, &held).await;
        return match refusal {
            refusal @ Refusal::Limited { .. } => Ok(Err(refusal)),
            failure => Err(failure),
        };
    }
    Ok(Ok(held))
}

async fn cancel<S: Store>(shared: &Shared<S>, held: &[Reservation]) {
    for (reservation, (limit, _)) in held.iter().zip(&shared.limits) {
        // A cancel that fails leaves the units held until the ttl:
        // stricter, never looser.
        let _ = shared.store.cancel(limit, reservation).await;
    }
}

/// What a request's response is charged, once its cost is known.
pub(crate) struct Charge<S> {
    shared: Arc<Shared<S>>,
    keys: Vec<Vec<u8>>,
    /// One reservation per limit.
    held: Vec<Reservation>,
}

impl<S: Store + 'static> Charge<S> {
    /// Charges `units` to every limit, settling its reservation at them.
    /// A reservation its ttl settled already (at the estimate) is charged
    /// the difference. A store that fails leaves the estimate in place,
    /// which its ttl settles; it is logged, not answered.
    pub(crate) async fn settle(self, units: u64) {
        let store = &self.shared.store;
        let estimate = self.shared.estimate.units;
        for ((reservation, (limit, _)), key) in
            self.held.iter().zip(&self.shared.limits).zip(&self.keys)
        {
            let result = match store.commit(limit, reservation, units).await {
                Err(error) if is_unknown(&error) && units > estimate => {
                    store.report(limit, key, units - estimate).await.map(|_| ())
                }
                Err(error) if is_unknown(&error) => {
                    store.refund(limit, key, estimate - units).await
                }
                other => other.map(|_| ()),
            };
            if let Err(error) = result {
                tracing::warn!(limit = limit.name(), %error, "a response's cost could not be charged");
            }
        }
    }

    /// The units a response whose cost could not be read is charged.
    pub(crate) fn otherwise(&self) -> u64 {
        self.shared.estimate.units
    }
}

/// A reservation no longer open: its ttl settled it at the estimate.
fn is_unknown(error: &StoreError) -> bool {
    matches!(
        error.without_store(),
        StoreError::Reservation(ratekeeper::store::reservation::ReservationError::Unknown)
    )
}
