//! The sliding log: every allowed hit, kept for one window.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_no_burst, check_period, check_quota, Algorithm, MAX_SCALED};
use crate::{policy::PolicyError, Decision, Rate, RetryAfter, Timestamp};

/// At most `limit` units in **any** interval of length `window`.
///
/// The exact sliding window: it remembers each allowed hit until it is a
/// window old. Memory grows with the limit (at most one [`Hit`] per allowed
/// request, hits at the same instant merged), and each decision walks the
/// log, so prefer [`SlidingWindow`](crate::SlidingWindow) for large limits.
///
/// A hit at time `a` counts against requests in `[a, a + window)`.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{RetryAfter, SlidingLog, Timestamp, policy::Algorithm};
///
/// let log = SlidingLog::new(2, Duration::from_secs(1)).unwrap();
/// let t = Timestamp::from_millis;
/// let d = log.simulate([(t(0), 1), (t(400), 1), (t(900), 1), (t(1000), 1)]);
/// assert!(d[0].is_allowed() && d[1].is_allowed());
/// // The first hit leaves the window 100 ms later.
/// assert_eq!(d[2].retry_after(), RetryAfter::After(Duration::from_millis(100)));
/// assert!(d[3].is_allowed());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingLog {
    limit: u64,
    window: u64,
}

/// One allowed request in a sliding log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Hit {
    /// When it was allowed.
    pub at: Timestamp,
    /// Its cost.
    pub cost: u64,
}

/// A sliding log's state: the allowed hits, oldest first. The default (no
/// hits) is fresh.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlidingLogState {
    /// The hits, in the order they were allowed.
    pub hits: Vec<Hit>,
}

impl SlidingLog {
    /// At most `limit` units in any `window`; `limit` in `1..=MAX_QUOTA`,
    /// `window` in `1 ns..=MAX_PERIOD`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Ok(SlidingLog {
            limit: check_quota("limit", limit)?,
            window: check_period("window", window)?,
        })
    }

    /// The log for `rate`: its amount per period. A rate with a burst is
    /// refused.
    pub fn from_rate(rate: &Rate) -> Result<Self, PolicyError> {
        check_no_burst("sliding_log", rate)?;
        Self::new(rate.amount(), rate.period())
    }

    /// Units allowed in any window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// When `hit` stops counting.
    #[inline]
    fn leaves(&self, hit: &Hit) -> u64 {
        hit.at.as_nanos().saturating_add(self.window)
    }

    /// The hits still in the window at `now` (or at the newest hit's time if
    /// the clock went back before it), the time used, and their total cost.
    fn live<'s>(&self, state: &'s SlidingLogState, now: Timestamp) -> (&'s [Hit], u64, u64) {
        let newest = state.hits.last().map_or(Timestamp::ZERO, |h| h.at);
        let now = now.max(newest).as_nanos();
        let first = state.hits.partition_point(|h| self.leaves(h) <= now);
        let live = &state.hits[first..];
        let used = live.iter().fold(0u64, |sum, h| sum.saturating_add(h.cost));
        (live, now, used)
    }

    /// The state of a key that `old` left in `state`, carried into this
    /// log at `now` (a configuration reload that changed the numbers): the
    /// hits still in `old`'s window at `now` are kept.
    ///
    /// With a window no shorter they keep their times, so each counts at
    /// least as long as it did: the key has what is left of the new limit
    /// after them, and when the limit was lowered (and the window not
    /// shortened) it can take no more than the old log would have let it,
    /// since every window-long interval of the old log lies inside one of
    /// the new log's and holds the same hits.
    ///
    /// With a shorter window a hit moves later, to leave when it would
    /// have left the old window, but no later than `now` (a log never
    /// holds a hit from the future): it counts until the earlier of the
    /// two. Hits moved onto the same instant are merged.
    pub fn carry_from(
        &self,
        old: &SlidingLog,
        state: &SlidingLogState,
        now: Timestamp,
    ) -> SlidingLogState {
        let (live, at, _) = old.live(state, now);
        let shift = old.window.saturating_sub(self.window);
        let mut hits: Vec<Hit> = Vec::with_capacity(live.len());
        for hit in live {
            let moved = Timestamp::from_nanos(hit.at.as_nanos().saturating_add(shift).min(at));
            match hits.last_mut() {
                Some(last) if last.at == moved => last.cost = last.cost.saturating_add(hit.cost),
                _ => hits.push(Hit {
                    at: moved,
                    cost: hit.cost,
                }),
            }
        }
        SlidingLogState { hits }
    }

    fn reset(&self, live: &[Hit], now: u64) -> Duration {
        live.last().map_or(Duration::ZERO, |h| {
            Duration::from_nanos(self.leaves(h).saturating_sub(now))
        })
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;

    fn fresh(&self) -> SlidingLogState {
        SlidingLogState::default()
    }

    fn decide(
        &self,
        state: &SlidingLogState,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, SlidingLogState) {
        // Hits are aged at the state's own time if the clock went back
        // (`at`); waits are told from the caller's `now`.
        let (live, at, used) = self.live(state, now);
        let now = now.as_nanos();
        let remaining = self.limit.saturating_sub(used);
        if cost == 0 {
            return (
                Decision::allowed(self.limit, remaining, self.reset(live, now)),
                state.clone(),
            );
        }
        if cost <= remaining {
            let mut hits = Vec::with_capacity(live.len() + 1);
            hits.extend_from_slice(live);
            match hits.last_mut() {
                Some(last) if last.at.as_nanos() == at => last.cost += cost,
                _ => hits.push(Hit {
                    at: Timestamp::from_nanos(at),
                    cost,
                }),
            }
            let reset = self.reset(&hits, now);
            (
                Decision::allowed(self.limit, remaining - cost, reset),
                SlidingLogState { hits },
            )
        } else {
            let retry = if cost > self.limit {
                RetryAfter::Never
            } else {
                // Walk the oldest hits out until the request fits.
                let excess = used - (self.limit - cost);
                let mut freed = 0u64;
                let leaves = live
                    .iter()
                    .find(|h| {
                        freed = freed.saturating_add(h.cost);
                        freed >= excess
                    })
                    .map_or(now, |h| self.leaves(h));
                RetryAfter::After(Duration::from_nanos(leaves.saturating_sub(now)))
            };
            (
                Decision::denied(self.limit, remaining, self.reset(live, now), retry),
                state.clone(),
            )
        }
    }

    fn refund(&self, state: &SlidingLogState, now: Timestamp, units: u64) -> SlidingLogState {
        if units == 0 {
            return state.clone();
        }
        let (live, _, _) = self.live(state, now);
        let mut hits = live.to_vec();
        let mut left = units;
        // Refunds come off the newest hits, the ones that would count longest.
        while left > 0 {
            let Some(last) = hits.last_mut() else { break };
            if last.cost > left {
                last.cost -= left;
                break;
            }
            left -= last.cost;
            hits.pop();
        }
        SlidingLogState { hits }
    }

    /// Logs `units` past the limit when the window has fewer left: a
    /// check of `n` is refused until enough of the oldest hits have left
    /// the window for the rest and `n` to fit, so an overdraft blocks until
    /// the hits before it leave, and then the report's own, `window` after
    /// it. A key already at its limit adds a report to its newest hit,
    /// moved to now (counted no shorter than logged apart), so reports
    /// never grow the log past one hit more than the limit allows. A hit's
    /// cost saturates at 2^62.
    #[inline]
    fn report(
        &self,
        state: &SlidingLogState,
        now: Timestamp,
        units: u64,
    ) -> (Decision, SlidingLogState) {
        let (decision, next) = self.decide(state, now, units);
        if decision.is_allowed() || units == 0 {
            return (decision, next);
        }
        overdraw(self, state, now, units)
    }

    fn expires_at(&self, state: &SlidingLogState) -> Timestamp {
        state
            .hits
            .last()
            .map_or(Timestamp::ZERO, |h| Timestamp::from_nanos(self.leaves(h)))
    }

    fn quota(&self) -> u64 {
        self.limit
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }
}

/// [`Algorithm::report`] past what the key has: out of line, so that a
/// report that fits costs what a check does.
#[cold]
#[inline(never)]
fn overdraw(
    policy: &SlidingLog,
    state: &SlidingLogState,
    now: Timestamp,
    units: u64,
) -> (Decision, SlidingLogState) {
    let (live, at, used) = policy.live(state, now);
    let now = now.as_nanos();
    let mut hits = live.to_vec();
    match hits.last_mut() {
        Some(last) if last.at.as_nanos() == at || used >= policy.limit => {
            last.at = Timestamp::from_nanos(at);
            last.cost = last.cost.saturating_add(units).min(MAX_SCALED);
        }
        _ => hits.push(Hit {
            at: Timestamp::from_nanos(at),
            cost: units.min(MAX_SCALED),
        }),
    }
    // Refused, so more than the limit is used now: walk the oldest hits
    // out until one unit fits.
    let used = used.saturating_add(units);
    let excess = used - (policy.limit - 1);
    let mut freed = 0u64;
    let leaves = hits
        .iter()
        .find(|h| {
            freed = freed.saturating_add(h.cost);
            freed >= excess
        })
        .map_or(now, |h| policy.leaves(h));
    let retry = RetryAfter::After(Duration::from_nanos(leaves.saturating_sub(now)));
    let reset = policy.reset(&hits, now);
    (
        Decision::denied(policy.limit, 0, reset, retry),
        SlidingLogState { hits },
    )
}
