//! How a limit is shown to Envoy: a whole number of requests per second,
//! minute, hour, day, week, month or year.
//!
//! Envoy's `RateLimit` (and envoyproxy/ratelimit's files, and a
//! descriptor's override) say a rate in those units, while a ratekeeper
//! rate is any amount per any period ("5 per 30s"). [`shown_rate`] shows a
//! rate in the smallest unit at least as long as its period in which it is
//! a whole number of requests: the period's own unit when it is one
//! (`100/minute` stays 100 per minute), else a longer one (`5 per 30s` is
//! 10 per minute, `7 per 90s` 280 per hour). When there is none, it uses
//! the smallest unit at least as long as the period, rounded down (`7 per
//! 13s` is 32 per minute); periods past a week are shown per week.
//! Months and years are never chosen: their length in Envoy's own service
//! is a convention (30 and 365 days), not a calendar.

use std::time::Duration;

/// A unit of Envoy's rates, numbered as Envoy numbers them (its
/// `RateLimitUnit` and `RateLimitResponse.RateLimit.Unit` agree).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum RateUnit {
    /// No unit (a file's limit without one).
    Unknown = 0,
    /// A second.
    Second = 1,
    /// A minute.
    Minute = 2,
    /// An hour.
    Hour = 3,
    /// A day.
    Day = 4,
    /// A month (30 days).
    Month = 5,
    /// A year (365 days).
    Year = 6,
    /// A week.
    Week = 7,
}

impl RateUnit {
    /// The unit of Envoy's number `number`; `None` for a number Envoy does
    /// not define.
    pub(crate) fn from_number(number: i32) -> Option<RateUnit> {
        Some(match number {
            0 => RateUnit::Unknown,
            1 => RateUnit::Second,
            2 => RateUnit::Minute,
            3 => RateUnit::Hour,
            4 => RateUnit::Day,
            5 => RateUnit::Month,
            6 => RateUnit::Year,
            7 => RateUnit::Week,
            _ => return None,
        })
    }

    /// The unit's name in lower case (`minute`).
    pub fn name(self) -> &'static str {
        match self {
            RateUnit::Unknown => "unknown",
            RateUnit::Second => "second",
            RateUnit::Minute => "minute",
            RateUnit::Hour => "hour",
            RateUnit::Day => "day",
            RateUnit::Month => "month",
            RateUnit::Year => "year",
            RateUnit::Week => "week",
        }
    }

    /// The unit's length (months are 30 days and years 365, as in Envoy's
    /// own service); `None` for [`RateUnit::Unknown`].
    pub fn duration(self) -> Option<Duration> {
        let secs = match self {
            RateUnit::Unknown => return None,
            RateUnit::Second => SECOND,
            RateUnit::Minute => MINUTE,
            RateUnit::Hour => HOUR,
            RateUnit::Day => DAY,
            RateUnit::Week => WEEK,
            RateUnit::Month => MONTH,
            RateUnit::Year => YEAR,
        };
        Some(Duration::from_secs(secs))
    }
}

/// A limit as Envoy's `current_limit` shows it: its name (empty when it
/// has none) and rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The limit's name.
    pub name: String,
    /// Its requests per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: RateUnit,
}

const SECOND: u64 = 1;
const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const WEEK: u64 = 7 * DAY;
/// A month as Envoy's own rate limit service counts it.
const MONTH: u64 = 30 * DAY;
/// A year as Envoy's own rate limit service counts it.
const YEAR: u64 = 365 * DAY;

/// The units [`shown_rate`] may choose, shortest first.
const CHOICES: [(u64, RateUnit); 5] = [
    (SECOND, RateUnit::Second),
    (MINUTE, RateUnit::Minute),
    (HOUR, RateUnit::Hour),
    (DAY, RateUnit::Day),
    (WEEK, RateUnit::Week),
];

/// `amount` per `period` as Envoy's requests per unit (see the module's
/// documentation for the choice of unit). Counts past `u32::MAX` are
/// clamped; a zero period or amount gives 0 per second.
pub fn shown_rate(amount: u64, period: Duration) -> (u32, RateUnit) {
    let nanos = period.as_nanos();
    if nanos == 0 || amount == 0 {
        return (0, RateUnit::Second);
    }
    let per = |secs: u64| u128::from(amount) * u128::from(secs) * 1_000_000_000;
    let clamp = |n: u128| u32::try_from(n).unwrap_or(u32::MAX);
    let long_enough = || {
        CHOICES
            .into_iter()
            .filter(|&(secs, _)| u128::from(secs) * 1_000_000_000 >= nanos)
    };
    // The smallest unit, at least as long as the period, in which the rate
    // is a whole number of requests that fits.
    for (secs, unit) in long_enough() {
        let scaled = per(secs);
        if scaled % nanos == 0 && u32::try_from(scaled / nanos).is_ok() {
            return (clamp(scaled / nanos), unit);
        }
    }
    // Otherwise the smallest unit at least as long as the period.
    if let Some((secs, unit)) = long_enough().next() {
        return (clamp(per(secs) / nanos), unit);
    }
    // Periods longer than a week: per week, rounded down (at least 1, so
    // the limit never reads as "nothing").
    (clamp((per(WEEK) / nanos).max(1)), RateUnit::Week)
}

/// The unit Envoy is shown for a ban (a limit of 0) of `period`: the
/// unit of that length (envoyproxy/ratelimit's month and year of 30 and
/// 365 days included), else as [`shown_rate`] chooses for one request.
pub fn ban_unit(period: Duration) -> RateUnit {
    match period.as_secs() {
        _ if period.subsec_nanos() != 0 => shown_rate(1, period).1,
        2_592_000 => RateUnit::Month,
        31_536_000 => RateUnit::Year,
        _ => shown_rate(1, period).1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn whole_units_are_kept() {
        assert_eq!(shown_rate(100, secs(60)), (100, RateUnit::Minute));
        assert_eq!(shown_rate(10, secs(1)), (10, RateUnit::Second));
        assert_eq!(shown_rate(5, secs(3600)), (5, RateUnit::Hour));
        assert_eq!(shown_rate(1000, secs(86_400)), (1000, RateUnit::Day));
        assert_eq!(shown_rate(3, secs(604_800)), (3, RateUnit::Week));
    }

    #[test]
    fn other_periods_take_the_smallest_exact_unit() {
        assert_eq!(shown_rate(5, secs(30)), (10, RateUnit::Minute));
        assert_eq!(shown_rate(7, secs(90)), (280, RateUnit::Hour));
        assert_eq!(
            shown_rate(10, Duration::from_millis(500)),
            (20, RateUnit::Second)
        );
        assert_eq!(shown_rate(120, secs(60)), (120, RateUnit::Minute));
    }

    #[test]
    fn inexact_periods_round_down_in_the_next_longer_unit() {
        assert_eq!(shown_rate(7, secs(13)), (32, RateUnit::Minute));
        assert_eq!(
            shown_rate(1, Duration::from_nanos(3)),
            (333_333_333, RateUnit::Second)
        );
        assert_eq!(shown_rate(1, secs(30 * 86_400 + 1)), (1, RateUnit::Week));
    }

    #[test]
    fn huge_rates_are_clamped_and_nothing_panics() {
        assert_eq!(shown_rate(u64::MAX, secs(1)), (u32::MAX, RateUnit::Second));
        assert_eq!(shown_rate(0, secs(1)), (0, RateUnit::Second));
        assert_eq!(shown_rate(1, Duration::ZERO), (0, RateUnit::Second));
        assert_eq!(shown_rate(u64::MAX, Duration::MAX).1, RateUnit::Week);
    }

    #[test]
    fn units_have_envoys_numbers_and_lengths() {
        assert_eq!(RateUnit::Unknown.duration(), None);
        assert_eq!(RateUnit::Minute.duration(), Some(secs(60)));
        assert_eq!(RateUnit::Week.duration(), Some(secs(604_800)));
        assert_eq!(RateUnit::Month.duration(), Some(secs(2_592_000)));
        assert_eq!(RateUnit::Year.duration(), Some(secs(31_536_000)));
        for number in 0..8 {
            let unit = RateUnit::from_number(number).unwrap();
            assert_eq!(unit as i32, number);
        }
        assert_eq!(RateUnit::from_number(8), None);
        assert_eq!(RateUnit::from_number(-1), None);
    }
}
