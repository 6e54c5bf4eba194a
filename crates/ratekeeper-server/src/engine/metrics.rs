//! What the engine records for `/metrics` on the decision path, beyond the
//! core's stats: how long decisions take, how many allowed requests came
//! near their limit, and how many found the store full.
//!
//! Both cost a few relaxed atomic operations per decision and take no lock
//! on the common path: the latency histogram is an array of atomic
//! counters, and the near-limit and saturated counters are only looked up
//! (under a read lock) for the decisions they count.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use ratekeeper::{store::AnsweredBy, Outcome};

use super::histogram::Histogram;
pub use super::histogram::LatencyHistogram;

/// An allowed decision is *near its limit* when what it left is at most
/// this fraction of the quota: `remaining <= quota / 10`, so the last 10
/// units of a quota of 100 (and, for a quota under 10, only the last
/// unit, `remaining == 0`).
pub const NEAR_LIMIT_PERCENT: u64 = 10;

/// Whether `outcome` allowed a request and left at most
/// [`NEAR_LIMIT_PERCENT`] of its quota.
pub fn is_near_limit(outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Decided(decision) if decision.is_allowed() => {
            // In u128: no product of two u64 overflows it.
            u128::from(decision.remaining()) * 100
                <= u128::from(decision.limit()) * u128::from(NEAR_LIMIT_PERCENT)
        }
        _ => false,
    }
}

/// Decision latencies and near-limit counts, shared by the engine (which
/// records) and the admin port (which reports).
#[derive(Debug, Default)]
pub struct DecisionMetrics {
    /// Decision latencies.
    latency: Histogram,
    /// Allowed decisions near their limit, by limit name.
    near_limit: NamedCounters,
    /// Requests whose forwarding header came from a peer the limit does
    /// not trust, by limit name.
    untrusted_forwarding: NamedCounters,
    /// Decisions on a new key whose store was full, by limit name.
    saturated: NamedCounters,
    /// Requests that named a plan the limit does not have, by limit name.
    unknown_plans: NamedCounters,
    /// Requests whose plan header came from a peer not in the limit's
    /// `plan_from_peers`, by limit name.
    untrusted_plans: NamedCounters,
    /// Envoy overrides ignored because the limit forbids them
    /// (`allow_overrides = false`), by limit name.
    overrides_refused: NamedCounters,
    /// Envoy requests over a limit answered OK by `[envoy] shadow_mode`.
    global_shadow: AtomicU64,
    /// Proxy requests answered 503 because `max_upstream_requests` were at
    /// the upstream.
    upstream_overflow: AtomicU64,
    /// Answers the failure policy made while the store failed, by limit
    /// name: allowed unlimited (fail open), and decided in memory.
    failed_open: NamedCounters,
    fallback: NamedCounters,
    /// Reports (units charged after the fact), the units they charged, and
    /// those that overdrew their limit, by limit name.
    reports: NamedCounters,
    report_units: NamedCounters,
    overdrafts: NamedCounters,
    /// Reservations made, and settled (committed, cancelled, or asked for
    /// when no longer open), by limit name.
    reservations: [NamedCounters; Reservations::ALL.len()],
    /// Slots of caps on requests in flight taken, refused and given back,
    /// by cap name.
    slots: [NamedCounters; Slots::ALL.len()],
    /// Blocks a penalty started, and requests refused by a block this
    /// instance knew (no call to the store), by limit name.
    blocks: NamedCounters,
    block_refusals: NamedCounters,
}

/// What became of the slots of caps on requests in flight, as `/metrics`
/// labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slots {
    /// Taken: a request let through.
    Taken,
    /// Refused: every slot of the key was taken.
    Refused,
    /// Given back when the request ended.
    Released,
    /// Asked to give back when not taken: released already, or past its
    /// lease (which freed it).
    Unknown,
}

impl Slots {
    /// Every outcome, in the order of the counters.
    pub const ALL: [Slots; 4] = [
        Slots::Taken,
        Slots::Refused,
        Slots::Released,
        Slots::Unknown,
    ];

    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Slots::Taken => "taken",
            Slots::Refused => "refused",
            Slots::Released => "released",
            Slots::Unknown => "unknown",
        }
    }
}

/// What became of reservations, as `/metrics` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservations {
    /// Made: an estimate held.
    Held,
    /// Settled at the request's cost.
    Committed,
    /// Given back.
    Cancelled,
    /// Asked to settle when not open: settled already, or past its ttl
    /// (which settled it at its estimate).
    Unknown,
}

impl Reservations {
    /// Every outcome, in the order of the counters.
    pub const ALL: [Reservations; 4] = [
        Reservations::Held,
        Reservations::Committed,
        Reservations::Cancelled,
        Reservations::Unknown,
    ];

    /// The `outcome` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Reservations::Held => "held",
            Reservations::Committed => "committed",
            Reservations::Cancelled => "cancelled",
            Reservations::Unknown => "unknown",
        }
    }
}

/// Counters by limit name, kept for the life of the process. The names
/// are those of configured limits, so the map stays as small as the
/// configuration.
#[derive(Debug, Default)]
struct NamedCounters(RwLock<HashMap<Box<str>, AtomicU64>>);

impl NamedCounters {
    /// Adds one to `name`'s counter; its value before.
    fn add(&self, name: &str) -> u64 {
        self.add_n(name, 1)
    }

    /// Adds `n` to `name`'s counter; its value before.
    fn add_n(&self, name: &str, n: u64) -> u64 {
        {
            let counters = self.0.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(counter) = counters.get(name) {
                return counter.fetch_add(n, Ordering::Relaxed);
            }
        }
        let mut counters = self.0.write().unwrap_or_else(PoisonError::into_inner);
        counters
            .entry(name.into())
            .or_default()
            .fetch_add(n, Ordering::Relaxed)
    }

    fn get(&self, name: &str) -> u64 {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .map_or(0, |counter| counter.load(Ordering::Relaxed))
    }
}

impl DecisionMetrics {
    /// A report of `units` to limit `name`, which it overdrew or not.
    pub(crate) fn record_report(&self, name: &str, units: u64, overdrew: bool) {
        self.reports.add(name);
        self.report_units.add_n(name, units);
        if overdrew {
            self.overdrafts.add(name);
        }
    }

    /// Reports to limit `name`: how many, the units they charged, and how
    /// many overdrew it.
    pub fn reports(&self, name: &str) -> (u64, u64, u64) {
        (
            self.reports.get(name),
            self.report_units.get(name),
            self.overdrafts.get(name),
        )
    }

    /// A reservation of limit `name` that became `what`.
    pub(crate) fn record_reservation(&self, name: &str, what: Reservations) {
        self.reservations[what as usize].add(name);
    }

    /// Reservations of limit `name` that became `what`.
    pub fn reservations(&self, name: &str, what: Reservations) -> u64 {
        self.reservations[what as usize].get(name)
    }

    /// A slot of cap `name` that became `what`.
    pub(crate) fn record_slot(&self, name: &str, what: Slots) {
        self.slots[what as usize].add(name);
    }

    /// Slots of cap `name` that became `what`.
    pub fn slots(&self, name: &str, what: Slots) -> u64 {
        self.slots[what as usize].get(name)
    }

    /// A block of limit `name` that a penalty started (`new`), or a
    /// request refused by a block this instance knew.
    pub(crate) fn record_block(&self, name: &str, new: bool) {
        let counters = match new {
            true => &self.blocks,
            false => &self.block_refusals,
        };
        counters.add(name);
    }

    /// Blocks limit `name`'s penalty started here.
    pub fn blocks(&self, name: &str) -> u64 {
        self.blocks.get(name)
    }

    /// Requests of limit `name` refused by a block this instance knew,
    /// without a call to the store.
    pub fn block_refusals(&self, name: &str) -> u64 {
        self.block_refusals.get(name)
    }

    /// Nothing recorded yet.
    pub fn new() -> DecisionMetrics {
        DecisionMetrics::default()
    }

    /// Records one decision (one call of
    /// [`Engine::check`](crate::engine::Engine::check), whatever the number
    /// of limits it checked) that took `elapsed`.
    pub fn observe(&self, elapsed: Duration) {
        self.latency.observe(elapsed);
    }

    /// Decisions observed so far (see [`DecisionMetrics::observe`]).
    pub fn decisions(&self) -> u64 {
        self.latency.count()
    }

    /// Counts `outcome` for the limit `name` if it allowed the request near
    /// its limit (see [`NEAR_LIMIT_PERCENT`]), or if the store had no room
    /// for its key; does nothing otherwise.
    pub(crate) fn record_outcome(&self, name: &str, outcome: &Outcome) {
        if is_near_limit(outcome) {
            self.near_limit.add(name);
        } else if outcome.is_saturated() {
            self.saturated.add(name);
        }
    }

    /// Counts an answer of the limit `name` that the failure policy made
    /// (`by`) while the store failed; nothing for the store's own.
    pub(crate) fn record_failover(&self, name: &str, by: AnsweredBy) {
        match by {
            AnsweredBy::FailOpen => {
                self.failed_open.add(name);
            }
            AnsweredBy::Fallback => {
                self.fallback.add(name);
            }
            _ => {}
        }
    }

    /// Answers of the limit `name` made by the failure policy since the
    /// process started: `(fail-open, fallback)`.
    pub fn failover_answers(&self, name: &str) -> (u64, u64) {
        (self.failed_open.get(name), self.fallback.get(name))
    }

    /// Counts a request to the limit `name` whose forwarding header came
    /// from a peer the limit does not trust; whether it is the first (to
    /// log it once).
    pub(crate) fn record_untrusted_forwarding(&self, name: &str) -> bool {
        self.untrusted_forwarding.add(name) == 0
    }

    /// Requests to the limit `name` whose forwarding header came from a
    /// peer it does not trust, since the process started.
    pub fn untrusted_forwarding(&self, name: &str) -> u64 {
        self.untrusted_forwarding.get(name)
    }

    /// Counts a request that named a plan the limit `name` does not have.
    pub(crate) fn record_unknown_plan(&self, name: &str) {
        self.unknown_plans.add(name);
    }

    /// Requests to the limit `name` that named a plan it does not have
    /// (and got its own numbers), since the process started.
    pub fn unknown_plans(&self, name: &str) -> u64 {
        self.unknown_plans.get(name)
    }

    /// Counts a plan header from a peer the limit `name` does not trust to
    /// set it; whether it is the first (to log it once).
    pub(crate) fn record_untrusted_plan(&self, name: &str) -> bool {
        self.untrusted_plans.add(name) == 0
    }

    /// Requests to the limit `name` whose plan header came from a peer not
    /// in its `plan_from_peers`, since the process started.
    pub fn untrusted_plans(&self, name: &str) -> u64 {
        self.untrusted_plans.get(name)
    }

    /// Counts an Envoy override ignored because the limit `name` forbids
    /// overrides; whether it is the first (to log it once).
    pub(crate) fn record_override_refused(&self, name: &str) -> bool {
        self.overrides_refused.add(name) == 0
    }

    /// Counts an Envoy request over a limit that `[envoy] shadow_mode`
    /// answered OK.
    pub(crate) fn record_global_shadow(&self) {
        self.global_shadow.fetch_add(1, Ordering::Relaxed);
    }

    /// Envoy requests over a limit answered OK by `[envoy] shadow_mode`,
    /// since the process started.
    pub(crate) fn global_shadow(&self) -> u64 {
        self.global_shadow.load(Ordering::Relaxed)
    }

    /// Counts a proxy request answered 503 because the proxy's
    /// `max_upstream_requests` were at the upstream.
    pub(crate) fn record_upstream_overflow(&self) {
        self.upstream_overflow.fetch_add(1, Ordering::Relaxed);
    }

    /// Proxy requests answered 503 at the upstream cap, since the process
    /// started.
    pub fn upstream_overflow(&self) -> u64 {
        self.upstream_overflow.load(Ordering::Relaxed)
    }

    /// Envoy overrides ignored because the limit `name` forbids them, since
    /// the process started.
    pub(crate) fn overrides_refused(&self, name: &str) -> u64 {
        self.overrides_refused.get(name)
    }

    /// Allowed decisions of the limit `name` that came near it, since the
    /// process started (kept by name across reloads).
    pub fn near_limit(&self, name: &str) -> u64 {
        self.near_limit.get(name)
    }

    /// Decisions of the limit `name` on a new key while its store was full
    /// (refused, or let through uncounted with `on_saturated = "allow"`),
    /// since the process started (kept by name across reloads).
    pub fn saturated(&self, name: &str) -> u64 {
        self.saturated.get(name)
    }

    /// The latency histogram now.
    ///
    /// Read while decisions are recorded, the buckets and the sum may be a
    /// decision or two apart; `count` is always the buckets' total.
    pub fn latency(&self) -> LatencyHistogram {
        self.latency.snapshot()
    }
}

#[cfg(test)]
mod tests {
    use super::super::histogram::BOUNDS_NANOS;
    use super::*;
    use ratekeeper::{Decision, RetryAfter};

    fn allowed(limit: u64, remaining: u64) -> Outcome {
        Outcome::Decided(Decision::allowed(limit, remaining, Duration::ZERO))
    }

    #[test]
    fn near_limit_is_the_last_tenth_of_the_quota() {
        assert!(!is_near_limit(&allowed(100, 11)));
        assert!(is_near_limit(&allowed(100, 10)));
        assert!(is_near_limit(&allowed(100, 0)));
        assert!(!is_near_limit(&allowed(3, 1)));
        assert!(is_near_limit(&allowed(3, 0)));
        assert!(is_near_limit(&allowed(u64::MAX, 0)));
        assert!(!is_near_limit(&allowed(u64::MAX, u64::MAX)));
        let denied = Outcome::Decided(Decision::denied(3, 0, Duration::ZERO, RetryAfter::NOW));
        assert!(!is_near_limit(&denied));
        assert!(!is_near_limit(&Outcome::Saturated {
            retry_after: Duration::ZERO,
            answered_by: ratekeeper::store::AnsweredBy::Store,
        }));
    }

    #[test]
    fn latencies_land_in_the_first_bucket_that_holds_them() {
        let metrics = DecisionMetrics::new();
        metrics.observe(Duration::from_nanos(1_000)); // le 1 µs
        metrics.observe(Duration::from_nanos(1_001)); // le 2.5 µs
        metrics.observe(Duration::from_secs(2)); // +Inf
        metrics.observe(Duration::MAX); // +Inf, saturated
        let latency = metrics.latency();
        assert_eq!(latency.count, 4);
        assert_eq!(latency.buckets[0], (1e-6, 1));
        assert_eq!(latency.buckets[1], (2.5e-6, 1));
        assert_eq!(latency.buckets.last(), Some(&(f64::INFINITY, 2)));
        assert_eq!(latency.buckets.len(), BOUNDS_NANOS.len() + 1);
    }

    #[test]
    fn near_limit_counts_by_name() {
        let metrics = DecisionMetrics::new();
        metrics.record_outcome("a", &allowed(10, 1));
        metrics.record_outcome("a", &allowed(10, 5));
        metrics.record_outcome("a", &allowed(10, 0));
        metrics.record_outcome("b", &allowed(10, 0));
        assert_eq!(metrics.near_limit("a"), 2);
        assert_eq!(metrics.near_limit("b"), 1);
        assert_eq!(metrics.near_limit("c"), 0);
    }

    #[test]
    fn untrusted_forwarding_counts_by_name_and_says_which_is_first() {
        let metrics = DecisionMetrics::new();
        assert!(metrics.record_untrusted_forwarding("a"));
        assert!(!metrics.record_untrusted_forwarding("a"));
        assert!(metrics.record_untrusted_forwarding("b"));
        assert_eq!(metrics.untrusted_forwarding("a"), 2);
        assert_eq!(metrics.untrusted_forwarding("b"), 1);
        assert_eq!(metrics.untrusted_forwarding("c"), 0);
        assert_eq!(metrics.near_limit("a"), 0);
    }
}
