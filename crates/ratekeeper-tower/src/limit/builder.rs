//! The layer's builder: its options, and the checks `build` makes.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response};
use http_body_util::Full;
use ratekeeper::{Limit, Store};
use thiserror::Error;

use super::key::{Key, WithoutPeer};
use super::layer::{CostFn, CustomResponse, RateLimitLayer, Shared};
use super::response::{Refusal, ResponseFormat};
use super::rule::Rule;
use super::wait::WaitQueue;
use super::warnings::LayerWarning;
use super::warnings::{ipv6_allow_key_warnings, warnings_for};
use crate::headers::{HeaderStyle, ResetStyle};

/// Why a layer could not be built.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LayerError {
    /// No limit was given.
    #[error("a rate-limit layer needs at least one limit")]
    NoLimits,
    /// Two limits have the same name (their headers would be ambiguous).
    #[error("two limits are named {0:?}")]
    DuplicateLimit(String),
    /// A reservation's ttl of zero or over an hour
    /// ([`ResponseCostLayerBuilder::estimate`](crate::response_cost::ResponseCostLayerBuilder::estimate)).
    #[error("a reservation's ttl must be more than 0 and at most an hour, not {0:?}")]
    ReservationTtl(std::time::Duration),
    /// A limit with a [`max_wait`](Rule::max_wait) whose policy cannot
    /// reserve ahead (a window forgets what it counted when it moves on).
    #[error("limit {0:?} has a max_wait, which only a token bucket or GCRA can honour")]
    WaitOnWindow(String),
}

/// Builds a [`RateLimitLayer`]; made by [`RateLimitLayer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct RateLimitLayerBuilder<S> {
    store: S,
    rules: Vec<Rule>,
    headers: HeaderStyle,
    reset: ResetStyle,
    format: ResponseFormat,
    skip_paths: Vec<String>,
    skip_methods: Vec<Method>,
    allow_keys: HashSet<Vec<u8>>,
    shadow: bool,
    partition_keys: bool,
    custom: Option<Arc<CustomResponse>>,
    cost: Option<Arc<CostFn>>,
    without_peer: WithoutPeer,
    wait_queue: Option<WaitQueue>,
}

impl<S> fmt::Debug for RateLimitLayerBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl<S: Store> RateLimitLayerBuilder<S> {
    /// The defaults, deciding through `store`.
    pub(crate) fn new(store: S) -> Self {
        RateLimitLayerBuilder {
            store,
            rules: Vec::new(),
            headers: HeaderStyle::default(),
            reset: ResetStyle::default(),
            format: ResponseFormat::default(),
            skip_paths: Vec::new(),
            skip_methods: vec![Method::OPTIONS],
            allow_keys: HashSet::new(),
            shadow: false,
            partition_keys: false,
            custom: None,
            cost: None,
            without_peer: WithoutPeer::Unknown,
            wait_queue: None,
        }
    }

    /// Where requests a rule holds ([`Rule::max_wait`]) wait: a queue
    /// bounded overall and per key, which layers may share (a service
    /// that rebuilds its layer keeps its queue and counts). By default a
    /// layer with such a rule gets a [`WaitQueue::default`] of its own.
    pub fn wait_queue(mut self, queue: WaitQueue) -> Self {
        self.wait_queue = Some(queue);
        self
    }

    /// Adds a limit, counted per `key`, on every request: the short form
    /// of [`rule`](Self::rule) with [`Rule::new`]. A request must pass
    /// every limit, all or nothing.
    pub fn limit(self, limit: Limit, key: Key) -> Self {
        self.rule(Rule::new(limit, key))
    }

    /// Adds a limit with its key, the requests it applies to, and whether
    /// it is in shadow mode. A request must pass every enforced limit that
    /// applies to it, all or nothing.
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Which rate-limit headers responses carry (default: the draft's).
    pub fn headers(mut self, style: HeaderStyle) -> Self {
        self.headers = style;
        self
    }

    /// How `X-RateLimit-Reset` is written (default: Unix seconds).
    pub fn reset_style(mut self, style: ResetStyle) -> Self {
        self.reset = style;
        self
    }

    /// Text or `application/problem+json` refusals (default: text).
    pub fn format(mut self, format: ResponseFormat) -> Self {
        self.format = format;
        self
    }

    /// Requests whose path starts with one of `prefixes` are not limited.
    pub fn skip_paths<P: Into<String>>(mut self, prefixes: impl IntoIterator<Item = P>) -> Self {
        self.skip_paths.extend(prefixes.into_iter().map(Into::into));
        self
    }

    /// Requests with these methods are not limited (default: `OPTIONS`, so
    /// CORS preflights never count). Replaces the list.
    pub fn skip_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.skip_methods = methods.into_iter().collect();
        self
    }

    /// Requests any of whose keys is in `keys` (as a limit's [`Key`] makes
    /// them: an IPv4 address, an IPv6 client's /64 such as
    /// `2001:db8:1:2::/64`, a header value) are not limited. A key written
    /// as one IPv6 address, which no client key equals, is reported as a
    /// [`LayerWarning::Ipv6AllowKey`].
    pub fn allow_keys<K: Into<Vec<u8>>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        self.allow_keys.extend(keys.into_iter().map(Into::into));
        self
    }

    /// Shadow mode for every rule (see [`Rule::shadow`]): decide, count and
    /// send the headers, but never refuse; to try limits on real traffic
    /// before enforcing them.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// Whether the draft fields carry each policy's partition key (`pk`,
    /// the request's key for that limit), so clients that share a quota
    /// can tell which one a field is about (default: no).
    pub fn partition_keys(mut self, enabled: bool) -> Self {
        self.partition_keys = enabled;
        self
    }

    /// A custom refusal: return `Some` response to send instead of the
    /// default 429 or 503 (the rate-limit headers are still added).
    pub fn on_refusal(
        mut self,
        f: impl Fn(&Refusal) -> Option<Response<Full<Bytes>>> + Send + Sync + 'static,
    ) -> Self {
        self.custom = Some(Arc::new(f));
        self
    }

    /// Believe the forwarding headers of a request that carries no socket
    /// peer, as if a trusted proxy had sent them
    /// ([`ClientIp::find_trusting_headers`](crate::client::ClientIp::find_trusting_headers)).
    ///
    /// Only for platforms whose edge strips every client-sent
    /// `X-Forwarded-For` / `Forwarded` / `X-Real-IP` (or whichever header
    /// the key reads) and sets its own, and that give the application no
    /// usable peer address (some serverless and function runtimes).
    /// Anywhere else it lets every client choose its own key and escape
    /// every limit keyed by its address.
    ///
    /// By default a request without a peer has no client: every limit
    /// keyed by the client's address counts it under the one shared
    /// [`UNKNOWN_KEY`](crate::UNKNOWN_KEY), and the layer logs an error
    /// (once) and counts it in
    /// [`missing_peer_requests`](RateLimitLayer::missing_peer_requests).
    /// With this opt-in, keys that read headers find the client in them
    /// instead, and such requests are neither logged nor counted;
    /// [`Key::peer`] still needs the peer. Building reports a
    /// [`LayerWarning::TrustsHeadersWithoutPeer`] for each limit concerned.
    /// Requests that do carry a peer are unaffected: their headers count
    /// only from a trusted proxy.
    pub fn trust_headers_without_peer(mut self) -> Self {
        self.without_peer = WithoutPeer::TrustHeaders;
        self
    }

    /// The cost of a request (default: 1), for limits on work rather than
    /// requests.
    pub fn cost(mut self, f: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Arc::new(f));
        self
    }

    /// Builds the layer, logging any [`LayerWarning`].
    pub fn build(mut self) -> Result<RateLimitLayer<S>, LayerError> {
        if self.shadow {
            self.rules = self
                .rules
                .into_iter()
                .map(|rule| rule.shadow(true))
                .collect();
        }
        if self.rules.is_empty() {
            return Err(LayerError::NoLimits);
        }
        let mut names = HashSet::new();
        for rule in &self.rules {
            if !names.insert(rule.limit().name()) {
                return Err(LayerError::DuplicateLimit(rule.limit().name().to_owned()));
            }
            if rule.longest_wait().is_some() && !rule.limit().policy().reserves_ahead() {
                return Err(LayerError::WaitOnWindow(rule.limit().name().to_owned()));
            }
        }
        let waits = self.rules.iter().any(|rule| rule.longest_wait().is_some());
        let wait_queue = waits.then(|| self.wait_queue.take().unwrap_or_default());
        let mut warnings: Vec<LayerWarning> = self
            .rules
            .iter()
            .flat_map(|rule| warnings_for(rule, self.without_peer))
            .collect();
        if self.rules.iter().any(|rule| rule.key().is_client_address()) {
            warnings.extend(ipv6_allow_key_warnings(&self.allow_keys));
        }
        for warning in warnings.iter() {
            tracing::warn!("{warning}");
        }
        let planned = self.rules.iter().any(|rule| rule.plans().is_some());
        // A planned rule's numbers are its request's plan's, so neither the
        // policy header nor the prepared limit can be made ahead.
        let policy_value = (!self.partition_keys && !planned)
            .then(|| policy_header(&self.rules))
            .flatten();
        let prepared = match self.rules.as_slice() {
            _ if planned => None,
            [rule] => self
                .store
                .immediate()
                .and_then(|store| store.prepare(rule.limit()).ok()),
            _ => None,
        };
        let needs_parts =
            self.cost.is_some() || self.rules.iter().any(|rule| rule.key().needs_parts());
        let peer_only = prepared.is_some()
            && self.cost.is_none()
            && matches!(self.rules.as_slice(), [rule] if rule.key().is_peer() && rule.applies_to_all());
        let uniform = self
            .rules
            .iter()
            .all(|rule| rule.applies_to_all() && !rule.is_shadow());
        let shared = Shared {
            peer_only,
            policy_value,
            prepared,
            needs_parts,
            store: self.store,
            rules: self.rules,
            headers: self.headers,
            reset: self.reset,
            format: self.format,
            skip_paths: self.skip_paths,
            skip_methods: self.skip_methods,
            allow_keys: self.allow_keys,
            uniform,
            partition_keys: self.partition_keys,
            custom: self.custom,
            cost: self.cost,
            without_peer: self.without_peer,
            missing_peer_logged: AtomicBool::new(false),
            missing_peer_requests: AtomicU64::new(0),
            planned,
            unknown_plans: AtomicU64::new(0),
            untrusted_plans: AtomicU64::new(0),
            untrusted_plan_logged: AtomicBool::new(false),
            warnings,
            wait_queue,
            unrefunded: Mutex::new(Vec::new()),
        };
        Ok(RateLimitLayer {
            shared: Arc::new(shared),
        })
    }
}

/// The `RateLimit-Policy` value of `rules`, as every response reports it
/// while each limit decides (a saturated one is left out, and the value is
/// formatted then).
fn policy_header(rules: &[Rule]) -> Option<http::HeaderValue> {
    use ratekeeper::policy::Algorithm;
    let decisions: Vec<ratekeeper::Decision> = rules
        .iter()
        .map(|rule| {
            let quota = rule.limit().policy().quota();
            ratekeeper::Decision::allowed(quota, quota, std::time::Duration::ZERO)
        })
        .collect();
    let reports: Vec<crate::headers::PolicyReport<'_>> = rules
        .iter()
        .zip(&decisions)
        .map(|(rule, decision)| crate::headers::PolicyReport {
            name: rule.limit().name(),
            window: rule.limit().policy().window(),
            decision,
            partition_key: None,
        })
        .collect();
    http::HeaderValue::try_from(crate::headers::ratelimit_policy_value(&reports)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratekeeper::{
        policy::{Algorithm, PolicyKind},
        Policy, Rate, Timestamp,
    };

    /// The ready-made `RateLimit-Policy` must be what formatting a real
    /// decision of each policy gives.
    #[test]
    fn the_ready_made_policy_header_matches_a_real_decision() {
        for kind in PolicyKind::ALL {
            let text = match kind {
                PolicyKind::TokenBucket | PolicyKind::Gcra => "10/s burst 20",
                _ => "100 per 90s",
            };
            let rate: Rate = text.parse().unwrap();
            let policy = Policy::new(kind, &rate).unwrap();
            let (decision, _) = policy.decide(&policy.fresh(), Timestamp::from_secs(5), 1);
            let limit = Limit::new("a", policy.clone()).unwrap();
            let report = crate::headers::PolicyReport {
                name: "a",
                window: policy.window(),
                decision: &decision,
                partition_key: None,
            };
            let rules = [Rule::new(limit, Key::global())];
            assert_eq!(
                policy_header(&rules).unwrap(),
                crate::headers::ratelimit_policy_value(&[report]).as_str(),
                "{kind}"
            );
        }
    }
}
