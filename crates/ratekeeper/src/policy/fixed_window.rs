//! The fixed window: a count per calendar window.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{check_no_burst, check_period, check_quota, Algorithm, MAX_SCALED};
use crate::{policy::PolicyError, Decision, Rate, RetryAfter, Timestamp};

/// At most `limit` units in each window of `window`, the windows aligned to
/// the clock's epoch (for a [`UnixClock`](crate::clock::UnixClock), a one-minute
/// window starts on the minute).
///
/// The cheapest policy, and the one every store can run with an atomic
/// increment. Its flaw: a client can spend a whole window's quota just
/// before a boundary and another just after, so up to **twice the limit**
/// can pass within one window's length.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{FixedWindow, Timestamp, policy::Algorithm};
///
/// // 5 per second: 5 at t=999 ms and 5 more at t=1001 ms all pass.
/// let window = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
/// let requests = [(Timestamp::from_millis(999), 1); 5]
///     .into_iter()
///     .chain([(Timestamp::from_millis(1001), 1); 5]);
/// assert!(window.simulate(requests).iter().all(|d| d.is_allowed()));
/// ```
///
/// [`FixedWindow::from_first_hit`] makes the other kind of fixed window,
/// Limitador's: a window opens with the first hit after the last one
/// ended, so each key's windows start when it is first seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FixedWindow {
    limit: u64,
    window: u64,
    /// Windows open at a key's first hit rather than on the epoch's
    /// multiples.
    from_first_hit: bool,
}

/// A fixed window's state: which window, and the units counted in it. The
/// default (nothing counted) is fresh.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FixedWindowState {
    /// When the counted window began.
    pub start: Timestamp,
    /// Units allowed in that window.
    pub count: u64,
}

impl FixedWindow {
    /// At most `limit` units per `window`; `limit` in `1..=MAX_QUOTA`,
    /// `window` in `1 ns..=MAX_PERIOD`.
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Ok(FixedWindow {
            limit: check_quota("limit", limit)?,
            window: check_period("window", window)?,
            from_first_hit: false,
        })
    }

    /// At most `limit` units per `window`, each window opening with the
    /// first hit after the previous one ended (Limitador's counters, which
    /// expire `seconds` after they are made), not on the clock's epoch.
    /// The same bounds as [`FixedWindow::new`]; the same boundary burst,
    /// at each key's own boundaries.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{FixedWindow, Timestamp, policy::Algorithm};
    ///
    /// // 2 per second, the first hit at 0.7 s: its window runs to 1.7 s.
    /// let window = FixedWindow::from_first_hit(2, Duration::from_secs(1)).unwrap();
    /// let at = |ms| (Timestamp::from_millis(ms), 1);
    /// let decisions = window.simulate([at(700), at(1_100), at(1_200), at(1_700)]);
    /// let allowed: Vec<bool> = decisions.iter().map(|d| d.is_allowed()).collect();
    /// assert_eq!(allowed, [true, true, false, true]);
    /// # Ok::<(), ratekeeper::policy::PolicyError>(())
    /// ```
    pub fn from_first_hit(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        let mut made = Self::new(limit, window)?;
        made.from_first_hit = true;
        Ok(made)
    }

    /// Whether windows open at a key's first hit
    /// ([`FixedWindow::from_first_hit`]) rather than on the epoch's
    /// multiples of the window.
    pub const fn is_from_first_hit(&self) -> bool {
        self.from_first_hit
    }

    /// The window for `rate`: its amount per period. A rate with a burst is
    /// refused.
    pub fn from_rate(rate: &Rate) -> Result<Self, PolicyError> {
        check_no_burst("fixed_window", rate)?;
        Self::new(rate.amount(), rate.period())
    }

    /// Units allowed per window.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// The start of the epoch-aligned window holding `now` (a window
    /// [from the first hit](FixedWindow::from_first_hit) starts where its
    /// state says).
    #[inline]
    pub fn window_start(&self, now: Timestamp) -> Timestamp {
        let now = now.as_nanos();
        Timestamp::from_nanos(now - now % self.window)
    }

    /// The count and start of the window in force at `now`, and the time
    /// to measure from (the state's window if the clock went back into an
    /// earlier one).
    #[inline]
    fn current(&self, state: &FixedWindowState, now: Timestamp) -> (u64, Timestamp, Timestamp) {
        if self.from_first_hit {
            let end = state.start.as_nanos().saturating_add(self.window);
            return if state.count == 0 || now.as_nanos() >= end {
                // No window open: the next hit opens one.
                (0, now, now)
            } else if now < state.start {
                // Backwards: keep counting the window the state holds.
                (state.count, state.start, state.start)
            } else {
                (state.count, state.start, now)
            };
        }
        let start = self.window_start(now);
        if start == state.start {
            (state.count, start, now)
        } else if start > state.start {
            (0, start, now)
        } else {
            // Backwards into an earlier window: keep counting the later one.
            (state.count, state.start, state.start)
        }
    }

    /// The state of a key that `old` left in `state`, carried into this
    /// window at `now` (a configuration reload that changed the numbers):
    /// the count in force at `now` is kept.
    ///
    /// With the same window length and alignment the state stays as it is,
    /// window start and count: the key has what is left of the new limit
    /// after its count, until its window ends, and when the limit was
    /// lowered it can take no more than the old limit would have let it
    /// (the same count against a smaller limit, the same boundaries).
    ///
    /// When the length or the alignment changes, the count moves into the
    /// new window that holds `now` (for windows [from the first
    /// hit](FixedWindow::from_first_hit), one opened at `now`), so the
    /// key keeps what it used until that window ends. It counts hits that
    /// may lie before the new window's start, erring toward refusing; hits
    /// before the old window's start are not known and not counted.
    pub fn carry_from(
        &self,
        old: &FixedWindow,
        state: &FixedWindowState,
        now: Timestamp,
    ) -> FixedWindowState {
        let (count, start, at) = old.current(state, now);
        if count == 0 {
            return FixedWindowState::default();
        }
        if old.window == self.window && old.from_first_hit == self.from_first_hit {
            return FixedWindowState { start, count };
        }
        let start = if self.from_first_hit {
            at
        } else {
            self.window_start(at)
        };
        FixedWindowState { start, count }
    }

    #[inline]
    fn until_end(&self, start: Timestamp, now: Timestamp) -> Duration {
        let end = start.as_nanos().saturating_add(self.window);
        Duration::from_nanos(end.saturating_sub(now.as_nanos()))
    }
}

impl FixedWindow {
    /// A check (`REPORT` false) or a report of `cost`: one body, so that
    /// a report whose units fit runs the check's own instructions, and
    /// only the refusals differ (a report's overdraft, out of line).
    #[inline(always)]
    fn update<const REPORT: bool>(
        &self,
        state: &FixedWindowState,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, FixedWindowState) {
        let (count, start, _) = self.current(state, now);
        // Waits are told from the caller's `now`, even when the clock went
        // back and the state's later window is the one counted.
        let until_end = self.until_end(start, now);
        // An aligned window resets at its end even when nothing is counted
        // in it (a check of cost 0 on a fresh key), as envoyproxy/ratelimit
        // reports for every key, used or not. A window from the first hit
        // is not open until a hit opens it: nothing to reset.
        let reset = |count: u64| match self.from_first_hit && count == 0 {
            true => Duration::ZERO,
            false => until_end,
        };
        // A state written under a larger limit may count past this one.
        let remaining = self.limit.saturating_sub(count);
        if cost <= remaining {
            let next = if cost == 0 {
                *state
            } else {
                FixedWindowState {
                    start,
                    count: count + cost,
                }
            };
            (
                Decision::allowed(self.limit, remaining - cost, reset(count + cost)),
                next,
            )
        } else if REPORT && cost > 0 {
            overdraw(self, count, start, until_end, cost)
        } else {
            let retry = if cost > self.limit {
                RetryAfter::Never
            } else {
                RetryAfter::After(until_end)
            };
            (
                Decision::denied(self.limit, remaining, reset(count), retry),
                *state,
            )
        }
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;

    fn fresh(&self) -> FixedWindowState {
        FixedWindowState::default()
    }

    #[inline]
    fn decide(
        &self,
        state: &FixedWindowState,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, FixedWindowState) {
        self.update::<false>(state, now, cost)
    }

    fn refund(&self, state: &FixedWindowState, now: Timestamp, units: u64) -> FixedWindowState {
        let (count, start, _) = self.current(state, now);
        if units == 0 || count == 0 {
            return *state;
        }
        FixedWindowState {
            start,
            count: count.saturating_sub(units),
        }
    }

    /// Counts `units` in the current window past the limit when it has
    /// fewer left: every check is refused until the window ends, and the
    /// next window starts from nothing, whatever the overdraft was (a
    /// window forgets; a [`TokenBucket`](crate::TokenBucket) or
    /// [`Gcra`](crate::Gcra) carries debt across). The count saturates at
    /// 2^62.
    #[inline]
    fn report(
        &self,
        state: &FixedWindowState,
        now: Timestamp,
        units: u64,
    ) -> (Decision, FixedWindowState) {
        self.update::<true>(state, now, units)
    }

    fn expires_at(&self, state: &FixedWindowState) -> Timestamp {
        if state.count == 0 {
            state.start
        } else {
            Timestamp::from_nanos(state.start.as_nanos().saturating_add(self.window))
        }
    }

    fn quota(&self) -> u64 {
        self.limit
    }

    fn window(&self) -> Duration {
        Duration::from_nanos(self.window)
    }
}

/// A report of `units` that do not fit in the window counted from
/// `start` with `count` in it: counted past the limit, saturated at 2^62.
/// Out of line, so that a report that fits costs what a check does.
#[cold]
#[inline(never)]
fn overdraw(
    policy: &FixedWindow,
    count: u64,
    start: Timestamp,
    until_end: Duration,
    units: u64,
) -> (Decision, FixedWindowState) {
    let next = FixedWindowState {
        start,
        count: count.saturating_add(units).min(MAX_SCALED),
    };
    let retry = RetryAfter::After(until_end);
    (Decision::denied(policy.limit, 0, until_end, retry), next)
}
