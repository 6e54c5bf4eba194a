//! The token bucket, after Go's x/time/rate.
//!
//! A bucket holds at most `burst` tokens and gains `rate` tokens every
//! `period`, continuously; a request of cost `n` takes `n` tokens. The
//! arithmetic is exact in integers: one token is `P` units and one nanosecond
//! adds `R` units, where `R / P` is `rate / period` in lowest terms. So
//! "3 per second" gains exactly three tokens a second, never 2.999999.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{check_period, check_quota, Algorithm, MAX_SCALED};
use crate::{policy::PolicyError, Decision, Rate, RetryAfter, Timestamp};

/// A token bucket: `rate` tokens per `period`, at most `burst`, starting
/// full, refilled continuously (x/time/rate's `NewLimiter(rate/period, burst)`).
///
/// Besides [`Algorithm::decide`] it offers x/time/rate's reservations:
/// [`reserve`](TokenBucket::reserve) takes tokens ahead into debt,
/// [`cancel`](TokenBucket::cancel) gives them back,
/// [`wait`](TokenBucket::wait) and [`tokens`](TokenBucket::tokens) look
/// without taking.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{RetryAfter, Timestamp, TokenBucket, policy::Algorithm};
///
/// // Three tokens, one more every 200 ms.
/// let bucket = TokenBucket::new(5, Duration::from_secs(1), 3).unwrap();
/// let decisions = bucket.simulate([(Timestamp::ZERO, 1); 4]);
/// assert!(decisions[..3].iter().all(|d| d.is_allowed()));
/// assert_eq!(decisions[3].retry_after(), RetryAfter::After(Duration::from_millis(200)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TokenBucket {
    rate: u64,
    period: u64,
    burst: u64,
    /// Units one nanosecond adds (`rate / gcd`).
    gain_per_nano: u64,
    /// Units in one token (`period / gcd`).
    unit: u64,
    /// Units in a full bucket (`burst * unit`).
    full: u64,
}

/// A token bucket's state: its level and when it was last updated.
///
/// `level` is in the bucket's internal units (see the module docs), negative
/// while reservations owe tokens; [`TokenBucket::tokens`] reads it in tokens.
/// [`Algorithm::fresh`] makes a full bucket.
///
/// The state records its unit, so a state written under other numbers (a
/// configuration change, a rolling deploy sharing a database) keeps its
/// number of tokens, rounded down, rather than being misread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenBucketState {
    /// Tokens left at `at`, in units of `1 / unit` token.
    pub level: i64,
    /// When `level` was measured.
    pub at: Timestamp,
    /// How many units make a token; 0 (a state from before it was
    /// recorded) means the reading bucket's own.
    #[serde(default)]
    pub unit: u64,
}

/// Tokens reserved ahead by [`TokenBucket::reserve`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BucketReservation {
    cost: u64,
    act_at: Timestamp,
    delay: Duration,
}

impl BucketReservation {
    /// How many tokens were reserved.
    pub const fn cost(&self) -> u64 {
        self.cost
    }

    /// When the caller may act.
    pub const fn act_at(&self) -> Timestamp {
        self.act_at
    }

    /// How long the caller must wait, from the time of the reservation.
    pub const fn delay(&self) -> Duration {
        self.delay
    }
}

/// Why [`TokenBucket::reserve`] reserved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum BucketReserveError {
    /// The tokens would be there only after `wait`, longer than the maximum.
    #[error("the tokens would take {wait:?}, longer than the maximum wait")]
    TooLong {
        /// How long the tokens would take.
        wait: Duration,
    },
    /// The cost is more than the burst: no wait makes it possible.
    #[error("the cost is larger than the bucket's burst")]
    Never,
}

impl TokenBucket {
    /// `rate` tokens per `period`, at most `burst`.
    ///
    /// Each number must be positive, `rate` and `burst` at most
    /// [`MAX_QUOTA`](crate::policy::MAX_QUOTA), `period` at most
    /// [`MAX_PERIOD`](crate::policy::MAX_PERIOD), and a full bucket must fit in 2^62
    /// internal units (`burst * period / gcd(rate, period)` with the period in
    /// nanoseconds), which holds for any burst up to 10^9 over a second.
    pub fn new(rate: u64, period: Duration, burst: u64) -> Result<Self, PolicyError> {
        let rate = check_quota("rate", rate)?;
        let period = check_period("period", period)?;
        let burst = check_quota("burst", burst)?;
        let g = gcd(rate, period);
        let (gain_per_nano, unit) = (rate / g, period / g);
        let full = burst
            .checked_mul(unit)
            .filter(|&full| full <= MAX_SCALED)
            .ok_or(PolicyError::Overflow {
                what: "a full bucket (burst x period / gcd(rate, period))",
            })?;
        Ok(TokenBucket {
            rate,
            period,
            burst,
            gain_per_nano,
            unit,
            full,
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

    /// The bucket for `rate`: its amount per period, with its burst.
    pub fn from_rate(rate: &Rate) -> Result<Self, PolicyError> {
        Self::new(rate.amount(), rate.period(), rate.burst())
    }

    /// Tokens gained per [`period`](TokenBucket::period).
    pub const fn rate(&self) -> u64 {
        self.rate
    }

    /// The period over which [`rate`](TokenBucket::rate) tokens are gained.
    pub const fn period(&self) -> Duration {
        Duration::from_nanos(self.period)
    }

    /// The most tokens the bucket holds.
    pub const fn burst(&self) -> u64 {
        self.burst
    }

    /// The tokens in the bucket at `now`, rounded down; negative while
    /// reservations owe tokens.
    pub fn tokens(&self, state: &TokenBucketState, now: Timestamp) -> i64 {
        let (deficit, _) = self.deficit_at(state, now);
        let level = self.full as i64 - deficit as i64;
        level.div_euclid(self.unit as i64)
    }

    /// How long until `cost` tokens are there, without taking them:
    /// [`RetryAfter::NOW`] if they are, [`RetryAfter::Never`] if `cost` is
    /// more than the burst.
    pub fn wait(&self, state: &TokenBucketState, now: Timestamp, cost: u64) -> RetryAfter {
        if cost > self.burst {
            return RetryAfter::Never;
        }
        let (deficit, _) = self.deficit_at(state, now);
        RetryAfter::After(self.time_to_cover(deficit, cost * self.unit))
    }

    /// Reserves `cost` tokens ahead, letting the bucket go into debt, when
    /// they will be there within `max_wait`; the caller then waits
    /// [`BucketReservation::delay`] before acting. As x/time/rate's `ReserveN` with
    /// a deadline. When refused, nothing is reserved and the state is
    /// unchanged.
    pub fn reserve(
        &self,
        state: &TokenBucketState,
        now: Timestamp,
        cost: u64,
        max_wait: Duration,
    ) -> Result<(BucketReservation, TokenBucketState), BucketReserveError> {
        if cost > self.burst {
            return Err(BucketReserveError::Never);
        }
        let (deficit, now) = self.deficit_at(state, now);
        let need = cost * self.unit;
        let owed = deficit.saturating_add(need).saturating_sub(self.full);
        // Debt is bounded by 2^62 units, so the level always fits an i64.
        if owed > MAX_SCALED {
            return Err(BucketReserveError::TooLong {
                wait: Duration::from_nanos(u64::MAX),
            });
        }
        let wait = Duration::from_nanos(self.nanos_to_gain(owed));
        if wait > max_wait {
            return Err(BucketReserveError::TooLong { wait });
        }
        let reservation = BucketReservation {
            cost,
            act_at: now + wait,
            delay: wait,
        };
        Ok((reservation, self.state_with_deficit(deficit + need, now)))
    }

    /// Gives back the tokens of `reservation` if it has not acted yet (its
    /// time is after `now`), up to a full bucket.
    ///
    /// Unlike x/time/rate this does not subtract the tokens that later
    /// reservations took, so a cancel may restore a little more than a
    /// perfect ledger would; it never fills the bucket past its burst.
    pub fn cancel(
        &self,
        state: &TokenBucketState,
        reservation: &BucketReservation,
        now: Timestamp,
    ) -> TokenBucketState {
        if reservation.act_at <= now || reservation.cost == 0 {
            return *state;
        }
        self.refund(state, now, reservation.cost)
    }

    /// The state of a key that `old` left in `state`, carried into this
    /// bucket at `now` (a configuration reload that changed the numbers):
    /// the tokens the key has used and not got back by `now`, measured by
    /// `old`, stay used (rounded up), and debt stays debt.
    ///
    /// It never grants more than either bucket would:
    ///
    /// - **the new bucket**: the key is charged every token it took that
    ///   has not come back, so it gets the new burst less what it used,
    ///   never a fresh bucket;
    /// - **the old bucket, when tightened** (a rate and a burst no
    ///   larger): both start from the same deficit; the new one refills no
    ///   faster and admits a cost only while the deficit plus the cost fits
    ///   a burst no larger, so, by induction over any following requests,
    ///   its deficit stays at least the old one's and everything it admits
    ///   the old would have admitted too.
    ///
    /// Keeping the *fraction* of the burst used instead would hand a key
    /// that used 4 of 10 tokens 3 fresh ones of a new burst of 5, where it
    /// has 1 left in this model: tightening would refill it.
    pub fn carry_from(
        &self,
        old: &TokenBucket,
        state: &TokenBucketState,
        now: Timestamp,
    ) -> TokenBucketState {
        if old == self {
            return *state;
        }
        let (deficit, at) = old.deficit_at(state, now);
        let scaled = (u128::from(deficit) * u128::from(self.unit)).div_ceil(u128::from(old.unit));
        // Debt is bounded as `reserve` bounds it, so the level fits an i64.
        let ceiling = u128::from(self.full) + u128::from(MAX_SCALED);
        let deficit = scaled.min(ceiling) as u64;
        self.state_with_deficit(deficit, at)
    }

    /// The deficit (full minus level, in units) at `now`, and the time it is
    /// measured at: `now`, or the state's own time if the clock went back.
    #[inline]
    fn deficit_at(&self, state: &TokenBucketState, now: Timestamp) -> (u64, Timestamp) {
        let now = now.max(state.at);
        let elapsed = now.as_nanos() - state.at.as_nanos();
        let gained = elapsed.saturating_mul(self.gain_per_nano);
        let level = if state.unit == self.unit || state.unit == 0 {
            state.level
        } else {
            rescale(state.level, state.unit, self.unit)
        };
        // A level above full (a state written under a larger burst) counts
        // as full; a corrupt very negative level saturates.
        let deficit = (self.full as i64).saturating_sub(level).max(0) as u64;
        (deficit.saturating_sub(gained), now)
    }

    /// Nanoseconds to gain `units`, rounded up.
    #[inline]
    fn nanos_to_gain(&self, units: u64) -> u64 {
        // Whenever the rate divides the period in nanoseconds (10/s, 100/min)
        // a unit is a nanosecond: skip the division.
        if self.gain_per_nano == 1 {
            units
        } else {
            units.div_ceil(self.gain_per_nano)
        }
    }

    #[inline]
    fn state_with_deficit(&self, deficit: u64, at: Timestamp) -> TokenBucketState {
        // deficit <= full + 2^62 <= 2^63: the difference fits an i64, the
        // operands need a wider type.
        let level = self.full as i128 - deficit as i128;
        TokenBucketState {
            level: level as i64,
            at,
            unit: self.unit,
        }
    }

    /// Time until the level covers `need` units, given `deficit`.
    #[inline]
    fn time_to_cover(&self, deficit: u64, need: u64) -> Duration {
        let missing = deficit.saturating_add(need).saturating_sub(self.full);
        Duration::from_nanos(self.nanos_to_gain(missing))
    }
}

impl Algorithm for TokenBucket {
    type State = TokenBucketState;

    fn fresh(&self) -> TokenBucketState {
        TokenBucketState {
            level: self.full as i64,
            at: Timestamp::ZERO,
            unit: self.unit,
        }
    }

    #[inline]
    fn decide(
        &self,
        state: &TokenBucketState,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, TokenBucketState) {
        let (deficit, at) = self.deficit_at(state, now);
        // When the clock went back, the bucket is measured at its own time;
        // waits are still told from the caller's `now`.
        let skew = at.as_nanos() - now.as_nanos();
        let wait =
            |units: u64| Duration::from_nanos(self.nanos_to_gain(units).saturating_add(skew));
        if cost > self.burst {
            let remaining = self.full.saturating_sub(deficit) / self.unit;
            return (
                Decision::denied(self.burst, remaining, wait(deficit), RetryAfter::Never),
                *state,
            );
        }
        // cost <= burst, so cost * unit <= full <= 2^62.
        let need = cost * self.unit;
        let after = deficit + need;
        if after <= self.full {
            let remaining = (self.full - after) / self.unit;
            let next = if cost == 0 {
                *state
            } else {
                self.state_with_deficit(after, at)
            };
            (Decision::allowed(self.burst, remaining, wait(after)), next)
        } else {
            let remaining = self.full.saturating_sub(deficit) / self.unit;
            let retry = RetryAfter::After(wait(after - self.full));
            (
                Decision::denied(self.burst, remaining, wait(deficit), retry),
                *state,
            )
        }
    }

    fn refund(&self, state: &TokenBucketState, now: Timestamp, units: u64) -> TokenBucketState {
        if units == 0 {
            return *state;
        }
        let (deficit, now) = self.deficit_at(state, now);
        let back = units.saturating_mul(self.unit);
        self.state_with_deficit(deficit.saturating_sub(back), now)
    }

    /// Takes `units` into debt when the bucket has fewer: the level goes
    /// below zero, and a check of `n` is refused until the bucket has
    /// refilled the debt and `n` tokens more. An overdraft of `d` tokens
    /// blocks every check for `d` tokens' refill time (`d x period /
    /// rate`), and the bucket is full again `burst + d` tokens' refill
    /// time after it. Debt saturates at 2^62 internal units, as a
    /// [reservation](TokenBucket::reserve)'s does.
    #[inline]
    fn report(
        &self,
        state: &TokenBucketState,
        now: Timestamp,
        units: u64,
    ) -> (Decision, TokenBucketState) {
        let (decision, next) = self.decide(state, now, units);
        if decision.is_allowed() || units == 0 {
            return (decision, next);
        }
        overdraw(self, state, now, units)
    }

    fn expires_at(&self, state: &TokenBucketState) -> Timestamp {
        let (deficit, at) = self.deficit_at(state, state.at);
        at + Duration::from_nanos(self.nanos_to_gain(deficit))
    }

    fn quota(&self) -> u64 {
        self.burst
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.full.div_ceil(self.gain_per_nano))
    }
}

/// `level` units of `1 / from` token in units of `1 / to`, rounded toward
/// fewer tokens (more debt), so a rescaled state never grants more.
fn rescale(level: i64, from: u64, to: u64) -> i64 {
    let scaled = (i128::from(level) * i128::from(to)).div_euclid(i128::from(from));
    scaled.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Greatest common divisor (Euclid); both arguments are positive.
pub(crate) const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

/// [`Algorithm::report`] past what the key has: out of line, so that a
/// report that fits costs what a check does.
#[cold]
#[inline(never)]
fn overdraw(
    policy: &TokenBucket,
    state: &TokenBucketState,
    now: Timestamp,
    units: u64,
) -> (Decision, TokenBucketState) {
    let (deficit, at) = policy.deficit_at(state, now);
    let skew = at.as_nanos() - now.as_nanos();
    let wait = |units: u64| Duration::from_nanos(policy.nanos_to_gain(units).saturating_add(skew));
    // Refused, so the units do not fit: `after` is past full.
    let after = deficit
        .saturating_add(units.saturating_mul(policy.unit))
        .min(policy.full + MAX_SCALED);
    let retry = RetryAfter::After(wait(after - policy.full + policy.unit));
    (
        Decision::denied(policy.burst, 0, wait(after), retry),
        policy.state_with_deficit(after, at),
    )
}
