//! How `/readyz` tells when the store went down: a date a reader can take
//! in (RFC 3339, UTC) and for how long, rather than a count of seconds
//! since 1970.

/// `since` (Unix seconds) as `2026-01-01T00:00:00Z, for 42 s`, the
/// duration counted to `now` (Unix seconds; 0 when the clock is behind).
pub(crate) fn since_and_for(since: u64, now: u64) -> String {
    format!(
        "{}, for {}",
        rfc3339(since),
        elapsed(now.saturating_sub(since))
    )
}

/// Unix seconds as an RFC 3339 UTC timestamp (Unix time has no leap
/// seconds, so days divide evenly).
pub(crate) fn rfc3339(unix_secs: u64) -> String {
    let (days, rest) = (unix_secs / 86_400, unix_secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// The calendar date `days` after 1970-01-01 (the proleptic Gregorian
/// calendar, by Howard Hinnant's `civil_from_days`, for days on or after
/// the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    // Counted from 0000-03-01, so that the leap day ends a year.
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// A duration in the largest unit that keeps it readable: `42 s`,
/// `12 min`, `5 h`, `3 days`.
pub(crate) fn elapsed(secs: u64) -> String {
    match secs {
        0..120 => format!("{secs} s"),
        120..7_200 => format!("{} min", secs / 60),
        7_200..172_800 => format!("{} h", secs / 3_600),
        _ => format!("{} days", secs / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::{elapsed, rfc3339, since_and_for};

    #[test]
    fn dates_are_rfc_3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_767_225_600), "2026-01-01T00:00:00Z");
        // A leap day, and the last second of a leap year.
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
        assert_eq!(rfc3339(4_102_444_800), "2100-01-01T00:00:00Z");
        // Any number formats: the largest is past year 500 billion.
        assert!(rfc3339(u64::MAX).ends_with('Z'));
    }

    #[test]
    fn durations_are_in_a_readable_unit() {
        assert_eq!(elapsed(0), "0 s");
        assert_eq!(elapsed(42), "42 s");
        assert_eq!(elapsed(119), "119 s");
        assert_eq!(elapsed(120), "2 min");
        assert_eq!(elapsed(7_199), "119 min");
        assert_eq!(elapsed(7_200), "2 h");
        assert_eq!(elapsed(172_800), "2 days");
        assert_eq!(
            since_and_for(1_767_225_600, 1_767_225_642),
            "2026-01-01T00:00:00Z, for 42 s"
        );
        assert_eq!(since_and_for(100, 50), "1970-01-01T00:01:40Z, for 0 s");
    }
}
