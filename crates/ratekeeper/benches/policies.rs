//! One decision per policy, on the allow and the deny path.
//!
//! Run with `cargo bench -p ratekeeper --bench policies`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use ratekeeper::{Algorithm, FixedWindow, Gcra, SlidingLog, SlidingWindow, Timestamp, TokenBucket};

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
        b.iter(|| policy.decide(black_box(&fresh), black_box(now), black_box(1)))
    });
    group.bench_function("deny", |b| {
        b.iter(|| policy.decide(black_box(&exhausted), black_box(now), black_box(1)))
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

criterion_group!(benches, policies);
criterion_main!(benches);
