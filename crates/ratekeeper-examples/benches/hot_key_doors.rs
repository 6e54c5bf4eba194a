//! Seed 003's comparison: one hot key checked from many threads through the
//! example application's doors.
//!
//! Run with `cargo bench -p ratekeeper-examples --bench hot_key_doors`.
//!
//! Each sample runs `iters` checks of ONE key split evenly over the threads,
//! which start together at a barrier; the time is from the first thread's
//! start to the last one's end, and criterion reports checks per second
//! over all threads. Every sample gets fresh limits whose quota holds the
//! whole sample, so every check is allowed (it is asserted afterwards).
//!
//! - `exact_door`: `RateLimits::check(Action::Auth, key)`, the token bucket
//!   in ratekeeper's `Actions`, one atomic word per key (the seed's
//!   serialized door, here lock-free but still one contended cache line);
//! - `sharded_door`: `HotDoor::admit`, the user's `ShardedWindow` held by
//!   the caller as a connection would;
//! - `sharded_door_lookup`: `RateLimits::check(Action::Publish, user)`,
//!   which finds the door under a read lock and reads every shard for the
//!   wait, as a caller that does not hold its door pays;
//! - `unconfigured`: `RateLimits::check(Action::Subscribe, user)` with
//!   subscribe off (the shipped default): a look-up that finds no limiter.
//!
//! The seed measured 64 processes on 8 cores; this machine has 2, so the
//! runs are at 1, 2 and 8 threads and the sharded door can gain at most 2x.

#[path = "../examples/named_actions.rs"]
#[allow(dead_code)]
mod example;

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use example::{Action, Config, RateLimits, Verdict};
use ratekeeper::clock::MonotonicClock;

/// Limits far above any sample, over an hour.
fn fresh() -> RateLimits<MonotonicClock> {
    let huge = (1u64 << 32).to_string();
    let config = Config::from_lookup(|name| match name {
        "AUTH_RATE_LIMIT" | "PUBLISH_RATE_LIMIT" => Some(huge.clone()),
        "AUTH_RATE_WINDOW_MS" | "PUBLISH_RATE_WINDOW_MS" => Some("3600000".to_owned()),
        _ => None,
    })
    .expect("valid numbers");
    RateLimits::with_clock(config, MonotonicClock::new()).expect("valid limits")
}

/// Runs `iters` calls of `op` split over `threads` threads started
/// together; the time from the first start to the last end.
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
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    let first = spans
        .iter()
        .map(|s| s.0)
        .min()
        .expect("one thread at least");
    let last = spans
        .iter()
        .map(|s| s.1)
        .max()
        .expect("one thread at least");
    last - first
}

fn hot_key(c: &mut Criterion) {
    let mut group = c.benchmark_group("hot_key_doors");
    group.throughput(Throughput::Elements(1));
    for threads in [1, 2, 8] {
        group.bench_with_input(
            BenchmarkId::new("exact_door", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let limits = fresh();
                    let time = run_threads(t, iters, || {
                        black_box(limits.check(Action::Auth, black_box("203.0.113.9")));
                    });
                    assert_eq!(limits.blocked(Action::Auth, "203.0.113.9"), None);
                    time
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("sharded_door", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let limits = fresh();
                    let door = limits
                        .door(Action::Publish, "alice")
                        .expect("publish is on");
                    let time = run_threads(t, iters, || {
                        black_box(door.admit());
                    });
                    assert_eq!(limits.blocked(Action::Publish, "alice"), None);
                    time
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("sharded_door_lookup", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let limits = fresh();
                    let time = run_threads(t, iters, || {
                        black_box(limits.check(Action::Publish, black_box("alice")));
                    });
                    assert_eq!(limits.blocked(Action::Publish, "alice"), None);
                    time
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("unconfigured", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    let limits = fresh();
                    assert_eq!(limits.check(Action::Subscribe, "alice"), Verdict::Unlimited);
                    run_threads(t, iters, || {
                        black_box(limits.check(Action::Subscribe, black_box("alice")));
                    })
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = hot_key
}
criterion_main!(benches);
