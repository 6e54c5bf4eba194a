//! One grammar for every duration ratekeeper reads: a rate's period
//! (`"5 per 30s"`), the service's timeouts (`"250ms"`), `simulate`'s
//! patterns and traces.
//!
//! A duration is a number, optionally with a fraction, then a unit, with
//! optional whitespace between: `"10s"`, `"1.5 h"`, `"250ms"`, `"2 days"`.
//! Digits may be grouped with `_` (`"1_000ms"`). Units: `ns`, `us` (`µs`),
//! `ms`, `s`, `m` (minutes), `h`, `d`, `w`, and their long names (`second`,
//! `minutes`, ...), in any case. A fraction is exact to the nanosecond
//! (digits past it are dropped); the largest duration is about 584 years
//! (`u64::MAX` nanoseconds).
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::duration::{self, ParseDurationError};
//!
//! assert_eq!(duration::parse("1.5s"), Ok(Duration::from_millis(1_500)));
//! assert_eq!(duration::parse(" 2 minutes "), Ok(Duration::from_secs(120)));
//! assert_eq!(
//!     duration::parse("3 fortnights"),
//!     Err(ParseDurationError::UnknownUnit { unit: "fortnights".into() }),
//! );
//! ```

use std::time::Duration;

use thiserror::Error;

/// A time unit: its length, the names it is written with and the names
/// a rate's `Display` writes.
pub(crate) struct Unit {
    pub(crate) nanos: u64,
    /// Written after a count: `"30s"`.
    pub(crate) short: &'static str,
    /// Written alone: `"second"`.
    pub(crate) long: &'static str,
    /// Every accepted spelling, compared ignoring ASCII case.
    pub(crate) names: &'static [&'static str],
}

/// The units, largest first (the order a rate's `Display` tries them).
pub(crate) const UNITS: [Unit; 8] = [
    Unit {
        nanos: 7 * 24 * 60 * 60 * 1_000_000_000,
        short: "w",
        long: "week",
        names: &["w", "wk", "wks", "week", "weeks"],
    },
    Unit {
        nanos: 24 * 60 * 60 * 1_000_000_000,
        short: "d",
        long: "day",
        names: &["d", "day", "days"],
    },
    Unit {
        nanos: 60 * 60 * 1_000_000_000,
        short: "h",
        long: "hour",
        names: &["h", "hr", "hrs", "hour", "hours"],
    },
    Unit {
        nanos: 60 * 1_000_000_000,
        short: "m",
        long: "minute",
        names: &["m", "min", "mins", "minute", "minutes"],
    },
    Unit {
        nanos: 1_000_000_000,
        short: "s",
        long: "second",
        names: &["s", "sec", "secs", "second", "seconds"],
    },
    Unit {
        nanos: 1_000_000,
        short: "ms",
        long: "millisecond",
        names: &["ms", "msec", "msecs", "millisecond", "milliseconds"],
    },
    Unit {
        nanos: 1_000,
        short: "us",
        long: "microsecond",
        // U+00B5 MICRO SIGN and U+03BC GREEK SMALL LETTER MU.
        names: &[
            "us",
            "\u{b5}s",
            "\u{3bc}s",
            "usec",
            "usecs",
            "microsecond",
            "microseconds",
        ],
    },
    Unit {
        nanos: 1,
        short: "ns",
        long: "nanosecond",
        names: &["ns", "nsec", "nsecs", "nanosecond", "nanoseconds"],
    },
];

impl Unit {
    fn lookup(name: &str) -> Option<&'static Unit> {
        UNITS
            .iter()
            .find(|unit| unit.names.iter().any(|n| n.eq_ignore_ascii_case(name)))
    }
}

/// Why a string is not a duration.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseDurationError {
    /// The string is empty or only whitespace.
    #[error("empty duration; expected a number and a unit such as \"10s\" or \"250ms\"")]
    Empty,
    /// The number is not digits with an optional fraction, as in `"-3s"`
    /// or `"1e3s"`.
    #[error("invalid number {text:?} in duration; expected digits with an optional fraction, as in \"10s\" or \"1.5s\"")]
    InvalidNumber {
        /// The text where a number was expected.
        text: String,
    },
    /// A number without a unit, as in `"10"`.
    #[error("missing time unit after {number:?}; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")")]
    MissingUnit {
        /// The number as written.
        number: String,
    },
    /// The unit is not one of the accepted ones.
    #[error("unknown time unit {unit:?}; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
    /// Longer than `u64::MAX` nanoseconds (about 584 years).
    #[error("the duration {text:?} is too long; the longest is about 584 years")]
    TooLong {
        /// The duration as written.
        text: String,
    },
    /// Something follows the unit.
    #[error("unexpected {text:?} after the duration")]
    UnexpectedTrailing {
        /// What follows.
        text: String,
    },
}

/// Parses a duration such as `"10s"`, `"1.5h"` or `"250 ms"`; see the
/// [module](self) for the grammar.
pub fn parse(text: &str) -> Result<Duration, ParseDurationError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ParseDurationError::Empty);
    }
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '_' | '.' | '+' | '-')))
        .unwrap_or(text.len());
    let (number, rest) = text.split_at(number_end);
    let rest = rest.trim_start();
    let unit_end = rest
        .find(|c: char| !c.is_alphabetic())
        .unwrap_or(rest.len());
    let (unit, trailing) = rest.split_at(unit_end);
    if unit.is_empty() && trailing.is_empty() && !number.is_empty() {
        return Err(ParseDurationError::MissingUnit {
            number: number.to_owned(),
        });
    }
    if !trailing.trim().is_empty() {
        return Err(ParseDurationError::UnexpectedTrailing {
            text: trailing.trim().to_owned(),
        });
    }
    let nanos = parse_parts(number, unit)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| ParseDurationError::TooLong {
            text: text.to_owned(),
        })
}

/// The length of one `name` (`"ms"`, `"minutes"`, ...), for a grammar
/// that writes a unit alone (`"50/s"`); `None` for an unknown name.
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(ratekeeper::duration::unit("MIN"), Some(Duration::from_secs(60)));
/// assert_eq!(ratekeeper::duration::unit("fortnight"), None);
/// ```
pub fn unit(name: &str) -> Option<Duration> {
    Unit::lookup(name).map(|unit| Duration::from_nanos(unit.nanos))
}

/// The nanoseconds of `number` (digits, `_`, one optional `.` and
/// fraction) times `unit`, exact to the nanosecond: the grammar's core,
/// for parsers that have found the two parts themselves (a rate's period,
/// a pattern's columns).
pub(crate) fn parse_parts(number: &str, unit: &str) -> Result<u128, ParseDurationError> {
    let invalid = || ParseDurationError::InvalidNumber {
        text: number.to_owned(),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.chars().all(|c| c.is_ascii_digit() || c == '_');
    if !whole.starts_with(|c: char| c.is_ascii_digit())
        || !digits_only(whole)
        || !digits_only(fraction)
        || (number.contains('.') && fraction.is_empty())
    {
        return Err(invalid());
    }
    if unit.is_empty() {
        return Err(ParseDurationError::MissingUnit {
            number: number.to_owned(),
        });
    }
    let unit_nanos = u128::from(
        Unit::lookup(unit)
            .ok_or_else(|| ParseDurationError::UnknownUnit {
                unit: unit.to_owned(),
            })?
            .nanos,
    );
    let too_long = || ParseDurationError::TooLong {
        text: format!("{number}{unit}"),
    };
    // Leading zeros and separators do not count towards the length limit.
    let whole: String = whole.chars().filter(char::is_ascii_digit).collect();
    let whole = whole.trim_start_matches('0');
    if whole.len() > 20 {
        return Err(too_long());
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_long())?
    };
    let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_long)?;
    let mut scale = unit_nanos;
    for digit in fraction.bytes().filter(u8::is_ascii_digit).take(20) {
        scale /= 10;
        nanos += u128::from(digit - b'0') * scale;
    }
    if nanos > u128::from(u64::MAX) {
        return Err(too_long());
    }
    Ok(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_and_its_long_names_parse() {
        for unit in &UNITS {
            for name in unit.names {
                assert_eq!(
                    parse(&format!("2{name}")).map(|d| d.as_nanos()),
                    Ok(2 * u128::from(unit.nanos)),
                    "{name}"
                );
                assert_eq!(
                    parse(&format!("2 {}", name.to_ascii_uppercase())).map(|d| d.as_nanos()),
                    Ok(2 * u128::from(unit.nanos)),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn fractions_are_exact_to_the_nanosecond() {
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1_500)));
        assert_eq!(parse("0.000000001s"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse("0.0000000019s"), Ok(Duration::from_nanos(1)));
        assert_eq!(parse("1_000ms"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("0.25h"), Ok(Duration::from_secs(900)));
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert_eq!(parse("  "), Err(ParseDurationError::Empty));
        assert_eq!(
            parse("10"),
            Err(ParseDurationError::MissingUnit {
                number: "10".into()
            })
        );
        assert_eq!(
            parse("s"),
            Err(ParseDurationError::InvalidNumber { text: "".into() })
        );
        assert_eq!(
            parse("-3s"),
            Err(ParseDurationError::InvalidNumber { text: "-3".into() })
        );
        assert_eq!(
            parse("1.s"),
            Err(ParseDurationError::InvalidNumber { text: "1.".into() })
        );
        assert_eq!(
            parse("1.2.3s"),
            Err(ParseDurationError::InvalidNumber {
                text: "1.2.3".into()
            })
        );
        assert_eq!(
            parse("3 fortnights"),
            Err(ParseDurationError::UnknownUnit {
                unit: "fortnights".into()
            })
        );
        assert_eq!(
            parse("3s later"),
            Err(ParseDurationError::UnexpectedTrailing {
                text: "later".into()
            })
        );
        assert!(matches!(
            parse("600 years"),
            Err(ParseDurationError::UnknownUnit { .. })
        ));
        assert_eq!(parse("1000w"), Ok(Duration::from_secs(1000 * 7 * 86_400)));
        assert!(matches!(
            parse("100000w"),
            Err(ParseDurationError::TooLong { .. })
        ));
        assert!(matches!(
            parse("99999999999999999999999999s"),
            Err(ParseDurationError::TooLong { .. })
        ));
    }

    #[test]
    fn no_input_panics() {
        for text in [
            "",
            ".",
            "_",
            "0",
            "0s",
            "00000000000000000000000001s",
            "1.\u{b5}s",
            "\u{3bc}",
            "9".repeat(400).as_str(),
        ] {
            let _ = parse(text);
        }
    }
}
