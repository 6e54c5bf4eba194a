//! What the configuration reloads did, for `/metrics`, `/v1/stats` and
//! the dashboard: how many were applied and refused, whether the last one
//! was, when the configuration in force was loaded, and why the last
//! refused one was refused.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use ratekeeper::Timestamp;

/// Reload counters, kept by the engine, counted by the reloader.
#[derive(Debug)]
pub struct ReloadStats {
    applied: AtomicU64,
    refused: AtomicU64,
    last_successful: AtomicBool,
    /// Unix time of the last load applied, in milliseconds.
    last_success_millis: AtomicU64,
    /// The last refusal, kept until the next one.
    last_refusal: Mutex<Option<ReloadRefusal>>,
}

/// The most bytes of a refusal's reason kept: an error names a file and a
/// place, never more than a few lines; a longer one is cut.
pub const MAX_REFUSAL_BYTES: usize = 2048;

/// Why a reload was refused, and when.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ReloadRefusal {
    /// When, in seconds since the Unix epoch.
    pub at_unix_secs: u64,
    /// The error, as the log told it (at most [`MAX_REFUSAL_BYTES`]).
    pub error: String,
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
            last_refusal: Mutex::new(None),
        }
    }

    /// Counts a reload put in force at `now`.
    pub fn applied(&self, now: Timestamp) {
        self.applied.fetch_add(1, Relaxed);
        self.last_successful.store(true, Relaxed);
        self.last_success_millis.store(millis(now), Relaxed);
    }

    /// Counts a reload refused at `now` for `error`.
    pub fn refused(&self, now: Timestamp, error: &dyn std::fmt::Display) {
        let mut error = error.to_string();
        if error.len() > MAX_REFUSAL_BYTES {
            let mut end = MAX_REFUSAL_BYTES;
            while !error.is_char_boundary(end) {
                end -= 1;
            }
            error.truncate(end);
            error.push('…');
        }
        let refusal = ReloadRefusal {
            at_unix_secs: now.as_duration().as_secs(),
            error,
        };
        // A poisoned lock only means a reader panicked: the value is whole.
        *self
            .last_refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(refusal);
        self.refused.fetch_add(1, Relaxed);
        self.last_successful.store(false, Relaxed);
    }

    /// The last refused reload, if any was; with
    /// [`ReloadSnapshot::last_successful`] false, the configuration file
    /// on disk is not the one in force, and this says why.
    pub fn last_refusal(&self) -> Option<ReloadRefusal> {
        self.last_refusal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
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
        stats.refused(Timestamp::from_secs(200), &"bad file");
        let refused = stats.snapshot();
        assert_eq!(
            stats.last_refusal(),
            Some(ReloadRefusal {
                at_unix_secs: 200,
                error: "bad file".to_owned()
            })
        );
        stats.refused(Timestamp::from_secs(201), &"é".repeat(MAX_REFUSAL_BYTES));
        let cut = stats.last_refusal().unwrap().error;
        assert!(cut.len() <= MAX_REFUSAL_BYTES + '…'.len_utf8() && cut.ends_with('…'));
        assert_eq!(refused.refused, 1);
        assert_eq!(stats.snapshot().refused, 2);
        assert!(!refused.last_successful);
        assert_eq!(refused.last_success_seconds, 100.0);
        stats.applied(Timestamp::from_millis(250_500));
        let applied = stats.snapshot();
        assert_eq!((applied.applied, applied.refused), (1, 2));
        assert!(applied.last_successful);
        assert_eq!(applied.last_success_seconds, 250.5);
    }
}
