//! The table for states wider than a word: the sliding log and the sliding
//! window counter.
//!
//! Their states do not fit one atomic word, so each shard is a hash map
//! behind a mutex, and a decision holds its shard's lock while it reads and
//! writes the key's state: exact under any contention, at the price of a
//! lock. Keys spread over many shards, so threads rarely meet on one lock
//! unless they check the same key.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use super::slot_table::Update;
use crate::policy::State;

/// Shards: enough that two cores rarely share a lock.
const SHARDS: usize = 64;

/// Fingerprints are already keyed hashes: use their bits as they are.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 fingerprints are hashed; fold anything else in anyway.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type Shard = HashMap<u64, State, BuildHasherDefault<FingerprintHasher>>;

/// Sharded, locked maps of wide states.
#[derive(Debug)]
pub(crate) struct LockedTable {
    shards: Box<[Mutex<Shard>]>,
    len: AtomicUsize,
    max_keys: usize,
}

impl LockedTable {
    pub(crate) fn new(max_keys: usize) -> Self {
        LockedTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            len: AtomicUsize::new(0),
            max_keys,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    fn shard(&self, fingerprint: u64) -> MutexGuard<'_, Shard> {
        let shard = &self.shards[(fingerprint >> 40) as usize % SHARDS];
        // Every change to a map is complete before its lock is released, so
        // a lock poisoned by a panicking caller still guards a whole map.
        shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `decide` on the key's state (`None` for a new key) under the
    /// shard's lock and stores the state it returns.
    pub(crate) fn update<R>(
        &self,
        fingerprint: u64,
        decide: impl FnOnce(Option<&State>) -> (R, Option<State>),
    ) -> Update<R> {
        let mut shard = self.shard(fingerprint);
        if let Some(state) = shard.get_mut(&fingerprint) {
            let (result, next) = decide(Some(state));
            if let Some(next) = next {
                *state = next;
            }
            return Update::Done(result);
        }
        let (result, next) = decide(None);
        if let Some(next) = next {
            let reserved = self
                .len
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |len| {
                    (len < self.max_keys).then_some(len + 1)
                })
                .is_ok();
            if !reserved {
                return Update::Saturated;
            }
            shard.insert(fingerprint, next);
        }
        Update::Done(result)
    }

    /// Runs `decide` on a tracked key's state and stores what it returns;
    /// `None` for an untracked key.
    pub(crate) fn update_existing<R>(
        &self,
        fingerprint: u64,
        decide: impl FnOnce(&State) -> (R, Option<State>),
    ) -> Option<R> {
        let mut shard = self.shard(fingerprint);
        let state = shard.get_mut(&fingerprint)?;
        let (result, next) = decide(state);
        if let Some(next) = next {
            *state = next;
        }
        Some(result)
    }

    /// Gives an untracked `fingerprint` the state `adopt` returns, if
    /// there is room; `adopt` runs under the shard's lock, once the room is
    /// reserved, and its `None` adds nothing.
    pub(crate) fn adopt(&self, fingerprint: u64, adopt: impl FnOnce() -> Option<State>) {
        let mut shard = self.shard(fingerprint);
        if shard.contains_key(&fingerprint) {
            return;
        }
        let reserved = self
            .len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |len| {
                (len < self.max_keys).then_some(len + 1)
            })
            .is_ok();
        if !reserved {
            return;
        }
        match adopt() {
            Some(state) => {
                shard.insert(fingerprint, state);
            }
            None => {
                self.len.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Every tracked key's fingerprint, one shard at a time.
    pub(crate) fn fingerprints(&self) -> Vec<u64> {
        self.shards
            .iter()
            .flat_map(|shard| {
                let shard = shard
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                shard.keys().copied().collect::<Vec<_>>()
            })
            .collect()
    }

    /// Forgets `fingerprint` and returns its state, if it was tracked.
    pub(crate) fn take(&self, fingerprint: u64) -> Option<State> {
        let taken = self.shard(fingerprint).remove(&fingerprint);
        if taken.is_some() {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        taken
    }

    pub(crate) fn get(&self, fingerprint: u64) -> Option<State> {
        self.shard(fingerprint).get(&fingerprint).cloned()
    }

    /// Whether `fingerprint` is tracked.
    pub(crate) fn contains(&self, fingerprint: u64) -> bool {
        self.shard(fingerprint).contains_key(&fingerprint)
    }

    pub(crate) fn remove(&self, fingerprint: u64) -> bool {
        let removed = self.shard(fingerprint).remove(&fingerprint).is_some();
        if removed {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        removed
    }

    /// Evicts the keys whose state `is_fresh`, one shard at a time.
    pub(crate) fn sweep(&self, mut is_fresh: impl FnMut(&State) -> bool) -> usize {
        (0..SHARDS)
            .map(|shard| self.sweep_shard(shard, &mut is_fresh))
            .sum()
    }

    /// How many shards the table has.
    pub(crate) fn shard_count(&self) -> usize {
        SHARDS
    }

    /// Evicts the keys of one shard whose state `is_fresh` (none past the
    /// last shard).
    pub(crate) fn sweep_shard(
        &self,
        shard: usize,
        mut is_fresh: impl FnMut(&State) -> bool,
    ) -> usize {
        let Some(shard) = self.shards.get(shard) else {
            return 0;
        };
        let mut shard = shard
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = shard.len();
        shard.retain(|_, state| !is_fresh(state));
        // Give back memory a flood left behind, without thrashing.
        if shard.capacity() > 4 * shard.len().max(16) {
            shard.shrink_to_fit();
        }
        let evicted = before - shard.len();
        self.len.fetch_sub(evicted, Ordering::AcqRel);
        evicted
    }

    /// Approximate bytes held: the maps' buckets and the sliding logs' hits.
    pub(crate) fn memory_bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u64, State)>() + 1;
        (0..SHARDS)
            .map(|index| {
                let shard = self.shard((index as u64) << 40);
                let hits: usize = shard
                    .values()
                    .map(|state| match state {
                        State::SlidingLog(log) => {
                            log.hits.capacity() * std::mem::size_of::<crate::policy::Hit>()
                        }
                        _ => 0,
                    })
                    .sum();
                shard.capacity() * entry + hits
            })
            .sum()
    }
}
