//! One limit of a layer: what it counts by, which requests it applies to,
//! and whether it is enforced.

use std::time::Duration;

use http::Method;
use ratekeeper::Limit;

use super::key::{Key, WithoutPeer};
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
        }
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
