//! The background sweeper: it evicts fresh states on its own, and its thread
//! ends when the last handle to the limiter is dropped.
//!
//! This file holds a single test so that no other limiter in the same
//! process starts sweeper threads while it counts them.

use std::time::Duration;

mod common;

use common::{eventually, threads_named};

use ratekeeper::{FixedWindow, MemoryLimiter, MIN_SWEEP_INTERVAL};

#[test]
fn the_sweeper_evicts_on_its_own_and_stops_with_the_limiter() {
    let sweeper_threads = || threads_named("rk-sweeper").unwrap_or(0);
    let has_proc = threads_named("rk-sweeper").is_some();
    let before = sweeper_threads();

    // A window of 1 ms: keys are fresh again almost at once, and the sweeper
    // runs every MIN_SWEEP_INTERVAL.
    let window = FixedWindow::new(1, Duration::from_millis(1)).unwrap();
    let limiter = MemoryLimiter::builder(window)
        .max_keys(100)
        .build()
        .unwrap();
    assert_eq!(limiter.sweep_interval(), MIN_SWEEP_INTERVAL);
    if has_proc {
        // The thread names itself once it runs.
        assert!(
            eventually(|| sweeper_threads() == before + 1),
            "no sweeper thread started"
        );
    }

    for key in 0..100 {
        assert!(limiter.check(key.to_string(), 1).is_allowed());
    }
    // No check from here until the table is empty: a check of a full
    // table sweeps for room itself, and this is about the sweeper alone.
    // (Asking whether a new key is saturated now would race the 1 ms
    // windows on a slow machine, as would counting the keys.)
    assert!(
        eventually(|| limiter.is_empty()),
        "the sweeper never emptied the table"
    );
    assert!(limiter.check("one more", 1).is_allowed());

    // Clones share the sweeper; it ends when the last one goes.
    let clone = limiter.clone();
    drop(limiter);
    assert!(clone.check("still here", 1).is_allowed());
    drop(clone);
    if has_proc {
        assert!(
            eventually(|| sweeper_threads() == before),
            "the sweeper thread outlived its limiter"
        );
    }

    // Without a background sweeper no thread starts.
    let manual = MemoryLimiter::builder(window)
        .background_sweep(false)
        .build()
        .unwrap();
    if has_proc {
        assert_eq!(sweeper_threads(), before);
    }
    drop(manual);
}
