//! A report against a check on the in-memory store, for every policy: the
//! allowed path (a quota no benchmark uses up) and a report that overdraws
//! (a key deep in debt). `cargo bench -p ratekeeper --bench report`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures_executor::block_on;
use ratekeeper::policy::PolicyKind;
use ratekeeper::{Limit, MemoryStore, Outcome, Policy, Rate, Store};

const KEYS: usize = 10_000;

/// A check through the `Store` trait, as a front end makes it.
///
/// Each operation is called from one place, out of line: the compiler
/// inlines a store's future into its caller when it has one caller, and a
/// report called from three places (the setup, two benchmarks) against a
/// check called from one measured that, 7-11 ns a call, not the store.
#[inline(never)]
fn check_once(store: &MemoryStore, limit: &Limit, key: &str) -> Outcome {
    block_on(store.check(limit, key.as_bytes(), 1)).unwrap()
}

/// A report of `units` through the `Store` trait (see [`check_once`]).
#[inline(never)]
fn report_once(store: &MemoryStore, limit: &Limit, key: &str, units: u64) -> Outcome {
    block_on(store.report(limit, key.as_bytes(), units)).unwrap()
}

fn limit(role: &str, kind: PolicyKind, amount: u64) -> Limit {
    let rate = Rate::new(amount, Duration::from_secs(3_600)).unwrap();
    Limit::new(
        format!("{role}-{kind}-{amount}"),
        Policy::new(kind, &rate).unwrap(),
    )
    .unwrap()
}

fn benches(c: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user-{i}")).collect();
    // The sliding log keeps every hit: a smaller quota keeps its logs short.
    for kind in PolicyKind::ALL {
        let store = MemoryStore::new();
        let roomy = limit(
            "check",
            kind,
            if kind == PolicyKind::SlidingLog {
                100_000
            } else {
                1_000_000
            },
        );
        // Its own states: a sliding log's grows with what is counted.
        let roomy_report = limit(
            "report",
            kind,
            if kind == PolicyKind::SlidingLog {
                100_000
            } else {
                1_000_000
            },
        );
        let tight = limit("overdrawn", kind, 10);
        // Its own states: a sliding log's grows with what is counted.

        for key in &keys {
            let charged = report_once(&store, &tight, key, 1_000);
            assert!(!charged.is_allowed());
        }
        let mut group = c.benchmark_group(format!("report/{kind}"));
        group.throughput(Throughput::Elements(1));
        let mut i = 0;
        group.bench_function("check", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                check_once(&store, &roomy, &keys[i])
            })
        });
        group.bench_function("report", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                report_once(&store, &roomy_report, &keys[i], 1)
            })
        });
        group.bench_function("report overdrawn", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                report_once(&store, &tight, &keys[i], 1)
            })
        });
        group.finish();
    }
}

criterion_group!(report, benches);
criterion_main!(report);
