//! Trace files: recorded or hand-written requests, one a line.
//!
//! # Format
//!
//! ```text
//! # a comment: from "#" to the end of the line
//! 0            one request at 0 s, cost 1
//! 0.25, 3      at 0.25 s, cost 3
//! 1500ms       at 1.5 s
//! 1.5s,2       at 1.5 s, cost 2   # comments may follow a request
//! ```
//!
//! Each line is `TIME [, COST]`, with whitespace allowed around both;
//! blank lines and comments are skipped, and `\r\n` line ends are fine.
//!
//! - `TIME` is a decimal number of seconds (`12`, `0.25`), or a duration
//!   since the trace's start in the grammar of every duration ratekeeper
//!   reads ([`ratekeeper::duration`]: `1500ms`, `0.5ms`, `1.5s`, `2m`). It
//!   is exact to the nanosecond (finer digits are dropped) and at most about
//!   584 years, so Unix times work. Times never go
//!   down: a line earlier than the one before is refused (sort the file).
//! - `COST` is a whole number of units, 1 when left out; 0 is a request that
//!   only asks, as in the core.
//!
//! A trace holds at most [`MAX_REQUESTS`] requests.
//!
//! ```
//! use ratekeeper_server::simulate::{parse_trace, Request};
//! use ratekeeper::Timestamp;
//!
//! let requests = parse_trace(b"# two requests\n0\n1500ms, 2\n").unwrap();
//! assert_eq!(requests, [
//!     Request { time: Timestamp::ZERO, cost: 1 },
//!     Request { time: Timestamp::from_millis(1500), cost: 2 },
//! ]);
//!
//! let error = parse_trace(b"0\n1,x\n").unwrap_err();
//! assert_eq!(error.to_string(), "line 2: cost \"x\" is not a whole number that fits 64 bits");
//! ```

use std::time::Duration;

use ratekeeper::Timestamp;
use thiserror::Error;

use super::{seconds, Request, MAX_REQUESTS};

/// Why a trace was refused, and on which line.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("line {line}: {kind}")]
pub struct TraceError {
    /// The line, counting from 1.
    pub line: usize,
    /// What is wrong.
    pub kind: TraceErrorKind,
}

/// What is wrong in a [`TraceError`].
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TraceErrorKind {
    /// The line is not UTF-8 text.
    #[error("not UTF-8 text")]
    NotUtf8,
    /// The time is not a number of seconds or a duration.
    #[error(
        "time {text:?} is not a number of seconds (\"1.5\") or a duration (\"1.5s\", \"1500ms\")"
    )]
    InvalidTime {
        /// The time as written.
        text: String,
    },
    /// The time is past about 584 years.
    #[error("time {text:?} is too large; times go up to about 584 years")]
    TimeTooLarge {
        /// The time as written.
        text: String,
    },
    /// The cost is not a whole number of `u64`.
    #[error("cost {text:?} is not a whole number that fits 64 bits")]
    InvalidCost {
        /// The cost as written.
        text: String,
    },
    /// More than two fields.
    #[error("unexpected {text:?} after the cost; a line is TIME or TIME,COST")]
    ExtraField {
        /// What follows the cost.
        text: String,
    },
    /// The time is earlier than the line before's.
    #[error(
        "time {}s is earlier than the request before it at {}s; sort the trace by time",
        seconds(*.time), seconds(*.previous)
    )]
    OutOfOrder {
        /// This line's time.
        time: Duration,
        /// The time of the request before.
        previous: Duration,
    },
    /// More than [`MAX_REQUESTS`] requests.
    #[error("more than {max} requests; a simulation takes at most that many")]
    TooManyRequests {
        /// [`MAX_REQUESTS`].
        max: usize,
    },
}

/// Parses a trace (see the [module docs](self) for the format).
///
/// An input with no request gives an empty list.
pub fn parse_trace(input: &[u8]) -> Result<Vec<Request>, TraceError> {
    let mut requests: Vec<Request> = Vec::new();
    for (index, line) in input.split(|&b| b == b'\n').enumerate() {
        let line_number = index + 1;
        let fail = |kind| TraceError {
            line: line_number,
            kind,
        };
        let line = std::str::from_utf8(line).map_err(|_| fail(TraceErrorKind::NotUtf8))?;
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut fields = line.splitn(3, ',');
        let time_text = fields.next().unwrap_or("").trim();
        let time = parse_time(time_text).map_err(fail)?;
        let cost = match fields.next() {
            None => 1,
            Some(text) => {
                let text = text.trim();
                text.parse::<u64>().map_err(|_| {
                    fail(TraceErrorKind::InvalidCost {
                        text: text.to_owned(),
                    })
                })?
            }
        };
        if let Some(extra) = fields.next() {
            return Err(fail(TraceErrorKind::ExtraField {
                text: extra.trim().to_owned(),
            }));
        }
        if let Some(previous) = requests.last() {
            if time < previous.time {
                return Err(fail(TraceErrorKind::OutOfOrder {
                    time: time.as_duration(),
                    previous: previous.time.as_duration(),
                }));
            }
        }
        if requests.len() == MAX_REQUESTS {
            return Err(fail(TraceErrorKind::TooManyRequests { max: MAX_REQUESTS }));
        }
        requests.push(Request { time, cost });
    }
    Ok(requests)
}

/// A time in the grammar of [`ratekeeper::duration`] (`1.5s`, `250ms`,
/// `2m`), or a bare number of seconds (`1.5`).
fn parse_time(text: &str) -> Result<Timestamp, TraceErrorKind> {
    let bare = text.ends_with(|c: char| c.is_ascii_digit());
    let parsed = if bare {
        ratekeeper::duration::parse(&format!("{text}s"))
    } else {
        ratekeeper::duration::parse(text)
    };
    match parsed {
        Ok(duration) => Ok(Timestamp::from_duration(duration)),
        Err(ratekeeper::duration::ParseDurationError::TooLong { .. }) => {
            Err(TraceErrorKind::TimeTooLarge {
                text: text.to_owned(),
            })
        }
        Err(_) => Err(TraceErrorKind::InvalidTime {
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        let t = |s: &str| parse_time(s).map(Timestamp::as_nanos);
        assert_eq!(t("0"), Ok(0));
        assert_eq!(t("000.5"), Ok(500_000_000));
        assert_eq!(t("1.5s"), Ok(1_500_000_000));
        assert_eq!(t("1.5 ms"), Ok(1_500_000));
        assert_eq!(t("0.0000000019"), Ok(1));
        assert_eq!(t("18446744073.709551615"), Ok(u64::MAX));
        assert!(matches!(
            t("18446744073.709551616"),
            Err(TraceErrorKind::TimeTooLarge { .. })
        ));
        for bad in ["", ".5", "1.", "-1", "1e3", "s", "1.5.5", "+1", "1 5"] {
            assert!(
                matches!(t(bad), Err(TraceErrorKind::InvalidTime { .. })),
                "{bad}"
            );
        }
    }
}
