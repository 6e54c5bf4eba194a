//! The JSON bodies of the decision API.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use ratekeeper::{store::AnsweredBy, RetryAfter};
use serde::{Deserialize, Serialize};

use crate::engine::{LimitResult, SlotResult, Verdict};

/// The body of `POST /v1/check`, `/v1/peek` and `/v1/refund`.
///
/// ```json
/// {"limits": ["per-user"], "key": {"header:x-user": "alice"}, "cost": 1}
/// {"method": "POST", "path": "/login", "key": {"client_ip": "203.0.113.7"}}
/// {"domain": "edge", "descriptors": [[{"key": "remote_address", "value": "203.0.113.7"}]]}
/// {"domain": "edge", "descriptors": [{"entries": [{"key": "remote_address", "value": "203.0.113.7"}]}]}
/// ```
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DecisionRequest {
    /// The limits to check, by name. Without it (and without
    /// `descriptors`), the limits whose `match` fits `method` and `path`
    /// (and those that match every request).
    #[serde(default)]
    pub limits: Option<Vec<String>>,
    /// Envoy's domain, for `descriptors`.
    #[serde(default)]
    pub domain: Option<String>,
    /// Envoy-style descriptors, each a list of entries or, as Envoy
    /// writes a descriptor in JSON, `{"entries": [..]}`: every limit of
    /// `domain` whose `match.descriptors` fits one of them applies, keyed by
    /// the descriptor's values, as over gRPC.
    #[serde(default, deserialize_with = "super::descriptors::deserialize")]
    pub descriptors: Option<Vec<Vec<DescriptorEntry>>>,
    /// The HTTP method the decision is for, to choose limits by their
    /// `match.methods` and to make the `route` key part.
    #[serde(default)]
    pub method: Option<String>,
    /// The path (without query) the decision is for, to choose limits by
    /// `match.path_prefix` and to make the `route` key part.
    #[serde(default)]
    pub path: Option<String>,
    /// The key parts by their names in the configuration: `peer`,
    /// `client_ip`, `route`, `header:NAME` (lower case), `descriptor:KEY`.
    #[serde(default)]
    pub key: HashMap<String, String>,
    /// The units the request takes (check), gives back (refund), charges
    /// after the fact (report) or holds (reserve); 1 by default; 0 only
    /// reads (a check).
    #[serde(default = "one")]
    pub cost: u64,
    /// For `/v1/reserve`: how long the reservation stays open unless
    /// settled, in the configuration's duration grammar (`"30s"`, `"5m"`);
    /// [`DEFAULT_RESERVATION_TTL`] when absent, at most an hour.
    #[serde(default)]
    pub ttl: Option<String>,
}

/// A reservation's ttl when `/v1/reserve` names none: a minute.
pub const DEFAULT_RESERVATION_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// The body of `POST /v1/commit` and `/v1/cancel`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct SettleRequest {
    /// The reservation, as `/v1/reserve` answered it.
    pub reservation: String,
    /// For `/v1/commit`, the units the request really cost (required);
    /// `/v1/cancel` takes none.
    #[serde(default)]
    pub cost: Option<u64>,
}

/// One entry of a descriptor.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct DescriptorEntry {
    /// The entry's key, such as `remote_address`.
    pub key: String,
    /// Its value.
    pub value: String,
}

impl crate::engine::matching::Entry for DescriptorEntry {
    fn key(&self) -> &str {
        &self.key
    }
    fn value(&self) -> &str {
        &self.value
    }
}

fn one() -> u64 {
    1
}

/// The answer of `POST /v1/check` and `/v1/peek`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct DecisionResponse {
    /// Whether the request may proceed (shadow limits never refuse).
    pub allowed: bool,
    /// The first limit that refused it.
    pub denied_by: Option<String>,
    /// Whole seconds to wait before retrying, rounded up (at least 1 when
    /// refused); `null` when no wait is enough (the cost exceeds a quota).
    pub retry_after: Option<u64>,
    /// Every limit that applied, in the configuration's order.
    pub limits: Vec<LimitStatus>,
    /// Who answered: `"store"`, or while the store failed, `"fail-open"`
    /// (allowed, nothing counted) or `"fallback"` (decided by this
    /// process's in-memory fallback).
    pub answered_by: AnsweredBy,
    /// The response headers an HTTP server would add: the IETF draft's
    /// `RateLimit-Policy` and `RateLimit`, and `Retry-After` when refused.
    pub headers: BTreeMap<String, String>,
    /// For `/v1/reserve`, when allowed: the reservation, to settle with
    /// `/v1/commit` or `/v1/cancel` (a token nobody can guess; whoever
    /// holds it can settle it, once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// For `/v1/acquire`, when allowed and a cap on requests in flight
    /// applied: the slots taken, to give back with `/v1/release` when the
    /// request ends (a token nobody can guess; whoever holds it can
    /// release it, once). A slot not given back is freed at its cap's
    /// lease.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
}

/// The body of `POST /v1/release`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ReleaseRequest {
    /// The slots, as `/v1/acquire` answered them.
    pub slot: String,
}

/// The answer of `POST /v1/release`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ReleaseResponse {
    /// How many slots were given back.
    pub released: usize,
}

/// One limit's decision.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LimitStatus {
    /// The limit's name.
    pub name: String,
    /// The request's key under it (invalid UTF-8 replaced).
    pub key: String,
    /// Whether this limit allowed the request.
    pub allowed: bool,
    /// Whether the limit only reports.
    pub shadow: bool,
    /// Whether the store had no room for a new key (nothing was counted).
    pub saturated: bool,
    /// The quota.
    pub limit: u64,
    /// Units left after this request.
    pub remaining: u64,
    /// Milliseconds until the quota is whole again.
    pub reset_ms: u64,
    /// Milliseconds until the same cost can succeed (0 when allowed);
    /// `null` when never.
    pub retry_after_ms: Option<u64>,
    /// Who answered for this limit (see [`DecisionResponse::answered_by`]).
    pub answered_by: AnsweredBy,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LimitStatus {
    fn new(result: &LimitResult) -> LimitStatus {
        let decision = result.decision();
        LimitStatus {
            name: result.check.limit.name().to_owned(),
            key: String::from_utf8_lossy(&result.check.key).into_owned(),
            allowed: !result.refused(),
            shadow: result.check.limit.is_shadow(),
            saturated: result.outcome.is_saturated(),
            limit: decision.limit(),
            remaining: decision.remaining(),
            reset_ms: millis(decision.reset()),
            retry_after_ms: decision.retry_after().duration().map(millis),
            answered_by: result.answered_by(),
        }
    }
}

impl LimitStatus {
    /// A cap on requests in flight's part in an acquire: its slots as the
    /// quota, those left after this request as what remains.
    pub(super) fn of_slot(result: &SlotResult) -> LimitStatus {
        let decision = result.decision();
        LimitStatus {
            name: result.check.cap.name().to_owned(),
            key: String::from_utf8_lossy(&result.check.key).into_owned(),
            allowed: !result.refused(),
            shadow: false,
            saturated: result.outcome.is_saturated(),
            limit: decision.limit(),
            remaining: decision.remaining(),
            reset_ms: millis(decision.reset()),
            retry_after_ms: decision.retry_after().duration().map(millis),
            answered_by: result.outcome.answered_by(),
        }
    }
}

impl DecisionResponse {
    /// The answer for `verdict`, with `headers` (name and value) already
    /// worked out by the caller.
    pub fn new(verdict: &Verdict, headers: BTreeMap<String, String>) -> DecisionResponse {
        let allowed = verdict.is_allowed();
        let retry_after = if allowed {
            Some(0)
        } else {
            match verdict.retry_after() {
                RetryAfter::Never => None,
                after => ratekeeper_tower::headers::retry_after_secs(after),
            }
        };
        DecisionResponse {
            allowed,
            denied_by: verdict.denied_by().map(|r| r.check.limit.name().to_owned()),
            retry_after,
            limits: verdict.results.iter().map(LimitStatus::new).collect(),
            answered_by: verdict.answered_by(),
            headers,
            reservation: None,
            slot: None,
        }
    }
}

/// The answer of `POST /v1/refund`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct RefundResponse {
    /// The units given back to each limit's key.
    pub refunded: Vec<Refunded>,
}

/// Units given back to one key.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct Refunded {
    /// The limit's name.
    pub name: String,
    /// The key (invalid UTF-8 replaced).
    pub key: String,
    /// The units.
    pub units: u64,
}
