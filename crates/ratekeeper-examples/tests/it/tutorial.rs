//! Seed 002's promises: the tutorial's printed outputs, exactly, including
//! 100 concurrent callers under a limit of 10 admitting exactly 10 and the
//! boundary burst (a fixed window admits twice its limit across a boundary,
//! sliding windows and buckets do not).

#[path = "../../examples/tutorial.rs"]
#[allow(dead_code)]
mod example;

use std::time::Duration;

use ratekeeper::{FixedWindow, Policy, SlidingLog, SlidingWindow, TokenBucket};

#[test]
fn the_printed_output_exactly() {
    assert_eq!(
        example::transcript().unwrap(),
        [
            "t=0    request 1: ok",
            "t=0    request 2: ok",
            "t=0    request 3: ok",
            "t=0    request 4: refused, retry in 200 ms",
            "t=150  refused, retry in 50 ms",
            "t=200  ok",
            "t=200  refused again",
            "at t=0: [alice: ok, alice: ok, alice: retry in 1000 ms, bob: ok]",
            "alice at t=1000: ok",
            "allowed out of 100: 10",
            "allowed between t=999 and t=1001 (fixed window): 10",
            "allowed between t=999 and t=1001 (sliding window): 5",
            "allowed between t=999 and t=1001 (sliding log): 5",
            "allowed between t=999 and t=1001 (token bucket): 5",
            "keys kept: 3 at t=5000, 0 after the sweep at t=6000 (evicted 3)",
            "four nodes, each its own memory: 40 allowed",
            "four nodes, one shared store: 10 allowed",
        ]
    );
}

#[test]
fn a_hundred_concurrent_callers_under_ten_admit_exactly_ten_every_time() {
    for round in 0..25 {
        assert_eq!(example::concurrent(100, 10).unwrap(), 10, "round {round}");
    }
    // And the count follows the limit, not the callers.
    assert_eq!(example::concurrent(64, 1).unwrap(), 1);
    assert_eq!(example::concurrent(50, 50).unwrap(), 50);
}

#[test]
fn the_boundary_burst_is_the_fixed_windows_alone() {
    let second = Duration::from_secs(1);
    let fixed: Policy = FixedWindow::new(5, second).unwrap().into();
    assert_eq!(example::boundary(&fixed), 10, "twice the limit within 2 ms");
    for policy in [
        Policy::from(SlidingWindow::new(5, second).unwrap()),
        Policy::from(SlidingLog::new(5, second).unwrap()),
        Policy::from(TokenBucket::new(5, second, 5).unwrap()),
    ] {
        assert_eq!(example::boundary(&policy), 5, "{policy:?}");
    }
}
