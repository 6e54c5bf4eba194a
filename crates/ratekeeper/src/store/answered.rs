//! How a store's answer was made: by the store, or by a failure policy
//! while the store was down.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Who made an answer: the store itself, or, while it failed, the
/// [`FailurePolicy`](crate::store::FailurePolicy) of a
/// [`Resilient`](crate::store::Resilient) store.
///
/// Every [`Decision`](crate::Decision) carries it
/// ([`Decision::answered_by`](crate::Decision::answered_by)), and so does a
/// [`MultiOutcome`](crate::store::MultiOutcome)
/// ([`MultiOutcome::answered_by`](crate::store::MultiOutcome::answered_by)),
/// so that front ends can tell a client (and count) that an answer is not
/// the shared store's.
///
/// ```
/// use ratekeeper::store::AnsweredBy;
///
/// assert_eq!(AnsweredBy::FailOpen.as_str(), "fail-open");
/// assert!(!AnsweredBy::Store.is_failover());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AnsweredBy {
    /// The store decided.
    #[default]
    Store,
    /// The store failed and the policy fails open: allowed, nothing
    /// counted.
    FailOpen,
    /// The store failed and the in-memory fallback decided (limits per
    /// process instead of shared).
    Fallback,
}

impl AnsweredBy {
    /// `store`, `fail-open` or `fallback`.
    pub fn as_str(self) -> &'static str {
        match self {
            AnsweredBy::Store => "store",
            AnsweredBy::FailOpen => "fail-open",
            AnsweredBy::Fallback => "fallback",
        }
    }

    /// Whether the store answered (what a serialized decision leaves out).
    pub(crate) fn is_store(&self) -> bool {
        *self == AnsweredBy::Store
    }

    /// Whether the failure policy answered instead of the store.
    pub fn is_failover(self) -> bool {
        self != AnsweredBy::Store
    }

    /// The one of `self` and `other` that tells most about a request
    /// answered by several calls: a failover answer over the store's, and
    /// fail-open over the fallback (nothing was limited).
    pub fn or(self, other: AnsweredBy) -> AnsweredBy {
        fn rank(by: AnsweredBy) -> u8 {
            match by {
                AnsweredBy::Store => 0,
                AnsweredBy::Fallback => 1,
                AnsweredBy::FailOpen => 2,
            }
        }
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

impl fmt::Display for AnsweredBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
