//! The keyed in-memory limiter against governor's keyed limiter and a
//! mutex-guarded `HashMap`, side by side in one run.
//!
//! Run with `cargo bench -p ratekeeper --bench memory` (add
//! `-- --warm-up-time 1 --measurement-time 3` for a shorter run).
//!
//! # What is measured
//!
//! Aggregate time per check (and checks per second, criterion's elements/s)
//! of keyed GCRA limiters. The first three read a TSC-based clock per check;
//! the last two read a cached timestamp that a thread refreshes every
//! millisecond, each library with its own such clock:
//!
//! - `ratekeeper`: [`MemoryLimiter`] with a [`Gcra`] policy, the default
//!   [`MonotonicClock`], `max_keys` 200,000 and no background sweep (so no
//!   thread disturbs the timing).
//! - `governor`: `governor::RateLimiter::keyed(quota)`, its default `DashMap`
//!   store and default (quanta) clock, keyed by `String`.
//! - `mutex_hashmap`: a `Mutex<HashMap<String, GcraState>>` (std's default
//!   hasher) deciding with ratekeeper's pure [`Gcra::decide`] under the lock,
//!   after reading the same [`MonotonicClock`].
//! - `ratekeeper_coarse_clock`: the same [`MemoryLimiter`] on a
//!   [`CoarseClock`] of 1 ms.
//! - `governor_coarse_clock`: governor's `DashMap` keyed limiter on its
//!   `QuantaUpkeepClock` of 1 ms.
//!
//! Scenarios, each with 1 and 2 threads:
//!
//! - `hot_key`: every check on one 20-byte `String` key.
//! - `distinct_keys`: 100,000 pre-generated 20-byte `String` keys visited
//!   round-robin; thread `t` of `n` starts at key `t * 100,000 / n`.
//!
//! and paths:
//!
//! - `allow`: a quota nothing in the run can exhaust (ratekeeper and the
//!   mutex map: 10^9 per second, burst 10^9; governor:
//!   `Quota::per_second(u32::MAX)`), so every check allows and writes the
//!   key's new state.
//! - `deny`: 1 per hour, burst 1, so every measured check is denied and
//!   nothing is written.
//!
//! Every key is touched once before measuring, so the steady state is
//! measured, not inserts; each sample asserts that every check went the
//! path's way. Each sample resumes the walk where the previous one stopped,
//! so short samples do not keep revisiting the same (cache-warm) keys. A
//! sample of `iters` checks is split over the threads, which start together
//! at a barrier; its time runs from the first thread's start to the last
//! thread's end, so "2 threads" reports aggregate throughput.
//!
//! `memory/floor/1_thread` has the floor: `cas_plus_clock` is one
//! `AtomicU64` compare-and-swap plus a [`MonotonicClock::now`] read, in the
//! same loop; `clock_only` is the clock read alone.
//!
//! Before the benchmarks, the bytes per tracked key are printed to stderr:
//! ratekeeper's `memory_bytes() / len()` at a cap of 100,000 keys filled to
//! the cap, and, for all three, the growth of the process's resident memory
//! (`/proc/self/statm`, Linux only) while building and filling a table of
//! 100,000 keys, divided by the keys (an estimate: allocator slack and page
//! granularity included).
//!
//! On a machine with 2 vCPUs (or a busy one) the 2-thread figures show
//! little parallel speed-up at best; compare them within one run.

use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use governor::clock::QuantaUpkeepClock;
use governor::state::keyed::DashMapStateStore;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratekeeper::{
    clock::{CoarseClock, MonotonicClock},
    policy::{Algorithm, GcraState},
    Clock, Gcra, MemoryLimiter,
};

/// How often the coarse clocks of both libraries are refreshed.
const COARSE: Duration = Duration::from_millis(1);

/// Distinct keys in the `distinct_keys` scenario.
const KEYS: usize = 100_000;

/// Bytes in every key.
const KEY_LEN: usize = 20;

/// The ratekeeper limiter's cap in the timed scenarios: room for every key.
const MAX_KEYS: usize = 200_000;

/// The `i`th key: 20 bytes.
fn key(i: usize) -> String {
    let key = format!("client-{i:013}");
    assert_eq!(key.len(), KEY_LEN);
    key
}

/// Which way every measured check goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Path {
    Allow,
    Deny,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Allow => "allow",
            Path::Deny => "deny",
        }
    }

    /// ratekeeper's GCRA for this path.
    fn gcra(self) -> Gcra {
        match self {
            Path::Allow => Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000),
            Path::Deny => Gcra::per_hour(1),
        }
        .unwrap()
    }

    /// governor's quota for this path.
    fn quota(self) -> Quota {
        match self {
            Path::Allow => Quota::per_second(NonZeroU32::MAX),
            Path::Deny => Quota::per_hour(NonZeroU32::MIN),
        }
    }
}

/// A keyed limiter under test: one check of one unit, now.
trait Check: Sync {
    // governor's keyed limiter takes `&K`, and its keys here are `String`s.
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool;
}

struct Ratekeeper<C = MonotonicClock>(MemoryLimiter<C>);

impl Ratekeeper {
    fn new(path: Path, max_keys: usize) -> Self {
        Ratekeeper::with_clock(path, max_keys, MonotonicClock::new())
    }
}

impl<C: Clock + 'static> Ratekeeper<C> {
    fn with_clock(path: Path, max_keys: usize, clock: C) -> Self {
        let limiter = MemoryLimiter::builder(path.gcra())
            .max_keys(max_keys)
            .clock(clock)
            .background_sweep(false)
            .build()
            .unwrap();
        Ratekeeper(limiter)
    }
}

impl<C: Clock> Check for Ratekeeper<C> {
    #[inline]
    fn check(&self, key: &String) -> bool {
        self.0.check(key, 1).is_allowed()
    }
}

struct Governor(DefaultKeyedRateLimiter<String>);

impl Governor {
    fn new(path: Path) -> Self {
        Governor(RateLimiter::keyed(path.quota()))
    }
}

impl Check for Governor {
    #[inline]
    fn check(&self, key: &String) -> bool {
        self.0.check_key(key).is_ok()
    }
}

/// governor's keyed limiter on its coarse clock, which an upkeep thread
/// refreshes: the peer of ratekeeper on its [`CoarseClock`].
struct GovernorCoarse(RateLimiter<String, DashMapStateStore<String>, QuantaUpkeepClock>);

impl GovernorCoarse {
    fn new(path: Path) -> Self {
        let clock = QuantaUpkeepClock::from_interval(COARSE).unwrap();
        GovernorCoarse(RateLimiter::dashmap_with_clock(path.quota(), clock))
    }
}

impl Check for GovernorCoarse {
    #[inline]
    fn check(&self, key: &String) -> bool {
        self.0.check_key(key).is_ok()
    }
}

/// The simple baseline: one lock around a std `HashMap`.
struct MutexHashMap {
    map: Mutex<HashMap<String, GcraState>>,
    gcra: Gcra,
    clock: MonotonicClock,
}

impl MutexHashMap {
    fn new(path: Path) -> Self {
        MutexHashMap {
            map: Mutex::new(HashMap::new()),
            gcra: path.gcra(),
            clock: MonotonicClock::new(),
        }
    }
}

impl Check for MutexHashMap {
    #[inline]
    fn check(&self, key: &String) -> bool {
        let now = self.clock.now();
        let mut map = self.map.lock().unwrap();
        match map.get_mut(key.as_str()) {
            Some(state) => {
                let (decision, next) = self.gcra.decide(state, now, 1);
                *state = next;
                decision.is_allowed()
            }
            None => {
                let (decision, next) = self.gcra.decide(&self.gcra.fresh(), now, 1);
                map.insert(key.clone(), next);
                decision.is_allowed()
            }
        }
    }
}

/// Checks `n` keys of `keys` round-robin from `start`: how many were
/// allowed.
#[inline]
fn walk<C: Check>(limiter: &C, keys: &[String], start: usize, n: u64) -> u64 {
    let mut allowed = 0;
    let mut i = start;
    for _ in 0..n {
        allowed += u64::from(limiter.check(black_box(&keys[i])));
        i += 1;
        if i == keys.len() {
            i = 0;
        }
    }
    allowed
}

/// Runs `iters` operations split over `threads` threads started together:
/// `work(thread, n)` does thread `thread`'s `n` and returns a count. Returns
/// the time from the first start to the last end, and the counts' sum.
fn run_threads<F: Fn(usize, u64) -> u64 + Sync>(
    threads: usize,
    iters: u64,
    work: F,
) -> (Duration, u64) {
    let barrier = Barrier::new(threads);
    let runs: Vec<(Instant, Instant, u64)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, work) = (&barrier, &work);
                let n = iters / threads as u64 + u64::from((t as u64) < iters % threads as u64);
                s.spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    let count = work(t, n);
                    (start, Instant::now(), count)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let first = runs.iter().map(|r| r.0).min().unwrap();
    let last = runs.iter().map(|r| r.1).max().unwrap();
    (last - first, runs.iter().map(|r| r.2).sum())
}

/// Touches every key once, then checks the path holds for each.
fn prepare<C: Check>(limiter: &C, keys: &[String], path: Path) {
    for key in keys {
        assert!(limiter.check(key), "first check of a key must be allowed");
    }
    for key in keys {
        assert_eq!(limiter.check(key), path == Path::Allow);
    }
}

/// Benchmarks `limiter` walking `keys` with `threads` threads.
fn bench_one<C: Check>(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    name: &str,
    limiter: &C,
    keys: &[String],
    threads: usize,
    path: Path,
) {
    group.bench_function(name, |b| {
        // Where the walk resumes: each sample continues where the last one
        // stopped, so samples shorter than the key set still cycle through
        // all of it instead of revisiting (cache-warm) the same first keys.
        let mut resume = 0;
        b.iter_custom(|iters| {
            let base = resume;
            let (elapsed, allowed) = run_threads(threads, iters, |t, n| {
                walk(
                    limiter,
                    keys,
                    (base + t * keys.len() / threads) % keys.len(),
                    n,
                )
            });
            resume = (base + (iters / threads as u64) as usize) % keys.len();
            let expected = if path == Path::Allow { iters } else { 0 };
            assert_eq!(
                allowed,
                expected,
                "{name}: a check left the {} path",
                path.name()
            );
            elapsed
        })
    });
}

/// One scenario (a key set) on one path, at 1 and 2 threads, for the three
/// limiters.
fn scenario(c: &mut Criterion, name: &str, keys: &[String], path: Path) {
    let ratekeeper = Ratekeeper::new(path, MAX_KEYS);
    let governor = Governor::new(path);
    let mutex = MutexHashMap::new(path);
    let ratekeeper_coarse =
        Ratekeeper::with_clock(path, MAX_KEYS, CoarseClock::new(COARSE).unwrap());
    let governor_coarse = GovernorCoarse::new(path);
    prepare(&ratekeeper, keys, path);
    prepare(&governor, keys, path);
    prepare(&mutex, keys, path);
    prepare(&ratekeeper_coarse, keys, path);
    prepare(&governor_coarse, keys, path);
    for threads in [1, 2] {
        let plural = if threads == 1 { "" } else { "s" };
        let mut group = c.benchmark_group(format!(
            "memory/{name}/{}/{threads}_thread{plural}",
            path.name()
        ));
        group.throughput(Throughput::Elements(1));
        bench_one(&mut group, "ratekeeper", &ratekeeper, keys, threads, path);
        bench_one(&mut group, "governor", &governor, keys, threads, path);
        bench_one(&mut group, "mutex_hashmap", &mutex, keys, threads, path);
        bench_one(
            &mut group,
            "ratekeeper_coarse_clock",
            &ratekeeper_coarse,
            keys,
            threads,
            path,
        );
        bench_one(
            &mut group,
            "governor_coarse_clock",
            &governor_coarse,
            keys,
            threads,
            path,
        );
        group.finish();
    }
}

fn hot_key(c: &mut Criterion) {
    let keys = [key(42)];
    scenario(c, "hot_key", &keys, Path::Allow);
    scenario(c, "hot_key", &keys, Path::Deny);
}

fn distinct_keys(c: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS).map(key).collect();
    scenario(c, "distinct_keys", &keys, Path::Allow);
    scenario(c, "distinct_keys", &keys, Path::Deny);
}

/// The floor: one clock read and one compare-and-swap of a shared word.
fn floor(c: &mut Criterion) {
    let clock = MonotonicClock::new();
    let word = AtomicU64::new(0);
    let mut group = c.benchmark_group("memory/floor/1_thread");
    group.throughput(Throughput::Elements(1));
    group.bench_function("cas_plus_clock", |b| {
        b.iter_custom(|iters| {
            let (elapsed, swapped) = run_threads(1, iters, |_, n| {
                let mut swapped = 0;
                for _ in 0..n {
                    let now = clock.now().as_nanos();
                    let current = word.load(Ordering::Acquire);
                    let next = current.max(now) + 1;
                    swapped += u64::from(
                        word.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire)
                            .is_ok(),
                    );
                }
                swapped
            });
            assert_eq!(swapped, iters);
            elapsed
        })
    });
    group.bench_function("clock_only", |b| {
        b.iter_custom(|iters| {
            run_threads(1, iters, |_, n| {
                for _ in 0..n {
                    black_box(clock.now());
                }
                0
            })
            .0
        })
    });
    group.finish();
}

/// Resident bytes of this process, from `/proc/self/statm` (4 KiB pages).
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The growth of resident memory while `fill` runs, per key.
fn resident_per_key<T>(keys: usize, fill: impl FnOnce() -> T) -> (T, Option<f64>) {
    let before = resident_bytes();
    let value = fill();
    let after = resident_bytes();
    let per_key = before
        .zip(after)
        .map(|(before, after)| after.saturating_sub(before) as f64 / keys as f64);
    (value, per_key)
}

/// Prints the bytes per tracked key of the three tables at 100,000 keys.
fn bytes_per_key(_: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS).map(key).collect();
    let show = |rss: Option<f64>| rss.map_or("n/a".to_owned(), |b| format!("{b:.1}"));
    // Keep every table alive until all are measured, so none reuses memory
    // another freed.
    let (ratekeeper, rk_rss) = resident_per_key(KEYS, || {
        let limiter = Ratekeeper::new(Path::Allow, KEYS);
        prepare(&limiter, &keys, Path::Allow);
        limiter
    });
    let (governor, gov_rss) = resident_per_key(KEYS, || {
        let limiter = Governor::new(Path::Allow);
        prepare(&limiter, &keys, Path::Allow);
        limiter
    });
    let (mutex, mutex_rss) = resident_per_key(KEYS, || {
        let limiter = MutexHashMap::new(Path::Allow);
        prepare(&limiter, &keys, Path::Allow);
        limiter
    });
    let limiter = &ratekeeper.0;
    assert_eq!(limiter.len(), KEYS);
    eprintln!(
        "memory/bytes_per_key: ratekeeper max_keys={} len={} memory_bytes={} -> {:.1} B/key \
         (resident growth {} B/key); governor resident growth {} B/key ({} keys); \
         mutex_hashmap resident growth {} B/key ({} keys)",
        limiter.max_keys(),
        limiter.len(),
        limiter.memory_bytes(),
        limiter.memory_bytes() as f64 / limiter.len() as f64,
        show(rk_rss),
        show(gov_rss),
        governor.0.len(),
        show(mutex_rss),
        mutex.map.lock().unwrap().len(),
    );
}

criterion_group!(benches, bytes_per_key, floor, hot_key, distinct_keys);
criterion_main!(benches);
