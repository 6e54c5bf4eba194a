//! Calendar windows in UTC: which minute, hour, day and week a time is in.
//!
//! Windows are counted in whole minutes since the Unix epoch, which UTC
//! days divide evenly (Unix time has no leap seconds). A minute starts at
//! `:00`, an hour at `HH:00`, a day at `00:00` UTC and a week on Monday at
//! `00:00` UTC, as in ISO 8601. The epoch, 1970-01-01, was a Thursday, so
//! the first week counted starts on Monday 1969-12-29, three days before
//! it; its start reads as the epoch.

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// Nanoseconds in a minute.
pub(crate) const NANOS_PER_MINUTE: u64 = 60_000_000_000;
const MINUTES_PER_HOUR: u64 = 60;
const MINUTES_PER_DAY: u64 = 24 * MINUTES_PER_HOUR;
const DAYS_PER_WEEK: u64 = 7;
/// Days from the Monday that starts the epoch's week to the epoch (a
/// Thursday).
const EPOCH_WEEKDAY: u64 = 3;

/// The whole minutes since the Unix epoch at `now`.
#[inline]
pub(crate) const fn minute_of(now: Timestamp) -> u64 {
    now.as_nanos() / NANOS_PER_MINUTE
}

/// A calendar window length, aligned in UTC.
///
/// ```
/// use ratekeeper::{Timestamp, stats::Period};
///
/// // Sunday 2024-01-07 23:59:59 UTC, and one second later.
/// let sunday = Timestamp::from_secs(1_704_671_999);
/// let monday = Timestamp::from_secs(1_704_672_000);
/// assert_eq!(Period::Week.start(sunday), Timestamp::from_secs(1_704_067_200)); // Monday 01-01
/// assert_eq!(Period::Week.start(monday), monday);
/// assert_eq!(Period::Hour.start(sunday), Timestamp::from_secs(1_704_668_400)); // 23:00
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    /// A minute, from second `:00`.
    Minute,
    /// An hour, from `HH:00:00`.
    Hour,
    /// A day, from `00:00:00` UTC.
    Day,
    /// A week, from Monday `00:00:00` UTC.
    Week,
}

impl Period {
    /// The four periods, shortest first.
    pub const ALL: [Period; 4] = [Period::Minute, Period::Hour, Period::Day, Period::Week];

    /// The number of the window holding the minute `minute` (minutes since
    /// the epoch), counting windows of this period from the epoch's.
    #[inline]
    pub(crate) const fn index(self, minute: u64) -> u64 {
        match self {
            Period::Minute => minute,
            Period::Hour => minute / MINUTES_PER_HOUR,
            Period::Day => minute / MINUTES_PER_DAY,
            Period::Week => (minute / MINUTES_PER_DAY + EPOCH_WEEKDAY) / DAYS_PER_WEEK,
        }
    }

    /// The first minute of window `index` (saturating: the first week's
    /// start reads as the epoch).
    pub(crate) const fn first_minute(self, index: u64) -> u64 {
        match self {
            Period::Minute => index,
            Period::Hour => index.saturating_mul(MINUTES_PER_HOUR),
            Period::Day => index.saturating_mul(MINUTES_PER_DAY),
            Period::Week => index
                .saturating_mul(DAYS_PER_WEEK)
                .saturating_sub(EPOCH_WEEKDAY)
                .saturating_mul(MINUTES_PER_DAY),
        }
    }

    /// When the window holding `now` started, `now` read as Unix time.
    pub fn start(self, now: Timestamp) -> Timestamp {
        minute_start(self.first_minute(self.index(minute_of(now))))
    }

    /// When the window holding `now` ends (the next one's start).
    pub fn end(self, now: Timestamp) -> Timestamp {
        let next = self.index(minute_of(now)).saturating_add(1);
        minute_start(self.first_minute(next))
    }
}

/// The time minute `minute` starts (saturating).
pub(crate) const fn minute_start(minute: u64) -> Timestamp {
    Timestamp::from_nanos(minute.saturating_mul(NANOS_PER_MINUTE))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: u64) -> Timestamp {
        Timestamp::from_secs(s)
    }

    #[test]
    fn weeks_start_on_monday() {
        // 2024-01-01 was a Monday; 1970-01-01 a Thursday.
        let monday = secs(1_704_067_200);
        assert_eq!(Period::Week.start(monday), monday);
        assert_eq!(
            Period::Week.start(monday - std::time::Duration::from_secs(1)),
            secs(1_703_462_400)
        );
        assert_eq!(Period::Week.start(secs(0)), secs(0));
        assert_eq!(Period::Week.start(secs(4 * 86_400)), secs(4 * 86_400)); // Monday 1970-01-05
        assert_eq!(Period::Week.end(secs(0)), secs(4 * 86_400));
    }

    #[test]
    fn the_end_of_time_saturates() {
        for period in Period::ALL {
            let start = period.start(Timestamp::MAX);
            assert!(start <= Timestamp::MAX);
            assert!(period.end(Timestamp::MAX) >= start);
        }
    }
}
