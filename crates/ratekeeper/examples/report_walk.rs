//! Checks or reports, one at a time, over 10,000 keys on the in-memory
//! store: the program to run under callgrind to count what a report
//! executes beside a check (see BENCHMARKS.md, "Reports against checks"),
//! which the timed benchmark cannot tell apart from its noise.
//!
//! ```sh
//! cargo build --release -p ratekeeper --example report_walk
//! valgrind --tool=callgrind target/release/examples/report_walk check
//! valgrind --tool=callgrind target/release/examples/report_walk report
//! valgrind --tool=callgrind target/release/examples/report_walk overdrawn
//! valgrind --tool=callgrind target/release/examples/report_walk check window
//! ```
//!
//! Each does 500,000 calls (50 rounds over the keys) on a GCRA limit (or,
//! with `window`, a fixed window) that
//! none of them uses up (`overdrawn`: of one unit an hour, so that every
//! report after a key's first overdraws); the instructions over 500,000
//! are one call's.

use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{FixedWindow, Gcra, Limit, MemoryStore, Store};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (report, quota) = match std::env::args().nth(1).as_deref() {
        Some("check") => (false, 1_000_000),
        Some("report") => (true, 1_000_000),
        // Every report past the quota: each key in debt.
        Some("overdrawn") => (true, 1),
        _ => return Err("usage: report_walk check|report|overdrawn".into()),
    };
    let store = MemoryStore::new();
    let hour = Duration::from_secs(3_600);
    let limit = match std::env::args().nth(2).as_deref() {
        None | Some("gcra") => Limit::new("walk", Gcra::new(quota, hour, quota)?)?,
        Some("window") => Limit::new("walk", FixedWindow::new(quota, hour)?)?,
        _ => return Err("the policy: gcra (the default) or window".into()),
    };
    let keys: Vec<String> = (0..10_000).map(|i| format!("user-{i}")).collect();
    let mut allowed = 0u64;
    for _ in 0..50 {
        for key in &keys {
            let outcome = match report {
                false => block_on(store.check(&limit, key.as_bytes(), 1))?,
                true => block_on(store.report(&limit, key.as_bytes(), 1))?,
            };
            allowed += u64::from(outcome.is_allowed());
        }
    }
    println!("{allowed} of 500000 allowed");
    Ok(())
}
