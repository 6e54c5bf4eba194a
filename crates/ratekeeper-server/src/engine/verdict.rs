//! What the engine answers: each limit's outcome and the request's fate.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{Algorithm, Decision, Outcome, RetryAfter};
use ratekeeper_tower::headers::PolicyReport;

use super::ActiveLimit;

/// One limit to decide a request against: the limit, the request's key
/// under it, and how many units the request costs.
#[derive(Clone, Debug)]
pub struct Check {
    /// The limit.
    pub limit: Arc<ActiveLimit>,
    /// The key, from [`ActiveLimit::key`].
    pub key: Vec<u8>,
    /// The units to take (0 only reports).
    pub cost: u64,
}

impl Check {
    /// A check of `cost` units for `key` under `limit`.
    pub fn new(limit: Arc<ActiveLimit>, key: Vec<u8>, cost: u64) -> Check {
        Check { limit, key, cost }
    }
}

/// One limit's part in a verdict.
#[derive(Clone, Debug)]
pub struct LimitResult {
    /// The check, as asked.
    pub check: Check,
    /// What the store decided.
    pub outcome: Outcome,
}

impl LimitResult {
    /// The decision, or for a saturated store (no room for a new key) a
    /// denial with the retry-after of the next sweep.
    pub fn decision(&self) -> Decision {
        match self.outcome {
            Outcome::Decided(decision) => decision,
            Outcome::Saturated { retry_after } => {
                let quota = self.check.limit.limit().policy().quota();
                Decision::denied(quota, 0, retry_after, RetryAfter::After(retry_after))
            }
        }
    }

    /// Whether this limit refused the request (shadow limits included).
    pub fn refused(&self) -> bool {
        !self.outcome.is_allowed()
    }
}

/// The decisions of every limit a request was checked against.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// The results, in the order of the checks.
    pub results: Vec<LimitResult>,
}

impl Verdict {
    /// Whether the request may proceed: no limit refused it, except shadow
    /// limits, which only report.
    pub fn is_allowed(&self) -> bool {
        self.results
            .iter()
            .all(|result| result.check.limit.is_shadow() || !result.refused())
    }

    /// The first limit (not in shadow mode) that refused the request.
    pub fn denied_by(&self) -> Option<&LimitResult> {
        self.results
            .iter()
            .find(|result| !result.check.limit.is_shadow() && result.refused())
    }

    /// Whether a shadow limit would have refused the request.
    pub fn shadow_refused(&self) -> bool {
        self.results
            .iter()
            .any(|result| result.check.limit.is_shadow() && result.refused())
    }

    /// When to try again: the longest wait among the limits that refused
    /// (shadow limits aside), `Never` if one can never allow this cost, and
    /// zero when allowed.
    pub fn retry_after(&self) -> RetryAfter {
        let mut longest = RetryAfter::After(Duration::ZERO);
        for result in &self.results {
            if result.check.limit.is_shadow() || !result.refused() {
                continue;
            }
            match (result.outcome.retry_after(), longest) {
                (RetryAfter::Never, _) => return RetryAfter::Never,
                (RetryAfter::After(wait), RetryAfter::After(current)) if wait > current => {
                    longest = RetryAfter::After(wait);
                }
                _ => {}
            }
        }
        longest
    }

    /// The decisions, for the header functions of
    /// [`ratekeeper_tower::headers`]; `decisions` must come from
    /// [`Verdict::decisions`].
    pub fn reports<'a>(&'a self, decisions: &'a [Decision]) -> Vec<PolicyReport<'a>> {
        self.results
            .iter()
            .zip(decisions)
            .map(|(result, decision)| PolicyReport {
                name: result.check.limit.name(),
                window: result.check.limit.window(),
                decision,
                partition_key: None,
            })
            .collect()
    }

    /// Every result's decision, in order (see [`LimitResult::decision`]).
    pub fn decisions(&self) -> Vec<Decision> {
        self.results.iter().map(LimitResult::decision).collect()
    }
}
