//! Several limits at once: a request under a global limit, a per-address
//! limit and a per-route limit (SPEC section 4), checked all or nothing.
//!
//! Run with `cargo bench -p ratekeeper --bench multi`.
//!
//! - `ratekeeper_check_all`: [`check_all`] over three [`MemoryLimiter`]s.
//! - `ratekeeper_store_check_all`: the same through [`MemoryStore`]'s
//!   [`Immediate::check_all_now`](ratekeeper::store::Immediate::check_all_now) (what the middleware and the service call):
//!   each limit's table found by name.
//! - `ratekeeper_three_checks`: the three limiters checked one after
//!   another, not all or nothing: the floor `check_all` adds to.
//! - `governor_three_checks`: governor's keyed limiters (its default
//!   `DashMap` and quanta clock) checked one after another, for reference:
//!   governor has no all-or-nothing check.
//!
//! All on GCRA with a quota nothing in the run exhausts (every check
//! allows and writes), over 1,000 addresses and 10 routes visited in turn,
//! each key touched in the warm-up; one thread. Each sample asserts that
//! every check allowed.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratekeeper::{
    clock::MonotonicClock, memory::check_all, store::Check, Gcra, Limit, MemoryLimiter,
    MemoryStore, Store,
};

const ADDRESSES: usize = 1_000;
const ROUTES: usize = 10;

fn policy() -> Gcra {
    Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).unwrap()
}

fn limiter() -> MemoryLimiter {
    MemoryLimiter::builder(policy())
        .max_keys(10_000)
        .background_sweep(false)
        .build()
        .unwrap()
}

/// The keys of request `i`: the global key, its address and its route.
struct Keys {
    addresses: Vec<String>,
    routes: Vec<String>,
}

impl Keys {
    fn new() -> Keys {
        Keys {
            addresses: (0..ADDRESSES)
                .map(|i| format!("198.51.{}.{}", i / 256, i % 256))
                .collect(),
            routes: (0..ROUTES)
                .map(|i| format!("GET /api/v1/items/{i}"))
                .collect(),
        }
    }

    fn of(&self, i: usize) -> [&str; 3] {
        [
            "all",
            &self.addresses[i % ADDRESSES],
            &self.routes[i % ROUTES],
        ]
    }
}

fn several_limits(c: &mut Criterion) {
    let keys = Keys::new();
    let mut group = c.benchmark_group("multi/3_limits");
    group.throughput(Throughput::Elements(1));

    let limiters = [limiter(), limiter(), limiter()];
    let mut next = 0;
    group.bench_function("ratekeeper_check_all", |b| {
        b.iter(|| {
            let [global, address, route] = keys.of(next);
            next += 1;
            let outcome = check_all(&[
                (&limiters[0], global, 1),
                (&limiters[1], address, 1),
                (&limiters[2], route, 1),
            ]);
            assert!(outcome.is_allowed());
            black_box(outcome)
        })
    });

    let store = MemoryStore::builder()
        .max_keys(10_000)
        .clock(MonotonicClock::new())
        .background_sweep(false)
        .build()
        .expect("a valid store");
    let limits =
        ["global", "per-address", "per-route"].map(|name| Limit::new(name, policy()).unwrap());
    let immediate = store
        .immediate()
        .expect("the in-memory store decides at once");
    let mut next = 0;
    group.bench_function("ratekeeper_store_check_all", |b| {
        b.iter(|| {
            let [global, address, route] = keys.of(next);
            next += 1;
            let checks = [
                Check::new(&limits[0], global.as_bytes(), 1),
                Check::new(&limits[1], address.as_bytes(), 1),
                Check::new(&limits[2], route.as_bytes(), 1),
            ];
            let outcome = immediate.check_all_now(&checks).unwrap();
            assert!(outcome.is_allowed());
            black_box(outcome)
        })
    });

    let mut next = 0;
    group.bench_function("ratekeeper_three_checks", |b| {
        b.iter(|| {
            let request = keys.of(next);
            next += 1;
            for (limiter, key) in limiters.iter().zip(request) {
                assert!(black_box(limiter.check(key, 1)).is_allowed());
            }
        })
    });

    let governors: [DefaultKeyedRateLimiter<String>; 3] =
        std::array::from_fn(|_| RateLimiter::keyed(Quota::per_second(NonZeroU32::MAX)));
    let owned: Vec<[String; 3]> = (0..ADDRESSES * ROUTES)
        .map(|i| keys.of(i).map(str::to_owned))
        .collect();
    let mut next = 0;
    group.bench_function("governor_three_checks", |b| {
        b.iter(|| {
            let request = &owned[next % owned.len()];
            next += 1;
            for (limiter, key) in governors.iter().zip(request) {
                assert!(black_box(limiter.check_key(key)).is_ok());
            }
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = several_limits
}
criterion_main!(benches);
