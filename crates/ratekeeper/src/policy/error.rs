//! Errors from building policies.

use thiserror::Error;

/// Why a policy's numbers were refused.
///
/// Every constructor validates its numbers up front so that no later
/// decision can overflow or divide by zero.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A count or duration that must be positive was zero.
    #[error("{field} must be greater than zero")]
    Zero {
        /// Which number: `"rate"`, `"burst"`, `"limit"`, `"period"` or `"window"`.
        field: &'static str,
    },
    /// A number is past the documented bound.
    #[error("{field} is {value}, above the largest supported value {max}")]
    TooLarge {
        /// Which number.
        field: &'static str,
        /// The value given (nanoseconds for durations).
        value: u128,
        /// The largest accepted value (nanoseconds for durations).
        max: u128,
    },
    /// The numbers combined do not fit exact 64-bit arithmetic, for example a
    /// huge burst over a very long period.
    #[error(
        "{what} does not fit exact 64-bit arithmetic; use a smaller burst or a shorter period"
    )]
    Overflow {
        /// What overflowed, in words.
        what: &'static str,
    },
    /// The window policies allow a quota per window and take no burst.
    #[error("the {policy} policy takes no burst; give the limit per window instead")]
    BurstNotSupported {
        /// The policy's name.
        policy: &'static str,
    },
    /// More requests per period than there are nanoseconds in it.
    #[error("rate of {rate} per {period_nanos} ns is finer than one nanosecond per request")]
    TooFine {
        /// Requests per period.
        rate: u64,
        /// The period in nanoseconds.
        period_nanos: u64,
    },
}
