//! The in-memory store's open reservations: by id, counted per key, and
//! forgotten in order of expiry.

use std::collections::{BTreeSet, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{ReservationError, ReservationId, MAX_OPEN_RESERVATIONS};
use crate::Timestamp;

/// Shards, so that keys far apart do not wait for one lock.
const SHARDS: usize = 16;

/// Open reservations (or in-flight slots), each in the shard of its limit
/// and key.
#[derive(Debug)]
pub(crate) struct Ledger {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    /// How many are open over every shard, kept as they open and close.
    total: Arc<AtomicUsize>,
}

/// One reservation, open until `expires_at`.
#[derive(Debug)]
struct Open {
    /// Its limit and key, as a digest: a settle must name the same.
    owner: u64,
    units: u64,
    expires_at: Timestamp,
}

#[derive(Debug, Default)]
pub(crate) struct Shard {
    open: HashMap<ReservationId, Open>,
    /// How many each limit and key hold (by digest).
    per_key: HashMap<u64, usize>,
    by_expiry: BTreeSet<(Timestamp, ReservationId)>,
    /// How many expired unsettled, since the ledger was made.
    expired: u64,
    /// The ledger's count over every shard.
    total: Arc<AtomicUsize>,
}

impl Default for Ledger {
    fn default() -> Self {
        let total = Arc::new(AtomicUsize::new(0));
        Ledger {
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        total: Arc::clone(&total),
                        ..Shard::default()
                    })
                })
                .collect(),
            hasher: RandomState::new(),
            total,
        }
    }
}

impl Ledger {
    /// The digest of `limit` and `key`.
    pub(crate) fn owner(&self, limit: &str, key: &[u8]) -> u64 {
        self.hasher.hash_one((limit, key))
    }

    /// The shard of `owner`, with what expired by `now` forgotten.
    pub(crate) fn shard(&self, owner: u64, now: Timestamp) -> MutexGuard<'_, Shard> {
        let mut shard = self.shards[owner as usize % SHARDS]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.expire(now);
        shard
    }

    /// How many are open, expired ones included until a shard forgets them:
    /// one load, for a bound checked on every insert.
    pub(crate) fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// How many reservations are open at `now`, over every key.
    pub(crate) fn len(&self, now: Timestamp) -> usize {
        self.sum(now, |shard| shard.open.len())
    }

    /// How many reservations expired unsettled by `now`, over every key.
    pub(crate) fn expired(&self, now: Timestamp) -> u64 {
        self.sum(now, |shard| shard.expired)
    }

    /// `count` over every shard, each with what expired by `now` forgotten.
    fn sum<N: std::iter::Sum<N>>(&self, now: Timestamp, count: impl Fn(&Shard) -> N) -> N {
        self.shards
            .iter()
            .map(|shard| {
                let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
                shard.expire(now);
                count(&shard)
            })
            .sum()
    }
}

impl Shard {
    /// Whether `owner` may open one more.
    pub(crate) fn room(&self, owner: u64) -> Result<(), ReservationError> {
        match self.open_of(owner) >= MAX_OPEN_RESERVATIONS {
            true => Err(ReservationError::TooMany),
            false => Ok(()),
        }
    }

    /// How many `owner` holds open.
    pub(crate) fn open_of(&self, owner: u64) -> usize {
        self.per_key.get(&owner).copied().unwrap_or(0)
    }

    pub(crate) fn insert(
        &mut self,
        owner: u64,
        id: ReservationId,
        units: u64,
        expires_at: Timestamp,
    ) {
        let open = Open {
            owner,
            units,
            expires_at,
        };
        if let Some(old) = self.open.insert(id, open) {
            // 128 random bits met twice: keep the counts right all the same.
            self.forget(id, &old);
        }
        *self.per_key.entry(owner).or_default() += 1;
        self.by_expiry.insert((expires_at, id));
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes `owner`'s reservation `id` and returns its units.
    pub(crate) fn take(&mut self, owner: u64, id: ReservationId) -> Option<u64> {
        if self.open.get(&id)?.owner != owner {
            return None;
        }
        let open = self.open.remove(&id)?;
        self.forget(id, &open);
        Some(open.units)
    }

    /// Forgets every reservation that expired by `now`: settled at its
    /// estimate, which stays taken.
    fn expire(&mut self, now: Timestamp) {
        while let Some(&(at, id)) = self.by_expiry.first() {
            if at > now {
                break;
            }
            self.by_expiry.pop_first();
            if let Some(open) = self.open.remove(&id) {
                self.uncount(open.owner);
                self.expired += 1;
            }
        }
    }

    fn forget(&mut self, id: ReservationId, open: &Open) {
        self.by_expiry.remove(&(open.expires_at, id));
        self.uncount(open.owner);
    }

    fn uncount(&mut self, owner: u64) {
        self.total.fetch_sub(1, Ordering::Relaxed);
        if let Some(count) = self.per_key.get_mut(&owner) {
            *count -= 1;
            if *count == 0 {
                self.per_key.remove(&owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_expire_in_order_and_free_their_key() {
        let ledger = Ledger::default();
        let owner = ledger.owner("llm", b"k");
        let t = Timestamp::from_secs;
        let (a, b) = (ReservationId::random(), ReservationId::random());
        {
            let mut shard = ledger.shard(owner, t(0));
            shard.insert(owner, a, 5, t(10));
            shard.insert(owner, b, 7, t(20));
        }
        assert_eq!(ledger.len(t(1)), 2);
        // Another key cannot settle it.
        let other = ledger.owner("llm", b"j");
        assert_eq!(ledger.shard(other, t(1)).take(other, a), None);
        assert_eq!(ledger.shard(owner, t(1)).take(owner, a), Some(5));
        assert_eq!(ledger.shard(owner, t(1)).take(owner, a), None);
        // Past its expiry: forgotten.
        assert_eq!(ledger.shard(owner, t(20)).take(owner, b), None);
        assert_eq!(ledger.len(t(20)), 0);
        assert!(ledger.shard(owner, t(20)).per_key.is_empty());
        // One settled, one expired.
        assert_eq!(ledger.expired(t(20)), 1);
    }

    #[test]
    fn a_key_holds_a_bounded_number() {
        let ledger = Ledger::default();
        let owner = ledger.owner("llm", b"k");
        let mut shard = ledger.shard(owner, Timestamp::ZERO);
        for _ in 0..MAX_OPEN_RESERVATIONS {
            shard.room(owner).unwrap();
            shard.insert(owner, ReservationId::random(), 1, Timestamp::from_secs(60));
        }
        assert_eq!(shard.room(owner), Err(ReservationError::TooMany));
    }
}
