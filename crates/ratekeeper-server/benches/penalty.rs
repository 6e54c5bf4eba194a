//! What refusing a blocked key costs (a limit with `block_for`): one
//! `Engine::check` of one limit, in process, against a check of a key
//! that is not blocked, on the in-memory store and on Redis.
//!
//! - `memory/allowed`: a key the limit allows (the in-memory store's
//!   check, the cost to stay under);
//! - `memory/blocked`, `redis/blocked`: a key this instance knows is
//!   blocked, refused from memory without a call to the store;
//! - `redis/allowed`: a key the limit allows on Redis (a round trip), for
//!   scale.
//!
//! ```text
//! cargo bench -p ratekeeper-server --bench penalty
//! ```
//!
//! Redis runs need `redis-server` (started here on a free port); without
//! it they are skipped with a message.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::{Engine, LimitCheck};
use ratekeeper_server::Config;
use ratekeeper_test_support::redis::RedisServer;
use tokio::runtime::Runtime;

/// A limit that allows every benchmarked key but `blocked`, blocked once
/// and for a day.
fn config(store: &str) -> String {
    format!(
        "{store}\n[[limits]]\nname = \"guarded\"\nrate = \"1000000000/minute burst 1000000000\"\n\
         key = [\"global\"]\nblock_for = \"1d\"\n"
    )
}

fn engine(runtime: &Runtime, store: &str) -> Engine {
    let config = Config::from_toml_str(&config(store), "bench.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    runtime
        .block_on(Engine::builder(&config).clock(clock).start())
        .unwrap()
}

/// `engine`'s check of `key`, `cost` units.
fn check(engine: &Engine, key: &[u8], cost: u64) -> LimitCheck {
    let limit = Arc::clone(engine.limits().get("guarded").unwrap());
    LimitCheck::new(limit, key.to_vec(), cost)
}

/// Blocks `key`: a cost past what it has left is an offence (a million
/// units: Redis's clock, which runs on, refills no more than a few
/// thousand between the two calls).
fn block(runtime: &Runtime, engine: &Engine, key: &[u8]) {
    runtime.block_on(async {
        let verdict = engine
            .check(vec![check(engine, key, 1_000_000_000)])
            .await
            .unwrap();
        assert!(verdict.is_allowed());
        let verdict = engine
            .check(vec![check(engine, key, 1_000_000)])
            .await
            .unwrap();
        assert!(!verdict.is_allowed(), "an offence");
        let verdict = engine.check(vec![check(engine, key, 1)]).await.unwrap();
        assert!(!verdict.is_allowed(), "the key is blocked");
    });
}

fn decide(c: &mut Criterion, runtime: &Runtime, engine: &Engine, name: &str, key: &[u8]) {
    let allowed = name.ends_with("allowed");
    c.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = Instant::now();
                for _ in 0..iterations {
                    let verdict = engine.check(vec![check(engine, key, 1)]).await.unwrap();
                    assert_eq!(black_box(verdict).is_allowed(), allowed);
                }
                started.elapsed()
            })
        })
    });
}

fn benches(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let memory = engine(&runtime, "");
    block(&runtime, &memory, b"mallory");
    decide(c, &runtime, &memory, "penalty/memory/allowed", b"alice");
    decide(c, &runtime, &memory, "penalty/memory/blocked", b"mallory");
    let Some(redis) = RedisServer::start() else {
        eprintln!("redis-server not found: the Redis runs are skipped");
        return;
    };
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 5000\n",
        redis.url()
    );
    let remote = engine(&runtime, &store);
    block(&runtime, &remote, b"mallory");
    decide(c, &runtime, &remote, "penalty/redis/allowed", b"alice");
    decide(c, &runtime, &remote, "penalty/redis/blocked", b"mallory");
    drop(redis);
}

criterion_group! {
    name = penalty;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(penalty);
