//! What the configuration reloads did, for `/metrics`: how many were
//! applied and refused, whether the last one was, and when the
//! configuration in force was loaded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use ratekeeper::Timestamp;

/// Reload counters, kept by the engine, counted by the reloader.
#[derive(Debug)]
pub struct ReloadStats {
    applied: AtomicU64,
    refused: AtomicU64,
    last_successful: AtomicBool,
    /// Unix time of the last load applied, in milliseconds.
    last_success_millis: AtomicU64,
}

/// The reload counters at one time.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct ReloadSnapshot {
    /// Reloads whose configuration was put in force.
    pub applied: u64,
    /// Reloads refused (a file that did not read or validate); the running
    /// configuration stayed.
    pub refused: u64,
    /// Whether the last reload (or the start, before any) was applied.
    pub last_successful: bool,
    /// When the configuration in force was loaded, in seconds since the
    /// Unix epoch (at the start, before any reload).
    pub last_success_seconds: f64,
}

impl ReloadStats {
    /// No reload yet; the configuration in force was loaded at `started`.
    pub fn new(started: Timestamp) -> ReloadStats {
        ReloadStats {
            applied: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            last_successful: AtomicBool::new(true),
            last_success_millis: AtomicU64::new(millis(started)),
        }
    }

    /// Counts a reload put in force at `now`.
    pub fn applied(&self, now: Timestamp) {
        self.applied.fetch_add(1, Relaxed);
        self.last_successful.store(true, Relaxed);
        self.last_success_millis.store(millis(now), Relaxed);
    }

    /// Counts a refused reload.
    pub fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
        self.last_successful.store(false, Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> ReloadSnapshot {
        ReloadSnapshot {
            applied: self.applied.load(Relaxed),
            refused: self.refused.load(Relaxed),
            last_successful: self.last_successful.load(Relaxed),
            // Exact for any time before the year 285,000.
            #[allow(clippy::cast_precision_loss)]
            last_success_seconds: self.last_success_millis.load(Relaxed) as f64 / 1000.0,
        }
    }
}

fn millis(at: Timestamp) -> u64 {
    at.as_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_remembers_the_last_success() {
        let stats = ReloadStats::new(Timestamp::from_secs(100));
        let start = stats.snapshot();
        assert_eq!((start.applied, start.refused), (0, 0));
        assert!(start.last_successful);
        assert_eq!(start.last_success_seconds, 100.0);
        stats.refused();
        let refused = stats.snapshot();
        assert_eq!(refused.refused, 1);
        assert!(!refused.last_successful);
        assert_eq!(refused.last_success_seconds, 100.0);
        stats.applied(Timestamp::from_millis(250_500));
        let applied = stats.snapshot();
        assert_eq!((applied.applied, applied.refused), (1, 1));
        assert!(applied.last_successful);
        assert_eq!(applied.last_success_seconds, 250.5);
    }
}
