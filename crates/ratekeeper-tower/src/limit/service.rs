//! The service: decide, then call the inner service or refuse.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use ratekeeper::{
    store::{check_shadow, Check, MultiOutcome, StoreError},
    Outcome, Store,
};
use tower::Service;

use super::body::RefusalBody;
use super::future::{PendingHeaders, ResponseFuture};
use super::headers::{add_rate_limit_headers, write_rate_limit_headers};
use super::key::{ipv4_text, peer_of, Extracted, Head};
use super::layer::Shared;
use super::plan::{PlanNote, Planned};
use super::response::{is_grpc, refusal_response, Refusal};
use super::rule::{Applied, Rule};
use super::wait;
use crate::client::canonical;
use crate::headers::HeaderStyle;

/// The rate-limited service; made by [`RateLimitLayer`](super::RateLimitLayer).
pub struct RateLimit<Inner, S> {
    inner: Inner,
    shared: Arc<Shared<S>>,
}

impl<Inner: Clone, S> Clone for RateLimit<Inner, S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Inner: std::fmt::Debug, S> std::fmt::Debug for RateLimit<Inner, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<Inner, S> RateLimit<Inner, S> {
    pub(crate) fn new(inner: Inner, shared: Arc<Shared<S>>) -> Self {
        RateLimit { inner, shared }
    }
}

impl<Inner, S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<Inner, S>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    Inner::Error: 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: RefusalBody + 'static,
{
    type Response = Response<ResBody>;
    type Error = Inner::Error;
    type Future = ResponseFuture<Inner::Future, ResBody, Inner::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        // One limit per client address with no allow list (the usual): the
        // key's text on the stack, the prepared limit, nothing else.
        // Everything else (skips, allow lists, IPv6 or missing peers,
        // headers, refusals, other keys) is out of line, so that this
        // path's instructions stay a few cache lines together: callgrind's
        // instruction-cache simulation counted 5-13% fewer misses.
        if let (true, Some(prepared)) = (shared.peer_only, &shared.prepared) {
            if shared.allow_keys.is_empty() && !skipped(shared, &request) {
                // An IPv6 or missing peer takes the general path.
                if let Some(IpAddr::V4(v4)) = peer_of(&request).map(canonical) {
                    let (text, len) = ipv4_text(v4);
                    let key = &text[..len];
                    let outcome = prepared.check(key, 1);
                    if outcome.is_allowed() && shared.headers == HeaderStyle::None {
                        return ResponseFuture::plain(self.inner.call(request));
                    }
                    return self.after_peer_check(request, key, outcome);
                }
            }
        }
        self.call_general(request)
    }
}

impl<Inner, S: Store + 'static> RateLimit<Inner, S> {
    /// The per-address path once its limit decided, unless the request
    /// was allowed with no headers to add: headers to write, shadow mode,
    /// or a refusal.
    #[inline(never)]
    fn after_peer_check<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
        key: &[u8],
        outcome: Outcome,
    ) -> ResponseFuture<Inner::Future, ResBody, Inner::Error>
    where
        Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        Inner::Future: Send + 'static,
        Inner::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: RefusalBody + 'static,
    {
        let shared = &*self.shared;
        let rule = &shared.rules[0];
        let checks = [Check::new(rule.limit(), key, 1)];
        if outcome.is_allowed() || rule.is_shadow() {
            let future = self.inner.call(request);
            return passed(shared, &checks, std::slice::from_ref(&outcome), future);
        }
        let decided = Some(Ok(Decided::One(outcome)));
        finish(
            &mut self.inner,
            &self.shared,
            decided,
            false,
            &checks,
            request,
        )
    }

    /// Every request the per-address path does not take.
    #[inline(never)]
    fn call_general<ReqBody, ResBody>(
        &mut self,
        request: Request<ReqBody>,
    ) -> ResponseFuture<Inner::Future, ResBody, Inner::Error>
    where
        Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
        Inner::Future: Send + 'static,
        Inner::Error: 'static,
        ReqBody: Send + 'static,
        ResBody: RefusalBody + 'static,
    {
        let shared = &*self.shared;
        if skipped(shared, &request) {
            return ResponseFuture::plain(self.inner.call(request));
        }
        // One rule (the usual case) takes a path with no list of keys,
        // checks or outcomes, and reads the request where it is unless a
        // function needs its `Parts`; a rule with plans chooses its limit
        // per request, on the general path.
        if let (false, [rule]) = (shared.planned, shared.rules.as_slice()) {
            if !rule.applies_to(request.method(), request.uri().path()) {
                return ResponseFuture::plain(self.inner.call(request));
            }
            let shadow = rule.is_shadow();
            if !shared.needs_parts {
                let key = extract_key(shared, rule, &request);
                if is_allow_listed(shared, &key.key) {
                    return ResponseFuture::plain(self.inner.call(request));
                }
                let decided = decide_one(shared, rule, &key.key, 1);
                let checks = [Check::new(rule.limit(), key.key.as_slice(), 1)];
                // The allowed request (the usual one) goes to the inner
                // service from here: passed through `finish`, the request
                // and the inner future were each copied once more.
                if let Some(Ok(decision)) = &decided {
                    if decision.is_allowed() || shadow {
                        let future = self.inner.call(request);
                        return passed(shared, &checks, decision.outcomes(), future);
                    }
                }
                return finish(
                    &mut self.inner,
                    &self.shared,
                    decided,
                    shadow,
                    &checks,
                    request,
                );
            }
            let (parts, body) = request.into_parts();
            let key = extract_key(shared, rule, &parts);
            if is_allow_listed(shared, &key.key) {
                return ResponseFuture::plain(self.inner.call(Request::from_parts(parts, body)));
            }
            let cost = shared.cost.as_ref().map_or(1, |cost| cost(&parts));
            let decided = decide_one(shared, rule, &key.key, cost);
            let checks = [Check::new(rule.limit(), key.key.as_slice(), cost)];
            let request = Request::from_parts(parts, body);
            return finish(
                &mut self.inner,
                &self.shared,
                decided,
                shadow,
                &checks,
                request,
            );
        }
        let (parts, body) = request.into_parts();
        let rules = match applicable(shared, &parts, Count::Yes) {
            Ok(rules) => rules,
            Err(denied) => return ResponseFuture::ready(deny(shared, denied, &parts)),
        };
        if rules.is_empty() {
            return ResponseFuture::plain(self.inner.call(Request::from_parts(parts, body)));
        }
        let keys = extract_keys(shared, &rules, &parts);
        if keys.iter().any(|key| is_allow_listed(shared, &key.key)) {
            return ResponseFuture::plain(self.inner.call(Request::from_parts(parts, body)));
        }
        let cost = shared.cost.as_ref().map_or(1, |cost| cost(&parts));
        let checks: Checks<'_> = rules
            .iter()
            .zip(&keys)
            .map(|(rule, key)| Check::new(rule.limit(), key.key.as_slice(), cost))
            .collect();
        // Shadow limits are decided after the enforced ones, on the
        // asynchronous path; without any, the store may decide at once.
        let decided = match rules.iter().any(|rule| rule.is_shadow()) {
            true => None,
            false => shared
                .store
                .immediate()
                .map(|store| store.check_all_now(&checks).map(Decided::All)),
        };
        let request = Request::from_parts(parts, body);
        finish(
            &mut self.inner,
            &self.shared,
            decided,
            false,
            &checks,
            request,
        )
    }
}

/// One rule decided at once, on its prepared limit when the store gave
/// one; `None` when the store must wait.
#[inline]
fn decide_one<S: Store>(
    shared: &Shared<S>,
    rule: &Rule,
    key: &[u8],
    cost: u64,
) -> Option<Result<Decided, StoreError>> {
    match &shared.prepared {
        Some(prepared) => Some(Ok(prepared.check(key, cost))),
        None => shared.store.immediate().map(|store| {
            let decided = store.check_all_now(&[Check::new(rule.limit(), key, cost)])?;
            Ok(decided.outcomes()[0])
        }),
    }
    .map(|result| result.map(Decided::One))
}

/// Acts on what the store decided at once (`shadow`: for a rule that only
/// reports), or hands the request to the asynchronous path when it could
/// not decide without waiting.
fn finish<Inner, S, ReqBody, ResBody>(
    inner: &mut Inner,
    shared_arc: &Arc<Shared<S>>,
    decided: Option<Result<Decided, StoreError>>,
    shadow: bool,
    checks: &[Check<'_>],
    request: Request<ReqBody>,
) -> ResponseFuture<Inner::Future, ResBody, Inner::Error>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Inner::Future: Send + 'static,
    Inner::Error: 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: RefusalBody + 'static,
{
    let shared = &**shared_arc;
    match decided {
        // Decided at once: call the inner service here, with no clone
        // and no boxed future.
        Some(Ok(decided)) if decided.is_allowed() || shadow => {
            passed(shared, checks, decided.outcomes(), inner.call(request))
        }
        // A rule may hold the request until its units are due: the
        // asynchronous path, which knows the decision already.
        Some(Ok(decided)) if shared.wait_queue.is_some() => {
            let clone = inner.clone();
            let inner = std::mem::replace(inner, clone);
            let shared = Arc::clone(shared_arc);
            let known = Some(decided.into_multi());
            let future = Box::pin(decide_then_call(shared, inner, request, known));
            ResponseFuture::waiting(future)
        }
        Some(Ok(decided)) => {
            let multi = decided.into_multi();
            let refusal = Refusal::Limited {
                violated: violated(checks, &multi, &[]),
                retry_after: multi.retry_after(),
            };
            let response = refuse(
                shared,
                &refusal,
                is_grpc(request.headers()),
                checks,
                Some(&multi),
            );
            ResponseFuture::ready(response)
        }
        Some(Err(_)) | None => {
            // The store waits (or failed): the asynchronous path, which
            // owns a ready inner service and the shared state.
            let clone = inner.clone();
            let inner = std::mem::replace(inner, clone);
            let shared = Arc::clone(shared_arc);
            let future = Box::pin(decide_then_call(shared, inner, request, None));
            ResponseFuture::waiting(future)
        }
    }
}

/// What a store decided at once: one limit's outcome, or several.
enum Decided {
    One(Outcome),
    All(MultiOutcome),
}

impl Decided {
    fn outcomes(&self) -> &[Outcome] {
        match self {
            Decided::One(outcome) => std::slice::from_ref(outcome),
            Decided::All(multi) => multi.outcomes(),
        }
    }

    fn is_allowed(&self) -> bool {
        match self {
            Decided::One(outcome) => outcome.is_allowed(),
            Decided::All(multi) => multi.is_allowed(),
        }
    }

    /// The refused path's form (it reports which limit refused).
    fn into_multi(self) -> MultiOutcome {
        match self {
            Decided::One(outcome) => {
                let denied = (!outcome.is_allowed()).then_some(0);
                MultiOutcome::new(vec![outcome], denied)
            }
            Decided::All(multi) => multi,
        }
    }
}

/// An allowed request's response: the inner service's `future`, with the
/// rate-limit headers of `outcomes` to add when the layer sends any.
#[inline]
fn passed<S, F, B, E>(
    shared: &Shared<S>,
    checks: &[Check<'_>],
    outcomes: &[Outcome],
    future: F,
) -> ResponseFuture<F, B, E> {
    if shared.headers == HeaderStyle::None {
        return ResponseFuture::plain(future);
    }
    let mut headers = PendingHeaders::for_style(shared.headers);
    write_rate_limit_headers(shared, &mut |n, v| headers.push(n, v), checks, outcomes);
    ResponseFuture::inner(future, headers)
}

/// Each rule's key, on the stack for up to two rules: a request under one
/// or two limits (the usual) allocates no list.
type Keys = smallvec::SmallVec<[Extracted; 2]>;

/// Each rule's limit and key, as the store takes them.
type Checks<'a> = smallvec::SmallVec<[Check<'a>; 4]>;

/// The rules that apply to a request, in the layer's order, each with
/// the limit of the request's plan.
type Rules<'a> = smallvec::SmallVec<[Applied<'a>; 4]>;

/// Whether choosing a request's plans counts what was odd about them: once
/// per request, when `call` first keys it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Count {
    Yes,
    No,
}

/// The rules that apply to the request with `parts` (every rule, unless
/// some name methods or a path), each with the limit of the request's
/// plan; a rule whose plan is unlimited does not apply. `Err` with the
/// rule whose plan refuses every request (a shadow rule's is left out).
fn applicable<'a, S>(
    shared: &'a Shared<S>,
    parts: &http::request::Parts,
    count: Count,
) -> Result<Rules<'a>, &'a Rule> {
    let path = parts.uri.path();
    let mut rules = Rules::new();
    for rule in &shared.rules {
        if !shared.uniform && !rule.applies_to(&parts.method, path) {
            continue;
        }
        let Some(plans) = rule.rule_plans() else {
            rules.push(Applied::new(rule, rule.limit()));
            continue;
        };
        let (planned, note) = plans.choose(parts, rule.key(), shared.without_peer);
        if count == Count::Yes && note != PlanNote::Fine {
            note_plan(shared, rule, note);
        }
        match planned {
            Planned::Limited(limit) => rules.push(Applied::new(rule, limit)),
            Planned::Unlimited => {}
            Planned::Deny if rule.is_shadow() => {}
            Planned::Deny => return Err(rule),
        }
    }
    Ok(rules)
}

/// Counts a request whose plan was unknown or named by an untrusted peer,
/// and logs the first untrusted one: each is checked at the limit's own
/// numbers.
#[cold]
fn note_plan<S>(shared: &Shared<S>, rule: &Rule, note: PlanNote) {
    match note {
        PlanNote::Fine => {}
        PlanNote::Unknown => {
            shared.unknown_plans.fetch_add(1, Ordering::Relaxed);
        }
        PlanNote::Untrusted(peer) => {
            shared.untrusted_plans.fetch_add(1, Ordering::Relaxed);
            if !shared.untrusted_plan_logged.swap(true, Ordering::Relaxed) {
                let header = rule
                    .plan_from()
                    .and_then(|from| from.header_name())
                    .map_or("", |name| name.as_str());
                tracing::warn!(
                    limit = rule.limit().name(),
                    peer = ?peer,
                    "rate limit: a request's {header} header came from a peer the limit's plan \
                     source does not trust, so it was ignored and the limit's own numbers \
                     applied. A client naming its own plan, or an edge missing from the \
                     PlanSource::header peers. Logged once; RateLimitLayer::untrusted_plans() \
                     counts such requests"
                );
            }
        }
    }
}

/// The refusal of a request whose key's plan refuses every request.
fn deny<S, B: RefusalBody>(
    shared: &Shared<S>,
    rule: &Rule,
    parts: &http::request::Parts,
) -> Response<B> {
    let refusal = Refusal::Limited {
        violated: vec![rule.limit().name().to_owned()],
        retry_after: ratekeeper::RetryAfter::Never,
    };
    refuse(shared, &refusal, is_grpc(&parts.headers), &[], None)
}

/// Each of `rules`' key for the request, counting (and logging once) a
/// missing peer.
fn extract_keys<S>(
    shared: &Shared<S>,
    rules: &[Applied<'_>],
    parts: &http::request::Parts,
) -> Keys {
    let keys = keys_of(shared, rules, parts);
    if keys.iter().any(|key| key.missing_peer) {
        log_missing_peer(shared);
    }
    keys
}

/// Each of `rules`' key for the request, with no count: for the
/// asynchronous path, whose request `call` has already keyed (and counted)
/// once.
fn keys_of<S>(shared: &Shared<S>, rules: &[Applied<'_>], parts: &http::request::Parts) -> Keys {
    rules
        .iter()
        .map(|rule| rule.key().extract(parts, shared.without_peer))
        .collect()
}

/// One rule's key for the request, logging once if the peer is missing.
#[inline]
fn extract_key<S>(shared: &Shared<S>, rule: &Rule, parts: &impl Head) -> Extracted {
    let key = rule.key().extract(parts, shared.without_peer);
    if key.missing_peer {
        log_missing_peer(shared);
    }
    key
}

#[inline]
fn is_allow_listed<S>(shared: &Shared<S>, key: &[u8]) -> bool {
    !shared.allow_keys.is_empty() && shared.allow_keys.contains(key)
}

/// Counts a request keyed to the unknown key for want of a peer, and says
/// so once per layer, loudly: every such client now shares one quota.
#[cold]
fn log_missing_peer<S>(shared: &Shared<S>) {
    shared.missing_peer_requests.fetch_add(1, Ordering::Relaxed);
    if !shared.missing_peer_logged.swap(true, Ordering::Relaxed) {
        tracing::error!(
            "rate limit: a request arrived without a socket peer, so its client cannot be found \
             and no X-Forwarded-For, Forwarded or other forwarding header is believed: every \
             such request is counted under the one shared \"unknown\" key, one quota for all \
             clients. Fix: with axum, serve with \
             `app.into_make_service_with_connect_info::<SocketAddr>()`; with hyper or another \
             server, insert a `ratekeeper_tower::PeerAddr` into each request's extensions; only \
             on a platform whose edge strips and sets the forwarding headers and gives no peer, \
             opt in with `RateLimitLayerBuilder::trust_headers_without_peer()`. Logged once; \
             `RateLimitLayer::missing_peer_requests()` counts such requests"
        );
    }
}

/// Decides a request whose store waits (or that `known`, decided at
/// once, refused while a rule may hold it), then calls the inner service
/// or refuses.
async fn decide_then_call<Inner, S, ReqBody, ResBody>(
    shared: Arc<Shared<S>>,
    mut inner: Inner,
    request: Request<ReqBody>,
    known: Option<MultiOutcome>,
) -> Result<Response<ResBody>, Inner::Error>
where
    Inner: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S: Store + 'static,
    ResBody: RefusalBody,
{
    if shared.wait_queue.is_some() {
        wait::refund_dropped(&shared).await;
    }
    if skipped(&shared, &request) {
        return inner.call(request).await;
    }
    let (parts, body) = request.into_parts();
    let rules = match applicable(&shared, &parts, Count::No) {
        Ok(rules) => rules,
        Err(denied) => return Ok(deny(&shared, denied, &parts)),
    };
    let keys = keys_of(&shared, &rules, &parts);
    if keys.iter().any(|key| is_allow_listed(&shared, &key.key)) {
        return inner.call(Request::from_parts(parts, body)).await;
    }
    let cost = shared.cost.as_ref().map_or(1, |cost| cost(&parts));
    let checks: Checks<'_> = rules
        .iter()
        .zip(&keys)
        .map(|(rule, key)| Check::new(rule.limit(), key.key.as_slice(), cost))
        .collect();
    let shadow: smallvec::SmallVec<[bool; 4]> = rules.iter().map(|rule| rule.is_shadow()).collect();
    let grpc = is_grpc(&parts.headers);
    let decided = match known {
        Some(all) => Ok(Reported {
            checks: checks.clone(),
            allowed: all.is_allowed(),
            retry_after: all.retry_after(),
            all,
        }),
        None => decide(&shared.store, &checks, &shadow).await,
    };
    let decided = match decided {
        Ok(decided) => decided,
        Err(error) if !shadow.contains(&false) => {
            tracing::warn!(%error, "rate-limit store failed (shadow mode: request passed)");
            return inner.call(Request::from_parts(parts, body)).await;
        }
        Err(error) => {
            tracing::warn!(%error, "rate-limit store failed closed");
            let refusal = Refusal::StoreUnavailable {
                reason: error.to_string(),
            };
            return Ok(refuse(&shared, &refusal, grpc, &checks, None));
        }
    };
    let Reported {
        checks: reported,
        all,
        allowed,
        retry_after,
    } = decided;
    if allowed {
        let refused = violated(&reported, &all, &[]);
        if !refused.is_empty() {
            tracing::info!(limits = ?refused, "shadow mode: request over a limit passed");
        }
        let mut response = inner.call(Request::from_parts(parts, body)).await?;
        let headers = response.headers_mut();
        add_rate_limit_headers(
            &shared,
            &mut |name, value| {
                headers.insert(name, value);
            },
            &reported,
            all.outcomes(),
        );
        mark_failover(headers, &all);
        return Ok(response);
    }
    if let Some(charged) = wait::hold(&shared, &rules, &reported, &all).await {
        // Held until its units were due: sent on, and they stay charged.
        charged.keep();
        return inner.call(Request::from_parts(parts, body)).await;
    }
    // Without the shadow checks (their store failed), every check
    // reported is enforced.
    let flags: &[bool] = match reported.len() == shadow.len() {
        true => &shadow,
        false => &[],
    };
    let refusal = Refusal::Limited {
        violated: violated(&reported, &all, flags),
        retry_after,
    };
    let mut response = refuse(&shared, &refusal, grpc, &reported, Some(&all));
    mark_failover(response.headers_mut(), &all);
    Ok(response)
}

/// `X-RateKeeper-Store` on an answer a failure policy made while the
/// store failed (see [`X_RATEKEEPER_STORE`](crate::headers::X_RATEKEEPER_STORE)).
fn mark_failover(headers: &mut http::HeaderMap, decided: &MultiOutcome) {
    let by = decided.answered_by();
    if by.is_failover() {
        headers.insert(
            crate::headers::X_RATEKEEPER_STORE,
            http::HeaderValue::from_static(by.as_str()),
        );
    }
}

/// What the limits of one request decided, as the response reports it.
struct Reported<'a> {
    /// The checks reported: every one, in order, unless the store failed
    /// while deciding the shadow ones, which are then left out.
    checks: Checks<'a>,
    /// Their outcomes, in the same order.
    all: MultiOutcome,
    /// Whether the enforced limits let the request through.
    allowed: bool,
    /// When the enforced limits would let it through.
    retry_after: ratekeeper::RetryAfter,
}

/// Decides `checks`: the enforced ones all or nothing, then those marked in
/// `shadow`, which only report ([`check_shadow`]).
async fn decide<'a, S: Store>(
    store: &S,
    checks: &[Check<'a>],
    shadow: &[bool],
) -> Result<Reported<'a>, StoreError> {
    if !shadow.contains(&true) {
        let enforced = store.check_all(checks).await?;
        return Ok(Reported {
            checks: checks.iter().copied().collect(),
            allowed: enforced.is_allowed(),
            retry_after: enforced.retry_after(),
            all: enforced,
        });
    }
    let mut enforced = Checks::new();
    let mut shadowed = Checks::new();
    for (check, &is_shadow) in checks.iter().zip(shadow) {
        match is_shadow {
            true => shadowed.push(*check),
            false => enforced.push(*check),
        }
    }
    let enforced_decided = match enforced.is_empty() {
        true => MultiOutcome::new(Vec::new(), None),
        false => store.check_all(&enforced).await?,
    };
    let allowed = enforced_decided.is_allowed();
    let retry_after = enforced_decided.retry_after();
    let reported = match check_shadow(store, &shadowed, allowed).await {
        Ok(outcomes) => outcomes,
        // They only report, so their failure refuses nothing: the request
        // goes on as the enforced limits decided, reported without them.
        Err(_) if !enforced.is_empty() => {
            return Ok(Reported {
                checks: enforced,
                all: enforced_decided,
                allowed,
                retry_after,
            });
        }
        Err(error) => return Err(error),
    };
    let mut enforced_outcomes = enforced_decided.outcomes().iter().copied();
    let mut shadow_outcomes = reported.into_iter();
    let mut denied_by = None;
    let mut outcomes = Vec::with_capacity(checks.len());
    for (index, &is_shadow) in shadow.iter().enumerate() {
        let next = match is_shadow {
            true => shadow_outcomes.next(),
            false => enforced_outcomes.next(),
        };
        // Each store gives one outcome per check.
        let Some(outcome) = next else { break };
        if !is_shadow && denied_by.is_none() && !outcome.is_allowed() {
            denied_by = Some(index);
        }
        outcomes.push(outcome);
    }
    Ok(Reported {
        checks: checks.iter().copied().collect(),
        all: MultiOutcome::new(outcomes, denied_by)
            .with_answered_by(enforced_decided.answered_by()),
        allowed,
        retry_after,
    })
}

#[inline]
fn skipped<B>(shared: &Shared<impl Sized>, request: &Request<B>) -> bool {
    shared.skip_methods.contains(request.method())
        || shared
            .skip_paths
            .iter()
            .any(|prefix| request.uri().path().starts_with(prefix.as_str()))
}

/// The limits that refused, but those marked in `shadow` (which only
/// report; an empty `shadow` marks none).
fn violated(checks: &[Check<'_>], multi: &MultiOutcome, shadow: &[bool]) -> Vec<String> {
    checks
        .iter()
        .zip(multi.outcomes())
        .enumerate()
        .filter(|(index, (_, outcome))| {
            !outcome.is_allowed() && !shadow.get(*index).copied().unwrap_or(false)
        })
        .map(|(_, (check, _))| check.limit.name().to_owned())
        .collect()
}

fn refuse<S, B: RefusalBody>(
    shared: &Shared<S>,
    refusal: &Refusal,
    grpc: bool,
    checks: &[Check<'_>],
    multi: Option<&MultiOutcome>,
) -> Response<B> {
    let mut response = shared
        .custom
        .as_ref()
        .and_then(|custom| custom(refusal))
        .unwrap_or_else(|| refusal_response(refusal, shared.format, grpc));
    if let Some(multi) = multi {
        let headers = response.headers_mut();
        add_rate_limit_headers(
            shared,
            &mut |name, value| {
                headers.insert(name, value);
            },
            checks,
            multi.outcomes(),
        );
    }
    response.map(B::from_refusal)
}
