//! The keys a node holds units for: a bounded map, in shards so that
//! requests for different keys rarely wait for one lock.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use smallvec::SmallVec;

use super::allotment::Allotment;
use crate::key;
use crate::Timestamp;

const SHARDS: usize = 64;

/// A key's name in the table: the limit's name, a byte no name holds, and
/// the key as stores keep it (at most 64 bytes), on the stack.
pub(crate) type Id = SmallVec<[u8; 136]>;

pub(crate) fn id(limit: &str, key: &[u8]) -> Id {
    let bounded = key::bounded(key);
    let mut id = Id::with_capacity(limit.len() + 1 + bounded.len());
    id.extend_from_slice(limit.as_bytes());
    // Names are printable ASCII: 0 separates them from the key.
    id.push(0);
    id.extend_from_slice(&bounded);
    id
}

type Shard = HashMap<Box<[u8]>, Allotment, ahash::RandomState>;

pub(crate) struct Table {
    shards: Box<[Mutex<Shard>]>,
    hasher: ahash::RandomState,
    per_shard: usize,
}

impl Table {
    /// A table of at most about `max_keys` keys (rounded up to a whole
    /// number per shard).
    pub(crate) fn new(max_keys: usize) -> Self {
        Table {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: ahash::RandomState::new(),
            per_shard: max_keys.div_ceil(SHARDS).max(1),
        }
    }

    /// The shard holding `id`, locked. A panic while it was held leaves
    /// allotments whose every change is complete, so a poisoned lock is
    /// taken as it is.
    pub(crate) fn lock(&self, id: &[u8]) -> MutexGuard<'_, Shard> {
        let index = (self.hasher.hash_one(id) as usize) % SHARDS;
        self.shards[index]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `id`'s allotment in `shard`, made if there is room: a full shard
    /// first forgets one key holding nothing and idle for `idle`. `None`
    /// when the shard is full of keys in use (the key then goes to the
    /// store for every request, as without leasing).
    pub(crate) fn entry<'a>(
        &self,
        shard: &'a mut Shard,
        id: &[u8],
        now: Timestamp,
        idle: Duration,
    ) -> Option<&'a mut Allotment> {
        if !shard.contains_key(id) {
            if shard.len() >= self.per_shard {
                let spare = shard
                    .iter()
                    .find(|(_, a)| a.slices.is_empty() && a.is_idle(now, idle))
                    .map(|(k, _)| k.clone())?;
                shard.remove(&spare);
            }
            shard.insert(id.into(), Allotment::new(now));
        }
        shard.get_mut(id)
    }

    /// Every shard in turn, locked.
    pub(crate) fn shards(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
