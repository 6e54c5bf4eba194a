//! Helpers shared by the tests that watch background threads.

#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Threads of this process named `name` (Linux lists them in /proc; names
/// are cut to 15 bytes there). `None` where /proc is not available.
pub(crate) fn threads_named(name: &str) -> Option<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").ok()?;
    let count = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.trim_end() == name)
        .count();
    Some(count)
}

/// Waits until `done` holds, for at most five seconds; whether it did.
/// Polls a condition with a deadline, for what a background thread does on
/// its own clock.
pub(crate) fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    done()
}
