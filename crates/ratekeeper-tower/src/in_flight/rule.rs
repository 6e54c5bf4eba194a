//! One cap of an in-flight layer: what it counts by and which requests it
//! applies to.

use http::Method;
use ratekeeper::store::in_flight::InFlight;

use crate::limit::key::WithoutPeer;
use crate::limit::scope::Scope;
use crate::limit::warnings::key_warnings;
use crate::{Key, LayerWarning};

/// A cap on requests in flight, the [`Key`] whose requests it counts, and
/// the requests it applies to (all of them unless it names methods or a
/// path prefix): the in-flight layer's [`Rule`](crate::Rule).
///
/// ```
/// use std::time::Duration;
/// use http::{HeaderName, Method};
/// use ratekeeper::store::in_flight::InFlight;
/// use ratekeeper_tower::{in_flight::CapRule, Key};
///
/// let exports = InFlight::new("exports", 2, Duration::from_secs(600))?;
/// let rule = CapRule::new(exports, Key::header(HeaderName::from_static("x-team")))
///     .methods([Method::POST])
///     .path_prefix("/export");
/// assert!(rule.applies_to(&Method::POST, "/export/csv"));
/// assert!(!rule.applies_to(&Method::GET, "/export/csv"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct CapRule {
    cap: InFlight,
    key: Key,
    scope: Scope,
}

impl CapRule {
    /// `cap`, counted per `key`, on every request.
    pub fn new(cap: InFlight, key: Key) -> CapRule {
        CapRule {
            cap,
            key,
            scope: Scope::default(),
        }
    }

    /// The cap applies only to requests with one of `methods` (by default,
    /// to every method). Replaces the list.
    #[must_use]
    pub fn methods(mut self, methods: impl IntoIterator<Item = Method>) -> CapRule {
        self.scope.methods = methods.into_iter().collect();
        self
    }

    /// The cap applies only to requests whose path starts with `prefix`.
    #[must_use]
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> CapRule {
        self.scope.path_prefix = Some(prefix.into());
        self
    }

    /// The cap.
    pub fn cap(&self) -> &InFlight {
        &self.cap
    }

    /// What the cap counts requests by.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Whether the cap applies to a request with `method` and `path`.
    pub fn applies_to(&self, method: &Method, path: &str) -> bool {
        self.scope.applies_to(method, path)
    }

    /// What looks wrong in this cap's key, as [`Rule::warnings`](crate::Rule::warnings)
    /// says of a limit's: a proxy network that covers every address, a
    /// key read from a header any client can set (a client that sends a
    /// new value each time has a cap of its own per request).
    pub fn warnings(&self) -> Vec<LayerWarning> {
        key_warnings(self.cap.name(), &self.key, WithoutPeer::Unknown)
    }
}
