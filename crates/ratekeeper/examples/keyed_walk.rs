//! One keyed check at a time over 100,000 distinct keys, ratekeeper's
//! in-memory table or governor's keyed limiter, each on its default clock:
//! the program `scripts/callgrind-keyed.sh` runs under callgrind's cache
//! simulation to count what one check executes and misses, which timing on
//! a shared machine cannot tell apart (see BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release -p ratekeeper --example keyed_walk -- ratekeeper 1000000
//! ```

use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use ratekeeper::{Gcra, MemoryLimiter};

/// Distinct keys walked round-robin, as the criterion bench's "100k keys".
const KEYS: usize = 100_000;

/// A keyed limiter: one check of one unit, now.
trait Check {
    // governor's keyed limiter takes `&K`, and its keys here are `String`s.
    #[allow(clippy::ptr_arg)]
    fn check(&self, key: &String) -> bool;
}

impl Check for MemoryLimiter {
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
fn walk(limiter: &dyn Check, keys: &[String], checks: usize) -> usize {
    let mut allowed = 0;
    for i in 0..checks {
        allowed += usize::from(limiter.check(black_box(&keys[i % keys.len()])));
    }
    allowed
}

fn main() {
    let mut args = std::env::args().skip(1);
    let which = args.next().unwrap_or_else(|| "ratekeeper".to_owned());
    let checks: usize = args
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000);
    let keys: Vec<String> = (0..KEYS).map(|i| format!("client-{i:013}")).collect();
    let limiter: Box<dyn Check> = match which.as_str() {
        "ratekeeper" => {
            let gcra = Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000)
                .expect("a valid rate");
            Box::new(
                MemoryLimiter::builder(gcra)
                    .max_keys(200_000)
                    .background_sweep(false)
                    .build()
                    .expect("a valid limiter"),
            )
        }
        "governor" => Box::new(Governor(RateLimiter::keyed(Quota::per_second(
            NonZeroU32::MAX,
        )))),
        other => {
            eprintln!("usage: keyed_walk ratekeeper|governor [checks], not {other:?}");
            std::process::exit(2);
        }
    };
    // Every key known before the measured walk, as in the bench.
    let warm = walk(limiter.as_ref(), &keys, KEYS);
    let allowed = walk(limiter.as_ref(), &keys, checks);
    assert_eq!((warm, allowed), (KEYS, checks), "every check allows");
    println!("{which}: {checks} checks over {KEYS} keys, all allowed");
}
