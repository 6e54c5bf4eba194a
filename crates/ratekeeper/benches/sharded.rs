//! One hot key checked from several threads: [`ShardedWindow`] against one
//! shared atomic word.
//!
//! Run with `cargo bench -p ratekeeper --bench sharded`.
//!
//! What is measured: aggregate checks per second on ONE key, with 1 and 2
//! threads (criterion reports it as elements/s). Each sample runs `iters`
//! checks split evenly over the threads, which start together at a barrier;
//! the time is from the first thread's start to the last thread's end.
//!
//! - `allow/*`: the allow path. Every sample gets a fresh limiter with a
//!   one-hour window and a limit far above the sample's checks, so every
//!   check is allowed and takes one unit with a compare-and-swap.
//! - `deny/*`: the deny path. The limiter is exhausted before the sample,
//!   so every check sees a full window (the sharded one sweeps every shard).
//! - `*/sharded_check`: [`ShardedWindow::check`], reading the monotonic clock
//!   each time, as a server would call it.
//! - `*/sharded_check_fixed_clock`: [`ShardedWindow::check`] on a
//!   [`ManualClock`] that stays put (one atomic load per read), to isolate
//!   the counter from the clock.
//! - `*/sharded_admit` and `*/sharded_admit_fixed_clock`: the same
//!   decisions through [`ShardedWindow::admit`], which returns only a bool
//!   and so skips reading every shard for `remaining`.
//! - `*/single_word_*`: the exact serialized baseline, a fixed window kept
//!   in one `AtomicU64` (window index and count packed, one CAS loop) that
//!   every thread updates, on the clock or at a precomputed time.
//!
//! Both `check` limiters return a full [`Decision`]; the sharded one adds up
//! every shard for its `remaining`, which is part of what is measured.
//!
//! The single-word baseline is exact and serialized; the gap between it and
//! the sharded window grows with the number of cores that really run in
//! parallel, so a busy machine, where the threads take turns on one core,
//! hides it. `check` reads every shard for `remaining`, which brings back
//! the cache-line traffic; `admit` is the path that scales.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ratekeeper::{
    clock::{ManualClock, MonotonicClock},
    memory::ShardedWindow,
    Clock, Decision, RetryAfter, Timestamp,
};

const HOUR: Duration = Duration::from_secs(3_600);

/// A fixed window in one atomic word: the window index in the high 32 bits,
/// the count in the low 32. Exact, and serialized on one cache line.
struct SingleWord {
    word: AtomicU64,
    limit: u64,
    window: u64,
    clock: MonotonicClock,
}

impl SingleWord {
    fn new(limit: u64, window: Duration) -> Self {
        SingleWord {
            word: AtomicU64::new(0),
            limit: limit.min(u64::from(u32::MAX)),
            window: window.as_nanos() as u64,
            clock: MonotonicClock::new(),
        }
    }

    fn check(&self, cost: u64) -> Decision {
        self.check_at(self.clock.now(), cost)
    }

    fn check_at(&self, now: Timestamp, cost: u64) -> Decision {
        let now = now.as_nanos();
        let index = (now / self.window) as u32;
        let until_end = Duration::from_nanos(self.window - now % self.window);
        let mut word = self.word.load(Ordering::Acquire);
        loop {
            let used = if (word >> 32) as u32 == index {
                word & u64::from(u32::MAX)
            } else {
                0
            };
            if used + cost > self.limit {
                return Decision::denied(
                    self.limit,
                    self.limit - used,
                    until_end,
                    RetryAfter::After(until_end),
                );
            }
            let next = (u64::from(index) << 32) | (used + cost);
            match self
                .word
                .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Decision::allowed(self.limit, self.limit - used - cost, until_end),
                Err(current) => word = current,
            }
        }
    }
}

/// Runs `iters` calls of `op` split over `threads` threads started together,
/// and returns the time from the first start to the last end.
fn run_threads<F: Fn() + Sync>(threads: usize, iters: u64, op: F) -> Duration {
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let (barrier, op) = (&barrier, &op);
                let n = iters / threads as u64 + u64::from(t < iters % threads as u64);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..n {
                        op();
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

/// The highest limit a default-sharded window takes.
fn sharded_max_limit() -> u64 {
    let shards = std::thread::available_parallelism().map_or(1, usize::from) as u64;
    (shards * u64::from(u32::MAX)).min(ratekeeper::policy::MAX_QUOTA)
}

/// Benchmarks `op` on a fresh limiter per sample, made by `fresh`, whose
/// window must hold the whole sample (so every measured check allows).
fn allow_on<L: Sync>(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    threads: usize,
    fresh: impl Fn() -> (L, u64),
    op: impl Fn(&L) + Sync,
) {
    group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
        b.iter_custom(|iters| {
            let (limiter, limit) = fresh();
            assert!(iters <= limit / 2, "sample too large for one window");
            run_threads(threads, iters, || op(&limiter))
        })
    });
}

fn allow(c: &mut Criterion) {
    let now = Timestamp::from_secs(1);
    let sharded = || {
        let limiter = ShardedWindow::new(sharded_max_limit(), HOUR).unwrap();
        let limit = limiter.limit();
        (limiter, limit)
    };
    let fixed = || {
        let limiter = ShardedWindow::new(sharded_max_limit(), HOUR)
            .unwrap()
            .with_clock(ManualClock::new(now));
        let limit = limiter.limit();
        (limiter, limit)
    };
    let single = || (SingleWord::new(u64::MAX, HOUR), u64::MAX);
    let mut group = c.benchmark_group("allow");
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        allow_on(&mut group, "sharded_check", threads, sharded, |l| {
            black_box(l.check(black_box(1)));
        });
        allow_on(
            &mut group,
            "sharded_check_fixed_clock",
            threads,
            fixed,
            |l| {
                black_box(l.check(black_box(1)));
            },
        );
        allow_on(&mut group, "sharded_admit", threads, sharded, |l| {
            black_box(l.admit(black_box(1)));
        });
        allow_on(
            &mut group,
            "sharded_admit_fixed_clock",
            threads,
            fixed,
            |l| {
                black_box(l.admit(black_box(1)));
            },
        );
        allow_on(&mut group, "single_word_check", threads, single, |l| {
            black_box(l.check(black_box(1)));
        });
        allow_on(&mut group, "single_word_check_at", threads, single, |l| {
            black_box(l.check_at(black_box(now), black_box(1)));
        });
    }
    group.finish();
}

fn deny(c: &mut Criterion) {
    let now = Timestamp::from_secs(1);
    let sharded = ShardedWindow::new(100, HOUR)
        .unwrap()
        .with_clock(ManualClock::new(now));
    while sharded.check(1).is_allowed() {}
    let single = SingleWord::new(100, HOUR);
    while single.check_at(now, 1).is_allowed() {}

    let mut group = c.benchmark_group("deny");
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2] {
        group.bench_with_input(
            BenchmarkId::new("sharded_check_fixed_clock", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, || {
                        black_box(sharded.check(black_box(1)));
                    })
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("single_word_check_at", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, || {
                        black_box(single.check_at(black_box(now), black_box(1)));
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, allow, deny);
criterion_main!(benches);
