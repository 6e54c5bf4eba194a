//! The limits both Redis measurements use (`benches/redis.rs` for
//! throughput, `examples/callgrind.rs` for instructions per call), in one
//! place so their figures are of the same policies.

use std::time::Duration;

use ratekeeper::{FixedWindow, Gcra, Limit, Policy, SlidingLog, SlidingWindow, TokenBucket};

/// Each policy twice, with its name: a quota that allows every call, and
/// one that denies every call after the first.
pub(crate) fn limits() -> Vec<(&'static str, Limit, Limit)> {
    let hour = Duration::from_secs(3_600);
    let big = 1u64 << 32;
    let pair = |name: &'static str, allow: Policy, deny: Policy| {
        (
            name,
            Limit::new(format!("{name}-allow"), allow).unwrap(),
            Limit::new(format!("{name}-deny"), deny).unwrap(),
        )
    };
    vec![
        pair(
            "gcra",
            Gcra::new(1_000_000, Duration::from_secs(1), 1_000_000)
                .unwrap()
                .into(),
            Gcra::new(1, hour, 1).unwrap().into(),
        ),
        pair(
            "token_bucket",
            TokenBucket::new(big, Duration::from_secs(1), big)
                .unwrap()
                .into(),
            TokenBucket::new(1, hour, 1).unwrap().into(),
        ),
        pair(
            "fixed_window",
            FixedWindow::new(big, hour).unwrap().into(),
            FixedWindow::new(1, hour).unwrap().into(),
        ),
        pair(
            "sliding_window",
            SlidingWindow::new(1 << 20, hour).unwrap().into(),
            SlidingWindow::new(1, hour).unwrap().into(),
        ),
        pair(
            "sliding_log",
            // Allowed hits are remembered for 10 ms: a log of a few entries
            // (more under valgrind's slowdown).
            SlidingLog::new(big, Duration::from_millis(10))
                .unwrap()
                .into(),
            SlidingLog::new(1, hour).unwrap().into(),
        ),
    ]
}
