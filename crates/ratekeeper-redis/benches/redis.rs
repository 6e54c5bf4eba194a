//! The Redis store beside the redis crate's own floor, on a private
//! `redis-server` (started here, stopped at the end).
//!
//! - `sequential`: one call at a time on one connection: PING, a bare
//!   EVALSHA of `return 1`, and a decision of each policy;
//! - `in_flight_64`: 64 calls in flight on one multiplexed connection; the
//!   store's decisions with its default batching (calls made while 4
//!   scripts run go together) and with batching off (`_alone`).
//!
//! Criterion reports decisions (elements) per second. Before it runs, the
//! Redis CPU per decision of each (`INFO commandstats`: µs in the command,
//! divided by the decisions) is printed, for decisions that are allowed
//! (the script writes) and denied (it only reads), one at a time and 64 in
//! flight.
//!
//! Run: `cargo bench -p ratekeeper-redis --bench redis`; with
//! `RATEKEEPER_REDIS_CPU_ONLY=1`, only the Redis CPU table; with
//! `RATEKEEPER_REDIS_BATCHING=IN_FLIGHT,MAX_CALLS`, other batching settings
//! than the default for the batched store.

use ratekeeper_test_support::redis as harness;
#[path = "common/limits.rs"]
mod limits;

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use harness::RedisServer;
use ratekeeper::Store;
use ratekeeper_redis::{Batching, RedisStore};
use redis::aio::ConnectionManager;
use tokio::runtime::Runtime;

const IN_FLIGHT: usize = 64;

struct Fixture {
    server: RedisServer,
    rt: Runtime,
    store: RedisStore,
    /// The same store with batching off: every call its own script.
    alone: RedisStore,
    raw: ConnectionManager,
    trivial: redis::Script,
}

fn fixture() -> Option<Fixture> {
    let server = RedisServer::start()?;
    // One thread for the client, leaving the other core to Redis: on a
    // 2-core machine a multi-threaded runtime only adds wake-ups.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let batching = match std::env::var("RATEKEEPER_REDIS_BATCHING") {
        Ok(setting) => {
            let (in_flight, max_calls) = setting
                .split_once(',')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .expect("RATEKEEPER_REDIS_BATCHING=IN_FLIGHT,MAX_CALLS");
            Batching::new(in_flight, max_calls)
        }
        Err(_) => Batching::default(),
    };
    println!("batching: {batching:?}");
    let (store, alone, raw) = rt.block_on(async {
        let store = RedisStore::builder()
            .timeout(Duration::from_secs(5))
            .batching(batching)
            .connect(&server.url())
            .await
            .unwrap();
        let alone = RedisStore::builder()
            .timeout(Duration::from_secs(5))
            .batching(Batching::OFF)
            .connect(&server.url())
            .await
            .unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let raw = ConnectionManager::new(client).await.unwrap();
        (store, alone, raw)
    });
    Some(Fixture {
        server,
        rt,
        store,
        alone,
        raw,
        trivial: redis::Script::new("return 1"),
    })
}

/// Redis CPU per decision, measured by `INFO commandstats` over `n` calls.
fn redis_cpu(f: &Fixture) {
    let n = 20_000;
    let mut con = f.server.connection();
    println!(
        "redis-cpu {:<36} {:>9} {:>9} {:>11} {:>9}",
        "call", "command", "process", "calls/s", "per script"
    );
    let mut measure = |what: &str, command: &str, run: &dyn Fn(usize)| {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut con)
            .unwrap();
        let cpu = f.server.cpu_seconds();
        let start = Instant::now();
        run(n);
        let elapsed = start.elapsed();
        let process = (f.server.cpu_seconds() - cpu) * 1e6 / n as f64;
        let (calls, usec) = f.server.command_stats(command);
        // `command`: µs inside the command (INFO commandstats) per call
        // made (a decision); `process`: the server's whole CPU time per
        // call, network included; `per script`: calls decided per script.
        println!(
            "redis-cpu {what:<36} {:>6.2} us {:>6.2} us {:>11.0} {:>9.1}",
            usec as f64 / n as f64,
            process,
            n as f64 / elapsed.as_secs_f64(),
            n as f64 / calls.max(1) as f64
        );
    };
    measure("ping", "ping", &|n| {
        f.rt.block_on(async {
            let mut raw = f.raw.clone();
            for _ in 0..n {
                let _: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
            }
        })
    });
    measure("evalsha return 1", "evalsha", &|n| {
        f.rt.block_on(async {
            let mut raw = f.raw.clone();
            for _ in 0..n {
                let _: i64 = f.trivial.invoke_async(&mut raw).await.unwrap();
            }
        })
    });
    let peer = redis::Script::new(PEER_GCRA);
    measure("peer: float GCRA, allowed", "evalsha", &|n| {
        f.rt.block_on(async {
            let mut raw = f.raw.clone();
            for i in 0..n {
                let _: Vec<redis::Value> = peer
                    .key(format!("peer:{}", i % 1_000))
                    .arg(1_000_000)
                    .arg(1_000_000)
                    .arg(1)
                    .arg(1)
                    .invoke_async(&mut raw)
                    .await
                    .unwrap();
            }
        })
    });
    for (name, allow, deny) in limits::limits() {
        for (label, limit) in [("allowed", &allow), ("denied", &deny)] {
            measure(&format!("{name} {label}"), "fcall", &|n| {
                f.rt.block_on(async {
                    for i in 0..n {
                        let key = (i % 1_000).to_string();
                        let key = if label == "denied" { "k" } else { key.as_str() };
                        let _ = f.store.check(limit, key.as_bytes(), 1).await.unwrap();
                    }
                })
            });
        }
    }
    // 64 in flight: batched (the default) and alone.
    for (name, allow, _) in limits::limits() {
        let allow = Arc::new(allow);
        for (label, store) in [
            ("64 in flight", &f.store),
            ("64 in flight, alone", &f.alone),
        ] {
            measure(&format!("{name} allowed, {label}"), "fcall", &|n| {
                f.rt.block_on(spread(n as u64, checks(store, &allow)));
            });
        }
    }
}

/// `iters` calls spread over 64 tasks sharing one multiplexed connection.
async fn spread(iters: u64, call: Arc<dyn Fn(u64) -> CallFuture + Send + Sync>) -> Duration {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..IN_FLIGHT as u64 {
        let call = Arc::clone(&call);
        let share = iters / IN_FLIGHT as u64 + u64::from(t < iters % IN_FLIGHT as u64);
        tasks.spawn(async move {
            for i in 0..share {
                call(t * 1_000_003 + i).await;
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    start.elapsed()
}

/// Allowed checks of `limit` over 1,000 keys.
fn checks(
    store: &RedisStore,
    limit: &Arc<ratekeeper::Limit>,
) -> Arc<dyn Fn(u64) -> CallFuture + Send + Sync> {
    let (store, limit) = (store.clone(), Arc::clone(limit));
    Arc::new(move |i| {
        let (store, limit) = (store.clone(), Arc::clone(&limit));
        Box::pin(async move {
            let key = (i % 1_000).to_string();
            let _ = black_box(store.check(&limit, key.as_bytes(), 1).await.unwrap());
        })
    })
}

/// A typical GCRA script for comparison (the shape of many published ones):
/// seconds as floats, numbers as strings, `SET ... EX`.
const PEER_GCRA: &str = r#"
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local interval = period / rate
local t = redis.call('TIME')
local now = (t[1] - 1483228800) + t[2] / 1000000
local tat = redis.call('GET', KEYS[1])
if not tat then tat = now else tat = tonumber(tat) end
if tat < now then tat = now end
local new_tat = tat + interval * cost
local diff = now - (new_tat - interval * burst)
if diff < 0 then
  return {0, 0, tostring(-diff), tostring(tat - now)}
end
local reset = new_tat - now
redis.call('SET', KEYS[1], new_tat, 'EX', math.ceil(reset))
return {1, math.floor(diff / interval), '-1', tostring(reset)}
"#;

/// Sequential decisions against PING round trips, interleaved in small
/// batches so that both see the same machine (a shared VM's latency drifts
/// by 2x within seconds).
fn interleaved(f: &Fixture) {
    let (rounds, batch) = (60, 100);
    for (name, allow, _) in limits::limits() {
        let (mut ping, mut check) = (Duration::ZERO, Duration::ZERO);
        f.rt.block_on(async {
            let mut raw = f.raw.clone();
            for round in 0..rounds {
                let start = Instant::now();
                for _ in 0..batch {
                    let _: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
                }
                ping += start.elapsed();
                let start = Instant::now();
                for i in 0..batch {
                    let key = ((round * batch + i) % 1_000).to_string();
                    let _ = black_box(f.store.check(&allow, key.as_bytes(), 1).await.unwrap());
                }
                check += start.elapsed();
            }
        });
        let n = (rounds * batch) as f64;
        println!(
            "sequential {name:<16} {:>7.0} decisions/s, PING {:>7.0}/s: {:.2}x",
            n / check.as_secs_f64(),
            n / ping.as_secs_f64(),
            ping.as_secs_f64() / check.as_secs_f64()
        );
    }
}

fn sequential(c: &mut Criterion, f: &Fixture) {
    let mut group = c.benchmark_group("sequential");
    group.throughput(Throughput::Elements(1));
    group.bench_function("ping", |b| {
        b.iter_custom(|iters| {
            f.rt.block_on(async {
                let mut raw = f.raw.clone();
                let start = Instant::now();
                for _ in 0..iters {
                    let _: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("evalsha_return_1", |b| {
        b.iter_custom(|iters| {
            f.rt.block_on(async {
                let mut raw = f.raw.clone();
                let start = Instant::now();
                for _ in 0..iters {
                    let _: i64 = f.trivial.invoke_async(&mut raw).await.unwrap();
                }
                start.elapsed()
            })
        })
    });
    for (name, allow, _) in limits::limits() {
        group.bench_function(format!("check_{name}"), |b| {
            b.iter_custom(|iters| {
                f.rt.block_on(async {
                    let start = Instant::now();
                    for i in 0..iters {
                        let key = (i % 1_000).to_string();
                        let _ = black_box(f.store.check(&allow, key.as_bytes(), 1).await.unwrap());
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

fn in_flight(c: &mut Criterion, f: &Fixture) {
    let mut group = c.benchmark_group("in_flight_64");
    group.throughput(Throughput::Elements(1));
    let spread = |iters: u64, call| f.rt.block_on(spread(iters, call));
    let raw = f.raw.clone();
    group.bench_function("ping", |b| {
        let raw = raw.clone();
        b.iter_custom(|iters| {
            let raw = raw.clone();
            spread(
                iters,
                Arc::new(move |_| {
                    let mut raw = raw.clone();
                    Box::pin(async move {
                        let _: String = redis::cmd("PING").query_async(&mut raw).await.unwrap();
                    })
                }),
            )
        })
    });
    let trivial = Arc::new(f.trivial.clone());
    group.bench_function("evalsha_return_1", |b| {
        b.iter_custom(|iters| {
            let (raw, trivial) = (raw.clone(), Arc::clone(&trivial));
            spread(
                iters,
                Arc::new(move |_| {
                    let (mut raw, trivial) = (raw.clone(), Arc::clone(&trivial));
                    Box::pin(async move {
                        let _: i64 = trivial.invoke_async(&mut raw).await.unwrap();
                    })
                }),
            )
        })
    });
    for (name, allow, _) in limits::limits() {
        let allow = Arc::new(allow);
        group.bench_function(format!("check_{name}"), |b| {
            b.iter_custom(|iters| spread(iters, checks(&f.store, &allow)))
        });
        group.bench_function(format!("check_{name}_alone"), |b| {
            b.iter_custom(|iters| spread(iters, checks(&f.alone, &allow)))
        });
    }
    group.finish();
}

type CallFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

fn benches(c: &mut Criterion) {
    let Some(f) = fixture() else {
        return;
    };
    redis_cpu(&f);
    interleaved(&f);
    if std::env::var_os("RATEKEEPER_REDIS_CPU_ONLY").is_some() {
        return;
    }
    sequential(c, &f);
    in_flight(c, &f);
}

criterion_group! {
    name = redis_benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(redis_benches);
