//! Points in time as the policies see them.
//!
//! Policies never read a clock: every decision takes a [`Timestamp`], which a
//! [`Clock`](crate::Clock) produces. A timestamp is a count of nanoseconds
//! since the epoch of the clock that made it, so timestamps from different
//! clocks must not be mixed in one state.

use std::fmt;
use std::ops::{Add, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A point in time: whole nanoseconds since the epoch of the clock that
/// produced it.
///
/// `u64` nanoseconds cover about 584 years, so a Unix-time timestamp lasts
/// until the year 2554. All arithmetic saturates instead of overflowing: a
/// window or arrival time that would end past [`Timestamp::MAX`] ends at it,
/// so decisions within one period of the end of time are conservative
/// approximations, never panics.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::Timestamp;
///
/// let t = Timestamp::from_millis(1_500);
/// assert_eq!(t + Duration::from_millis(500), Timestamp::from_secs(2));
/// assert_eq!(Timestamp::from_secs(2).duration_since(t), Duration::from_millis(500));
/// // Never negative: an earlier time gives zero.
/// assert_eq!(t.duration_since(Timestamp::from_secs(2)), Duration::ZERO);
/// ```
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's epoch.
    pub const ZERO: Timestamp = Timestamp(0);
    /// The latest representable time; arithmetic saturates here.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// The timestamp `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Timestamp(nanos)
    }

    /// The timestamp `micros` microseconds after the epoch (saturating).
    pub const fn from_micros(micros: u64) -> Self {
        Timestamp(micros.saturating_mul(1_000))
    }

    /// The timestamp `millis` milliseconds after the epoch (saturating).
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis.saturating_mul(1_000_000))
    }

    /// The timestamp `secs` seconds after the epoch (saturating).
    pub const fn from_secs(secs: u64) -> Self {
        Timestamp(secs.saturating_mul(1_000_000_000))
    }

    /// The timestamp `since_epoch` after the epoch (saturating).
    pub const fn from_duration(since_epoch: Duration) -> Self {
        Timestamp(duration_to_nanos(since_epoch))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds since the epoch, rounded down.
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Whole milliseconds since the epoch, rounded down.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// The time since the epoch.
    pub const fn as_duration(self) -> Duration {
        Duration::from_nanos(self.0)
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub const fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub const fn saturating_add(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_to_nanos(d)))
    }

    /// `self - d`, saturating at [`Timestamp::ZERO`].
    pub const fn saturating_sub(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_to_nanos(d)))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating addition.
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturating subtraction.
    fn sub(self, rhs: Duration) -> Timestamp {
        self.saturating_sub(rhs)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Timestamp({}.{:09}s)",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// A duration in whole nanoseconds, saturating at `u64::MAX`.
pub(crate) const fn duration_to_nanos(d: Duration) -> u64 {
    let nanos = d.as_nanos();
    if nanos > u64::MAX as u128 {
        u64::MAX
    } else {
        nanos as u64
    }
}
