//! A latency histogram of atomic counters, for the decision latency and
//! the store's per-operation latencies: one relaxed increment per bucket
//! and one for the sum per observation, no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The upper bounds of the buckets, in nanoseconds: from 1 µs (the
/// in-memory store) to 1 s (a remote store timing out). Larger latencies
/// land in the `+Inf` bucket.
pub(super) const BOUNDS_NANOS: [u64; 19] = [
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// Latencies observed, by bucket.
#[derive(Debug, Default)]
pub(super) struct Histogram {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BOUNDS_NANOS.len() + 1],
    /// The sum of all latencies, in nanoseconds.
    sum_nanos: AtomicU64,
}

impl Histogram {
    /// Records one latency.
    pub(super) fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NANOS.partition_point(|&bound| bound < nanos);
        if let Some(counter) = self.buckets.get(bucket) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// Observations so far.
    pub(super) fn count(&self) -> u64 {
        self.buckets.iter().fold(0u64, |total, n| {
            total.saturating_add(n.load(Ordering::Relaxed))
        })
    }

    /// The histogram now.
    ///
    /// Read while latencies are recorded, the buckets and the sum may be an
    /// observation or two apart; `count` is always the buckets' total.
    pub(super) fn snapshot(&self) -> LatencyHistogram {
        let buckets: Vec<(f64, u64)> = BOUNDS_NANOS
            .iter()
            .map(|&bound| Duration::from_nanos(bound).as_secs_f64())
            .chain(std::iter::once(f64::INFINITY))
            .zip(&self.buckets)
            .map(|(bound, counter)| (bound, counter.load(Ordering::Relaxed)))
            .collect();
        let count = buckets
            .iter()
            .fold(0u64, |total, (_, n)| total.saturating_add(*n));
        LatencyHistogram {
            buckets,
            count,
            sum_seconds: Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed)).as_secs_f64(),
        }
    }
}

/// A latency histogram at one time.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct LatencyHistogram {
    /// Each bucket's upper bound in seconds and the observations that took
    /// longer than the previous bound and at most this one (not
    /// cumulative); the last bound is infinite.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Their total latency, in seconds.
    pub sum_seconds: f64,
}
