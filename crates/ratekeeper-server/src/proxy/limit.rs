//! The proxy's rate limit: the tower layer's [`RateLimitLayer`] over the
//! engine's rules, and its [`ResponseCostLayer`]s over those with an
//! `after_response` (charged what each response cost), rebuilt when a
//! reload replaces them.
//!
//! The layer keys each request, picks the rules that apply to it, decides
//! (shadow rules after the others), and answers with its refusals and
//! headers. It decides through [`EngineStore`], which hands each check to
//! the [`Engine`] under the configured limit of that name: the counts,
//! statistics, metrics and `on_saturated` passes are the engine's, shared
//! with every other door.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::ReservationId;
use ratekeeper::store::{Check as StoreCheck, MultiOutcome, StoreError};
use ratekeeper::{Decision, Limit, Outcome, Store};
use ratekeeper_tower::headers::{HeaderStyle, ResetStyle};
use ratekeeper_tower::in_flight::InFlightLayer;
use ratekeeper_tower::{RateLimitLayer, ResponseCostLayer, ResponseFormat};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt};

use crate::config::AfterResponse;

use crate::engine::{DecisionDoor, Engine, HttpSource, LimitCheck, LimitSet, Verdict};

/// Rate-limits each request by the engine's limits in force.
#[derive(Clone, Debug)]
pub(crate) struct LimitLayer {
    engine: Engine,
    current: Arc<ArcSwap<Current>>,
}

/// The layer of one set of limits.
struct Current {
    limits: Arc<LimitSet>,
    /// `None` when no limit applies to HTTP requests.
    layer: Option<RateLimitLayer<EngineStore>>,
    /// The limits charged after the response, one layer per way of
    /// charging (their `after_response` alike), innermost first.
    charged: Vec<ResponseCostLayer<EngineStore>>,
    /// The caps on requests in flight, outermost: a request takes its
    /// slots before the rate limits decide it (a full cap takes nothing
    /// from them), and holds them until its response body ends.
    in_flight: Option<InFlightLayer<EngineStore>>,
}

impl std::fmt::Debug for Current {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Current")
            .field("layer", &self.layer)
            .finish_non_exhaustive()
    }
}

impl LimitLayer {
    pub(crate) fn new(engine: Engine) -> LimitLayer {
        let current = Current::of(&engine, engine.limits());
        LimitLayer {
            engine,
            current: Arc::new(ArcSwap::from_pointee(current)),
        }
    }

    /// The layer of the limits in force, rebuilt first if a reload
    /// replaced them.
    fn current(&self) -> Arc<Current> {
        let current = self.current.load_full();
        let limits = self.engine.limits();
        if Arc::ptr_eq(&current.limits, &limits) {
            return current;
        }
        let fresh = Arc::new(Current::of(&self.engine, limits));
        // Requests racing a reload may each build one; the last stored
        // wins, and all of them are of the same limits.
        self.current.store(Arc::clone(&fresh));
        fresh
    }
}

impl Current {
    fn of(engine: &Engine, limits: Arc<LimitSet>) -> Current {
        let store = || EngineStore {
            engine: engine.clone(),
            limits: Arc::clone(&limits),
        };
        let mut rules = Vec::new();
        let mut charged: Vec<(AfterResponse, Vec<ratekeeper_tower::Rule>)> = Vec::new();
        for limit in limits.iter() {
            let Some(rule) = limit.http_rule().cloned() else {
                continue;
            };
            match &limit.config().after_response {
                None => rules.push(rule),
                Some(after) => match charged.iter_mut().find(|(alike, _)| alike == after) {
                    Some((_, rules)) => rules.push(rule),
                    None => charged.push((after.clone(), vec![rule])),
                },
            }
        }
        let charged = charged
            .into_iter()
            .filter_map(|(after, rules)| {
                let mut builder = ResponseCostLayer::builder(store())
                    .cost(after.cost.to_cost())
                    .estimate(after.estimate, after.ttl)
                    .response_format(ResponseFormat::Text);
                for rule in rules {
                    builder = builder.rule(rule);
                }
                // Names are unique and the ttl checked: it builds.
                builder.build().ok()
            })
            .collect();
        let store = store();
        let mut builder = RateLimitLayer::builder(store)
            // One queue for every layer a reload makes: its bounds and
            // counts hold across them.
            .wait_queue(engine.wait_queue().clone())
            .headers(HeaderStyle::Draft)
            .reset_style(ResetStyle::DeltaSeconds)
            .format(ResponseFormat::Text)
            // Every method counts, OPTIONS included: a limit that should
            // skip preflights says so in its `match.methods`.
            .skip_methods([]);
        for rule in rules {
            builder = builder.rule(rule);
        }
        let mut caps = InFlightLayer::builder(EngineStore {
            engine: engine.clone(),
            limits: Arc::clone(&limits),
        })
        .response_format(ResponseFormat::Text);
        for cap in limits.in_flight_for_any_http() {
            caps = caps.rule(cap.rule().clone());
        }
        // The configuration's names are unique, so the only error is
        // having no limit (or cap) for HTTP at all: then nothing is
        // limited.
        Current {
            layer: builder.build().ok(),
            in_flight: caps.build().ok(),
            limits,
            charged,
        }
    }
}

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`LimitLayer`].
#[derive(Clone, Debug)]
pub(crate) struct Limited<S> {
    inner: S,
    layer: LimitLayer,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<S> Service<Request<Body>> for Limited<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> BoxFuture {
        // The inner service that was polled ready goes with the request;
        // a clone stays for the next one.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let current = self.layer.current();
        watch_forwarding(&self.layer.engine, &current.limits, &request);
        if let Some(caps) = &current.in_flight {
            let limited = BoxCloneService::new(Limited::rate_limited(inner, &current));
            let mut capped = caps
                .layer(limited)
                .map_response(|response| response.map(Body::new));
            return Box::pin(capped.call(request));
        }
        if current.charged.is_empty() {
            return match &current.layer {
                Some(layer) => Box::pin(Service::call(&mut layer.layer(inner), request)),
                None => Box::pin(inner.call(request)),
            };
        }
        Box::pin(Limited::rate_limited(inner, &current).call(request))
    }
}

impl<S> Limited<S>
where
    S: Service<Request<Body>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    /// `inner` behind `current`'s rate limits, as one service: those
    /// charged after the response innermost, then the others (for the caps
    /// on requests in flight to hold, or alone).
    fn rate_limited(
        inner: S,
        current: &Current,
    ) -> BoxCloneService<Request<Body>, Response<Body>, Infallible> {
        let mut service = BoxCloneService::new(inner);
        for layer in &current.charged {
            let charged = layer
                .layer(service)
                .map_response(|response| response.map(Body::new));
            service = BoxCloneService::new(charged);
        }
        match &current.layer {
            Some(layer) => BoxCloneService::new(layer.layer(service)),
            None => service,
        }
    }
}

/// Counts and logs, once per limit, a forwarding header that a limit
/// keyed by `client_ip` ignored because the peer is not a proxy it
/// trusts, and a plan header from a peer not in `plan_from_peers` or
/// naming an unknown plan: the layer ignores such headers without a word.
/// A request no limit applies to is counted as unmatched.
fn watch_forwarding(engine: &Engine, limits: &LimitSet, request: &Request<Body>) {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0.ip());
    let (method, path) = (request.method(), request.uri().path());
    engine.observe_http(limits, DecisionDoor::Proxy, method, path, |limit| {
        engine.watch_forwarding(limit, request.headers(), peer, &[]);
        if limit.plan_limits().is_some() {
            let source = HttpSource {
                method,
                path,
                headers: request.headers(),
                peer,
            };
            engine.observe_plan(limit, &source);
        }
    });
}

/// The engine as a [`Store`] for the layer: each check goes to the engine
/// under the configured limit of its name, in the set the layer was built
/// from.
#[derive(Debug)]
pub(crate) struct EngineStore {
    engine: Engine,
    limits: Arc<LimitSet>,
}

impl EngineStore {
    /// The engine's checks for the layer's.
    fn checks(&self, checks: &[StoreCheck<'_>]) -> Result<Vec<LimitCheck>, StoreError> {
        checks
            .iter()
            .map(|check| self.check(check.limit, check.key, check.cost))
            .collect()
    }

    fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<LimitCheck, StoreError> {
        // The layer's rules are made from this set: every name is in it.
        let active = self.limits.get(limit.name()).ok_or_else(|| {
            StoreError::unavailable(format!("limit {} is not configured", limit.name()))
        })?;
        // A rule with plans checks the limit of the request's plan.
        let active = match limit.plan() {
            None => Arc::clone(active),
            Some(plan) => Engine::limit_of_plan(active, plan).ok_or_else(|| {
                StoreError::unavailable(format!(
                    "plan {plan} of limit {} is not limited",
                    limit.name()
                ))
            })?,
        };
        Ok(LimitCheck::new(active, key.to_vec(), cost))
    }
}

/// The engine's verdict as the layer takes it: one outcome per check, who
/// answered (the layer marks the failure policy's answers), and
/// the first limit that refused (as the engine judges it: a saturated
/// table refuses only under `on_saturated = "deny"`).
fn multi_outcome(verdict: Verdict) -> MultiOutcome {
    let denied_by = verdict
        .results
        .iter()
        .position(|result| !result.check.limit.is_shadow() && result.refused());
    let outcomes = verdict
        .results
        .iter()
        .map(|result| result.outcome)
        .collect();
    MultiOutcome::new(outcomes, denied_by).with_answered_by(verdict.answered_by())
}

impl Store for EngineStore {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        let check = EngineStore::check(self, limit, key, cost)?;
        let verdict = self.engine.check(vec![check]).await?;
        verdict
            .results
            .first()
            .map(|result| result.outcome)
            .ok_or_else(|| StoreError::unavailable("the engine decided no limit"))
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        let check = EngineStore::check(self, limit, key, 0)?;
        let verdict = self.engine.peek(vec![check]).await?;
        verdict
            .results
            .first()
            .map(|result| result.decision())
            .ok_or_else(|| StoreError::unavailable("the engine decided no limit"))
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        let check = EngineStore::check(self, limit, key, units)?;
        self.engine.refund(&[check]).await
    }

    async fn check_all(&self, checks: &[StoreCheck<'_>]) -> Result<MultiOutcome, StoreError> {
        let checks = self.checks(checks)?;
        Ok(multi_outcome(self.engine.check(checks).await?))
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        let check = EngineStore::check(self, limit, key, units)?;
        let verdict = self.engine.report(vec![check]).await?;
        verdict
            .results
            .first()
            .map(|result| result.outcome)
            .ok_or_else(|| StoreError::unavailable("the engine decided no limit"))
    }

    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let check = EngineStore::check(self, limit, key, units)?;
        self.engine.hold(&check, id, ttl).await
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let check = EngineStore::check(self, limit, key, 0)?;
        self.engine.settle_one(&check, id, actual).await
    }

    async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        self.engine.take_slot(cap, key, id).await
    }

    async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.engine.free_slot(cap, key, id).await
    }
}
