//! The answer to one request.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::AnsweredBy;

/// When a denied request of the same cost can succeed.
///
/// A decision that allowed its request carries [`RetryAfter::NOW`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryAfter {
    /// After this wait, a request of the same cost will be allowed (unless
    /// other requests take the quota first).
    After(Duration),
    /// Never: the request costs more than the whole quota.
    Never,
}

impl RetryAfter {
    /// No wait: the request may proceed now.
    pub const NOW: RetryAfter = RetryAfter::After(Duration::ZERO);

    /// The wait, or `None` for [`RetryAfter::Never`].
    pub const fn duration(self) -> Option<Duration> {
        match self {
            RetryAfter::After(d) => Some(d),
            RetryAfter::Never => None,
        }
    }

    /// Whether no wait can ever make the request succeed.
    pub const fn is_never(self) -> bool {
        matches!(self, RetryAfter::Never)
    }
}

/// The outcome of deciding one request under one policy.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{RetryAfter, Timestamp, TokenBucket, policy::Algorithm};
///
/// // 2 per second, burst 2: the third request at t=0 waits 500 ms.
/// let bucket = TokenBucket::per_second(2).unwrap();
/// let mut state = bucket.fresh();
/// for _ in 0..2 {
///     let (d, next) = bucket.decide(&state, Timestamp::ZERO, 1);
///     assert!(d.is_allowed());
///     state = next;
/// }
/// let (d, _) = bucket.decide(&state, Timestamp::ZERO, 1);
/// assert!(!d.is_allowed());
/// assert_eq!(d.limit(), 2);
/// assert_eq!(d.remaining(), 0);
/// assert_eq!(d.retry_after(), RetryAfter::After(Duration::from_millis(500)));
/// assert_eq!(d.reset(), Duration::from_secs(1));
/// ```
///
/// Its times are kept in whole nanoseconds, as every policy computes them:
/// a reset or wait given to [`allowed`](Decision::allowed) or
/// [`denied`](Decision::denied) longer than `u64::MAX` nanoseconds (584
/// years) reads back as that.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "DecisionFields", into = "DecisionFields")]
pub struct Decision {
    allowed: bool,
    limit: u64,
    remaining: u64,
    // Nanoseconds, not `Duration`s: a keyed check builds a decision on
    // every call, and a `Duration` costs a division by 10^9 to make and
    // twice the bytes to move through the table's layers.
    reset_nanos: u64,
    /// [`RETRY_NEVER`] for [`RetryAfter::Never`].
    retry_nanos: u64,
    /// Kept in the padding after `allowed`: the decision is no larger.
    answered_by: AnsweredBy,
}

/// `retry_nanos` of a request that can never succeed; a wait is saturated
/// below it.
const RETRY_NEVER: u64 = u64::MAX;

/// `duration` in nanoseconds, saturated to `max`.
const fn saturating_nanos(duration: Duration, max: u64) -> u64 {
    let nanos = duration.as_nanos();
    if nanos > max as u128 {
        max
    } else {
        nanos as u64
    }
}

const fn retry_nanos(retry_after: RetryAfter) -> u64 {
    match retry_after {
        RetryAfter::After(wait) => saturating_nanos(wait, RETRY_NEVER - 1),
        RetryAfter::Never => RETRY_NEVER,
    }
}

impl Decision {
    /// An allowed request: `remaining` units are left of `limit` after it,
    /// and the quota is whole again after `reset`.
    pub const fn allowed(limit: u64, remaining: u64, reset: Duration) -> Self {
        Self::allowed_nanos(limit, remaining, saturating_nanos(reset, u64::MAX))
    }

    /// [`allowed`](Decision::allowed) with the reset in nanoseconds.
    #[inline]
    pub(crate) const fn allowed_nanos(limit: u64, remaining: u64, reset_nanos: u64) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset_nanos,
            retry_nanos: 0,
            answered_by: AnsweredBy::Store,
        }
    }

    /// A denied request: `remaining` units are left of `limit` (fewer than it
    /// asked for), the quota is whole again after `reset`, and the same
    /// request may succeed after `retry_after`.
    pub const fn denied(
        limit: u64,
        remaining: u64,
        reset: Duration,
        retry_after: RetryAfter,
    ) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_nanos: saturating_nanos(reset, u64::MAX),
            retry_nanos: retry_nanos(retry_after),
            answered_by: AnsweredBy::Store,
        }
    }

    /// [`denied`](Decision::denied) with the reset and the wait in
    /// nanoseconds, `None` for a request that can never succeed.
    #[inline]
    pub(crate) const fn denied_nanos(
        limit: u64,
        remaining: u64,
        reset_nanos: u64,
        retry_nanos: Option<u64>,
    ) -> Self {
        Decision {
            allowed: false,
            limit,
            remaining,
            reset_nanos,
            retry_nanos: match retry_nanos {
                Some(wait) if wait < RETRY_NEVER => wait,
                Some(_) => RETRY_NEVER - 1,
                None => RETRY_NEVER,
            },
            answered_by: AnsweredBy::Store,
        }
    }

    /// Whether the request may proceed.
    pub const fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// The quota: a bucket's burst, a window's limit.
    pub const fn limit(&self) -> u64 {
        self.limit
    }

    /// Units left of the quota after this request, rounded down.
    pub const fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The time until the whole quota is available again; for a fixed
    /// window aligned to the clock, the time until its window ends, even
    /// when nothing was counted in it (the moment its quota resets, as
    /// Envoy's `duration_until_reset` tells).
    pub const fn reset(&self) -> Duration {
        Duration::from_nanos(self.reset_nanos)
    }

    /// [`RetryAfter::NOW`] when allowed; otherwise the wait after which the
    /// same cost can succeed, or [`RetryAfter::Never`].
    pub const fn retry_after(&self) -> RetryAfter {
        match self.retry_nanos {
            RETRY_NEVER => RetryAfter::Never,
            wait => RetryAfter::After(Duration::from_nanos(wait)),
        }
    }

    /// Who made the decision: [`AnsweredBy::Store`], unless the failure
    /// policy of a [`Resilient`](crate::store::Resilient) store answered
    /// while the store failed (allowed unknowingly, or by the in-memory
    /// fallback), which front ends tell their clients and count.
    pub const fn answered_by(&self) -> AnsweredBy {
        self.answered_by
    }

    /// This decision, made by `answered_by`.
    #[must_use]
    pub const fn with_answered_by(mut self, answered_by: AnsweredBy) -> Self {
        self.answered_by = answered_by;
        self
    }
}

/// What `Debug` showed when the fields were the accessors' types.
impl fmt::Debug for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Decision");
        debug
            .field("allowed", &self.allowed)
            .field("limit", &self.limit)
            .field("remaining", &self.remaining)
            .field("reset", &self.reset())
            .field("retry_after", &self.retry_after());
        // Shown only when it tells something: most decisions are the store's.
        if self.answered_by.is_failover() {
            debug.field("answered_by", &self.answered_by);
        }
        debug.finish()
    }
}

/// The serialized form of a [`Decision`]: the fields it had as `Duration`s,
/// so that what was written before reads the same, and is written the same.
#[derive(Serialize, Deserialize)]
#[serde(rename = "Decision")]
struct DecisionFields {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset: Duration,
    retry_after: RetryAfter,
    /// Written only for a failure policy's answer: the store's decisions
    /// are written as they always were.
    #[serde(default, skip_serializing_if = "AnsweredBy::is_store")]
    answered_by: AnsweredBy,
}

impl From<Decision> for DecisionFields {
    fn from(decision: Decision) -> Self {
        DecisionFields {
            allowed: decision.allowed,
            limit: decision.limit,
            remaining: decision.remaining,
            reset: decision.reset(),
            retry_after: decision.retry_after(),
            answered_by: decision.answered_by,
        }
    }
}

impl From<DecisionFields> for Decision {
    fn from(fields: DecisionFields) -> Self {
        Decision {
            allowed: fields.allowed,
            limit: fields.limit,
            remaining: fields.remaining,
            reset_nanos: saturating_nanos(fields.reset, u64::MAX),
            retry_nanos: retry_nanos(fields.retry_after),
            answered_by: fields.answered_by,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The serialized form is part of the API (the service and clients may
    /// keep or send decisions): it stays what the derived implementation of
    /// the struct's original fields wrote, whatever the fields are now.
    #[test]
    fn the_serialized_form_is_the_derived_one_of_the_documented_fields() {
        let cases = [
            (
                Decision::allowed(2, 1, Duration::from_millis(1_500)),
                r#"{"allowed":true,"limit":2,"remaining":1,"reset":{"secs":1,"nanos":500000000},"retry_after":{"after":{"secs":0,"nanos":0}}}"#,
            ),
            (
                Decision::denied(
                    5,
                    0,
                    Duration::from_nanos(7),
                    RetryAfter::After(Duration::new(3, 25)),
                ),
                r#"{"allowed":false,"limit":5,"remaining":0,"reset":{"secs":0,"nanos":7},"retry_after":{"after":{"secs":3,"nanos":25}}}"#,
            ),
            (
                Decision::denied(1, 0, Duration::ZERO, RetryAfter::Never),
                r#"{"allowed":false,"limit":1,"remaining":0,"reset":{"secs":0,"nanos":0},"retry_after":"never"}"#,
            ),
        ];
        for (decision, json) in cases {
            assert_eq!(serde_json::to_string(&decision).unwrap(), json);
            let back: Decision = serde_json::from_str(json).unwrap();
            assert_eq!(back, decision);
            assert_eq!(serde_json::to_string(&back).unwrap(), json);
        }
    }

    #[test]
    fn accessors_give_back_what_the_constructors_took() {
        let d = Decision::denied(
            9,
            3,
            Duration::new(12, 345),
            RetryAfter::After(Duration::new(0, 999_999_999)),
        );
        assert!(!d.is_allowed());
        assert_eq!(d.limit(), 9);
        assert_eq!(d.remaining(), 3);
        assert_eq!(d.reset(), Duration::new(12, 345));
        assert_eq!(
            d.retry_after(),
            RetryAfter::After(Duration::new(0, 999_999_999))
        );
        let a = Decision::allowed(4, 4, Duration::ZERO);
        assert!(a.is_allowed());
        assert_eq!(a.retry_after(), RetryAfter::NOW);
        assert_eq!(
            format!("{a:?}"),
            "Decision { allowed: true, limit: 4, remaining: 4, reset: 0ns, retry_after: After(0ns) }"
        );
    }
}
