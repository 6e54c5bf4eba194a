//! Each descriptor's status, and whether the request is over its limit,
//! as envoyproxy/ratelimit answers them.

use std::time::Duration;

use ratekeeper::Decision;
use smallvec::{smallvec, SmallVec};

use super::{DescriptorVerdict, Planned, Shown, Uncounted};
use crate::engine::LimitResult;

/// One descriptor's part of the answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DescriptorAnswer {
    /// Whether the descriptor is over its limit.
    pub over: bool,
    /// The limit shown: the one that refused, else the tightest; `None`
    /// when no limit applied (or an unlimited one).
    pub limit: Option<Shown>,
    /// What is left under it (`u32::MAX` for an unlimited one).
    pub remaining: u32,
    /// Time until its quota is whole again; `None` with no limit.
    pub until_reset: Option<Duration>,
}

/// One result with what it belongs to.
type Row<'a> = (&'a LimitResult, &'a Planned, &'a Decision);

/// A request's rows, or positions, without allocating for the few
/// limits most requests meet.
type Few<T> = SmallVec<[T; 4]>;

/// Each descriptor's status, and whether the request is over its limit:
/// envoyproxy/ratelimit's rule, over when a descriptor not in quota mode
/// is, or when every one in quota mode is (before global shadow mode,
/// which the caller applies).
pub(super) fn statuses(
    verdict: &DescriptorVerdict,
    uncounted: Vec<Option<Uncounted>>,
    shadow_mode: bool,
) -> (Vec<DescriptorAnswer>, bool) {
    let rows: Few<Row<'_>> = verdict.results().collect();
    let mine = by_descriptor(
        uncounted.len(),
        rows.iter().map(|(_, plan, _)| plan.descriptor),
    );
    let (mut over, mut quotas, mut quotas_over) = (false, 0usize, 0usize);
    let statuses = uncounted
        .into_iter()
        .enumerate()
        .map(|(index, uncounted)| {
            let results = || mine.of(index).iter().map(|&at| &rows[at]);
            let (mut status, quota) = match uncounted {
                Some(Uncounted::Zero {
                    shown,
                    window,
                    shadow,
                    quota,
                }) => {
                    let status = DescriptorAnswer {
                        over: !shadow,
                        limit: Some(shown),
                        remaining: 0,
                        until_reset: Some(window),
                    };
                    (status, quota && !shadow)
                }
                Some(Uncounted::Unlimited) if mine.of(index).is_empty() => (
                    DescriptorAnswer {
                        remaining: u32::MAX,
                        ..DescriptorAnswer::default()
                    },
                    false,
                ),
                _ => (
                    descriptor_status(results(), shadow_mode),
                    results().any(|(_, plan, _)| plan.quota),
                ),
            };
            if quota {
                quotas += 1;
                let refused = results()
                    .any(|(result, plan, _)| plan.quota && !plan.refund && result.refused())
                    || status.over;
                if refused {
                    quotas_over += 1;
                    status.over = true;
                    status.remaining = 0;
                }
            } else {
                over |= status.over;
            }
            status
        })
        .collect();
    over |= quotas > 0 && quotas == quotas_over;
    (statuses, over)
}

/// The status of one descriptor from the results of its limits: not over
/// with no limit when none applied; otherwise the limit that refused it,
/// or else the tightest (least remaining, then longest reset). Shadow
/// limits are shown only when no other limit applied, and never refuse,
/// unless the door is in `shadow_mode`, where the status is as decided
/// whatever the limits' flags; refunds never refuse.
fn descriptor_status<'a>(
    results: impl Iterator<Item = &'a Row<'a>>,
    shadow_mode: bool,
) -> DescriptorAnswer {
    // In global shadow mode every limit is a shadow limit, and the
    // statuses are what shows which would refuse: they stay as decided.
    let is_shadow = |result: &LimitResult| !shadow_mode && result.check.limit.is_shadow();
    let mine: Few<&Row<'a>> = results
        .inspect(|_| {
            #[cfg(test)]
            work::step();
        })
        .collect();
    let enforced: Few<_> = mine
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
        return DescriptorAnswer::default();
    };
    DescriptorAnswer {
        over: refusing.is_some(),
        limit: Some(plan.shown.clone()),
        remaining: u32::try_from(decision.remaining()).unwrap_or(u32::MAX),
        until_reset: Some(decision.reset()),
    }
}

/// Positions grouped by the descriptor they belong to, in one pass each
/// way (a counting sort): [`ByDescriptor::of`] gives one descriptor's.
struct ByDescriptor {
    /// Positions, descriptor by descriptor.
    order: Few<usize>,
    /// Where each descriptor's positions start in `order`, and one past
    /// the last descriptor's end.
    starts: Few<usize>,
}

impl ByDescriptor {
    /// The positions of descriptor `index`, in their original order.
    fn of(&self, index: usize) -> &[usize] {
        let end = index.checked_add(1).and_then(|next| self.starts.get(next));
        match (self.starts.get(index), end) {
            (Some(&start), Some(&end)) => self.order.get(start..end).unwrap_or_default(),
            _ => &[],
        }
    }
}

/// Groups positions by descriptor: `descriptors` gives, for each position,
/// the descriptor (below `count`) it belongs to; others are left out.
fn by_descriptor(count: usize, descriptors: impl Iterator<Item = usize> + Clone) -> ByDescriptor {
    // starts[d + 1] counts descriptor d's positions, then the running sum
    // makes starts[d] where d's run begins.
    let mut starts: Few<usize> = smallvec![0; count + 1];
    for descriptor in descriptors.clone().filter(|&d| d < count) {
        starts[descriptor + 1] += 1;
    }
    for index in 1..starts.len() {
        starts[index] += starts[index - 1];
    }
    let mut next = starts.clone();
    let mut order: Few<usize> = smallvec![0; starts[count]];
    for (position, descriptor) in descriptors.enumerate().filter(|&(_, d)| d < count) {
        order[next[descriptor]] = position;
        next[descriptor] += 1;
    }
    ByDescriptor { order, starts }
}

/// A count of the results each request's statuses look at, for the test
/// that the work is linear.
#[cfg(test)]
pub(crate) mod work {
    use std::cell::Cell;

    thread_local! {
        static STEPS: Cell<u64> = const { Cell::new(0) };
    }

    /// One result looked at.
    pub(crate) fn step() {
        STEPS.with(|steps| steps.set(steps.get() + 1));
    }

    /// The steps so far on this thread, starting the count again.
    pub(crate) fn take() -> u64 {
        STEPS.with(|steps| steps.replace(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_group_by_descriptor_in_order() {
        let groups = by_descriptor(4, [2, 0, 2, 3, 0, 9].into_iter());
        assert_eq!(groups.of(0), [1, 4]);
        assert!(groups.of(1).is_empty());
        assert_eq!(groups.of(2), [0, 2]);
        assert_eq!(groups.of(3), [3]);
        // Out of range: nothing, never a panic.
        assert!(groups.of(4).is_empty());
        assert!(groups.of(usize::MAX).is_empty());
    }
}
