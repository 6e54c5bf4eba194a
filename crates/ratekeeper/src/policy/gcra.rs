//! The generic cell rate algorithm, as redis-cell runs it.
//!
//! GCRA keeps one number per key, the theoretical arrival time (TAT): when
//! the key's bucket would be full again. A request of cost `n` moves the TAT
//! `n` emission intervals later and is allowed while the TAT stays within the
//! burst tolerance of `now`. It is a token bucket seen through time instead
//! of tokens, which is why it fits in one machine word.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_period, check_quota, Algorithm, MAX_SCALED};
use crate::{policy::PolicyError, Decision, Rate, Timestamp, TokenBucket};

/// GCRA: `limit` requests per `period`, at most `burst` at once.
///
/// # Precision
///
/// The emission interval `period / limit` is kept in whole nanoseconds,
/// rounded up so the policy never admits faster than configured. When
/// `limit` divides the period in nanoseconds (any limit dividing 10^9 per
/// second, or 100 per minute, or 1,000 per hour...) GCRA makes exactly the
/// decisions of the [`TokenBucket`] with the same numbers, field for field.
/// Otherwise its rate is slower by less than one nanosecond per request; use
/// a [`TokenBucket`] where that matters.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{Gcra, RetryAfter, Timestamp, policy::Algorithm};
///
/// let gcra = Gcra::per_second(2).unwrap();
/// let t = Timestamp::from_millis;
/// let d = gcra.simulate([(t(0), 1), (t(10), 1), (t(20), 1)]);
/// assert_eq!(d[2].retry_after(), RetryAfter::After(Duration::from_millis(480)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gcra {
    limit: u64,
    period: u64,
    burst: u64,
    /// Nanoseconds per unit of cost (the emission interval, T).
    interval: u64,
    /// How far ahead of now the TAT may run (tau = T * burst).
    tolerance: u64,
}

/// A GCRA key's state: its theoretical arrival time. The default (time zero)
/// is fresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GcraState {
    /// When the key's quota is whole again.
    pub tat: Timestamp,
}

impl Gcra {
    /// `limit` requests per `period`, at most `burst` at once.
    ///
    /// `limit` and `burst` must be in `1..=MAX_QUOTA`, `period` in
    /// `1 ns..=MAX_PERIOD`, the period at least `limit` nanoseconds (an
    /// emission interval of at least 1 ns), and `burst` intervals at most
    /// 2^62 ns.
    pub fn new(limit: u64, period: Duration, burst: u64) -> Result<Self, PolicyError> {
        let limit = check_quota("limit", limit)?;
        let period = check_period("period", period)?;
        let burst = check_quota("burst", burst)?;
        if period < limit {
            return Err(PolicyError::TooFine {
                rate: limit,
                period_nanos: period,
            });
        }
        let interval = period.div_ceil(limit);
        let tolerance = interval
            .checked_mul(burst)
            .filter(|&t| t <= MAX_SCALED)
            .ok_or(PolicyError::Overflow {
                what: "the burst tolerance (burst x period / limit)",
            })?;
        Ok(Gcra {
            limit,
            period,
            burst,
            interval,
            tolerance,
        })
    }

    /// `n` per second, with a burst of `n`.
    pub fn per_second(n: u64) -> Result<Self, PolicyError> {
        Self::new(n, Duration::from_secs(1), n)
    }

    /// `n` per minute, with a burst of `n`.
    pub fn per_minute(n: u64) -> Result<Self, PolicyError> {
        Self::new(n, Duration::from_secs(60), n)
    }

    /// `n` per hour, with a burst of `n`.
    pub fn per_hour(n: u64) -> Result<Self, PolicyError> {
        Self::new(n, Duration::from_secs(3600), n)
    }

    /// The GCRA for `rate`: its amount per period, with its burst.
    pub fn from_rate(rate: &Rate) -> Result<Self, PolicyError> {
        Self::new(rate.amount(), rate.period(), rate.burst())
    }

    /// The GCRA with the numbers of `bucket`, which admits the same requests
    /// (see the precision note on [`Gcra`]).
    pub fn from_token_bucket(bucket: &TokenBucket) -> Result<Self, PolicyError> {
        Self::new(bucket.rate(), bucket.period(), bucket.burst())
    }

    /// Requests per [`period`](Gcra::period).
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The period over which [`limit`](Gcra::limit) requests are allowed.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period)
    }

    /// The most requests allowed at once.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The emission interval: the time one unit of cost takes to come back.
    pub const fn emission_interval(&self) -> Duration {
        Duration::from_nanos(self.interval)
    }

    /// [`decide`](Algorithm::decide) on the TAT and `now` in nanoseconds:
    /// the decision and the next TAT. Always inlined: the in-memory table
    /// runs it on every check, with the TAT straight from its slot.
    #[inline(always)]
    pub(crate) fn decide_tat(&self, tat: u64, now: u64, cost: u64) -> (Decision, u64) {
        // A clock that went back sees the TAT further ahead: it can only deny
        // more, never less.
        let current = tat.saturating_sub(now);
        if cost > self.burst {
            let decision =
                Decision::denied_nanos(self.burst, self.remaining(current), current, None);
            return (decision, tat);
        }
        // cost <= burst, so the product is at most the tolerance (<= 2^62),
        // and `current` can exceed it only by a corrupt or foreign state.
        let ahead = current.saturating_add(cost * self.interval);
        if ahead <= self.tolerance {
            let next = if cost == 0 {
                tat
            } else {
                now.saturating_add(ahead)
            };
            let decision = Decision::allowed_nanos(self.burst, self.remaining(ahead), ahead);
            (decision, next)
        } else {
            let decision = Decision::denied_nanos(
                self.burst,
                self.remaining(current),
                current,
                Some(ahead - self.tolerance),
            );
            (decision, tat)
        }
    }

    /// [`report`](Algorithm::report) on the TAT and `now` in nanoseconds:
    /// the decision and the next TAT, as [`decide_tat`](Gcra::decide_tat).
    #[inline(always)]
    pub(crate) fn report_tat(&self, tat: u64, now: u64, units: u64) -> (Decision, u64) {
        // Whether the units fit is told before any decision is built, so
        // that each path builds its own in place, and no decision is
        // copied from one to the other (measured: fewer instructions than
        // deciding first, or one body for both with a const parameter).
        let current = tat.saturating_sub(now);
        // units <= burst: the product is at most the tolerance.
        let fits =
            units <= self.burst && current.saturating_add(units * self.interval) <= self.tolerance;
        if fits || units == 0 {
            return self.decide_tat(tat, now, units);
        }
        let ahead = self.overdraft_ahead(current, units);
        let retry = ahead - self.tolerance + self.interval;
        let decision = Decision::denied_nanos(self.burst, 0, ahead, Some(retry));
        (decision, now.saturating_add(ahead))
    }

    /// How far ahead of now the TAT runs after a report of `units` that
    /// do not fit, `current` being how far it ran before: past the
    /// tolerance, capped. Out of line, so that a report that fits costs
    /// what a check does.
    #[cold]
    #[inline(never)]
    fn overdraft_ahead(&self, current: u64, units: u64) -> u64 {
        current
            .saturating_add(units.saturating_mul(self.interval))
            .min(self.tolerance + MAX_SCALED)
    }

    /// The state of a key that `old` left in `state`, carried into this
    /// policy at `now` (a configuration reload that changed the numbers):
    /// the units the key has outstanding at `now` stay outstanding.
    ///
    /// The TAT runs `ahead` of now by the key's outstanding units times
    /// `old`'s emission interval; the carried TAT runs ahead by the same
    /// units times this one's, rounded up. That is the token bucket's
    /// [`carry_from`](TokenBucket::carry_from) seen through time, and
    /// never grants more than either limit would:
    ///
    /// - **the new limit**: the key is charged every unit it took that
    ///   has not come back, so it gets the new quota less what it used,
    ///   never a fresh one;
    /// - **the old limit, when tightened** (an interval no shorter, a
    ///   burst no larger): both start from the same outstanding units `u`;
    ///   the new one pays them back no faster (`u` shrinks by one per
    ///   interval, and its interval is longer) and admits a cost `c` only
    ///   while `u + c` fits a burst no larger, so, by induction over any
    ///   following requests, everything it admits the old would have
    ///   admitted too.
    ///
    /// A TAT already past (a whole quota) is left as it is.
    pub fn carry_from(&self, old: &Gcra, state: &GcraState, now: Timestamp) -> GcraState {
        let now = now.as_nanos();
        let tat = state.tat.as_nanos();
        if old.interval == self.interval || tat <= now {
            return *state;
        }
        let ahead = u128::from(tat - now) * u128::from(self.interval);
        let ahead = ahead.div_ceil(u128::from(old.interval));
        let ahead = u64::try_from(ahead).unwrap_or(u64::MAX).min(MAX_SCALED);
        GcraState {
            tat: Timestamp::from_nanos(now.saturating_add(ahead)),
        }
    }

    /// Remaining units when the TAT is `ahead` nanoseconds past now.
    #[inline]
    fn remaining(&self, ahead: u64) -> u64 {
        self.tolerance.saturating_sub(ahead) / self.interval
    }
}

impl Algorithm for Gcra {
    type State = GcraState;

    fn fresh(&self) -> GcraState {
        GcraState::default()
    }

    #[inline]
    fn decide(&self, state: &GcraState, now: Timestamp, cost: u64) -> (Decision, GcraState) {
        let (decision, tat) = self.decide_tat(state.tat.as_nanos(), now.as_nanos(), cost);
        (
            decision,
            GcraState {
                tat: Timestamp::from_nanos(tat),
            },
        )
    }

    fn refund(&self, state: &GcraState, now: Timestamp, units: u64) -> GcraState {
        let back = Duration::from_nanos(units.saturating_mul(self.interval));
        // Never move the TAT before now: that would bank quota past whole.
        let tat = state.tat.saturating_sub(back).max(now.min(state.tat));
        GcraState { tat }
    }

    /// Moves the TAT past the tolerance when the key has fewer units
    /// left: a check of `n` is refused until the TAT is no more than the
    /// tolerance less `n` intervals ahead. An overdraft of `d` units blocks
    /// every check for `d` emission intervals (`d x period / limit`), and
    /// the key is whole again `burst + d` intervals after it. The TAT runs
    /// at most 2^62 ns past the tolerance.
    fn report(&self, state: &GcraState, now: Timestamp, units: u64) -> (Decision, GcraState) {
        let (decision, tat) = self.report_tat(state.tat.as_nanos(), now.as_nanos(), units);
        (
            decision,
            GcraState {
                tat: Timestamp::from_nanos(tat),
            },
        )
    }

    fn expires_at(&self, state: &GcraState) -> Timestamp {
        state.tat
    }

    fn quota(&self) -> u64 {
        self.burst
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.tolerance)
    }
}
