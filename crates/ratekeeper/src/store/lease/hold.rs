//! How long units taken from a shared store stay safe to spend elsewhere.
//!
//! A store counts leased units as used at the moment it hands them out. A
//! node that spends one later must not let the cluster's real admissions
//! (at the moments they happen) go past what the policy allows. What keeps
//! that true depends on how the policy forgets:
//!
//! - **Fixed window, sliding window counter.** The store only knows which
//!   window a unit was counted in, so a unit counted in this window may be
//!   spent at any moment of it, and at no moment after: it is held until
//!   the window ends. (For the sliding window counter, the estimate of a
//!   later moment in the same window weighs the previous window less, so
//!   a unit that fitted when taken still fits.)
//! - **Token bucket, GCRA.** The store's bucket refills whether or not
//!   the node has spent its units. Think of the store's debt (how far the
//!   bucket is below full) as a stack of units that refill eats from the
//!   bottom, one unit per emission interval: a take puts its units on
//!   top. The node's units are safe while they are still part of the
//!   debt; once refill has reached them the store may hand them out again.
//!   So they *drain*: of the units taken with a debt of `d` after the
//!   take, `floor((d - elapsed) / interval)` are still safe after
//!   `elapsed`, the top of the stack last. Summed over every holder this
//!   never exceeds the store's debt, which is what the real bucket (with
//!   the spent units taken out) can pay.
//! - **Sliding log.** The store logs each unit at the moment it was taken
//!   and forgets it a window later; one spent later would be remembered by
//!   nobody for that gap. Nothing taken can be held: leasing takes only the
//!   request's own cost, and each decision is a round trip, as without it.
//!
//! Every time here counts from the moment the node *sent* the take, which
//! is no later than the store's decision, so a node's elapsed time is never
//! less than the store's; the reset the store reported is read one
//! nanosecond short, and an interval that is not a whole number of
//! nanoseconds is rounded up. Each of these errs towards holding less.

use std::time::Duration;

use crate::policy::{Algorithm, Policy};
use crate::Decision;

/// How long the units of one take stay safe to spend: what [`Hold::after`]
/// works out from the store's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Hold {
    /// All of them until `for_` after the take, none after (the window
    /// policies: until the window they were counted in ends).
    Until {
        /// How long after the take.
        for_: Duration,
    },
    /// They drain (token bucket, GCRA): after `elapsed`, `floor((debt -
    /// elapsed) / interval)` of them are still safe, at most all, and none
    /// from `ends` on.
    Draining {
        /// The store's debt after the take: the time until its bucket is
        /// full again.
        debt: Duration,
        /// The time one unit takes to refill, rounded up.
        interval: Duration,
        /// When the hold ends whatever is left ([`Hold::capped`]).
        ends: Duration,
    },
    /// Not past the decision that took them (the sliding log).
    None,
}

impl Hold {
    /// The hold of units `policy`'s store took with `decision` (an allowed
    /// one: the answer to the take itself).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{Decision, FixedWindow, Policy, store::lease::Hold};
    ///
    /// let policy = Policy::from(FixedWindow::new(100, Duration::from_secs(60))?);
    /// // 10 taken, 25 s before the window ends.
    /// let taken = Decision::allowed(100, 60, Duration::from_secs(25));
    /// let hold = Hold::after(&policy, &taken);
    /// assert_eq!(hold.safe(10, Duration::from_secs(24)), 10);
    /// assert_eq!(hold.safe(10, Duration::from_secs(25)), 0);
    /// # Ok::<(), ratekeeper::policy::PolicyError>(())
    /// ```
    pub fn after(policy: &Policy, decision: &Decision) -> Hold {
        if !decision.is_allowed() {
            return Hold::None;
        }
        let reset = decision.reset().saturating_sub(Duration::from_nanos(1));
        match policy {
            Policy::TokenBucket(_) | Policy::Gcra(_) => {
                let window = policy.window().as_nanos();
                let quota = u128::from(policy.quota().max(1));
                let interval = window.div_ceil(quota).max(1);
                Hold::Draining {
                    debt: reset,
                    interval: Duration::from_nanos(u64::try_from(interval).unwrap_or(u64::MAX)),
                    ends: Duration::MAX,
                }
            }
            // Reported right after a take: the reset is the window's end.
            Policy::FixedWindow(_) => Hold::Until { for_: reset },
            // With units in the current window, the quota is whole again
            // a window after the current one ends.
            Policy::SlidingWindow(_) => Hold::Until {
                for_: reset.saturating_sub(policy.window()),
            },
            Policy::SlidingLog(_) => Hold::None,
        }
    }

    /// Whether `policy`'s units can be held past the decision that took
    /// them: all but the sliding log's.
    pub fn possible(policy: &Policy) -> bool {
        !matches!(policy, Policy::SlidingLog(_))
    }

    /// How long after the take all of `units` (the last ones held) are
    /// still safe: the deadline for giving them back, by which the store
    /// must have them. `None` when they never were.
    pub fn deadline(self, units: u64) -> Option<Duration> {
        match self {
            Hold::Until { for_ } => Some(for_),
            Hold::Draining {
                debt,
                interval,
                ends,
            } => {
                let needed = interval.checked_mul(u32::try_from(units).ok()?)?;
                Some(debt.checked_sub(needed)?.min(ends))
            }
            Hold::None => None,
        }
    }

    /// Whether units held so can outlive the decision that took them: false
    /// only for [`Hold::None`] (leasing then takes a request's own cost).
    pub fn can_hold(self) -> bool {
        !matches!(self, Hold::None)
    }

    /// How many of `units` taken `elapsed` ago are still safe to spend.
    pub fn safe(self, units: u64, elapsed: Duration) -> u64 {
        match self {
            Hold::Until { for_ } if elapsed < for_ => units,
            Hold::Draining {
                debt,
                interval,
                ends,
            } if elapsed < ends => {
                let left = debt.saturating_sub(elapsed).as_nanos();
                let whole = left / interval.as_nanos().max(1);
                units.min(u64::try_from(whole).unwrap_or(u64::MAX))
            }
            _ => 0,
        }
    }

    /// This hold, ending no later than `at_most` after the take (a lease's
    /// longest life).
    pub fn capped(self, at_most: Duration) -> Hold {
        match self {
            Hold::Until { for_ } => Hold::Until {
                for_: for_.min(at_most),
            },
            Hold::Draining {
                debt,
                interval,
                ends,
            } => Hold::Draining {
                debt,
                interval,
                ends: ends.min(at_most),
            },
            Hold::None => Hold::None,
        }
    }
}
