//! Policies whose state fits one 64-bit word, for the lock-free table.

use crate::policy::fixed_window::{FixedWindow, FixedWindowState};
use crate::policy::gcra::{Gcra, GcraState};
use crate::{
    policy::{Algorithm, State},
    Decision, Policy, Timestamp,
};

/// A policy the lock-free table can run, with its state packed in a word.
///
/// - GCRA: the theoretical arrival time in nanoseconds. A token bucket runs
///   as the GCRA with its numbers, which admits the same requests (see the
///   precision note on [`Gcra`]).
/// - Fixed window: the window's number (its start divided by its length)
///   modulo 2^32 in the high half, the count in the low half; so only
///   limits below 2^32 fit. The window number is recovered from `now`: a
///   state whose number is up to 2^31 windows behind `now` is in the past,
///   one up to 2^31 ahead was written by a clock that has since gone back.
///   The sweeper evicts a window's state once it ends, long before the
///   number wraps; a state left that long could only deny early.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OneWord {
    Gcra(Gcra),
    FixedWindow(FixedWindow),
}

impl OneWord {
    /// The one-word form of `policy`, if it has one.
    pub(crate) fn for_policy(policy: &Policy) -> Option<OneWord> {
        match policy {
            Policy::Gcra(gcra) => Some(OneWord::Gcra(*gcra)),
            Policy::TokenBucket(bucket) => Gcra::from_token_bucket(bucket).ok().map(OneWord::Gcra),
            // A window from the first hit needs its start in full: the
            // locked table keeps it.
            Policy::FixedWindow(window)
                if window.limit() <= u64::from(u32::MAX) && !window.is_from_first_hit() =>
            {
                Some(OneWord::FixedWindow(*window))
            }
            _ => None,
        }
    }

    /// Decides on the packed state (`None` for a new key); returns the
    /// packed next state when it changed.
    #[inline]
    pub(crate) fn decide(
        &self,
        word: Option<u64>,
        now: Timestamp,
        cost: u64,
    ) -> (Decision, Option<u64>) {
        match self {
            OneWord::Gcra(gcra) => decide_gcra(gcra, word, now, cost),
            OneWord::FixedWindow(window) => decide_window(window, word, now, cost),
        }
    }

    /// Gives `units` back; the packed next state when it changed.
    pub(crate) fn refund(&self, word: Option<u64>, now: Timestamp, units: u64) -> Option<u64> {
        let word = word?;
        match self {
            OneWord::Gcra(gcra) => {
                let state = GcraState {
                    tat: Timestamp::from_nanos(word),
                };
                let next = gcra.refund(&state, now, units);
                (next != state).then_some(next.tat.as_nanos())
            }
            OneWord::FixedWindow(window) => {
                let state = unpack_window(window, word, now);
                let next = window.refund(&state, now, units);
                (next != state).then(|| pack_window(window, &next))
            }
        }
    }

    /// Whether the packed state is the same as a fresh one at `now`.
    pub(crate) fn is_fresh(&self, word: u64, now: Timestamp) -> bool {
        self.fresh_at(word, now) <= now
    }

    /// When the packed state becomes the same as a fresh one, read at `now`
    /// (a fixed window's number is recovered from it).
    pub(crate) fn fresh_at(&self, word: u64, now: Timestamp) -> Timestamp {
        match self {
            OneWord::Gcra(gcra) => gcra.expires_at(&GcraState {
                tat: Timestamp::from_nanos(word),
            }),
            OneWord::FixedWindow(window) => window.expires_at(&unpack_window(window, word, now)),
        }
    }
}

impl OneWord {
    /// The policy the words follow: a token bucket's GCRA.
    pub(crate) fn policy(&self) -> Policy {
        match self {
            OneWord::Gcra(gcra) => Policy::Gcra(*gcra),
            OneWord::FixedWindow(window) => Policy::FixedWindow(*window),
        }
    }

    /// The packed state as a [`State`] of [`policy`](OneWord::policy), read
    /// at `now`.
    pub(crate) fn unpack(&self, word: u64, now: Timestamp) -> State {
        match self {
            OneWord::Gcra(_) => State::Gcra(GcraState {
                tat: Timestamp::from_nanos(word),
            }),
            OneWord::FixedWindow(window) => State::FixedWindow(unpack_window(window, word, now)),
        }
    }

    /// `state` packed, if it is one of this policy's shape.
    pub(crate) fn pack(&self, state: &State) -> Option<u64> {
        match (self, state) {
            (OneWord::Gcra(_), State::Gcra(state)) => Some(state.tat.as_nanos()),
            (OneWord::FixedWindow(window), State::FixedWindow(state)) => {
                Some(pack_window(window, state))
            }
            _ => None,
        }
    }
}

/// [`OneWord::decide`] for GCRA. Always inlined: the table's update loop
/// is specialized for each policy (see `MemoryLimiter::update_at`), and
/// this is all of a GCRA check's arithmetic.
#[inline(always)]
pub(crate) fn decide_gcra(
    gcra: &Gcra,
    word: Option<u64>,
    now: Timestamp,
    cost: u64,
) -> (Decision, Option<u64>) {
    let tat = word.unwrap_or(0);
    let (decision, next) = gcra.decide_tat(tat, now.as_nanos(), cost);
    (decision, (next != tat).then_some(next))
}

/// [`OneWord::decide`] for a fixed window.
#[inline]
pub(crate) fn decide_window(
    window: &FixedWindow,
    word: Option<u64>,
    now: Timestamp,
    cost: u64,
) -> (Decision, Option<u64>) {
    let state = unpack_window(window, word.unwrap_or(0), now);
    let (decision, next) = window.decide(&state, now, cost);
    (
        decision,
        (next != state).then(|| pack_window(window, &next)),
    )
}

/// [`Algorithm::report`] on a packed GCRA state; the packed next state
/// when it changed.
#[inline(always)]
pub(crate) fn report_gcra(
    gcra: &Gcra,
    word: Option<u64>,
    now: Timestamp,
    units: u64,
) -> (Decision, Option<u64>) {
    let tat = word.unwrap_or(0);
    let (decision, next) = gcra.report_tat(tat, now.as_nanos(), units);
    (decision, (next != tat).then_some(next))
}

/// [`Algorithm::report`] on a packed fixed window. The packed count
/// saturates at 2^32 - 1, past this policy's limit: a window over it is
/// over all the same.
#[inline]
pub(crate) fn report_window(
    window: &FixedWindow,
    word: Option<u64>,
    now: Timestamp,
    units: u64,
) -> (Decision, Option<u64>) {
    let state = unpack_window(window, word.unwrap_or(0), now);
    let (decision, next) = window.report(&state, now, units);
    (
        decision,
        (next != state).then(|| pack_window(window, &next)),
    )
}

fn window_nanos(window: &FixedWindow) -> u64 {
    window.window().as_nanos() as u64
}

fn pack_window(window: &FixedWindow, state: &FixedWindowState) -> u64 {
    let number = state.start.as_nanos() / window_nanos(window);
    // count <= limit < 2^32 for any state a check writes; a report's
    // overdraft saturates below 2^32.
    ((number as u32 as u64) << 32) | state.count.min(u64::from(u32::MAX))
}

fn unpack_window(window: &FixedWindow, word: u64, now: Timestamp) -> FixedWindowState {
    let count = word & u64::from(u32::MAX);
    if count == 0 {
        return FixedWindowState::default();
    }
    let length = window_nanos(window);
    let current = now.as_nanos() / length;
    // Serial-number arithmetic on the low 32 bits of the window number.
    let behind = (current as u32).wrapping_sub((word >> 32) as u32) as i32;
    let number = if behind >= 0 {
        current.saturating_sub(behind as u64)
    } else {
        current.saturating_add(behind.unsigned_abs() as u64)
    };
    FixedWindowState {
        start: Timestamp::from_nanos(number.saturating_mul(length)),
        count,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_window_state_survives_packing() {
        let window = FixedWindow::new(10, Duration::from_secs(1)).unwrap();
        let now = Timestamp::from_secs(5_000_000_000) + Duration::from_millis(300);
        let state = FixedWindowState {
            start: Timestamp::from_secs(5_000_000_000),
            count: 7,
        };
        assert_eq!(
            unpack_window(&window, pack_window(&window, &state), now),
            state
        );
        // Read from a clock that went back three windows: still the later window.
        let earlier = now - Duration::from_secs(3);
        assert_eq!(
            unpack_window(&window, pack_window(&window, &state), earlier),
            state
        );
        // An old window is recognised as old.
        let later = now + Duration::from_secs(1_000);
        assert_eq!(
            unpack_window(&window, pack_window(&window, &state), later),
            state
        );
        assert!(OneWord::FixedWindow(window).is_fresh(pack_window(&window, &state), later));
    }

    #[test]
    fn only_limits_below_2_pow_32_fit_one_word() {
        let big = FixedWindow::new(1 << 33, Duration::from_secs(1)).unwrap();
        assert!(OneWord::for_policy(&Policy::FixedWindow(big)).is_none());
        let log = crate::SlidingLog::new(3, Duration::from_secs(1)).unwrap();
        assert!(OneWord::for_policy(&Policy::SlidingLog(log)).is_none());
    }
}
