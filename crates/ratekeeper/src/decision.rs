//! The answer to one request.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Decision {
    allowed: bool,
    limit: u64,
    remaining: u64,
    reset: Duration,
    retry_after: RetryAfter,
}

impl Decision {
    /// An allowed request: `remaining` units are left of `limit` after it,
    /// and the quota is whole again after `reset`.
    pub const fn allowed(limit: u64, remaining: u64, reset: Duration) -> Self {
        Decision {
            allowed: true,
            limit,
            remaining,
            reset,
            retry_after: RetryAfter::NOW,
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
            reset,
            retry_after,
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

    /// The time until the whole quota is available again.
    pub const fn reset(&self) -> Duration {
        self.reset
    }

    /// [`RetryAfter::NOW`] when allowed; otherwise the wait after which the
    /// same cost can succeed, or [`RetryAfter::Never`].
    pub const fn retry_after(&self) -> RetryAfter {
        self.retry_after
    }
}
