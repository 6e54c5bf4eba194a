//! Envoy's units of time, and how a ratekeeper rate is shown in them.
//!
//! Envoy's `RateLimit` is a whole number of requests per second, minute,
//! hour, day, week, month or year, while a ratekeeper rate is any amount
//! per any period ("5 per 30s"). [`envoy_rate`] shows a rate in the
//! smallest unit at least as long as its period in which it is a whole
//! number of requests: the period's own unit when it is one (`100/minute`
//! stays 100 per minute), else a longer one (`5 per 30s` is 10 per minute,
//! `7 per 90s` 280 per hour). When there is none, it uses the smallest unit
//! at least as long as the period, rounded down (`7 per 13s` is 32 per
//! minute); periods past a week are shown per week.
//! Months and years are never chosen: their length in Envoy's own service
//! is a convention (30 and 365 days), not a calendar.

use std::time::Duration;

use super::proto::rate_limit_response::rate_limit::Unit;
use super::proto::RateLimitUnit;

const SECOND: u64 = 1;
const MINUTE: u64 = 60;
const HOUR: u64 = 60 * MINUTE;
const DAY: u64 = 24 * HOUR;
const WEEK: u64 = 7 * DAY;
/// A month as Envoy's own rate limit service counts it.
const MONTH: u64 = 30 * DAY;
/// A year as Envoy's own rate limit service counts it.
const YEAR: u64 = 365 * DAY;

/// The units [`envoy_rate`] may choose, shortest first.
const CHOICES: [(u64, Unit); 5] = [
    (SECOND, Unit::Second),
    (MINUTE, Unit::Minute),
    (HOUR, Unit::Hour),
    (DAY, Unit::Day),
    (WEEK, Unit::Week),
];

/// The length of a descriptor override's unit (months are 30 days and
/// years 365, as in Envoy's own service); `None` for `UNKNOWN`.
pub fn unit_duration(unit: RateLimitUnit) -> Option<Duration> {
    let secs = match unit {
        RateLimitUnit::Unknown => return None,
        RateLimitUnit::Second => SECOND,
        RateLimitUnit::Minute => MINUTE,
        RateLimitUnit::Hour => HOUR,
        RateLimitUnit::Day => DAY,
        RateLimitUnit::Week => WEEK,
        RateLimitUnit::Month => MONTH,
        RateLimitUnit::Year => YEAR,
    };
    Some(Duration::from_secs(secs))
}

/// The response's unit for an override's unit (the two enums have the
/// same names and numbers).
pub fn response_unit(unit: RateLimitUnit) -> Unit {
    match unit {
        RateLimitUnit::Unknown => Unit::Unknown,
        RateLimitUnit::Second => Unit::Second,
        RateLimitUnit::Minute => Unit::Minute,
        RateLimitUnit::Hour => Unit::Hour,
        RateLimitUnit::Day => Unit::Day,
        RateLimitUnit::Week => Unit::Week,
        RateLimitUnit::Month => Unit::Month,
        RateLimitUnit::Year => Unit::Year,
    }
}

/// `amount` per `period` as Envoy's requests per unit (see the module's
/// documentation for the choice of unit). Counts past `u32::MAX` are
/// clamped; a zero period or amount gives 0 per second.
pub fn envoy_rate(amount: u64, period: Duration) -> (u32, Unit) {
    let nanos = period.as_nanos();
    if nanos == 0 || amount == 0 {
        return (0, Unit::Second);
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
    (clamp((per(WEEK) / nanos).max(1)), Unit::Week)
}

/// The unit Envoy is shown for a ban (a limit of 0) of `period`: the
/// unit of that length (envoyproxy/ratelimit's month and year of 30 and
/// 365 days included), else as [`envoy_rate`] chooses for one request.
pub fn ban_unit(period: Duration) -> Unit {
    match period.as_secs() {
        _ if period.subsec_nanos() != 0 => envoy_rate(1, period).1,
        2_592_000 => Unit::Month,
        31_536_000 => Unit::Year,
        _ => envoy_rate(1, period).1,
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
        assert_eq!(envoy_rate(100, secs(60)), (100, Unit::Minute));
        assert_eq!(envoy_rate(10, secs(1)), (10, Unit::Second));
        assert_eq!(envoy_rate(5, secs(3600)), (5, Unit::Hour));
        assert_eq!(envoy_rate(1000, secs(86_400)), (1000, Unit::Day));
        assert_eq!(envoy_rate(3, secs(604_800)), (3, Unit::Week));
    }

    #[test]
    fn other_periods_take_the_smallest_exact_unit() {
        assert_eq!(envoy_rate(5, secs(30)), (10, Unit::Minute));
        assert_eq!(envoy_rate(7, secs(90)), (280, Unit::Hour));
        assert_eq!(
            envoy_rate(10, Duration::from_millis(500)),
            (20, Unit::Second)
        );
        assert_eq!(envoy_rate(120, secs(60)), (120, Unit::Minute));
    }

    #[test]
    fn inexact_periods_round_down_in_the_next_longer_unit() {
        assert_eq!(envoy_rate(7, secs(13)), (32, Unit::Minute));
        assert_eq!(
            envoy_rate(1, Duration::from_nanos(3)),
            (333_333_333, Unit::Second)
        );
        assert_eq!(envoy_rate(1, secs(30 * 86_400 + 1)), (1, Unit::Week));
    }

    #[test]
    fn huge_rates_are_clamped_and_nothing_panics() {
        assert_eq!(envoy_rate(u64::MAX, secs(1)), (u32::MAX, Unit::Second));
        assert_eq!(envoy_rate(0, secs(1)), (0, Unit::Second));
        assert_eq!(envoy_rate(1, Duration::ZERO), (0, Unit::Second));
        assert_eq!(envoy_rate(u64::MAX, Duration::MAX).1, Unit::Week);
    }

    #[test]
    fn override_units_have_envoys_lengths() {
        assert_eq!(unit_duration(RateLimitUnit::Unknown), None);
        assert_eq!(unit_duration(RateLimitUnit::Minute), Some(secs(60)));
        assert_eq!(unit_duration(RateLimitUnit::Week), Some(secs(604_800)));
        assert_eq!(unit_duration(RateLimitUnit::Month), Some(secs(2_592_000)));
        assert_eq!(unit_duration(RateLimitUnit::Year), Some(secs(31_536_000)));
        assert_eq!(response_unit(RateLimitUnit::Year), Unit::Year);
    }
}
