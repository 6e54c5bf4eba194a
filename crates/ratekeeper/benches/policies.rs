//! One decision per policy, on the allow and the deny path.
//!
//! Run with `cargo bench -p ratekeeper --bench policies`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ratekeeper::{
    policy::Algorithm, FixedWindow, Gcra, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};

/// Benchmarks `policy` deciding one unit from a state that allows it and
/// from one that denies it, at a fixed time so each iteration does the same
/// work.
fn bench_policy<A: Algorithm>(c: &mut Criterion, name: &str, policy: A) {
    let now = Timestamp::from_secs(1_000);
    let fresh = policy.fresh();
    let mut exhausted = fresh.clone();
    while policy.decide(&exhausted, now, 1).0.is_allowed() {
        exhausted = policy.decide(&exhausted, now, 1).1;
    }
    let mut group = c.benchmark_group(name);
    group.bench_function("allow", |b| {
        b.iter(|| black_box(&policy).decide(black_box(&fresh), black_box(now), black_box(1)))
    });
    group.bench_function("deny", |b| {
        b.iter(|| black_box(&policy).decide(black_box(&exhausted), black_box(now), black_box(1)))
    });
    group.finish();
}

fn policies(c: &mut Criterion) {
    let minute = Duration::from_secs(60);
    bench_policy(
        c,
        "token_bucket",
        TokenBucket::new(100, minute, 100).unwrap(),
    );
    bench_policy(c, "gcra", Gcra::new(100, minute, 100).unwrap());
    bench_policy(c, "fixed_window", FixedWindow::new(100, minute).unwrap());
    bench_policy(
        c,
        "sliding_window",
        SlidingWindow::new(100, minute).unwrap(),
    );
    bench_policy(c, "sliding_log", SlidingLog::new(100, minute).unwrap());
}

/// The peer: governor's direct (unkeyed) GCRA limiter on its fake clock, the
/// closest thing it has to one pure decision. It also does an atomic
/// compare-and-swap on its state, which ratekeeper's pure decision does not.
fn governor_peer(c: &mut Criterion) {
    use governor::clock::FakeRelativeClock;
    use governor::{Quota, RateLimiter};
    use std::num::NonZeroU32;

    let quota = Quota::per_minute(NonZeroU32::new(100).unwrap());
    let mut group = c.benchmark_group("governor_direct");
    let clock = FakeRelativeClock::default();
    let limiter = RateLimiter::direct_with_clock(quota, clock.clone());
    group.bench_function("allow", |b| {
        b.iter(|| {
            // Step the fake clock a full period each time, so every check allows.
            clock.advance(Duration::from_secs(1));
            black_box(limiter.check())
        })
    });
    let exhausted = RateLimiter::direct_with_clock(quota, FakeRelativeClock::default());
    while exhausted.check().is_ok() {}
    group.bench_function("deny", |b| b.iter(|| black_box(exhausted.check())));
    group.finish();
}

criterion_group!(benches, policies, governor_peer);
criterion_main!(benches);
