//! Denials per key, bounded, and forgotten with the key.
//!
//! A key's row holds its denials and the time of the last one. Rows live
//! in a few shards, each a map behind its own lock, so denials of
//! different keys rarely wait on each other; only denials come here, never
//! allowed requests.
//!
//! The table holds at most `max_keys` rows, exactly: a row is reserved on a
//! shared counter before it is inserted. A denial of a new key that finds
//! the table full is counted as untracked instead, so a flood of distinct
//! keys costs no memory.
//!
//! A row is reaped once no denial touched it for `retention`: a limiter
//! forgets a key once its state is fresh again, at most one window after
//! its last counted request, so a retention of the limit's window reaps the
//! row when the limiter forgets the key. [`DeniedKeys::forget`] drops a
//! row at once, for a key reset by hand.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use crate::Timestamp;

/// Shards at most; fewer for small tables.
const MAX_SHARDS: usize = 16;

#[derive(Clone, Copy, Debug)]
struct Row {
    denied: u64,
    last: Timestamp,
}

type Shard = HashMap<Box<[u8]>, Row, ahash::RandomState>;

/// Denials per key.
#[derive(Debug)]
pub(crate) struct DeniedKeys {
    shards: Box<[Mutex<Shard>]>,
    /// Picks a key's shard; seeded at random, so nobody can aim keys at
    /// one shard.
    hasher: ahash::RandomState,
    len: AtomicUsize,
    max_keys: usize,
    retention: Duration,
    untracked: AtomicU64,
}

impl DeniedKeys {
    /// A table of at most `max_keys` rows, each kept for `retention` after
    /// its last denial.
    pub(crate) fn new(max_keys: usize, retention: Duration) -> Self {
        let shards = max_keys.clamp(1, MAX_SHARDS).next_power_of_two();
        let hasher = ahash::RandomState::new();
        DeniedKeys {
            shards: (0..shards)
                .map(|_| Mutex::new(HashMap::with_hasher(hasher.clone())))
                .collect(),
            hasher,
            len: AtomicUsize::new(0),
            max_keys,
            retention,
            untracked: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &[u8]) -> MutexGuard<'_, Shard> {
        let index = self.hasher.hash_one(key) as usize & (self.shards.len() - 1);
        lock(&self.shards[index])
    }

    /// Counts a denial of `key` at `now`.
    pub(crate) fn record(&self, key: &[u8], now: Timestamp) {
        let mut shard = self.shard(key);
        if let Some(row) = shard.get_mut(key) {
            row.denied = row.denied.saturating_add(1);
            row.last = row.last.max(now);
        } else if self.reserve() {
            shard.insert(
                key.into(),
                Row {
                    denied: 1,
                    last: now,
                },
            );
        } else {
            self.untracked.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Takes one row of the capacity, if there is room.
    fn reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |len| {
                (len < self.max_keys).then_some(len + 1)
            })
            .is_ok()
    }

    fn release(&self, rows: usize) {
        if rows > 0 {
            self.len.fetch_sub(rows, Ordering::AcqRel);
        }
    }

    /// The denials counted for `key`, if it has a row.
    pub(crate) fn get(&self, key: &[u8]) -> Option<u64> {
        self.shard(key).get(key).map(|row| row.denied)
    }

    /// Drops `key`'s row: whether it had one.
    pub(crate) fn forget(&self, key: &[u8]) -> bool {
        let removed = self.shard(key).remove(key).is_some();
        self.release(usize::from(removed));
        removed
    }

    /// Drops the rows with no denial for `retention` before `now`: how many.
    /// Locks one shard at a time.
    pub(crate) fn reap(&self, now: Timestamp) -> usize {
        let mut reaped = 0;
        for shard in self.shards.iter() {
            let mut shard = lock(shard);
            let before = shard.len();
            shard.retain(|_, row| row.last.saturating_add(self.retention) > now);
            let removed = before - shard.len();
            self.release(removed);
            reaped += removed;
        }
        reaped
    }

    /// Rows held.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Denials of keys that found the table full.
    pub(crate) fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// The bytes of the keys held.
    #[cfg(test)]
    pub(crate) fn key_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock(shard).keys().map(|key| key.len()).sum::<usize>())
            .sum()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under the lock is one map operation: a poisoned lock
    // still guards a consistent map.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    #[test]
    fn bounded_exactly_and_counts_the_rest() {
        let keys = DeniedKeys::new(3, MINUTE);
        for key in 0..10u8 {
            keys.record(&[key], Timestamp::ZERO);
        }
        assert_eq!(keys.len(), 3);
        assert_eq!(keys.untracked(), 7);
    }

    #[test]
    fn zero_keys_tracks_nothing() {
        let keys = DeniedKeys::new(0, MINUTE);
        keys.record(b"a", Timestamp::ZERO);
        assert_eq!((keys.len(), keys.untracked(), keys.get(b"a")), (0, 1, None));
    }

    #[test]
    fn reaps_after_the_retention_and_forgets_at_once() {
        let keys = DeniedKeys::new(10, MINUTE);
        let t0 = Timestamp::from_secs(1_000);
        keys.record(b"old", t0);
        keys.record(b"new", t0 + Duration::from_secs(30));
        keys.record(b"gone", t0);
        assert!(keys.forget(b"gone"));
        assert!(!keys.forget(b"gone"));
        assert_eq!(keys.reap(t0 + MINUTE - Duration::from_nanos(1)), 0);
        assert_eq!(keys.reap(t0 + MINUTE), 1);
        assert_eq!((keys.get(b"old"), keys.get(b"new")), (None, Some(1)));
        assert_eq!(keys.len(), 1);
    }
}
