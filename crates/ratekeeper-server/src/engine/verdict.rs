//! What the engine answers: each limit's outcome and the request's fate.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{policy::Algorithm, store::AnsweredBy, Decision, Outcome, RetryAfter};
use ratekeeper_tower::headers::PolicyReport;

use super::ActiveLimit;

/// One limit to decide a request against: the limit, the request's key
/// under it, and how many units the request costs.
#[derive(Clone, Debug)]
pub struct LimitCheck {
    /// The limit.
    pub limit: Arc<ActiveLimit>,
    /// The key, from [`ActiveLimit::key`].
    pub key: Vec<u8>,
    /// The units to take (0 only reports).
    pub cost: u64,
}

impl LimitCheck {
    /// A check of `cost` units for `key` under `limit`.
    pub fn new(limit: Arc<ActiveLimit>, key: Vec<u8>, cost: u64) -> LimitCheck {
        LimitCheck { limit, key, cost }
    }
}

/// One limit's part in a verdict.
#[derive(Clone, Debug)]
pub struct LimitResult {
    /// The check, as asked.
    pub check: LimitCheck,
    /// What the store decided, and who decided it
    /// ([`Outcome::answered_by`]).
    pub outcome: Outcome,
}

impl LimitResult {
    /// Who decided: the store, or the failure policy while it failed.
    pub fn answered_by(&self) -> AnsweredBy {
        self.outcome.answered_by()
    }

    /// The decision; for a saturated store (no room for a new key), nothing
    /// left until room can return: a denial with that retry-after, or for a
    /// limit that allows new keys while saturated, an allowed decision.
    pub fn decision(&self) -> Decision {
        match self.outcome {
            Outcome::Decided(decision) => decision,
            Outcome::Saturated { retry_after, .. } => {
                let quota = self.check.limit.limit().policy().quota();
                if self.check.limit.allows_saturated() {
                    Decision::allowed(quota, 0, retry_after)
                } else {
                    Decision::denied(quota, 0, retry_after, RetryAfter::After(retry_after))
                }
            }
        }
    }

    /// Whether this limit refused the request (shadow limits included): a
    /// saturated store refuses unless the limit allows new keys then.
    pub fn refused(&self) -> bool {
        refuses(&self.check, &self.outcome)
    }

    /// Whether the store had no room for the key (nothing was counted).
    pub fn saturated(&self) -> bool {
        self.outcome.is_saturated()
    }
}

/// Whether `outcome` refuses `check`'s request: a denial, or a saturated
/// store under a limit with `on_saturated = "deny"`.
pub(crate) fn refuses(check: &LimitCheck, outcome: &Outcome) -> bool {
    match outcome {
        Outcome::Saturated { .. } => !check.limit.allows_saturated(),
        decided => !decided.is_allowed(),
    }
}

/// The header every door adds when a limit's store was saturated: the
/// names of those limits (not in shadow mode) as a structured-field list
/// of strings, such as `"per-ip"`. The request was refused by them, or
/// let through uncounted by those with `on_saturated = "allow"`. The tower
/// layer's [`X_RATEKEEPER_SATURATED`](ratekeeper_tower::headers::X_RATEKEEPER_SATURATED),
/// as text for the Envoy door's header lists.
pub const SATURATED_HEADER: &str = "x-ratekeeper-saturated";

/// The header every HTTP door adds to an answer that the failure policy
/// made while the store failed: `fail-open` (allowed, nothing counted)
/// or `fallback` (decided by this process's in-memory fallback); absent
/// when the store decided. The Envoy door sends it as response metadata
/// and among `response_headers_to_add`.
pub const STORE_HEADER: &str = "x-ratekeeper-store";

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

    /// The value of [`SATURATED_HEADER`] (`"a", "b"`): the limits, not in
    /// shadow mode, whose store had no room for the key; `None` when none.
    pub(crate) fn saturated_header(&self) -> Option<String> {
        let names = self
            .results
            .iter()
            .filter(|result| !result.check.limit.is_shadow() && result.saturated())
            .map(|result| result.check.limit.name());
        let value = ratekeeper_tower::headers::saturated_value(names)?;
        value.to_str().ok().map(str::to_owned)
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

    /// Who answered the request: [`AnsweredBy::Store`] when the store
    /// decided every limit; else what the failure policy did (fail-open
    /// first, then the fallback, when calls differ).
    pub fn answered_by(&self) -> AnsweredBy {
        self.results
            .iter()
            .fold(AnsweredBy::Store, |by, result| by.or(result.answered_by()))
    }

    /// Every result's decision, in order (see [`LimitResult::decision`]),
    /// as the response headers report them: a limit in shadow mode refused
    /// nothing, so its refusal is reported as allowed
    /// ([`shadow_view`](ratekeeper_tower::headers::shadow_view)).
    pub fn decisions(&self) -> Vec<Decision> {
        self.results
            .iter()
            .map(|result| match result.check.limit.is_shadow() {
                true => ratekeeper_tower::headers::shadow_view(&result.decision()),
                false => result.decision(),
            })
            .collect()
    }
}
