//! Reading the script's reply: little-endian doubles, six per limit
//! (allowed, remaining, reset µs and ns, retry µs or -1 for never, retry
//! ns), then the index of the limit that denied and Redis's time.

use std::time::Duration;

use ratekeeper::{store::StoreError, Decision, Outcome, RetryAfter, Timestamp};
use thiserror::Error;

use crate::params::MAX_EXACT;
use crate::store::Prepared;

/// A script reply this version of the store cannot read: the source of a
/// [`StoreError::InvalidReply`]. Seen only when the script on the server
/// is not the one this store sent (a damaged reply, or a function of the
/// same name loaded by something else).
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ReplyError {
    /// The reply's length is not a whole number of 8-byte numbers.
    #[error("a reply of {0} bytes is not a list of 8-byte numbers")]
    Length(usize),
    /// A number that is not an integer the script could send exactly.
    #[error("{0} is not an integer below 2^53")]
    NotInteger(f64),
    /// Fewer or more numbers than the call's limits need.
    #[error("expected {expected} numbers, got {got}")]
    Count {
        /// The numbers the call's limits need.
        expected: usize,
        /// The numbers the reply held.
        got: usize,
    },
    /// The index of the denying limit is not one of the call's.
    #[error("limit index {0} is not one of the call's")]
    LimitIndex(i64),
    /// Redis's time before the Unix epoch.
    #[error("the server's time {0} µs is negative")]
    NegativeTime(i64),
    /// One limit's six numbers do not make a decision.
    #[error("invalid decision {0:?}")]
    Decision([i64; 6]),
    /// A peek came back without a decision.
    #[error("a peek was not decided")]
    PeekUndecided,
    /// A batch's reply ended before its last call's.
    #[error("a batch's reply of {0} numbers is too short")]
    ShortBatch(usize),
}

impl From<ReplyError> for StoreError {
    fn from(error: ReplyError) -> Self {
        StoreError::invalid_reply(error)
    }
}

/// The reply's numbers, each an integer.
pub(crate) fn numbers(reply: &[u8]) -> Result<Vec<i64>, ReplyError> {
    if !reply.len().is_multiple_of(8) {
        return Err(ReplyError::Length(reply.len()));
    }
    reply
        .chunks_exact(8)
        .map(|chunk| {
            let value = f64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            let exact = value.fract() == 0.0 && value.abs() <= MAX_EXACT as f64;
            exact
                .then_some(value as i64)
                .ok_or(ReplyError::NotInteger(value))
        })
        .collect()
}

/// Each limit's outcome, the index of the one that denied, and Redis's time.
pub(crate) type Parsed = (Vec<Outcome>, Option<usize>, Timestamp);

/// Reads a reply of six numbers per limit, the denying index and the time.
pub(crate) fn parse(prepared: &[Prepared], reply: &[i64]) -> Result<Parsed, StoreError> {
    let n = prepared.len();
    if reply.len() != n * 6 + 2 {
        return Err(ReplyError::Count {
            expected: n * 6 + 2,
            got: reply.len(),
        }
        .into());
    }
    let outcomes = prepared
        .iter()
        .zip(reply.chunks_exact(6))
        .map(|(p, r)| decision(p.quota, r).map(Outcome::Decided))
        .collect::<Result<Vec<_>, _>>()?;
    let denied = match reply[n * 6] {
        0 => None,
        i if (1..=n as i64).contains(&i) => Some(i as usize - 1),
        i => return Err(ReplyError::LimitIndex(i).into()),
    };
    let time = reply[n * 6 + 1];
    let now = u64::try_from(time).map_err(|_| ReplyError::NegativeTime(time))?;
    Ok((outcomes, denied, Timestamp::from_micros(now)))
}

/// One limit's decision from its six numbers.
fn decision(quota: u64, r: &[i64]) -> Result<Decision, ReplyError> {
    let bad = || {
        let mut numbers = [0; 6];
        numbers.copy_from_slice(&r[..6]);
        ReplyError::Decision(numbers)
    };
    let non_negative = |v: i64| u64::try_from(v).map_err(|_| bad());
    let duration = |us: i64, ns: i64| -> Result<Duration, ReplyError> {
        let (us, ns) = (non_negative(us)?, non_negative(ns)?);
        if ns >= 1_000 {
            return Err(bad());
        }
        Ok(Duration::from_micros(us) + Duration::from_nanos(ns))
    };
    let remaining = non_negative(r[1])?;
    let reset = duration(r[2], r[3])?;
    match r[0] {
        1 => Ok(Decision::allowed(quota, remaining, reset)),
        0 => {
            let retry = match r[4] {
                -1 => RetryAfter::Never,
                us => RetryAfter::After(duration(us, r[5])?),
            };
            Ok(Decision::denied(quota, remaining, reset, retry))
        }
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doubles(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    #[test]
    fn a_reply_is_read_as_whole_numbers_or_refused() {
        assert_eq!(numbers(&doubles(&[1.0, -1.0, 0.0])).unwrap(), [1, -1, 0]);
        for (reply, expected) in [
            (vec![0; 7], ReplyError::Length(7)),
            (doubles(&[0.5]), ReplyError::NotInteger(0.5)),
            (
                doubles(&[2f64.powi(60)]),
                ReplyError::NotInteger(2f64.powi(60)),
            ),
        ] {
            assert_eq!(numbers(&reply).unwrap_err(), expected);
        }
        // a store error says which
        let error = StoreError::from(ReplyError::Length(7));
        assert!(
            matches!(&error, StoreError::InvalidReply(source)
                if source.downcast_ref::<ReplyError>() == Some(&ReplyError::Length(7))),
            "{error:?}"
        );
    }

    #[test]
    fn a_limit_s_numbers_that_make_no_decision_are_refused() {
        assert!(decision(10, &[1, 9, 6_000, 0, 0, 0]).unwrap().is_allowed());
        let denied = decision(10, &[0, 0, 6_000, 0, -1, 0]).unwrap();
        assert_eq!(denied.retry_after(), RetryAfter::Never);
        for r in [
            [2, 9, 6_000, 0, 0, 0],
            [1, -1, 6_000, 0, 0, 0],
            [1, 9, 6_000, 1_000, 0, 0],
            [0, 0, 6_000, 0, -2, 0],
        ] {
            assert_eq!(decision(10, &r).unwrap_err(), ReplyError::Decision(r));
        }
    }
}
