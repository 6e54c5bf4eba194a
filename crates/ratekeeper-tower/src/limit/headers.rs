//! The rate-limit response headers of a decision, as the layer writes them
//! (its style, its ready-made `RateLimit-Policy`, partition keys).

use ratekeeper::{store::Check, Outcome};

use super::layer::Shared;
use crate::headers::{shadow_view, write_headers, HeaderStyle, PolicyReport};

#[inline]
pub(super) fn add_rate_limit_headers<S>(
    shared: &Shared<S>,
    put: &mut dyn FnMut(http::HeaderName, http::HeaderValue),
    checks: &[Check<'_>],
    outcomes: &[Outcome],
) {
    if shared.headers != HeaderStyle::None {
        write_rate_limit_headers(shared, put, checks, outcomes);
    }
}

pub(super) fn write_rate_limit_headers<S>(
    shared: &Shared<S>,
    put: &mut dyn FnMut(http::HeaderName, http::HeaderValue),
    checks: &[Check<'_>],
    outcomes: &[Outcome],
) {
    if outcomes.iter().any(Outcome::is_saturated) {
        put_saturated(shared, put, checks, outcomes);
    }
    if outcomes.iter().any(|outcome| !outcome.is_allowed()) {
        if let Some(seen) = shadow_views(shared, checks, outcomes) {
            return write_reports(shared, put, checks, &seen);
        }
    }
    write_reports(shared, put, checks, outcomes);
}

/// The outcomes as the headers report them when a shadow rule refused:
/// allowed ([`shadow_view`]), since it refused nothing; `None` when no
/// shadow rule refused.
#[cold]
fn shadow_views<S>(
    shared: &Shared<S>,
    checks: &[Check<'_>],
    outcomes: &[Outcome],
) -> Option<smallvec::SmallVec<[Outcome; 4]>> {
    let mut changed = false;
    let seen = checks
        .iter()
        .zip(outcomes)
        .map(|(check, outcome)| match outcome {
            Outcome::Decided(decision) if !decision.is_allowed() && is_shadow(shared, check) => {
                changed = true;
                Outcome::Decided(shadow_view(decision))
            }
            other => *other,
        })
        .collect();
    changed.then_some(seen)
}

/// Whether `check` is a shadow rule's, which only reports.
fn is_shadow<S>(shared: &Shared<S>, check: &Check<'_>) -> bool {
    shared
        .rules
        .iter()
        .any(|rule| std::ptr::eq(rule.limit(), check.limit) && rule.is_shadow())
}

fn write_reports<S>(
    shared: &Shared<S>,
    put: &mut dyn FnMut(http::HeaderName, http::HeaderValue),
    checks: &[Check<'_>],
    outcomes: &[Outcome],
) {
    // One limit (the usual): its report alone, no list to build.
    if let ([check], [outcome]) = (checks, outcomes) {
        if let Some(report) = report_of(shared, check, outcome) {
            write_with_policy(shared, put, std::slice::from_ref(&report));
        }
        return;
    }
    let reports: smallvec::SmallVec<[PolicyReport<'_>; 4]> = checks
        .iter()
        .zip(outcomes)
        .filter_map(|(check, outcome)| report_of(shared, check, outcome))
        .collect();
    write_with_policy(shared, put, &reports);
}

/// `X-RateKeeper-Saturated`, naming the limits (not in shadow mode) whose
/// store had no room for the key.
#[cold]
fn put_saturated<S>(
    shared: &Shared<S>,
    put: &mut dyn FnMut(http::HeaderName, http::HeaderValue),
    checks: &[Check<'_>],
    outcomes: &[Outcome],
) {
    let names = checks
        .iter()
        .zip(outcomes)
        .filter(|(check, outcome)| outcome.is_saturated() && !is_shadow(shared, check))
        .map(|(check, _)| check.limit.name());
    if let Some(value) = crate::headers::saturated_value(names) {
        put(crate::headers::X_RATEKEEPER_SATURATED, value);
    }
}

/// One limit's part in the headers; `None` when it decided nothing (a
/// saturated table).
#[inline]
fn report_of<'a, S>(
    shared: &Shared<S>,
    &Check { limit, key, .. }: &Check<'a>,
    outcome: &'a Outcome,
) -> Option<PolicyReport<'a>> {
    match outcome {
        Outcome::Decided(decision) => Some(PolicyReport {
            name: limit.name(),
            window: ratekeeper::policy::Algorithm::window(limit.policy()),
            decision,
            partition_key: shared.partition_keys.then_some(key),
        }),
        _ => None,
    }
}

/// Writes the headers of `reports`, with the layer's ready-made
/// `RateLimit-Policy` when every rule is reported (it holds them all).
#[inline]
fn write_with_policy<S>(
    shared: &Shared<S>,
    put: &mut dyn FnMut(http::HeaderName, http::HeaderValue),
    reports: &[PolicyReport<'_>],
) {
    let policy_value = shared
        .policy_value
        .as_ref()
        .filter(|_| reports.len() == shared.rules.len());
    write_headers(put, shared.headers, shared.reset, reports, policy_value);
}
