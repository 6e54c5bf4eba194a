//! The cost of recording a decision in [`LimitStats`].
//!
//! Run with `cargo bench -p ratekeeper --bench stats`.
//!
//! What is measured: time per recorded decision, aggregated over 1 and 2
//! threads that share one `LimitStats` (criterion reports it as elements/s
//! too). Each sample runs `iters` records split evenly over the threads,
//! which start together at a barrier; the time is from the first thread's
//! start to the last thread's end. The time is a fixed Unix timestamp, so
//! the clock is not measured and no window rolls over during a sample.
//!
//! - `record/allowed`: [`LimitStats::record`] of an allowed request: the
//!   total and the live minute, two atomic increments.
//! - `record/denied_hot_key`: a denial, always of the same key: also the
//!   per-key table's shard lock and hash lookup, and the top-k summary's
//!   lock and lookup.
//! - `record/denied_10k_keys`: denials walking 10,000 keys round-robin,
//!   with the default 32 top-k counters: nearly every denial replaces the
//!   summary's minimum (a scan of 32 counts and one allocation); the
//!   per-key table holds all 10,000 keys.
//! - `record/atomic_baseline`: one relaxed `fetch_add` on one shared
//!   counter, the floor of any exact shared count.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratekeeper::{stats::LimitStats, Timestamp};

/// Runs `iters` calls of `op(thread, i)` split over `threads` threads
/// started together, and returns the time from the first start to the last
/// end.
fn run_threads<F: Fn(u64, u64) + Sync>(threads: usize, iters: u64, op: F) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                let n = iters / threads as u64 + u64::from(t < iters % threads as u64);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for i in 0..n {
                        op(t, i);
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = spans.iter().map(|s| s.0).min().unwrap();
    let last = spans.iter().map(|s| s.1).max().unwrap();
    last - first
}

fn record(c: &mut Criterion) {
    // Monday 2024-01-08 00:00:30 UTC.
    let now = Timestamp::from_secs(1_704_672_030);
    let keys: Vec<String> = (0..10_000).map(|i| format!("client-{i:05}")).collect();
    let mut group = c.benchmark_group("record");
    group.throughput(Throughput::Elements(1));
    for threads in [1usize, 2] {
        let stats = LimitStats::new();
        group.bench_with_input(
            BenchmarkId::new("allowed", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |_, _| {
                        stats.record(black_box(now), black_box(true), black_box("client"));
                    })
                })
            },
        );
        assert!(stats.allowed() > 0 && stats.denied() == 0);

        let stats = LimitStats::new();
        group.bench_with_input(
            BenchmarkId::new("denied_hot_key", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |_, _| {
                        stats.record(black_box(now), black_box(false), black_box("client"));
                    })
                })
            },
        );
        assert_eq!(stats.keys_tracked(), 1);

        let stats = LimitStats::new();
        group.bench_with_input(
            BenchmarkId::new("denied_10k_keys", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, i| {
                        let key = &keys[((i * 2 + t) % keys.len() as u64) as usize];
                        stats.record(black_box(now), black_box(false), key.as_bytes());
                    })
                })
            },
        );
        assert_eq!(stats.untracked_denials(), 0);

        let counter = AtomicU64::new(0);
        group.bench_with_input(
            BenchmarkId::new("atomic_baseline", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |_, _| {
                        black_box(&counter).fetch_add(1, Ordering::Relaxed);
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, record);
criterion_main!(benches);
