//! Limitador's limits in a request's plan (`[limitador]`): a request whose
//! domain is a Limitador namespace is checked against the limits of that
//! namespace that apply to its descriptors, beside the native limits, all
//! or nothing (see [`LimitadorLimits`](crate::engine::LimitadorLimits)).
//!
//! Limitador answers with an overall code only; the plan reports each of
//! its limits on a descriptor, as native limits are: the first descriptor
//! its expressions read. The hits are the request's (its `hits_addend`, 0
//! counting as 1), as Limitador reads them; a descriptor's own
//! `hits_addend` does not change them.

use std::time::Duration;

use super::shown::{shown_rate, Shown};
use super::{Descriptor, DescriptorPlan, Planned, Uncounted};
use crate::engine::LimitSet;
use ratekeeper_formats::envoy::Entry;
use ratekeeper_formats::limitador::Descriptors;

/// Adds to `plan` the checks of the Limitador limits of `domain` that
/// apply to `descriptors`; nothing when the domain is no Limitador
/// namespace.
pub(super) fn plan<D: Descriptor>(
    limits: &LimitSet,
    domain: &str,
    descriptors: &[D],
    hits: u64,
    plan: &mut DescriptorPlan,
) {
    let limitador = limits.limitador();
    if !limitador.knows(domain) {
        return;
    }
    let read = Descriptors::new(descriptors.iter().map(|descriptor| {
        descriptor
            .entries()
            .iter()
            .map(|entry| (entry.key(), entry.value()))
    }));
    for applying in limitador.checks(domain, &read, hits) {
        let limit = applying.limit;
        let window = Duration::from_secs(limit.seconds());
        let (requests_per_unit, unit) = shown_rate(limit.max_value(), window);
        let name = match (&applying.check, limit.name()) {
            (_, Some(name)) => name.to_owned(),
            (Some(check), None) => check.limit.name().to_owned(),
            (None, None) => String::new(),
        };
        let shown = Shown {
            name,
            requests_per_unit,
            unit,
        };
        match applying.check {
            Some(check) => plan.take(
                check,
                Planned {
                    descriptor: applying.descriptor,
                    refund: false,
                    shown,
                    quota: false,
                },
            ),
            // max_value 0: Limitador refuses any hit, and counts nothing.
            None => {
                if let Some(slot) = plan.uncounted.get_mut(applying.descriptor) {
                    *slot = Some(Uncounted::Zero {
                        shown,
                        window,
                        shadow: false,
                        quota: false,
                    });
                    plan.blocked = true;
                }
            }
        }
    }
}
