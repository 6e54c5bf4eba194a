//! The all-time allowed and denied totals of one limit.
//!
//! Two atomic counters, each on its own cache line so that threads counting
//! allowed requests do not evict the line of those counting denials. An
//! increment is one relaxed `fetch_add`: the totals only have to be exact
//! in what they count, not ordered with anything else.

use std::sync::atomic::{AtomicU64, Ordering};

/// A value alone on a 128-byte cache line (two 64-byte lines, as adjacent
/// line prefetchers pull lines in pairs), so that counters updated by
/// different threads never share one.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// Allowed and denied counts since the stats were made.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    allowed: Padded<AtomicU64>,
    denied: Padded<AtomicU64>,
}

impl Totals {
    /// Counts one decision.
    #[inline]
    pub(crate) fn record(&self, allowed: bool) {
        let counter = if allowed {
            &self.allowed.0
        } else {
            &self.denied.0
        };
        // Wrapping at 2^64 would take centuries at any real rate.
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests allowed so far.
    pub(crate) fn allowed(&self) -> u64 {
        self.allowed.0.load(Ordering::Relaxed)
    }

    /// Requests denied so far.
    pub(crate) fn denied(&self) -> u64 {
        self.denied.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_side() {
        let totals = Totals::default();
        totals.record(true);
        totals.record(true);
        totals.record(false);
        assert_eq!((totals.allowed(), totals.denied()), (2, 1));
        assert_eq!(std::mem::align_of::<Padded<AtomicU64>>(), 128);
    }
}
