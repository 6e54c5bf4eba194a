//! What a store answers: a decision, or "saturated".

use std::time::Duration;

use crate::store::AnsweredBy;
use crate::{Decision, RetryAfter};

/// The answer of a limiter that keeps many keys: the policy's decision, or
/// [`Saturated`](Outcome::Saturated) when the key is new and the store
/// cannot take another.
///
/// Saturation is what bounds memory: an attacker minting keys (a spoofed
/// header, a large IPv6 range) fills the table, then new keys are refused
/// while keys already tracked keep being limited. It never switches
/// limiting off, and lasts only until known keys are fresh again: a full
/// [`MemoryLimiter`](crate::MemoryLimiter) sweeps for a new key on demand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use = "an outcome says whether the request may proceed"]
pub enum Outcome {
    /// The key is tracked (or needed no row) and the policy decided.
    Decided(Decision),
    /// The key is new and the store already tracks its maximum number of
    /// keys; nothing was counted. Room returns when a sweep evicts keys whose
    /// state is fresh again; a new key arriving then runs that sweep itself.
    Saturated {
        /// When room may return: until the first key that could make room
        /// turns fresh (and at least the gap between two sweeps on
        /// demand), at most until the next background sweep.
        retry_after: Duration,
        /// Whose table was full: the store's, or the in-memory fallback's
        /// while a [`Resilient`](crate::store::Resilient) store was down.
        answered_by: AnsweredBy,
    },
}

impl Outcome {
    /// Whether the request may proceed.
    pub const fn is_allowed(&self) -> bool {
        match self {
            Outcome::Decided(decision) => decision.is_allowed(),
            Outcome::Saturated { .. } => false,
        }
    }

    /// Whether the store was full.
    pub const fn is_saturated(&self) -> bool {
        matches!(self, Outcome::Saturated { .. })
    }

    /// The policy's decision, unless the store was saturated.
    pub const fn decision(&self) -> Option<&Decision> {
        match self {
            Outcome::Decided(decision) => Some(decision),
            Outcome::Saturated { .. } => None,
        }
    }

    /// When to try again: the decision's retry-after, or when room may
    /// return when saturated.
    pub const fn retry_after(&self) -> RetryAfter {
        match self {
            Outcome::Decided(decision) => decision.retry_after(),
            Outcome::Saturated { retry_after, .. } => RetryAfter::After(*retry_after),
        }
    }
}

impl Outcome {
    /// Who answered: the store, or a failure policy while it was down
    /// (see [`AnsweredBy`]).
    pub const fn answered_by(&self) -> AnsweredBy {
        match self {
            Outcome::Decided(decision) => decision.answered_by(),
            Outcome::Saturated { answered_by, .. } => *answered_by,
        }
    }

    /// This outcome, answered by `answered_by`.
    pub const fn with_answered_by(self, answered_by: AnsweredBy) -> Self {
        match self {
            Outcome::Decided(decision) => Outcome::Decided(decision.with_answered_by(answered_by)),
            Outcome::Saturated { retry_after, .. } => Outcome::Saturated {
                retry_after,
                answered_by,
            },
        }
    }
}

impl From<Decision> for Outcome {
    fn from(decision: Decision) -> Self {
        Outcome::Decided(decision)
    }
}
