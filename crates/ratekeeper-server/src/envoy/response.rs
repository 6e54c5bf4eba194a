//! Envoy's response: each descriptor's status, and the headers added to
//! the request and the response.

use std::collections::HashMap;
use std::time::Duration;

use ratekeeper::Decision;
use ratekeeper_tower::headers::{self, PolicyReport};

use super::proto::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::proto::HeaderValue;
use super::service::Planned;
use crate::config::EnvoyDoorConfig;
use crate::engine::LimitResult;

/// The status of a descriptor whose override allows nothing.
pub(super) fn zero_status(shown: RateLimit, window: Duration) -> DescriptorStatus {
    DescriptorStatus {
        code: Code::OverLimit as i32,
        current_limit: Some(shown),
        limit_remaining: 0,
        duration_until_reset: Some(duration(window)),
    }
}

/// The status of one descriptor from the results of its limits: OK with no
/// limit when none applied; otherwise the limit that refused it, or else
/// the tightest (least remaining, then longest reset). Shadow limits are
/// shown only when no other limit applied, and never refuse, unless the door
/// is in `shadow_mode` (`[envoy]` or `[enforcement]`), where the code is as
/// decided whatever the limits' flags; refunds never refuse.
pub(super) fn descriptor_status<'a>(
    results: impl Iterator<Item = &'a (&'a LimitResult, &'a Planned, Decision)>,
    shadow_mode: bool,
) -> DescriptorStatus {
    // In global shadow mode every limit is a shadow limit, and the
    // statuses are what shows which would refuse: they stay as decided.
    let is_shadow = |result: &LimitResult| !shadow_mode && result.check.limit.is_shadow();
    let mine: Vec<&(&LimitResult, &Planned, Decision)> = results
        .inspect(|_| {
            #[cfg(test)]
            work::step();
        })
        .collect();
    let enforced: Vec<_> = mine
        .iter()
        .copied()
        .filter(|(result, _, _)| !is_shadow(result))
        .collect();
    let pool = if enforced.is_empty() { mine } else { enforced };
    let refusing = pool
        .iter()
        .copied()
        .find(|(result, plan, _)| !plan.refund && !is_shadow(result) && result.refused());
    let chosen = refusing.or_else(|| {
        pool.iter().copied().min_by(|(_, _, a), (_, _, b)| {
            a.remaining()
                .cmp(&b.remaining())
                .then(b.reset().cmp(&a.reset()))
        })
    });
    let Some((_, plan, decision)) = chosen else {
        return DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
    };
    DescriptorStatus {
        code: if refusing.is_some() {
            Code::OverLimit
        } else {
            Code::Ok
        } as i32,
        current_limit: Some(plan.shown.clone()),
        limit_remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(decision.reset())),
    }
}

/// The draft's `RateLimit-Policy` (every limit that applied, not in shadow
/// mode, once per name: its tightest key) and `RateLimit` (the tightest).
pub(super) fn add_headers(
    out: &mut Vec<HeaderValue>,
    results: &[(&LimitResult, &Planned, Decision)],
) {
    /// Up to this many names, finding a name's report by looking through
    /// them costs less than hashing it.
    const SEARCHED: usize = 8;
    let mut reports: Vec<PolicyReport<'_>> = Vec::new();
    // Where each name's report is, past SEARCHED names: overrides make as
    // many names as descriptors, so searching them all would be quadratic.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (result, _, decision) in results {
        #[cfg(test)]
        work::step();
        if result.check.limit.is_shadow() {
            continue;
        }
        let report = PolicyReport {
            name: result.check.limit.name(),
            window: result.check.limit.window(),
            decision,
            partition_key: None,
        };
        let found = if reports.len() <= SEARCHED {
            reports.iter().position(|kept| kept.name == report.name)
        } else {
            if seen.is_empty() {
                seen.extend(reports.iter().enumerate().map(|(at, kept)| (kept.name, at)));
            }
            seen.get(report.name).copied()
        };
        match found {
            Some(at) => {
                let kept = &mut reports[at];
                if report.decision.remaining() < kept.decision.remaining() {
                    *kept = report;
                }
            }
            None => {
                if !seen.is_empty() {
                    seen.insert(report.name, reports.len());
                }
                reports.push(report);
            }
        }
    }
    let Some(tightest) = headers::tightest(&reports) else {
        return;
    };
    out.push(header(
        headers::RATELIMIT_POLICY.as_str(),
        headers::ratelimit_policy_value(&reports),
    ));
    out.push(header(
        headers::RATELIMIT.as_str(),
        headers::ratelimit_value(tightest),
    ));
}

/// envoyproxy/ratelimit's `RateLimit-Limit`, `RateLimit-Remaining` and
/// `RateLimit-Reset` (named by `door`) of the descriptor closest to its
/// limit, as that service picks it: the last one over its limit if any,
/// else the first with the least remaining; none when no descriptor had a
/// limit. The reset is in whole seconds, rounded up.
pub(super) fn add_envoy_ratelimit_headers(
    out: &mut Vec<HeaderValue>,
    statuses: &[DescriptorStatus],
    door: &EnvoyDoorConfig,
) {
    let limited = statuses
        .iter()
        .filter(|status| status.current_limit.is_some());
    let over = limited
        .clone()
        .rfind(|status| status.code == Code::OverLimit as i32);
    let chosen = over.or_else(|| limited.min_by_key(|status| status.limit_remaining));
    let Some(status) = chosen else { return };
    let limit = status
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit);
    let reset = status.duration_until_reset.as_ref().map_or(0, |reset| {
        let seconds = reset.seconds.max(0);
        match reset.nanos > 0 {
            true => seconds.saturating_add(1),
            false => seconds,
        }
    });
    out.push(header(&door.limit_header, limit.to_string()));
    out.push(header(
        &door.remaining_header,
        status.limit_remaining.to_string(),
    ));
    out.push(header(&door.reset_header, reset.to_string()));
}

/// Positions grouped by the descriptor they belong to, in one pass each
/// way (a counting sort): [`ByDescriptor::of`] gives one descriptor's.
pub(super) struct ByDescriptor {
    /// Positions, descriptor by descriptor.
    order: Vec<usize>,
    /// Where each descriptor's positions start in `order`, and one past
    /// the last descriptor's end.
    starts: Vec<usize>,
}

impl ByDescriptor {
    /// The positions of descriptor `index`, in their original order.
    pub(super) fn of(&self, index: usize) -> &[usize] {
        let end = index.checked_add(1).and_then(|next| self.starts.get(next));
        match (self.starts.get(index), end) {
            (Some(&start), Some(&end)) => self.order.get(start..end).unwrap_or_default(),
            _ => &[],
        }
    }
}

/// Groups positions by descriptor: `descriptors` gives, for each position,
/// the descriptor (below `count`) it belongs to; others are left out.
pub(super) fn by_descriptor(
    count: usize,
    descriptors: impl Iterator<Item = usize> + Clone,
) -> ByDescriptor {
    // starts[d + 1] counts descriptor d's positions, then the running sum
    // makes starts[d] where d's run begins.
    let mut starts = vec![0usize; count + 1];
    for descriptor in descriptors.clone().filter(|&d| d < count) {
        starts[descriptor + 1] += 1;
    }
    for index in 1..starts.len() {
        starts[index] += starts[index - 1];
    }
    let mut next = starts.clone();
    let mut order = vec![0usize; starts[count]];
    for (position, descriptor) in descriptors.enumerate().filter(|&(_, d)| d < count) {
        order[next[descriptor]] = position;
        next[descriptor] += 1;
    }
    ByDescriptor { order, starts }
}

pub(super) fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        raw_value: Vec::new(),
    }
}

/// A protobuf duration, clamped to its range.
pub(super) fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration::try_from(d).unwrap_or(prost_types::Duration {
        seconds: i64::MAX,
        nanos: 999_999_999,
    })
}

/// A count of the results each request's answer looks at, for the test
/// that the work is linear.
#[cfg(test)]
pub(super) mod work {
    use std::cell::Cell;

    thread_local! {
        static STEPS: Cell<u64> = const { Cell::new(0) };
    }

    /// One result looked at.
    pub(super) fn step() {
        STEPS.with(|steps| steps.set(steps.get() + 1));
    }

    /// The steps so far on this thread, starting the count again.
    pub(in crate::envoy) fn take() -> u64 {
        STEPS.with(|steps| steps.replace(0))
    }
}
