//! Several limits at once, all or nothing.
//!
//! A request is often under several limits: global, per address, per
//! session, per route. [`check_all`] checks it against each and admits it
//! only if every one allows; a request denied by one takes nothing from the
//! others.
//!
//! # How it stays all-or-nothing
//!
//! First every limit is asked what it would decide, storing nothing: if any
//! would deny, the request is denied and no state changed. Otherwise each
//! limit takes the cost in turn. If another thread took a limit's last unit
//! in between, that limit denies; the units already taken from the limits
//! before it are refunded, and the request is denied. So the limits never
//! admit more than their quotas, and a denied request keeps nothing; under
//! contention a request that is rolled back may, for an instant, make
//! another one see a limit as tighter than it ends up.

use crate::{Clock, Decision, MemoryLimiter, Outcome, RetryAfter};

/// What [`check_all`] decided: one outcome per limit, in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an outcome says whether the request may proceed"]
pub struct MultiOutcome {
    outcomes: Vec<Outcome>,
    denied_by: Option<usize>,
}

impl MultiOutcome {
    /// One outcome per limit, in order, and the index of the limit that
    /// denied, if one did: for stores that decide several limits themselves.
    pub fn new(outcomes: Vec<Outcome>, denied_by: Option<usize>) -> Self {
        MultiOutcome {
            outcomes,
            denied_by,
        }
    }

    /// Whether every limit allowed the request (and it was counted in all).
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// The index of the limit that denied the request, if one did.
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// Each limit's outcome, in the order the limits were given. When the
    /// request was denied, the others' outcomes say what they would have
    /// decided; nothing was taken from them.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }

    /// The decision with the least remaining: the limit closest to denying.
    pub fn tightest(&self) -> Option<&Decision> {
        self.outcomes
            .iter()
            .filter_map(Outcome::decision)
            .min_by_key(|d| d.remaining())
    }

    /// When to try again: the longest wait among the limits that deny now.
    pub fn retry_after(&self) -> RetryAfter {
        self.outcomes
            .iter()
            .filter(|outcome| !outcome.is_allowed())
            .map(Outcome::retry_after)
            .max()
            .unwrap_or(RetryAfter::NOW)
    }
}

/// Checks a request of `cost` against every `(limiter, key)` pair, all or
/// nothing: it is counted in every limit if each allows it, and in none
/// otherwise.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{FixedWindow, MemoryLimiter, Timestamp, clock::ManualClock, memory::check_all};
///
/// let clock = ManualClock::new(Timestamp::ZERO);
/// let build = |limit| {
///     MemoryLimiter::builder(FixedWindow::new(limit, Duration::from_secs(60)).unwrap())
///         .clock(clock.clone())
///         .background_sweep(false)
///         .build()
///         .unwrap()
/// };
/// let (global, per_ip) = (build(1_000), build(2));
///
/// for _ in 0..2 {
///     assert!(check_all([(&global, "all"), (&per_ip, "192.0.2.1")], 1).is_allowed());
/// }
/// let third = check_all([(&global, "all"), (&per_ip, "192.0.2.1")], 1);
/// assert_eq!(third.denied_by(), Some(1));
/// // The denied request took nothing from the global limit.
/// assert_eq!(global.peek("all").remaining(), 998);
/// ```
pub fn check_all<'a, C, K>(
    limits: impl IntoIterator<Item = (&'a MemoryLimiter<C>, K)>,
    cost: u64,
) -> MultiOutcome
where
    C: Clock + 'a,
    K: AsRef<[u8]>,
{
    // Each limiter reads its own clock once: their epochs may differ.
    let limits: Vec<_> = limits
        .into_iter()
        .map(|(limiter, key)| {
            let now = limiter.clock().now();
            (limiter, key, now)
        })
        .collect();

    let previews: Vec<Outcome> = limits
        .iter()
        .map(|(limiter, key, now)| limiter.preview_at(key.as_ref(), *now, cost))
        .collect();
    if let Some(denied) = previews.iter().position(|outcome| !outcome.is_allowed()) {
        return MultiOutcome {
            outcomes: previews,
            denied_by: Some(denied),
        };
    }

    let mut outcomes = Vec::with_capacity(limits.len());
    for (index, (limiter, key, now)) in limits.iter().enumerate() {
        let outcome = limiter.check_at(key, *now, cost);
        if !outcome.is_allowed() {
            // Lost a race for this limit's last units: give back what the
            // limits before it took.
            for (limiter, key, now) in &limits[..index] {
                limiter.refund_at(key, *now, cost);
            }
            let mut outcomes = previews;
            outcomes[index] = outcome;
            return MultiOutcome {
                outcomes,
                denied_by: Some(index),
            };
        }
        outcomes.push(outcome);
    }
    MultiOutcome {
        outcomes,
        denied_by: None,
    }
}
