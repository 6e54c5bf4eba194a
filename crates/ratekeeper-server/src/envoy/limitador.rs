//! The Envoy door's side of Limitador's limits (`[limitador]`): a
//! request whose domain is a Limitador namespace is checked against the
//! limits of that namespace that apply to its descriptors, beside the
//! native limits, all or nothing (see [`crate::engine::LimitadorLimits`]).
//!
//! Limitador answers with an overall code only; this door answers as it
//! does for native limits, with a status per descriptor: a Limitador
//! limit is reported on the first descriptor its expressions read. The
//! hits are the request's `hits_addend` (0 counting as 1), as Limitador
//! reads them; a descriptor's own `hits_addend` does not change them.

use std::time::Duration;

use super::proto::rate_limit_response::RateLimit;
use super::proto::RateLimitRequest;
use super::service::Planned;
use super::units;
use crate::config::limitador::Descriptors;
use crate::engine::{Check, LimitSet};

/// What the Limitador limits add to a request's plan.
pub(super) struct Plan<'a> {
    /// The checks to take, and where each is reported.
    pub(super) takes: &'a mut Vec<Check>,
    /// Their plans, in the same order.
    pub(super) plans: &'a mut Vec<Planned>,
    /// Marks a descriptor refused outright (`max_value: 0`), with what
    /// to show: its index, the limit and its window.
    pub(super) zero: &'a mut dyn FnMut(usize, RateLimit, Duration),
    /// Whether the request is refused whatever the store says.
    pub(super) blocked: &'a mut bool,
}

/// Adds the checks of the Limitador limits of `request.domain` that apply
/// to it; nothing when the domain is no Limitador namespace.
pub(super) fn plan(limits: &LimitSet, request: &RateLimitRequest, hits: u64, plan: Plan<'_>) {
    let limitador = limits.limitador();
    if !limitador.knows(&request.domain) {
        return;
    }
    let descriptors = Descriptors::new(request.descriptors.iter().map(|descriptor| {
        descriptor
            .entries
            .iter()
            .map(|entry| (entry.key.as_str(), entry.value.as_str()))
    }));
    for applying in limitador.checks(&request.domain, &descriptors, hits) {
        let limit = applying.limit;
        let window = Duration::from_secs(limit.seconds());
        let (requests_per_unit, unit) = units::envoy_rate(limit.max_value(), window);
        let name = match (&applying.check, limit.name()) {
            (_, Some(name)) => name.to_owned(),
            (Some(check), None) => check.limit.name().to_owned(),
            (None, None) => String::new(),
        };
        let shown = RateLimit {
            name,
            requests_per_unit,
            unit: unit as i32,
        };
        match applying.check {
            Some(check) => {
                plan.takes.push(check);
                plan.plans.push(Planned {
                    descriptor: applying.descriptor,
                    refund: false,
                    shown,
                    quota: false,
                });
            }
            // max_value 0: Limitador refuses any hit, and counts nothing.
            None => {
                if applying.descriptor < request.descriptors.len() {
                    (plan.zero)(applying.descriptor, shown, window);
                    *plan.blocked = true;
                }
            }
        }
    }
}
