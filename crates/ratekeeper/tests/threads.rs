//! Tests that count this process's threads by name: each runs in a binary
//! of its own, since every other test's limiters start sweeper threads and
//! clocks of their own.

mod common;

use std::time::Duration;

use common::{eventually, threads_named};
use ratekeeper::{
    clock::CoarseClock, memory::MIN_SWEEP_INTERVAL, Clock, FixedWindow, MemoryLimiter,
};

/// The only test here that makes a coarse clock, so it can count their threads.
#[test]
fn coarse_clock_steps_forward_and_stops_with_its_last_clone() {
    let coarse_clock_threads = || threads_named("rk-coarse-clock");
    let clock = CoarseClock::new(Duration::from_millis(1)).unwrap();
    assert_eq!(clock.resolution(), Duration::from_millis(1));
    let start = clock.now();
    assert!(
        eventually(|| clock.now() > start),
        "the coarse clock never moved"
    );
    let mut last = clock.now();
    for _ in 0..1_000 {
        let now = clock.now();
        assert!(now >= last);
        last = now;
    }
    if coarse_clock_threads().is_some() {
        assert!(eventually(|| coarse_clock_threads() == Some(1)));
    }
    let clone = clock.clone();
    drop(clock);
    assert!(clone.now() >= last);
    drop(clone);
    if coarse_clock_threads().is_some() {
        assert!(
            eventually(|| coarse_clock_threads() == Some(0)),
            "the clock's thread outlived it"
        );
    }
    assert!(format!("{:?}", CoarseClock::new(Duration::ZERO).unwrap()).contains("1µs"));
}

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
