//! One limit of a layer: what it counts by, which requests it applies to,
//! and whether it is enforced.

use std::time::Duration;

use http::Method;
use ratekeeper::plan::Plans;
use ratekeeper::Limit;

use super::key::{Key, WithoutPeer};
use super::plan::{PlanSource, RulePlans};
use super::scope::Scope;
use super::warnings::{warnings_for, LayerWarning};

/// A limit, the [`Key`] it counts requests by, the requests it applies to
/// (all of them unless it names methods or a path prefix), and whether it
/// is in shadow mode.
///
/// The service (`ratekeeper-server`) describes each limit of its
/// configuration file with the same type when it limits HTTP requests, so
/// a layer and the service treat a limit alike.
///
/// ```
/// use http::Method;
/// use ratekeeper::{Gcra, Limit, MemoryStore};
/// use ratekeeper_tower::{Key, RateLimitLayer, Rule};
///
/// let uploads = Rule::new(Limit::new("uploads", Gcra::per_minute(5)?)?, Key::peer())
///     .methods([Method::POST, Method::PUT])
///     .path_prefix("/upload");
/// // Tried on real traffic first: decided, counted and reported, never refusing.
/// let stricter = Rule::new(Limit::new("per-ip-strict", Gcra::per_second(2)?)?, Key::peer())
///     .shadow(true);
/// assert!(uploads.applies_to(&Method::POST, "/upload/photo"));
/// assert!(!uploads.applies_to(&Method::GET, "/upload/photo"));
///
/// let layer = RateLimitLayer::builder(MemoryStore::new())
///     .rule(uploads)
///     .rule(stricter)
///     .build()?;
/// # drop(layer);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct Rule {
    limit: Limit,
    key: Key,
    shadow: bool,
    scope: Scope,
    max_wait: Option<Duration>,
    plans: Option<Box<RulePlans>>,
}

impl Rule {
    /// `limit`, counted per `key`, on every request, enforced.
    pub fn new(limit: Limit, key: Key) -> Rule {
        Rule {
            limit,
            key,
            shadow: false,
            scope: Scope::default(),
            max_wait: None,
            plans: None,
        }
    }

    /// `plans`' limit, counted per `key`, each request checked against
    /// the numbers of its key's plan as `from` names it: a plan the limit
    /// does not have, or none, gets the limit's own numbers; an
    /// `unlimited` plan's requests pass without a check, a `deny` plan's
    /// are refused without one. A key's use counts once over the plans,
    /// so a key that changes plan keeps what it used
    /// ([`ratekeeper::plan`]).
    ///
    /// ```
    /// use ratekeeper::plan::Plans;
    /// use ratekeeper::{Limit, MemoryStore, TokenBucket};
    /// use ratekeeper_tower::{Key, PlanSource, RateLimitLayer, Rule};
    ///
    /// let plans = Plans::new(Limit::new("api", TokenBucket::per_second(10)?)?)
    ///     .limited("pro", TokenBucket::per_second(100)?)?
    ///     .unlimited("internal")?
    ///     .deny("suspended")?;
    /// let edge = PlanSource::header("x-plan".parse()?, ["10.0.0.0/8".parse()?]);
    /// let rule = Rule::with_plans(plans, Key::header("x-api-key".parse()?), edge);
    /// let layer = RateLimitLayer::builder(MemoryStore::new()).rule(rule).build()?;
    /// # drop(layer);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_plans(plans: Plans, key: Key, from: PlanSource) -> Rule {
        let mut rule = Rule::new(plans.limit().clone(), key);
        rule.plans = Some(Box::new(RulePlans { plans, from }));
        rule
    }

    /// The rule's plans, if it has any ([`with_plans`](Rule::with_plans)).
    pub fn plans(&self) -> Option<&Plans> {
        self.plans.as_ref().map(|plans| &plans.plans)
    }

    /// Where requests name their plan, if the rule has plans.
    pub fn plan_from(&self) -> Option<&PlanSource> {
        self.plans.as_ref().map(|plans| &plans.from)
    }

    pub(crate) fn rule_plans(&self) -> Option<&RulePlans> {
        self.plans.as_deref()
    }

    /// Hold a request this limit refuses for up to `wait`, when its units
    /// will be due by then, instead of refusing it: the units are charged
    /// at once (into the key's debt) and the request is sent on when they
    /// are due. Only a token bucket or GCRA can (building the layer
    /// refuses a window policy); the layer's [`WaitQueue`](super::WaitQueue)
    /// bounds the requests held. A held request whose client goes away
    /// gives its units back.
    #[must_use]
    pub fn max_wait(mut self, wait: Duration) -> Rule {
        self.max_wait = Some(wait);
        self
    }

    /// The longest a request this limit refuses may be held
    /// ([`max_wait`](Rule::max_wait)); `None` when it is refused at once.
    pub fn longest_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// Shadow mode: the limit is decided and counted, and reported in the
    /// headers, but never refuses. It is decided after the enforced limits,
    /// and takes the request's cost only when they let it through
    /// ([`check_shadow`](ratekeeper::store::check_shadow)).
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Rule {
        self.shadow = shadow;
        self
    }

    /// The limit applies only to requests with one of `methods` (by
    /// default, to every method). Replaces the list.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> Rule {
        self.scope.methods = methods.into_iter().collect();
        self
    }

    /// The limit applies only to requests whose path starts with `prefix`.
    #[must_use]
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Rule {
        self.scope.path_prefix = Some(prefix.into());
        self
    }

    /// The limit.
    pub fn limit(&self) -> &Limit {
        &self.limit
    }

    /// What the limit counts requests by.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether the limit only reports.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// Whether the limit applies to a request with `method` and `path`.
    pub fn applies_to(&self, method: &Method, path: &str) -> bool {
        self.scope.applies_to(method, path)
    }

    /// Whether the limit applies to every request.
    pub(crate) fn applies_to_all(&self) -> bool {
        self.scope.is_everything()
    }

    /// What looks wrong in this rule: a proxy network that covers every
    /// address, a key read from a header any client can set. A layer logs
    /// them when it is built; the service's `check` prints them.
    pub fn warnings(&self) -> Vec<LayerWarning> {
        warnings_for(self, WithoutPeer::Unknown)
    }
}

/// A rule as it applies to one request: with the limit of the request's
/// plan (the rule's own limit unless it has plans).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Applied<'a> {
    rule: &'a Rule,
    limit: &'a Limit,
}

impl<'a> Applied<'a> {
    pub(crate) fn new(rule: &'a Rule, limit: &'a Limit) -> Applied<'a> {
        Applied { rule, limit }
    }

    /// The limit the request is checked against.
    pub(crate) fn limit(&self) -> &'a Limit {
        self.limit
    }

    pub(crate) fn key(&self) -> &'a Key {
        self.rule.key()
    }

    pub(crate) fn is_shadow(&self) -> bool {
        self.rule.is_shadow()
    }

    pub(crate) fn longest_wait(&self) -> Option<Duration> {
        self.rule.longest_wait()
    }
}
