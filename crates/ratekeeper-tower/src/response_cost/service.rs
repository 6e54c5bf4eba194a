//! The service: hold or check before the request, charge after it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use ratekeeper::store::reservation::ReservationError;
use ratekeeper::store::Reservation;
use ratekeeper::{Limit, Store};
use tower::Service;

use super::body::CostedBody;
use super::layer::Shared;
use crate::limit::plan::Planned;
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
            let grpc = is_grpc(&parts.headers);
            let rules = match applicable(&shared, &parts) {
                Ok(rules) => rules,
                Err(refusal) => {
                    let response = refusal_response(&refusal, shared.format, grpc);
                    return Ok(response.map(CostedBody::refused));
                }
            };
            if rules.is_empty() {
                let response = inner.call(Request::from_parts(parts, body)).await?;
                return Ok(response.map(CostedBody::passed));
            }
            let keys: Vec<Vec<u8>> = rules
                .iter()
                .map(|(i, _)| {
                    let key = shared.rules[*i].key();
                    key.extract(&parts, shared.without_peer).key.to_vec()
                })
                .collect();
            let held = match before(&shared, &rules, &keys).await {
                Ok(Ok(held)) => held,
                Ok(Err(refusal)) | Err(refusal) => {
                    let response = refusal_response(&refusal, shared.format, grpc);
                    return Ok(response.map(CostedBody::refused));
                }
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let charge = Charge {
                shared,
                rules,
                keys,
                held,
            };
            let otherwise = charge.shared.estimate.units;
            let head = (response.status(), response.headers());
            match charge.shared.cost.read_head(head.0, head.1, otherwise) {
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

/// The rules that apply to the request with `parts` (their places in the
/// layer), each with the limit of the request's plan; a rule whose plan is
/// unlimited does not apply. `Err` with the refusal of a plan that
/// refuses every request (a shadow rule's is left out).
fn applicable<S>(
    shared: &Shared<S>,
    parts: &http::request::Parts,
) -> Result<Vec<(usize, Limit)>, Refusal> {
    let (method, path) = (&parts.method, parts.uri.path());
    let mut rules = Vec::new();
    for (index, rule) in shared.rules.iter().enumerate() {
        if !rule.applies_to(method, path) {
            continue;
        }
        let Some(plans) = rule.rule_plans() else {
            rules.push((index, rule.limit().clone()));
            continue;
        };
        match plans.choose(parts, rule.key(), shared.without_peer).0 {
            Planned::Limited(limit) => rules.push((index, limit.clone())),
            Planned::Unlimited => {}
            Planned::Deny if rule.is_shadow() => {}
            Planned::Deny => {
                return Err(Refusal::Limited {
                    violated: vec![rule.limit().name().to_owned()],
                    retry_after: ratekeeper::RetryAfter::Never,
                })
            }
        }
    }
    Ok(rules)
}

/// Before the request: the estimate held on every rule that applies, all
/// or none (a shadow rule refuses nothing: it holds nothing then). The
/// reservations held, one per rule; a refusal; or the store's failure as a
/// refusal (503).
async fn before<S: Store>(
    shared: &Shared<S>,
    rules: &[(usize, Limit)],
    keys: &[Vec<u8>],
) -> Result<Result<Vec<Option<Reservation>>, Refusal>, Refusal> {
    let store = &shared.store;
    let estimate = shared.estimate;
    let mut held = Vec::with_capacity(keys.len());
    for ((index, limit), key) in rules.iter().zip(keys) {
        let rule = &shared.rules[*index];
        let refusal = match store
            .reserve(limit, key, estimate.units, estimate.ttl)
            .await
        {
            Ok(reserved) if reserved.outcome.is_allowed() || rule.is_shadow() => {
                held.push(reserved.reservation);
                continue;
            }
            Ok(reserved) => Ok(Refusal::Limited {
                violated: vec![limit.name().to_owned()],
                retry_after: reserved.outcome.retry_after(),
            }),
            Err(error) => Err(Refusal::StoreUnavailable {
                reason: error.to_string(),
            }),
        };
        // All or none: what the rules before it hold goes back.
        cancel(shared, rules, &held).await;
        return refusal.map(Err);
    }
    Ok(Ok(held))
}

/// Gives back what `held` holds, each under its rule's limit in `rules`.
async fn cancel<S: Store>(
    shared: &Shared<S>,
    rules: &[(usize, Limit)],
    held: &[Option<Reservation>],
) {
    for ((_, limit), reservation) in rules.iter().zip(held) {
        if let Some(reservation) = reservation {
            // A cancel that fails leaves the units held until the ttl:
            // stricter, never looser.
            let _ = shared.store.cancel(limit, reservation).await;
        }
    }
}

/// What a request's response is charged, once its cost is known.
pub(crate) struct Charge<S> {
    shared: Arc<Shared<S>>,
    /// The rules that applied (their places in the layer, and the limit
    /// of the request's plan), with their keys.
    rules: Vec<(usize, Limit)>,
    keys: Vec<Vec<u8>>,
    /// One reservation per rule; none where a shadow rule was refused.
    held: Vec<Option<Reservation>>,
}

impl<S: Store + 'static> Charge<S> {
    /// Charges `units` to every rule, settling its reservation at them. A
    /// reservation its ttl settled already (at the estimate) is charged
    /// the difference; a shadow rule that held none is charged a report. A
    /// store that fails leaves the estimate in place, which its ttl
    /// settles; it is logged, not answered.
    pub(crate) async fn settle(self, units: u64) {
        let store = &self.shared.store;
        let estimate = self.shared.estimate.units;
        let charges = self.held.iter().zip(&self.rules).zip(&self.keys);
        for ((reservation, (_, limit)), key) in charges {
            let result = match reservation {
                None if units == 0 => continue,
                None => store.report(limit, key, units).await.map(|_| ()),
                Some(reservation) => match store.commit(limit, reservation, units).await {
                    // Its ttl settled it at the estimate: the difference.
                    Err(error) if error.reservation() == Some(&ReservationError::Unknown) => {
                        match units.checked_sub(estimate) {
                            Some(excess) => store.report(limit, key, excess).await.map(|_| ()),
                            None => store.refund(limit, key, estimate - units).await,
                        }
                    }
                    other => other.map(|_| ()),
                },
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
