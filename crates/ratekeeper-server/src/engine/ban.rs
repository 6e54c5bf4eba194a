//! Limits that refuse every request (`rate = "0/minute"`, a ban): decided
//! here, without a store, as envoyproxy/ratelimit decides
//! `requests_per_unit: 0`.

use ratekeeper::store::AnsweredBy;
use ratekeeper::{Decision, Outcome, RetryAfter};

use super::Check;

/// Whether `check` is under a ban.
pub(super) fn is_ban(check: &Check) -> bool {
    check.limit.config().ban
}

/// A ban's answer: refused, nothing allowed or left, whole again never
/// (the reset is its window, as Envoy's service reports a zero limit).
pub(super) fn answer(check: &Check) -> (Outcome, AnsweredBy) {
    let decision = Decision::denied(0, 0, check.limit.window(), RetryAfter::Never);
    (Outcome::Decided(decision), AnsweredBy::Store)
}

/// Whether a ban among `checks` refuses the request before any store is
/// asked: one not in shadow mode that costs something. The other limits
/// are then only read, whatever the counting, as envoyproxy/ratelimit
/// reads the others when a descriptor's limit is 0. A check only (cost
/// 0) is refused by it but does not stop the others.
pub(super) fn blocks(checks: &[Check]) -> bool {
    checks
        .iter()
        .any(|check| is_ban(check) && check.cost > 0 && !check.limit.is_shadow())
}
