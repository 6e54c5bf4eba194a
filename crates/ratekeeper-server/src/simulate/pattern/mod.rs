//! Request patterns such as `steady:50/s,burst:200@10s`: a synthetic trace
//! described in one line.
//!
//! # Grammar
//!
//! ```text
//! pattern  = phase { "," phase }
//! phase    = steady | ramp | idle | burst
//! steady   = "steady:" rate [ "for" duration ]
//! ramp     = "ramp:" count ".." rate [ "for" duration ]
//! idle     = "idle:" duration
//! burst    = "burst:" count [ "@" duration ]
//! rate     = count "/" [ count ] unit          50/s, 100/m, 5/30s
//! duration = digits [ "." digits ] unit         10s, 1.5s, 250ms, 2m, 1h
//! count    = digit { digit | "_" }              whole numbers: 1_000 is 1000
//! unit     = ns | us | ms | s | m | h | d | w   or a long name such as "minutes"
//! ```
//!
//! Durations and units are those of every duration ratekeeper reads
//! ([`ratekeeper::duration`]).
//!
//! Phase names and units are case-insensitive; whitespace may go between any
//! two parts (so `steady:50/s for 30s` reads as it is written).
//!
//! # Meaning
//!
//! Phases run one after the other from time 0, each request costing 1 unit:
//!
//! - `steady:R/U for D`: `R` requests per `U`, evenly spaced, the first at
//!   the phase's start, for `D` (60 s when `for` is left out);
//! - `ramp:A..B/U for D`: a rate that changes linearly from `A` to `B` per
//!   `U` over `D` (60 s by default); request `k` comes when the ramp's
//!   cumulative count reaches `k`;
//! - `idle:D`: nothing for `D`;
//! - `burst:N`: `N` requests at once, when the phase before it ended; it
//!   takes no time, so the next phase starts at the same instant;
//! - `burst:N@T`: `N` requests at once at `T` after the pattern's start,
//!   wherever it is written; it does not move the phases after it. So
//!   `steady:50/s,burst:200@10s` is a minute of 50 requests per second with
//!   200 more at the 10th second.
//!
//! A pattern makes at most [`MAX_REQUESTS`] requests and lasts at most
//! [`MAX_SPAN`]; it is refused past either, before any request is made.
//!
//! ```
//! use ratekeeper_server::simulate::Pattern;
//!
//! let pattern: Pattern = "steady:2/s for 2s, idle:1s, burst:3".parse().unwrap();
//! let millis: Vec<u64> = pattern.requests().iter().map(|r| r.time.as_millis()).collect();
//! assert_eq!(millis, [0, 500, 1000, 1500, 3000, 3000, 3000]);
//!
//! let error = "steady:50/x".parse::<Pattern>().unwrap_err();
//! assert_eq!(error.to_string(), "column 11: unknown time unit \"x\"; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")");
//! ```

use std::time::Duration;

use ratekeeper::Timestamp;
use thiserror::Error;

use super::{Request, MAX_REQUESTS};

mod display;
mod parse;

/// The longest a pattern may last: 366 days.
pub const MAX_SPAN: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// How long `steady` and `ramp` last without `for`.
pub const DEFAULT_PHASE: Duration = Duration::from_secs(60);

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A parsed pattern: its phases, in the order written.
///
/// Parse one with [`str::parse`]; [`Pattern::requests`] makes its requests.
/// Its [`Display`](std::fmt::Display) writes a canonical form that parses back
/// to the same pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    phases: Vec<Phase>,
    len: usize,
}

/// One phase of a [`Pattern`] (see the [module docs](self) for what each
/// does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// `count` requests per `per`, evenly spaced, for `duration`.
    Steady {
        /// Requests per `per`.
        count: u64,
        /// The rate's period.
        per: Duration,
        /// How long the phase lasts.
        duration: Duration,
    },
    /// A rate changing linearly from `from` to `to` requests per `per`
    /// over `duration`.
    Ramp {
        /// Requests per `per` at the start.
        from: u64,
        /// Requests per `per` at the end.
        to: u64,
        /// The rate's period.
        per: Duration,
        /// How long the phase lasts.
        duration: Duration,
    },
    /// No requests for `duration`.
    Idle {
        /// How long the phase lasts.
        duration: Duration,
    },
    /// `count` requests at one instant: `at` after the pattern's start, or
    /// when the phase before ended if `at` is `None`.
    Burst {
        /// How many requests.
        count: u64,
        /// When, from the pattern's start.
        at: Option<Duration>,
    },
}

/// Why a pattern (or a duration) was refused, and where.
///
/// ```
/// use ratekeeper_server::simulate::{Pattern, PatternErrorKind};
///
/// let error = "steady:50/s,bursts:200".parse::<Pattern>().unwrap_err();
/// assert_eq!(error.column, 13);
/// assert_eq!(error.kind, PatternErrorKind::UnknownPhase { name: "bursts".into() });
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("column {column}: {kind}")]
pub struct PatternError {
    /// Where, counting characters from 1.
    pub column: usize,
    /// What is wrong.
    pub kind: PatternErrorKind,
}

/// What is wrong in a [`PatternError`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PatternErrorKind {
    /// Nothing but whitespace.
    #[error("empty pattern; expected phases such as \"steady:50/s,burst:200@10s\"")]
    Empty,
    /// Nothing between two commas, or after the last.
    #[error("empty phase; expected steady, ramp, idle or burst")]
    EmptyPhase,
    /// A phase name that is not one of the four.
    #[error("unknown phase {name:?}; expected steady, ramp, idle or burst")]
    UnknownPhase {
        /// The name as written.
        name: String,
    },
    /// Something else where a particular symbol belongs.
    #[error("expected {expected}, found {}", found_text(.found))]
    Expected {
        /// What belongs here, such as `"\":\" after the phase name"`.
        expected: &'static str,
        /// What is there instead (empty at the end).
        found: String,
    },
    /// A number that is not one, or does not fit.
    #[error("{} is not a whole number that fits 64 bits", found_text(.text))]
    InvalidNumber {
        /// The text where the number was expected.
        text: String,
    },
    /// A time unit that is not one of [`ratekeeper::duration`]'s.
    #[error("unknown time unit {unit:?}; expected ms, s, m, h, d or w (or ns, us, or a long name such as \"minutes\")")]
    UnknownUnit {
        /// The unit as written.
        unit: String,
    },
    /// A steady rate of 0, a burst of 0 or a rate over a period of 0.
    #[error("{what} must be more than 0")]
    Zero {
        /// Which number, in words.
        what: &'static str,
    },
    /// A duration past [`MAX_SPAN`], or a pattern that lasts longer.
    #[error("too long: a pattern lasts at most 366 days")]
    TooLong,
    /// More than [`MAX_REQUESTS`] requests in all.
    #[error("the pattern makes {requests} requests, more than the {max} a simulation takes")]
    TooManyRequests {
        /// Requests made up to and including the phase at fault.
        requests: u128,
        /// [`MAX_REQUESTS`].
        max: usize,
    },
}

fn found_text(found: &str) -> String {
    if found.is_empty() {
        "the end".to_owned()
    } else {
        format!("{found:?}")
    }
}

impl Pattern {
    /// The phases, in the order written.
    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// How many requests [`requests`](Pattern::requests) makes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the pattern makes no request (only `idle` phases).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The requests, sorted by time (requests at one instant in the order
    /// their phases were written), each of cost 1.
    pub fn requests(&self) -> Vec<Request> {
        let mut requests = Vec::with_capacity(self.len);
        let mut cursor: u64 = 0;
        for phase in &self.phases {
            match *phase {
                Phase::Steady {
                    count,
                    per,
                    duration,
                } => {
                    let n = steady_count(count, per, duration);
                    let per = per.as_nanos();
                    for i in 0..n {
                        let offset = i * per / u128::from(count);
                        requests.push(at(cursor, offset));
                    }
                    cursor += nanos(duration);
                }
                Phase::Ramp {
                    from,
                    to,
                    per,
                    duration,
                } => {
                    let n = ramp_count(from, to, per, duration);
                    let d = nanos(duration);
                    let (d_f, per_f) = (d as f64, per.as_nanos() as f64);
                    // Cumulative count N(t) = b t + a t^2; request k comes at
                    // N(t) = k, in the form that stays exact for a = 0.
                    let a = (to as f64 - from as f64) / (2.0 * d_f * per_f);
                    let b = from as f64 / per_f;
                    for k in 0..n {
                        let k = k as f64;
                        let root = (b * b + 4.0 * a * k).max(0.0).sqrt();
                        let t = if k == 0.0 { 0.0 } else { 2.0 * k / (b + root) };
                        let t = if t.is_finite() { t } else { 0.0 };
                        // `as` saturates; a request stays inside its phase.
                        let t = (t as u64).min(d.saturating_sub(1));
                        requests.push(at(cursor, u128::from(t)));
                    }
                    cursor += d;
                }
                Phase::Idle { duration } => cursor += nanos(duration),
                Phase::Burst { count, at: when } => {
                    let time = when.map_or(cursor, nanos);
                    for _ in 0..count {
                        requests.push(Request {
                            time: Timestamp::from_nanos(time),
                            cost: 1,
                        });
                    }
                }
            }
        }
        // Stable: a burst keeps its place among requests at its instant.
        requests.sort_by_key(|r| r.time);
        requests
    }
}

/// `cursor + offset` nanoseconds; both are bounded by [`MAX_SPAN`] at parse
/// time, so the sum fits.
fn at(cursor: u64, offset: u128) -> Request {
    let offset = u64::try_from(offset).unwrap_or(u64::MAX);
    Request {
        time: Timestamp::from_nanos(cursor.saturating_add(offset)),
        cost: 1,
    }
}

/// A duration known to be at most [`MAX_SPAN`], in nanoseconds.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Requests in a steady phase: the `i` with `i * per / count < duration`.
fn steady_count(count: u64, per: Duration, duration: Duration) -> u128 {
    let product = duration.as_nanos().saturating_mul(u128::from(count));
    product.div_ceil(per.as_nanos().max(1))
}

/// Requests in a ramp: the `k` whose cumulative time is inside the phase,
/// `ceil((from + to) * duration / (2 per))`.
fn ramp_count(from: u64, to: u64, per: Duration, duration: Duration) -> u128 {
    let sum = u128::from(from) + u128::from(to);
    let product = duration.as_nanos().saturating_mul(sum);
    product.div_ceil(per.as_nanos().saturating_mul(2).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(s: &str) -> String {
        s.parse::<Pattern>().unwrap_err().to_string()
    }

    #[test]
    fn display_round_trips() {
        for text in [
            "steady:50/s for 1m",
            "ramp:0..100/s for 30s,idle:5s,burst:3",
            "burst:200@10s,steady:5/30s for 1.5s",
            "idle:250ms,burst:1@0s",
            "steady:1/ms for 2.5s",
        ] {
            let pattern: Pattern = text.parse().unwrap();
            assert_eq!(pattern.to_string(), text);
            assert_eq!(pattern.to_string().parse::<Pattern>(), Ok(pattern));
        }
    }

    #[test]
    fn errors_say_where() {
        assert_eq!(
            err("steady:50/s,"),
            "column 13: empty phase; expected steady, ramp, idle or burst"
        );
        assert_eq!(
            err("steady"),
            "column 7: expected \":\" after the phase name, found the end"
        );
        assert_eq!(err("burst:0"), "column 7: a burst must be more than 0");
        assert_eq!(
            err("idle:5"),
            "column 7: expected a time unit (ms, s, m, h, d, w, ...), found the end"
        );
    }

    #[test]
    fn ramps_reach_their_count() {
        let pattern: Pattern = "ramp:0..100/s for 10s".parse().unwrap();
        let requests = pattern.requests();
        assert_eq!(requests.len(), 500);
        assert!(requests.windows(2).all(|w| w[0].time <= w[1].time));
        assert!(requests
            .iter()
            .all(|r| r.time.as_nanos() < 10 * NANOS_PER_SEC));
        // The second half of an upward ramp holds three quarters of it.
        let late = requests
            .iter()
            .filter(|r| r.time.as_millis() >= 5000)
            .count();
        assert_eq!(late, 375);
    }
}
