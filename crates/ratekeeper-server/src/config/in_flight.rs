//! A `[[limits]]` entry with `policy = "concurrency"`: a cap on a key's
//! requests in flight.

use ratekeeper::store::in_flight::InFlight;
use ratekeeper_tower::in_flight::CapRule;
use ratekeeper_tower::Key;

use super::{KeyPart, Match};

/// How long a request may hold its slot when `lease` is not given: five
/// minutes, above most upstream timeouts.
pub const DEFAULT_IN_FLIGHT_LEASE: std::time::Duration = std::time::Duration::from_secs(300);

/// One named cap on requests in flight (`policy = "concurrency"`,
/// `max_in_flight = N`, `lease = "5m"`): each key may have at most
/// `max_in_flight` requests running, and a slot its request never gives
/// back is freed when its lease ends.
///
/// A cap takes a slot when a request starts and gives it back when it
/// ends: in the proxy when the response body has been sent (or dropped),
/// on the JSON API with `/v1/acquire` and `/v1/release`, and on the gRPC
/// door by the slot token Envoy sends back when the stream is done (the
/// `x-ratekeeper-slot` request header the answer adds). A cap applies to HTTP
/// requests (by methods and path) or to Envoy descriptors (by domain and
/// descriptors), as a rate limit's `match` says.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlightConfig {
    /// The name, the most requests in flight per key and the lease.
    pub cap: InFlight,
    /// The parts of the key, in order; never empty.
    pub key: Vec<KeyPart>,
    /// Which requests the cap applies to: HTTP requests by methods and a
    /// path prefix, or Envoy descriptors by domain and descriptors (the
    /// loader refuses a `match` no request meets).
    pub matcher: Match,
}

impl InFlightConfig {
    /// Whether the cap applies to HTTP requests (the proxy, `/v1/acquire`
    /// by method and path), rather than to Envoy descriptors.
    pub fn applies_to_http(&self) -> bool {
        self.matcher.reach() == super::Reach::Http
    }

    /// The cap as the tower layer's [`CapRule`]: its key read from an HTTP
    /// request, and the methods and path it applies to.
    pub fn rule(&self) -> CapRule {
        let mut keys: Vec<Key> = self.key.iter().map(KeyPart::http_key).collect();
        let key = match keys.len() {
            1 => keys.remove(0),
            _ => Key::compose(keys),
        };
        let mut rule =
            CapRule::new(self.cap.clone(), key).methods(self.matcher.methods.iter().cloned());
        if let Some(prefix) = &self.matcher.path_prefix {
            rule = rule.path_prefix(prefix.clone());
        }
        rule
    }
}
