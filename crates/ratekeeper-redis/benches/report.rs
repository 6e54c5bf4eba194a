//! A report against a check on Redis (a `redis-server` of its own on a
//! free loopback port), one call at a time: the allowed path and a report
//! that overdraws. `cargo bench -p ratekeeper-redis --bench report`.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ratekeeper::policy::PolicyKind;
use ratekeeper::{Limit, Policy, Rate, Store};
use ratekeeper_redis::RedisStore;
use ratekeeper_test_support::redis::RedisServer;

const KEYS: usize = 1_000;

fn limit(role: &str, kind: PolicyKind, amount: u64) -> Limit {
    let rate = Rate::new(amount, Duration::from_secs(3_600)).unwrap();
    Limit::new(
        format!("{role}-{kind}-{amount}"),
        Policy::new(kind, &rate).unwrap(),
    )
    .unwrap()
}

fn benches(c: &mut Criterion) {
    let Some(server) = RedisServer::start() else {
        eprintln!("no redis-server: nothing to measure");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt.block_on(async {
        RedisStore::builder()
            .timeout(Duration::from_secs(5))
            .connect(&server.url())
            .await
            .unwrap()
    });
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user-{i}")).collect();
    for kind in PolicyKind::ALL {
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

        rt.block_on(async {
            for key in &keys {
                let charged = store.report(&tight, key.as_bytes(), 1_000).await.unwrap();
                assert!(!charged.is_allowed());
            }
        });
        let mut group = c.benchmark_group(format!("redis report/{kind}"));
        group.throughput(Throughput::Elements(1));
        let mut i = 0;
        group.bench_function("check", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                rt.block_on(store.check(&roomy, keys[i].as_bytes(), 1))
                    .unwrap()
            })
        });
        group.bench_function("report", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                rt.block_on(store.report(&roomy_report, keys[i].as_bytes(), 1))
                    .unwrap()
            })
        });
        group.bench_function("report overdrawn", |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                rt.block_on(store.report(&tight, keys[i].as_bytes(), 1))
                    .unwrap()
            })
        });
        group.finish();
    }
    drop(server);
}

criterion_group!(report, benches);
criterion_main!(report);
