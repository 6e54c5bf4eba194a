//! A limit's penalty (`block_for`, `block_max`, `block_forget`): a key it
//! refuses is blocked for a while, longer for a repeat offender.

use std::time::Duration;

/// How long a key a limit refuses is blocked: `block_for` for a first
/// offence, doubled for each offence since the key's last was forgotten,
/// up to `block_max`; an offence is forgotten `block_forget` after it
/// (one at a time: a key quiet for three such periods has three fewer).
///
/// ```
/// use std::time::Duration;
/// use ratekeeper_server::config::Penalty;
///
/// let minutes = |n: u64| Duration::from_secs(60 * n);
/// let penalty = Penalty::new(minutes(15), minutes(60), minutes(24 * 60));
/// assert_eq!(penalty.block(1), minutes(15));
/// assert_eq!(penalty.block(2), minutes(30));
/// assert_eq!(penalty.block(3), minutes(60));
/// assert_eq!(penalty.block(9), minutes(60));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Penalty {
    /// A first offence's block (`block_for`).
    pub block_for: Duration,
    /// The longest block (`block_max`; `block_for` unless given: no
    /// doubling).
    pub block_max: Duration,
    /// How long an offence counts towards a longer block (`block_forget`).
    pub block_forget: Duration,
}

impl Penalty {
    /// The most offences a key's record holds: more would double past
    /// any `block_max` a file may set.
    pub const MAX_OFFENCES: u64 = 32;

    /// What the store names a limit's record of offences: the limit's
    /// name and this (a digest of the name when that would be too long).
    pub const OFFENCES_SUFFIX: &'static str = "~offences";

    /// A penalty of `block_for`, doubled up to `block_max`, offences
    /// forgotten after `block_forget`.
    pub fn new(block_for: Duration, block_max: Duration, block_forget: Duration) -> Penalty {
        Penalty {
            block_for,
            block_max: block_max.max(block_for),
            block_forget,
        }
    }

    /// The block of a key's `offences`-th offence (1 for a first): the
    /// first's, doubled for each one before it, at most `block_max`.
    pub fn block(&self, offences: u64) -> Duration {
        let doublings = offences.saturating_sub(1).min(Self::MAX_OFFENCES);
        let factor = 1u32.checked_shl(doublings as u32).unwrap_or(u32::MAX);
        self.block_for
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.block_max)
    }
}
