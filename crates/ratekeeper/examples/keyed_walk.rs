//! One keyed check at a time over 100,000 distinct keys, ratekeeper's
//! in-memory table or governor's keyed limiter, each on its default clock:
//! the program `scripts/callgrind-keyed.sh` runs under callgrind's cache
//! simulation to count what one check executes and misses, which timing on
//! a shared machine cannot tell apart (see BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release -p ratekeeper --example keyed_walk -- ratekeeper 1000000
//! ```
//!
//! `time [threads] [checks]` times both instead, in interleaved rounds (one
//! of each, eleven times, each on its own limiter warmed with every key),
//! and prints the fastest and the median round per check: on a machine
//! whose speed changes from minute to minute, rounds side by side compare
//! where a benchmark run after another does not. Each round also times the
//! table on a `CoarseClock` (1 ms), the same check without the clock read
//! on its path (`ratekeeper-coarse`), to show what the read costs.
//!
//! ```sh
//! cargo run --release -p ratekeeper --example keyed_walk -- time 2 4000000
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratekeeper::clock::CoarseClock;
use ratekeeper::{Clock, Gcra, MemoryLimiter};

/// Distinct keys walked round-robin, as the criterion bench's "100k keys".
const KEYS: usize = 100_000;

/// A keyed limiter: one check of one unit, now.
trait Check: Sync {
    // governor's keyed limiter takes `&K`, and its keys here are `String`s.
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool;
}

impl<C: Clock> Check for MemoryLimiter<C> {
    fn check(&self, key: &String) -> bool {
        MemoryLimiter::check(self, key, 1).is_allowed()
    }
}

struct Governor(DefaultKeyedRateLimiter<String>);

impl Check for Governor {
    fn check(&self, key: &String) -> bool {
        self.0.check_key(key).is_ok()
    }
}

/// The measured loop, a function of its own so that callgrind can count
/// only it (`--toggle-collect='*walk*'`).
#[inline(never)]
fn walk(limiter: &dyn Check, keys: &[String], start: usize, checks: usize) -> usize {
    let mut allowed = 0;
    for i in start..start + checks {
        allowed += usize::from(limiter.check(black_box(&keys[i % keys.len()])));
    }
    allowed
}

/// A limiter by name, with every key of the walk known to it.
fn limiter(which: &str, keys: &[String]) -> Box<dyn Check> {
    let gcra =
        || Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).expect("a valid rate");
    let limiter: Box<dyn Check> = match which {
        "ratekeeper" => Box::new(
            MemoryLimiter::builder(gcra())
                .max_keys(200_000)
                .background_sweep(false)
                .build()
                .expect("a valid limiter"),
        ),
        "ratekeeper-coarse" => Box::new(
            MemoryLimiter::builder(gcra())
                .max_keys(200_000)
                .background_sweep(false)
                .clock(CoarseClock::new(Duration::from_millis(1)).expect("the clock's thread"))
                .build()
                .expect("a valid limiter"),
        ),
        "governor" => Box::new(Governor(RateLimiter::keyed(Quota::per_second(
            NonZeroU32::MAX,
        )))),
        other => {
            eprintln!("usage: keyed_walk ratekeeper|ratekeeper-coarse|governor [checks] | time [threads] [checks], not {other:?}");
            std::process::exit(2);
        }
    };
    // Every key known before the measured walk, as in the bench.
    assert_eq!(
        walk(limiter.as_ref(), keys, 0, KEYS),
        KEYS,
        "every check allows"
    );
    limiter
}

/// Nanoseconds per check of `checks` checks split over `threads` threads,
/// each walking from its own place in the keys.
fn timed(limiter: &dyn Check, keys: &[String], threads: usize, checks: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let start = t * keys.len() / threads;
            s.spawn(move || {
                assert_eq!(
                    walk(limiter, keys, start, checks / threads),
                    checks / threads
                )
            });
        }
    });
    start.elapsed().as_nanos() as f64 / (checks / threads * threads) as f64
}

fn time(threads: usize, checks: usize, keys: &[String]) {
    const ROUNDS: usize = 11;
    let names = ["ratekeeper", "governor", "ratekeeper-coarse"];
    let mut rounds = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        for (times, name) in rounds.iter_mut().zip(names) {
            times.push(timed(limiter(name, keys).as_ref(), keys, threads, checks));
        }
    }
    for (name, mut times) in names.iter().zip(rounds) {
        times.sort_by(f64::total_cmp);
        println!(
            "{name:<17} {threads} thread(s): fastest {:6.1} ns, median {:6.1} ns per check",
            times[0],
            times[ROUNDS / 2]
        );
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "ratekeeper".to_owned());
    let mut number = |default| args.next().and_then(|n| n.parse().ok()).unwrap_or(default);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("client-{i:013}")).collect();
    if which == "time" {
        let threads = number(1).max(1);
        time(threads, number(4_000_000), &keys);
        return;
    }
    let checks = number(1_000_000);
    let limiter = limiter(&which, &keys);
    let allowed = walk(limiter.as_ref(), &keys, 0, checks);
    assert_eq!(allowed, checks, "every check allows");
    println!("{which}: {checks} checks over {KEYS} keys, all allowed");
}
