//! Stats of many limits, by name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use super::limit::{LimitStats, StatsConfig};
use super::snapshot::StatsSnapshot;
use crate::Timestamp;

struct Inner {
    limits: RwLock<BTreeMap<String, LimitStats>>,
    config: StatsConfig,
}

/// The [`LimitStats`] of every limit of a service, by limit name.
///
/// Clones are cheap and share the limits. Look a limit's stats up once
/// (when the limit is configured) and keep the [`LimitStats`] handle:
/// recording through it never touches the registry's lock.
///
/// ```
/// use ratekeeper::{Timestamp, stats::Stats};
///
/// let stats = Stats::new();
/// let now = Timestamp::from_secs(1_704_672_000);
/// let login = stats.limit("login");
/// login.record(now, true, "10.0.0.1");
/// login.record(now, false, "10.0.0.1");
///
/// assert_eq!(stats.get("login").map(|s| s.denied()), Some(1));
/// let snapshot = stats.snapshot(now);
/// assert_eq!(snapshot.limits["login"].windows.minute.current.requests, 2);
/// ```
#[derive(Clone)]
pub struct Stats {
    inner: Arc<Inner>,
}

impl Default for Stats {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stats")
            .field("limits", &self.names())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl Stats {
    /// An empty registry whose limits get the default [`StatsConfig`].
    pub fn new() -> Self {
        Self::with_config(StatsConfig::default())
    }

    /// An empty registry whose limits, made by [`limit`](Stats::limit), get
    /// `config`.
    pub fn with_config(config: StatsConfig) -> Self {
        Stats {
            inner: Arc::new(Inner {
                limits: RwLock::new(BTreeMap::new()),
                config,
            }),
        }
    }

    /// The stats of the limit `name`, made with the registry's config on
    /// first use.
    pub fn limit(&self, name: &str) -> LimitStats {
        if let Some(stats) = self.get(name) {
            return stats;
        }
        let mut limits = self
            .inner
            .limits
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        limits
            .entry(name.to_owned())
            .or_insert_with(|| LimitStats::with_config(self.inner.config))
            .clone()
    }

    /// The stats of the limit `name`, if it has any.
    pub fn get(&self, name: &str) -> Option<LimitStats> {
        self.read().get(name).cloned()
    }

    /// Registers `stats` (made with its own config, e.g. a key retention
    /// matching the limit's window) as the limit `name`'s, returning the
    /// stats it replaces.
    pub fn insert(&self, name: &str, stats: LimitStats) -> Option<LimitStats> {
        self.inner
            .limits
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(name.to_owned(), stats)
    }

    /// Unregisters the limit `name`, returning its stats.
    pub fn remove(&self, name: &str) -> Option<LimitStats> {
        self.inner
            .limits
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(name)
    }

    /// The names of the limits with stats, in order.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Reaps every limit's per-key counts at `now` (see
    /// [`LimitStats::reap`]): how many were dropped.
    pub fn reap(&self, now: Timestamp) -> usize {
        self.handles()
            .iter()
            .map(|(_, stats)| stats.reap(now))
            .fold(0, usize::saturating_add)
    }

    /// Every limit's snapshot at `now` (Unix time).
    pub fn snapshot(&self, now: Timestamp) -> StatsSnapshot {
        StatsSnapshot {
            limits: self
                .handles()
                .into_iter()
                .map(|(name, stats)| (name, stats.snapshot(now)))
                .collect(),
        }
    }

    /// The limits' handles, copied out so that no work runs under the lock.
    fn handles(&self) -> Vec<(String, LimitStats)> {
        self.read()
            .iter()
            .map(|(name, stats)| (name.clone(), stats.clone()))
            .collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, LimitStats>> {
        self.inner
            .limits
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
