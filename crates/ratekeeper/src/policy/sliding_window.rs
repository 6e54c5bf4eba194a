//! The sliding window counter: Cloudflare's weighted approximation.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_no_burst, check_period, check_quota, Algorithm, MAX_SCALED};
use crate::{policy::PolicyError, Decision, Rate, RetryAfter, Timestamp};

/// About `limit` units per sliding `window`, kept in two counters.
///
/// Time is cut into fixed windows as in [`FixedWindow`](crate::FixedWindow).
/// A request is weighed against the current window's count plus the
/// previous window's count scaled by how much of the previous window still
/// overlaps the sliding one: 30% into the current window, 70% of the
/// previous count is added. Only allowed units are counted.
///
/// # Rounding and accuracy
///
/// The weighted previous count is rounded **up** (`ceil(prev * (window -
/// elapsed) / window)`, in exact integer arithmetic), so a partly expired
/// request still counts as a whole one. The method assumes the previous
/// window's requests were spread evenly; when they clustered at its end,
/// more than `limit` can pass in some window-long interval (at most about
/// twice, as with a fixed window, but only in that skewed case). Use
/// [`SlidingLog`](crate::SlidingLog) when the bound must be exact.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{SlidingWindow, Timestamp, policy::Algorithm};
///
/// let policy = SlidingWindow::new(100, Duration::from_secs(60)).unwrap();
/// // 100 requests fill the first minute...
/// let mut state = policy.fresh();
/// for _ in 0..100 {
///     state = policy.decide(&state, Timestamp::from_secs(10), 1).1;
/// }
/// // ...and 30% into the next one, 70 of them still count: 30 are left.
/// let d = policy.peek(&state, Timestamp::from_secs(78));
/// assert_eq!(d.remaining(), 30);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SlidingWindow {
    limit: u64,
    window: u64,
}

/// A sliding window counter's state: the current window and the counts of
/// it and the one before. The default (nothing counted) is fresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SlidingWindowState {
    /// When the current window began.
    pub start: Timestamp,
    /// Units allowed in the window before it.
    pub previous: u64,
    /// Units allowed in the current window.
    pub current: u64,
}

/// The counts in force at a moment: the window, both counts, and the
/// nanoseconds elapsed in the window.
struct Counts {
    start: u64,
    previous: u64,
    current: u64,
    elapsed: u64,
}

impl SlidingWindow {
    /// About `limit` units per sliding `window`; `limit` in `1..=MAX_QUOTA`,
    /// `window` in `1 ns..=MAX_PERIOD`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Ok(SlidingWindow {
            limit: check_quota("limit", limit)?,
            window: check_period("window", window)?,
        })
    }

    /// The counter for `rate`: its amount per period. A rate with a burst is
    /// refused.
    pub fn from_rate(rate: &Rate) -> Result<Self, PolicyError> {
        check_no_burst("sliding_window", rate)?;
        Self::new(rate.amount(), rate.period())
    }

    /// Units allowed per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    #[inline]
    fn counts(&self, state: &SlidingWindowState, now: Timestamp) -> Counts {
        let now = now.as_nanos();
        let start = now - now % self.window;
        let last = state.start.as_nanos();
        if start == last {
            Counts {
                start,
                previous: state.previous,
                current: state.current,
                elapsed: now - start,
            }
        } else if start > last {
            let previous = if start - last == self.window {
                state.current
            } else {
                0
            };
            Counts {
                start,
                previous,
                current: 0,
                elapsed: now - start,
            }
        } else {
            // The clock went back into an earlier window: stay in the
            // state's window at its very start, where the previous count
            // weighs most.
            Counts {
                start: last,
                previous: state.previous,
                current: state.current,
                elapsed: 0,
            }
        }
    }

    /// The state of a key that `old` left in `state`, carried into this
    /// counter at `now` (a configuration reload that changed the numbers).
    ///
    /// With the same window the state stays as it is: the key has what is
    /// left of the new limit after the same estimate, and when the limit
    /// was lowered it can take no more than the old limit would have let
    /// it (the same estimate against a smaller limit, the counts moving
    /// alike).
    ///
    /// When the window changes, `old`'s estimate at `now` (the current
    /// count plus the weighted previous one) becomes the current count of
    /// the new window holding `now`: the key keeps what it used, which then
    /// ages out as this counter's current count does (over one to two new
    /// windows).
    pub fn carry_from(
        &self,
        old: &SlidingWindow,
        state: &SlidingWindowState,
        now: Timestamp,
    ) -> SlidingWindowState {
        if old.window == self.window {
            return *state;
        }
        let c = old.counts(state, now);
        let estimate = c
            .current
            .saturating_add(old.weighted(c.previous, c.elapsed));
        if estimate == 0 {
            return SlidingWindowState::default();
        }
        // The clock may have gone back into the state's window: count from
        // the later of the two.
        let at = now.as_nanos().max(c.start);
        SlidingWindowState {
            start: Timestamp::from_nanos(at - at % self.window),
            previous: 0,
            current: estimate,
        }
    }

    /// `ceil(count * (window - elapsed) / window)`: the part of a window's
    /// count that still overlaps the sliding window.
    #[inline]
    fn weighted(&self, count: u64, elapsed: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        let overlap = self.window - elapsed.min(self.window);
        match count.checked_mul(overlap) {
            Some(scaled) => scaled.div_ceil(self.window),
            // Rare (huge counts over long windows): the slower 128-bit path.
            None => (count as u128 * overlap as u128).div_ceil(self.window as u128) as u64,
        }
    }

    /// The least `elapsed` in a window at which `ceil(count * (window -
    /// elapsed) / window) <= budget`; `window` if none inside it.
    fn elapsed_until_within(&self, count: u64, budget: u64) -> u64 {
        if count == 0 {
            return 0;
        }
        let room = (budget as u128 * self.window as u128) / count as u128;
        self.window
            .saturating_sub(room.min(self.window as u128) as u64)
    }

    fn reset(&self, c: &Counts, current: u64, now: u64) -> Duration {
        let at = if current > 0 {
            c.start.saturating_add(self.window.saturating_mul(2))
        } else if c.previous > 0 {
            c.start.saturating_add(self.window)
        } else {
            return Duration::ZERO;
        };
        Duration::from_nanos(at.saturating_sub(now))
    }

    /// The wait from `now` until a request of `cost` (at most the limit)
    /// fits.
    fn retry(&self, c: &Counts, cost: u64, now: u64) -> Duration {
        let budget = self.limit - cost;
        if c.current <= budget {
            let at = self.elapsed_until_within(c.previous, budget - c.current);
            if at < self.window {
                return Duration::from_nanos(c.start.saturating_add(at).saturating_sub(now));
            }
        }
        // In the next window the current count becomes the previous one.
        let at = self.elapsed_until_within(c.current, budget);
        let next = c.start.saturating_add(self.window).saturating_add(at);
        Duration::from_nanos(next.saturating_sub(now))
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;

    fn fresh(&self) -> SlidingWindowState {
        SlidingWindowState::default()
    }

    #[inline]
    fn decide(
        &self,
        state: &SlidingWindowState,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, SlidingWindowState) {
        let c = self.counts(state, now);
        // Waits are told from the caller's `now`, even when the clock went
        // back and the state's window is the one counted.
        let now = now.as_nanos();
        let estimate = c
            .current
            .saturating_add(self.weighted(c.previous, c.elapsed));
        let remaining = self.limit.saturating_sub(estimate);
        if cost <= remaining {
            let current = c.current + cost;
            let next = if cost == 0 {
                *state
            } else {
                SlidingWindowState {
                    start: Timestamp::from_nanos(c.start),
                    previous: c.previous,
                    current,
                }
            };
            (
                Decision::allowed(self.limit, remaining - cost, self.reset(&c, current, now)),
                next,
            )
        } else {
            let retry = if cost > self.limit {
                RetryAfter::Never
            } else {
                RetryAfter::After(self.retry(&c, cost, now))
            };
            (
                Decision::denied(self.limit, remaining, self.reset(&c, c.current, now), retry),
                *state,
            )
        }
    }

    fn refund(&self, state: &SlidingWindowState, now: Timestamp, units: u64) -> SlidingWindowState {
        if units == 0 {
            return *state;
        }
        let c = self.counts(state, now);
        let from_current = units.min(c.current);
        let from_previous = (units - from_current).min(c.previous);
        SlidingWindowState {
            start: Timestamp::from_nanos(c.start),
            previous: c.previous - from_previous,
            current: c.current - from_current,
        }
    }

    /// Counts `units` in the current window past the limit when the
    /// estimate has fewer left: checks are refused while the estimate (the
    /// current count and the previous one weighted by how much of it the
    /// sliding window still covers) is over the limit, which is within the
    /// next window at the latest. An overdraft is forgotten two windows
    /// after the window it was counted in began, as every count is. The
    /// count saturates at 2^62.
    #[inline]
    fn report(
        &self,
        state: &SlidingWindowState,
        now: Timestamp,
        units: u64,
    ) -> (Decision, SlidingWindowState) {
        let (decision, next) = self.decide(state, now, units);
        if decision.is_allowed() || units == 0 {
            return (decision, next);
        }
        overdraw(self, state, now, units)
    }

    fn expires_at(&self, state: &SlidingWindowState) -> Timestamp {
        let windows = if state.current > 0 {
            2
        } else if state.previous > 0 {
            1
        } else {
            0
        };
        state.start + Duration::from_nanos(self.window.saturating_mul(windows))
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
    policy: &SlidingWindow,
    state: &SlidingWindowState,
    now: Timestamp,
    units: u64,
) -> (Decision, SlidingWindowState) {
    let c = policy.counts(state, now);
    let now = now.as_nanos();
    let after = Counts {
        current: c.current.saturating_add(units).min(MAX_SCALED),
        ..c
    };
    let retry = RetryAfter::After(policy.retry(&after, 1, now));
    let reset = policy.reset(&after, after.current, now);
    let next = SlidingWindowState {
        start: Timestamp::from_nanos(after.start),
        previous: after.previous,
        current: after.current,
    };
    (Decision::denied(policy.limit, 0, reset, retry), next)
}
