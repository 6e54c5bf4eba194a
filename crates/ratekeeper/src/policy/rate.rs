//! Rates such as `"100/minute"`: an amount per period with an optional
//! burst, and the one parser for rate strings used by configuration files
//! and command lines.
//!
//! The grammar, case-insensitive and with flexible whitespace:
//!
//! ```text
//! rate   = amount ("/" | "per") period [[","] "burst" amount]
//! amount = digit {digit | "_"}            whole numbers only: "1_000" is 1000
//! period = [count] unit                   a duration ("30s", "1.5h") or a unit alone
//! ```
//!
//! The period is a duration in the grammar of [`crate::duration`], the one
//! every duration ratekeeper reads is written in; a unit alone is one of it.
//!
//! [`Rate`]'s [`Display`](fmt::Display) writes a canonical form that parses
//! back to the same value.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use thiserror::Error;

use crate::duration::{self, ParseDurationError, UNITS};
use crate::policy::{check_quota, PolicyError, MAX_PERIOD};

/// An amount of requests per period, with an optional burst: the numbers a
/// rate-limiting policy is built from.
///
/// The amount and the burst are in `1..=`[`MAX_QUOTA`](crate::policy::MAX_QUOTA), the
/// period is positive and at most [`MAX_PERIOD`](crate::policy::MAX_PERIOD). A rate
/// parses from strings such as `"100/minute"`, `"5 per 30s"` or
/// `"10/s, burst 20"` (see [`ParseRateError`] for what is refused), and
/// displays in a canonical form that parses back to the same value.
///
/// # Rate strings
///
/// `AMOUNT / [COUNT] UNIT [[,] burst BURST]`, where `per` may stand for `/`.
/// Case does not matter and whitespace may go between any two parts.
///
/// - `AMOUNT` and `BURST` are whole numbers, optionally with `_`
///   separators (`1_000`); decimals, signs and suffixes are refused.
///   `COUNT` may have a fraction (`"1 per 1.5s"`): the period is a
///   [duration](crate::duration).
/// - `UNIT` is one of `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`, `d` or `w`,
///   or a longer spelling: `msec`, `millisecond(s)`, `sec(s)`, `second(s)`,
///   `min(s)`, `minute(s)`, `hr(s)`, `hour(s)`, `day(s)`, `wk(s)`, `week(s)`,
///   `nsec`, `nanosecond(s)`, `usec`, `microsecond(s)`. `m` is minutes.
/// - `COUNT` multiplies the unit: `"5 per 30s"` is 5 per 30 seconds.
///
/// So `"100/minute"`, `"100/min"`, `"100 per m"`, `"3 per 250ms"`, `"1/2h"`,
/// `"7/week"` and `"10/s, burst 20"` are all rates.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::Rate;
///
/// let rate: Rate = "10 per 30s, burst 20".parse().unwrap();
/// assert_eq!(rate.amount(), 10);
/// assert_eq!(rate.period(), Duration::from_secs(30));
/// assert_eq!(rate.burst(), 20);
/// assert_eq!(rate.to_string(), "10/30s burst 20");
///
/// // Without "burst", the burst is the amount.
/// let rate: Rate = "1_000 / Hour".parse().unwrap();
/// assert_eq!(rate, Rate::per_hour(1_000).unwrap());
/// assert_eq!((rate.burst(), rate.explicit_burst()), (1_000, None));
/// assert_eq!(rate.to_string(), "1000/hour");
///
/// // Display round-trips.
/// assert_eq!(rate.to_string().parse::<Rate>(), Ok(rate));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rate {
    amount: u64,
    period: Duration,
    burst: Option<u64>,
}

impl Rate {
    /// `amount` requests per `period`, with the burst equal to the amount.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Zero`] if `amount` or `period` is zero (field
    /// `"amount"` or `"period"`), [`PolicyError::TooLarge`] if `amount` is
    /// above [`MAX_QUOTA`](crate::policy::MAX_QUOTA) or `period` above
    /// [`MAX_PERIOD`](crate::policy::MAX_PERIOD).
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{Rate, policy::PolicyError};
    ///
    /// let rate = Rate::new(5, Duration::from_secs(30)).unwrap();
    /// assert_eq!(rate.to_string(), "5/30s");
    /// assert_eq!(Rate::new(0, Duration::from_secs(1)), Err(PolicyError::Zero { field: "amount" }));
    /// ```
    pub fn new(amount: u64, period: Duration) -> Result<Rate, PolicyError> {
        let amount = check_quota("amount", amount)?;
        let period = check_period_nanos(period.as_nanos())?;
        Ok(Rate {
            amount,
            period,
            burst: None,
        })
    }

    /// The same rate with an explicit burst: how many requests may pass at
    /// once after a quiet spell.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Zero`] if `burst` is zero and [`PolicyError::TooLarge`]
    /// if it is above [`MAX_QUOTA`](crate::policy::MAX_QUOTA), both with field
    /// `"burst"`.
    ///
    /// ```
    /// use ratekeeper::Rate;
    ///
    /// let rate = Rate::per_second(10).unwrap().with_burst(20).unwrap();
    /// assert_eq!((rate.amount(), rate.burst()), (10, 20));
    /// assert_eq!(rate.to_string(), "10/second burst 20");
    /// ```
    pub fn with_burst(self, burst: u64) -> Result<Rate, PolicyError> {
        let burst = check_quota("burst", burst)?;
        Ok(Rate {
            burst: Some(burst),
            ..self
        })
    }

    /// `n` requests per second; see [`Rate::new`] for the errors.
    pub fn per_second(n: u64) -> Result<Rate, PolicyError> {
        Rate::new(n, Duration::from_secs(1))
    }

    /// `n` requests per minute; see [`Rate::new`] for the errors.
    pub fn per_minute(n: u64) -> Result<Rate, PolicyError> {
        Rate::new(n, Duration::from_secs(60))
    }

    /// `n` requests per hour; see [`Rate::new`] for the errors.
    pub fn per_hour(n: u64) -> Result<Rate, PolicyError> {
        Rate::new(n, Duration::from_secs(60 * 60))
    }

    /// `n` requests per day (24 hours); see [`Rate::new`] for the errors.
    pub fn per_day(n: u64) -> Result<Rate, PolicyError> {
        Rate::new(n, Duration::from_secs(24 * 60 * 60))
    }

    /// How many requests each period allows.
    pub fn amount(&self) -> u64 {
        self.amount
    }

    /// The period over which [`amount`](Rate::amount) requests are allowed.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The burst: the explicit one if one was given, else the amount.
    pub fn burst(&self) -> u64 {
        self.burst.unwrap_or(self.amount)
    }

    /// The burst if one was given explicitly (with [`Rate::with_burst`] or
    /// `"burst N"` in the string), else `None`.
    pub fn explicit_burst(&self) -> Option<u64> {
        self.burst
    }
}

/// Checks a period in nanoseconds against `1..=MAX_PERIOD`.
fn check_period_nanos(nanos: u128) -> Result<Duration, PolicyError> {
    let too_large = || PolicyError::TooLarge {
        field: "period",
        value: nanos,
        max: MAX_PERIOD.as_nanos(),
    };
    if nanos == 0 {
        Err(PolicyError::Zero { field: "period" })
    } else if nanos > MAX_PERIOD.as_nanos() {
        Err(too_large())
    } else {
        let nanos = u64::try_from(nanos).map_err(|_| too_large())?;
        Ok(Duration::from_nanos(nanos))
    }
}

/// Why a string is not a [`Rate`].
///
/// Each message names what is wrong and, where it helps, quotes the
/// offending text, for a person editing a configuration file.
///
/// ```
/// use ratekeeper::{Rate, policy::{ParseRateError, PolicyError}};
///
/// assert_eq!(
///     "3/fortnight".parse::<Rate>(),
///     Err(ParseRateError::UnknownUnit { unit: "fortnight".into() }),
/// );
/// assert_eq!(
///     "1.5/s".parse::<Rate>(),
///     Err(ParseRateError::InvalidNumber { text: "1.5".into() }),
/// );
/// assert_eq!(
///     "0/s".parse::<Rate>(),
///     Err(ParseRateError::Invalid(PolicyError::Zero { field: "amount" })),
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParseRateError {
    /// The string is empty or only whitespace.
    #[error("empty rate; expected an amount per period such as \"100/minute\"")]
    Empty,
    /// No `/` or `per` between the amount and the period, as in `"100 minute"`.
    #[error(
        "missing \"/\" or \"per\" between the amount and the period in rate; \
         expected something like \"100/minute\" or \"5 per 30s\""
    )]
    MissingSeparator,
    /// The amount or the period's count is not a whole number that fits in a
    /// `u64`, for example `"1.5"`, `"-3"`, `"abc"` or `"1e3"`; `text` is
    /// empty when the amount is missing, as in `"/s"`.
    #[error("{}", invalid_number_message(.text))]
    InvalidNumber {
        /// The text where a number was expected.
        text: String,
    },
    /// Nothing, or only a count, after the `/` or `per`, as in `"5/"` or
    /// `"5/30"`.
    #[error(
        "missing time unit in rate; expected a unit after \"/\" or \"per\", \
         as in \"100/minute\" or \"5/30s\""
    )]
    MissingUnit,
    /// The period's unit is not one of the accepted ones.
    #[error(
        "unknown time unit {unit:?} in rate; expected ms, s, m, h, d or w \
         (or ns, us, or a long name such as \"minutes\")"
    )]
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
    /// Something other than `burst N` follows the period, or something
    /// follows the burst.
    #[error(
        "unexpected {text:?} at the end of rate; only an optional \"burst N\" \
         may follow the period, as in \"10/s burst 20\""
    )]
    UnexpectedTrailing {
        /// The unexpected text, trimmed.
        text: String,
    },
    /// `burst` is not followed by a whole number; `text` is what followed it
    /// (empty when nothing did).
    #[error("{}", invalid_burst_message(.text))]
    InvalidBurst {
        /// The text after `burst`.
        text: String,
    },
    /// The string is well formed but a number is out of range: a zero or too
    /// large amount, period or burst.
    #[error("invalid rate: {0}")]
    Invalid(PolicyError),
}

impl From<PolicyError> for ParseRateError {
    fn from(error: PolicyError) -> Self {
        ParseRateError::Invalid(error)
    }
}

fn invalid_number_message(text: &str) -> String {
    if text.is_empty() {
        "missing amount in rate; expected a whole number before \"/\" or \"per\", \
         as in \"100/minute\""
            .to_owned()
    } else if text.chars().all(|c| c.is_ascii_digit() || c == '_') {
        format!("number {text:?} in rate is too large")
    } else {
        format!(
            "invalid number {text:?} in rate; expected a whole number such as 100 \
             or 1_000, without sign, decimals or suffix"
        )
    }
}

fn invalid_burst_message(text: &str) -> String {
    if text.is_empty() {
        "missing number after \"burst\" in rate; expected a whole number, \
         as in \"10/s burst 20\""
            .to_owned()
    } else {
        format!("invalid burst {text:?} in rate; expected a whole number, as in \"10/s burst 20\"")
    }
}

/// Splits `s` before the first char that fails `keep`.
fn split_while(s: &str, keep: impl Fn(char) -> bool) -> (&str, &str) {
    let end = s
        .char_indices()
        .find(|&(_, c)| !keep(c))
        .map_or(s.len(), |(i, _)| i);
    s.split_at_checked(end).unwrap_or((s, ""))
}

/// Parses a whole number written with ASCII digits and `_` separators; the
/// first char must be a digit.
fn parse_number(text: &str) -> Option<u64> {
    if !text.starts_with(|c: char| c.is_ascii_digit())
        || !text.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    text.chars()
        .filter(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

impl FromStr for Rate {
    type Err = ParseRateError;

    /// Parses a rate such as `"100/minute"`, `"5 per 30s"` or
    /// `"10/s, burst 20"`; see [`Rate`] for the forms accepted and
    /// [`ParseRateError`] for the errors.
    fn from_str(s: &str) -> Result<Rate, ParseRateError> {
        let s = s.trim();
        if s.is_empty() {
            return Err(ParseRateError::Empty);
        }

        // The amount: everything up to whitespace or "/", so that "1.5",
        // "10k" or "1e3" are reported whole.
        let (amount_text, rest) = split_while(s, |c| !c.is_whitespace() && c != '/');
        let amount = parse_number(amount_text).ok_or_else(|| ParseRateError::InvalidNumber {
            text: amount_text.to_owned(),
        })?;

        // "/" or "per".
        let rest = rest.trim_start();
        let rest = match rest.strip_prefix('/') {
            Some(rest) => rest,
            None => {
                let (word, rest) = split_while(rest, char::is_alphabetic);
                if !word.eq_ignore_ascii_case("per") {
                    return Err(ParseRateError::MissingSeparator);
                }
                rest
            }
        };

        // An optional count, then the unit.
        let (count_text, rest) = split_while(rest.trim_start(), |c| {
            c.is_ascii_digit() || matches!(c, '_' | '.' | '+' | '-')
        });
        let (unit_text, rest) = split_while(rest.trim_start(), char::is_alphabetic);
        if unit_text.is_empty() {
            return Err(ParseRateError::MissingUnit);
        }
        // The period in the duration grammar of every other field
        // (`ratekeeper::duration`); a unit alone is one of it.
        let count_text = if count_text.is_empty() {
            "1"
        } else {
            count_text
        };
        let invalid_count = || ParseRateError::InvalidNumber {
            text: count_text.to_owned(),
        };
        // The count's whole part is a u64, as every number of a rate.
        let whole = count_text
            .split_once('.')
            .map_or(count_text, |(whole, _)| whole);
        let whole = parse_number(whole).ok_or_else(invalid_count)?;
        let period_nanos = match duration::parse_parts(count_text, unit_text) {
            Ok(nanos) => nanos,
            Err(ParseDurationError::UnknownUnit { unit }) => {
                return Err(ParseRateError::UnknownUnit { unit })
            }
            // Past u64 nanoseconds: too large, reported in whole units.
            Err(ParseDurationError::TooLong { .. }) => {
                let unit = duration::unit(unit_text).map_or(1, |unit| unit.as_nanos());
                u128::from(whole).saturating_mul(unit)
            }
            Err(_) => return Err(invalid_count()),
        };

        // An optional "[,] burst N".
        let trailing = rest.trim();
        let burst = if trailing.is_empty() {
            None
        } else {
            let unexpected = || ParseRateError::UnexpectedTrailing {
                text: trailing.to_owned(),
            };
            let rest = trailing.strip_prefix(',').map_or(trailing, str::trim_start);
            let (word, rest) = split_while(rest, char::is_alphabetic);
            if !word.eq_ignore_ascii_case("burst") {
                return Err(unexpected());
            }
            let (burst_text, rest) =
                split_while(rest.trim_start(), |c| !c.is_whitespace() && c != ',');
            let burst = parse_number(burst_text).ok_or_else(|| ParseRateError::InvalidBurst {
                text: burst_text.to_owned(),
            })?;
            let rest = rest.trim();
            if !rest.is_empty() {
                return Err(ParseRateError::UnexpectedTrailing {
                    text: rest.to_owned(),
                });
            }
            Some(burst)
        };

        // Range checks, in the order of `Rate::new`. The product of two u64
        // always fits in a u128 (so the saturation never happens), and
        // `check_period_nanos` reports it as too large past MAX_PERIOD.
        let amount = check_quota("amount", amount)?;
        let period = check_period_nanos(period_nanos)?;
        let rate = Rate {
            amount,
            period,
            burst: None,
        };
        Ok(match burst {
            Some(burst) => rate.with_burst(burst)?,
            None => rate,
        })
    }
}

impl fmt::Display for Rate {
    /// Writes the canonical form: the amount, `/`, the period in the largest
    /// unit that divides it exactly (`"minute"` for one unit, `"30s"` for
    /// more), then `" burst N"` if a burst was given explicitly.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/", self.amount)?;
        let nanos = self.period.as_nanos();
        let unit = UNITS
            .iter()
            .find(|unit| nanos.checked_rem(u128::from(unit.nanos)) == Some(0));
        match unit {
            Some(unit) => match nanos.checked_div(u128::from(unit.nanos)) {
                Some(1) => f.write_str(unit.long)?,
                Some(count) => write!(f, "{count}{}", unit.short)?,
                None => write!(f, "{nanos}ns")?,
            },
            // Unreachable: nanoseconds divide every period.
            None => write!(f, "{nanos}ns")?,
        }
        if let Some(burst) = self.burst {
            write!(f, " burst {burst}")?;
        }
        Ok(())
    }
}
