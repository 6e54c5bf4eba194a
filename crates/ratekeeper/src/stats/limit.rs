//! One limit's stats: the handle that records decisions and reads them.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::counters::Totals;
use super::denied_keys::DeniedKeys;
use super::snapshot::{LimitSnapshot, TopKey, TrafficWindows, WindowTraffic};
use super::top_k::SpaceSaving;
use super::windows::Traffic;
use crate::key::{bounded, MAX_KEY_LEN};
use crate::{memory::MAX_KEYS, Timestamp};

/// How much a [`LimitStats`] keeps per key.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::stats::{LimitStats, StatsConfig};
///
/// let mut config = StatsConfig::default();
/// config.top_k = 10;
/// config.key_retention = Duration::from_secs(3_600); // the limit's window
/// let stats = LimitStats::with_config(config);
/// assert_eq!(stats.config().top_k, 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatsConfig {
    /// Counters of the top-denied summary (default
    /// [`StatsConfig::DEFAULT_TOP_K`], at most [`StatsConfig::MAX_TOP_K`]):
    /// every key denied more than `1/top_k` of all denials is found. Zero
    /// turns the summary off.
    pub top_k: usize,
    /// Counters of the charged-keys summary (default 0, off; at most
    /// [`StatsConfig::MAX_TOP_K`]): the keys that took the most requests,
    /// allowed or denied, such as every request under one proxy's address.
    /// Every key charged more than `1/top_charged` of all requests is
    /// found. On, an allowed request also takes this summary's lock, as a
    /// denial takes the top-denied one's.
    pub top_charged: usize,
    /// Keys whose denials are counted one by one, at most (default
    /// [`StatsConfig::DEFAULT_MAX_KEYS`], at most [`MAX_KEYS`]); denials of
    /// further keys count as untracked. Zero turns per-key counts off.
    pub max_keys: usize,
    /// How long a key's count is kept after its last denial (default a
    /// minute). Set it to how long the limiter keeps an idle key, so the
    /// count goes when the key does: the policy's window, or twice it for
    /// the sliding window counter, whose previous window still counts.
    pub key_retention: Duration,
}

impl StatsConfig {
    /// Top-denied counters unless told otherwise.
    pub const DEFAULT_TOP_K: usize = 32;
    /// The most top-denied counters.
    pub const MAX_TOP_K: usize = 4_096;
    /// Keys counted one by one unless told otherwise.
    pub const DEFAULT_MAX_KEYS: usize = 10_000;
    /// How long a key's count is kept unless told otherwise.
    pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(60);
}

impl StatsConfig {
    /// The most bytes of keys stats with this config keep:
    /// `(max_keys + top_k + top_charged) × MAX_KEY_LEN` (a key over
    /// [`MAX_KEY_LEN`](crate::key::MAX_KEY_LEN) bytes is kept as
    /// [`bounded`](crate::key::bounded) makes it). With the defaults, 640 KB
    /// for the per-key table and 2 KB for the summary; each key kept also
    /// costs about 60 bytes of counts and table.
    ///
    /// ```
    /// use ratekeeper::stats::StatsConfig;
    ///
    /// assert_eq!(StatsConfig::default().key_bytes_budget(), (10_000 + 32) * 64);
    /// ```
    pub fn key_bytes_budget(&self) -> usize {
        self.max_keys
            .min(MAX_KEYS)
            .saturating_add(self.top_k.min(Self::MAX_TOP_K))
            .saturating_add(self.top_charged.min(Self::MAX_TOP_K))
            .saturating_mul(MAX_KEY_LEN)
    }
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            top_k: Self::DEFAULT_TOP_K,
            top_charged: 0,
            max_keys: Self::DEFAULT_MAX_KEYS,
            key_retention: Self::DEFAULT_KEY_RETENTION,
        }
    }
}

struct Inner {
    totals: Totals,
    traffic: Traffic,
    keys: DeniedKeys,
    top: Mutex<SpaceSaving>,
    charged: Mutex<SpaceSaving>,
    config: StatsConfig,
}

/// The stats of one limit: how many requests it allowed and denied, in all
/// and per calendar window, which keys it denied and which most.
///
/// Record each decision with [`record`](LimitStats::record), passing the
/// time as Unix time (a [`UnixClock`](crate::clock::UnixClock) reading, or a
/// [`ManualClock`](crate::clock::ManualClock) set to one in tests): the windows
/// are calendar windows in UTC (see [`Period`](crate::stats::Period)). Windows
/// roll over when a record or a read first sees a later minute; a record
/// whose time is before the newest minute seen counts in that minute.
/// Clones are cheap and share the counts.
///
/// # Cost
///
/// Recording an allowed request is two relaxed atomic increments (the
/// total and the live minute) and one load; it neither locks nor
/// allocates, except for one short lock by the first request of each
/// minute, which rolls the windows over. A denial also updates the per-key
/// table (one sharded lock, and an allocation for a key not yet counted)
/// and the top-denied summary (one lock). With
/// [`top_charged`](StatsConfig::top_charged) on (it is off by default),
/// every recorded request with a key also takes that summary's lock.
/// Counts are exact under any
/// concurrency: no request is lost or counted twice.
///
/// # Memory
///
/// Bounded whatever the traffic: the windows are a fixed size, the per-key
/// table holds at most [`max_keys`](StatsConfig::max_keys) keys, and the
/// summary [`top_k`](StatsConfig::top_k), and a key over
/// [`MAX_KEY_LEN`](crate::key::MAX_KEY_LEN) (64) bytes is kept as
/// [`bounded`](crate::key::bounded) makes it: a readable prefix and a
/// digest, 64 bytes. So the keys kept weigh at most
/// [`key_bytes_budget`](StatsConfig::key_bytes_budget) bytes, whatever
/// clients send; [`denied_for`](LimitStats::denied_for) and
/// [`forget`](LimitStats::forget) take the key as sent, and
/// [`top_denied`](LimitStats::top_denied) reports it as kept. Per-key counts go
/// [`key_retention`](StatsConfig::key_retention) after a key's last
/// denial, when [`reap`](LimitStats::reap) runs, or at once with
/// [`forget`](LimitStats::forget).
#[derive(Clone)]
pub struct LimitStats {
    inner: Arc<Inner>,
}

impl Default for LimitStats {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LimitStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitStats")
            .field("allowed", &self.allowed())
            .field("denied", &self.denied())
            .field("keys_tracked", &self.keys_tracked())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl LimitStats {
    /// Stats with the default [`StatsConfig`].
    pub fn new() -> Self {
        Self::with_config(StatsConfig::default())
    }

    /// Stats keeping what `config` says; sizes above their maximums are
    /// lowered to them.
    pub fn with_config(mut config: StatsConfig) -> Self {
        config.top_k = config.top_k.min(StatsConfig::MAX_TOP_K);
        config.top_charged = config.top_charged.min(StatsConfig::MAX_TOP_K);
        config.max_keys = config.max_keys.min(MAX_KEYS);
        LimitStats {
            inner: Arc::new(Inner {
                totals: Totals::default(),
                traffic: Traffic::default(),
                keys: DeniedKeys::new(config.max_keys, config.key_retention),
                top: Mutex::new(SpaceSaving::new(config.top_k)),
                charged: Mutex::new(SpaceSaving::new(config.top_charged)),
                config,
            }),
        }
    }

    /// What these stats keep.
    pub fn config(&self) -> &StatsConfig {
        &self.inner.config
    }

    /// Records a decision for `key` at `now` (Unix time): allowed, or
    /// denied. The key is only read for a denial, and for an allowed
    /// request when [`top_charged`](StatsConfig::top_charged) is on.
    #[inline]
    pub fn record(&self, now: Timestamp, allowed: bool, key: impl AsRef<[u8]>) {
        if allowed {
            self.record_allowed(now);
            if self.inner.config.top_charged > 0 {
                self.charge(&bounded(key.as_ref()));
            }
        } else {
            self.record_denied(now, key.as_ref());
        }
    }

    /// Counts a request of `key`, already bounded, in the charged-keys
    /// summary, when on.
    fn charge(&self, key: &[u8]) {
        if self.inner.config.top_charged > 0 {
            lock(&self.inner.charged).offer(key);
        }
    }

    /// Records an allowed request at `now` (Unix time).
    #[inline]
    pub fn record_allowed(&self, now: Timestamp) {
        self.inner.totals.record(true);
        self.inner.traffic.record(now, true);
    }

    /// Records a denial of `key` at `now` (Unix time).
    pub fn record_denied(&self, now: Timestamp, key: impl AsRef<[u8]>) {
        let key = bounded(key.as_ref());
        let key = &*key;
        self.inner.totals.record(false);
        self.inner.traffic.record(now, false);
        self.inner.keys.record(key, now);
        if self.inner.config.top_k > 0 {
            lock(&self.inner.top).offer(key);
        }
        self.charge(key);
    }

    /// Requests allowed since the stats were made.
    pub fn allowed(&self) -> u64 {
        self.inner.totals.allowed()
    }

    /// Requests denied since the stats were made.
    pub fn denied(&self) -> u64 {
        self.inner.totals.denied()
    }

    /// Traffic in the minute, hour, day and week holding `now` (Unix time),
    /// and in the ones before them.
    pub fn windows(&self, now: Timestamp) -> TrafficWindows {
        self.inner.traffic.windows(now)
    }

    /// Traffic in each of the 60 minutes up to the one holding `now`,
    /// oldest first (fewer in the first hour after the epoch).
    pub fn history(&self, now: Timestamp) -> Vec<WindowTraffic> {
        self.inner.traffic.history(now)
    }

    /// Denials of `key` counted since its count was last reaped or
    /// forgotten; `None` if it has no count (never denied, reaped, or the
    /// per-key table was full).
    pub fn denied_for(&self, key: impl AsRef<[u8]>) -> Option<u64> {
        self.inner.keys.get(&bounded(key.as_ref()))
    }

    /// Keys with a per-key count.
    pub fn keys_tracked(&self) -> usize {
        self.inner.keys.len()
    }

    /// Denials not counted per key because the per-key table was full.
    pub fn untracked_denials(&self) -> u64 {
        self.inner.keys.untracked()
    }

    /// The keys denied most since the stats were made, most first: up to
    /// [`top_k`](StatsConfig::top_k) keys, each with its count and error
    /// bound; a key over 64 bytes as [`bounded`](crate::key::bounded) keeps
    /// it.
    pub fn top_denied(&self) -> Vec<TopKey> {
        lock(&self.inner.top).top()
    }

    /// The keys that took the most requests (allowed or denied) since the
    /// stats were made, most first: up to
    /// [`top_charged`](StatsConfig::top_charged) keys (none when it is 0,
    /// the default), each with its count and error bound; a key over 64
    /// bytes as [`bounded`](crate::key::bounded) keeps it. Requests
    /// recorded with [`record_allowed`](LimitStats::record_allowed), which
    /// takes no key, are not in it.
    ///
    /// ```
    /// use ratekeeper::{stats::{LimitStats, StatsConfig}, Timestamp};
    ///
    /// let mut config = StatsConfig::default();
    /// config.top_charged = 4;
    /// let stats = LimitStats::with_config(config);
    /// let now = Timestamp::from_secs(1_704_672_000);
    /// for (allowed, key) in [(true, "10.0.0.1"), (true, "10.0.0.1"), (false, "10.0.0.1"), (true, "10.0.0.2")] {
    ///     stats.record(now, allowed, key);
    /// }
    /// let top = stats.top_charged();
    /// assert_eq!((top[0].key.as_slice(), top[0].count), (&b"10.0.0.1"[..], 3));
    /// ```
    pub fn top_charged(&self) -> Vec<TopKey> {
        lock(&self.inner.charged).top()
    }

    /// Drops `key`'s per-key count, as when a limiter forgets the key:
    /// whether it had one. The totals, windows and top keys keep its
    /// denials.
    pub fn forget(&self, key: impl AsRef<[u8]>) -> bool {
        self.inner.keys.forget(&bounded(key.as_ref()))
    }

    /// Drops the per-key counts of keys not denied for
    /// [`key_retention`](StatsConfig::key_retention) before `now` (Unix
    /// time): how many. Call it periodically, as a limiter's sweeper does.
    pub fn reap(&self, now: Timestamp) -> usize {
        self.inner.keys.reap(now)
    }

    /// Everything at `now` (Unix time), ready to serialize.
    pub fn snapshot(&self, now: Timestamp) -> LimitSnapshot {
        LimitSnapshot {
            at_unix_secs: now.as_nanos() / 1_000_000_000,
            allowed: self.allowed(),
            denied: self.denied(),
            windows: self.windows(now),
            history: self.history(now),
            top_denied: self.top_denied(),
            top_charged: self.top_charged(),
            keys_tracked: self.keys_tracked(),
            untracked_denials: self.untracked_denials(),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The summary is consistent after every step (nothing under the lock
    // panics), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood of denials of distinct 4 KB keys keeps at most the budget
    /// of key bytes, and a long key is still found as it was sent.
    #[test]
    fn long_keys_are_kept_within_the_byte_budget() {
        let config = StatsConfig {
            max_keys: 500,
            top_k: 16,
            top_charged: 8,
            ..StatsConfig::default()
        };
        let stats = LimitStats::with_config(config);
        let now = Timestamp::from_secs(1_704_672_000);
        let key = |i: usize| {
            let mut key = format!("{i:06}").into_bytes();
            key.resize(4_096, b'k');
            key
        };
        for i in 0..1_000 {
            stats.record_denied(now, key(i));
        }
        let kept = stats.inner.keys.key_bytes()
            + lock(&stats.inner.top).key_bytes()
            + lock(&stats.inner.charged).key_bytes();
        assert_eq!(config.key_bytes_budget(), (500 + 16 + 8) * 64);
        assert!(
            kept <= config.key_bytes_budget(),
            "{kept} bytes of keys kept"
        );
        assert_eq!(stats.keys_tracked(), 500);
        assert_eq!(stats.denied_for(key(0)), Some(1));
        stats.record_denied(now, key(0));
        assert_eq!(stats.denied_for(key(0)), Some(2));
        let top = stats.top_denied();
        assert_eq!(top[0].key, &*bounded(&key(0)));
        assert_eq!(top[0].key.len(), MAX_KEY_LEN);
        assert!(stats.forget(key(0)));
        assert_eq!(stats.denied_for(key(0)), None);
    }
}
