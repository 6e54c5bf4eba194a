//! The lock-free table for states that fit one 64-bit word.
//!
//! # Layout
//!
//! A fixed array of 16-byte slots, each one 128-bit atomic holding a key's
//! 64-bit fingerprint and its 64-bit state. The array is cut into shards;
//! a key lives in the shard named by its fingerprint's high bits and is
//! found by linear probing from the slot its low bits name. The table has
//! twice as many slots as keys it may track, so probes stay short.
//!
//! # Protocol
//!
//! - **Update** (the hot path, lock-free): find the slot holding the key,
//!   compute the next state, and compare-and-swap the whole slot, key and
//!   state together. If anything changed in between (another update, an
//!   eviction, a reuse of the slot by another key), the swap fails and the
//!   update starts over. Because key and state change in one atomic step, a
//!   request can never be counted against a slot after it was given to
//!   another key, and two threads can never both take the last unit.
//! - **Claim** (a key's first counted request) and **evict** (the sweeper,
//!   [`reset`](SlotTable::remove)) change which key a slot holds. They take
//!   the shard's lock, so at most one of them runs per shard: a claim
//!   re-scans under the lock and finds the key if a racing claim put it
//!   there first, so a key is never in two slots. Updates never wait on the
//!   lock.
//! - **Capacity** is a counter reserved before a slot is claimed, by
//!   compare-and-swap, so many first hits racing in different shards cannot
//!   overshoot `max_keys`.
//! - An evicted slot becomes a tombstone that probes walk past; a claim
//!   reuses the first free slot it passes, and the sweeper turns tombstones
//!   at the end of a probe run back into empty slots.

use super::sync::{AtomicU128, AtomicUsize, Mutex, Ordering};

/// A slot no key has held since the last trim: probes stop here.
const EMPTY: u64 = 0;
/// A slot whose key was evicted: probes continue past it.
const TOMBSTONE: u64 = 1;

/// The smallest fingerprint a key can have; lower values mark free slots.
pub(crate) const MIN_FINGERPRINT: u64 = 2;

/// Slots per shard at most: a shard is the unit of locking and of a probe.
const MAX_SHARD_LEN: usize = 1024;

/// What an update decided.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Update<R> {
    /// The key was tracked (or needed no row), and this is its result.
    Done(R),
    /// The key is new, would need a row, and the table is full: nothing was
    /// counted.
    Saturated,
}

/// What an update computes from a key's state (`None` for a new key): its
/// result, and the next state when it changed (`None` leaves the slot as
/// it is, and a new key without a row).
///
/// A trait rather than only a closure so that the policies' hot paths can
/// implement it with an always-inlined method: a closure's body is inlined
/// or not as the optimizer judges, and the checks' was not.
pub(crate) trait Decide {
    /// What the update returns.
    type Result;

    /// Decides on `state`; may run more than once when threads race.
    fn decide(&mut self, state: Option<u64>) -> (Self::Result, Option<u64>);
}

impl<R, F: FnMut(Option<u64>) -> (R, Option<u64>)> Decide for F {
    type Result = R;

    #[inline]
    fn decide(&mut self, state: Option<u64>) -> (R, Option<u64>) {
        self(state)
    }
}

#[inline]
const fn pack(key: u64, state: u64) -> u128 {
    ((key as u128) << 64) | state as u128
}

#[inline]
const fn key_of(slot: u128) -> u64 {
    (slot >> 64) as u64
}

#[inline]
const fn state_of(slot: u128) -> u64 {
    slot as u64
}

/// The lock-free table of one-word states.
#[derive(Debug)]
pub(crate) struct SlotTable {
    slots: Box<[AtomicU128]>,
    /// Slots per shard, a power of two.
    shard_len: usize,
    /// How many shards, any number: the slots are twice `max_keys` rounded
    /// up to whole shards, not to a power of two, since at 100,000 keys and
    /// more every check's slot is a cache miss and a table up to twice as
    /// large misses the last-level cache more often.
    shards: u64,
    /// Serializes claims and evictions within each shard.
    locks: Box<[Mutex<()>]>,
    /// Each shard's slots that are not empty (keys and tombstones), changed
    /// under the shard's lock: a sweep passes over shards with none, so an
    /// idle sweep of a large table with few keys reads only their shards.
    occupied: Box<[AtomicUsize]>,
    len: AtomicUsize,
    max_keys: usize,
}

impl SlotTable {
    /// A table tracking at most `max_keys` keys.
    pub(crate) fn new(max_keys: usize) -> Self {
        let wanted = max_keys.max(1).saturating_mul(2);
        let shard_len = wanted.next_power_of_two().clamp(8, MAX_SHARD_LEN);
        let shards = wanted.div_ceil(shard_len);
        let capacity = shards * shard_len;
        SlotTable {
            slots: (0..capacity)
                .map(|_| AtomicU128::new(pack(EMPTY, 0)))
                .collect(),
            shard_len,
            shards: shards as u64,
            locks: (0..shards).map(|_| Mutex::new(())).collect(),
            occupied: (0..shards).map(|_| AtomicUsize::new(0)).collect(),
            len: AtomicUsize::new(0),
            max_keys,
        }
    }

    /// How many keys hold a slot.
    pub(crate) fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Bytes of slots: the table's memory, whatever the number of keys.
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
            + std::mem::size_of_val(&*self.locks)
            + std::mem::size_of_val(&*self.occupied)
    }

    #[inline]
    fn shard_of(&self, fingerprint: u64) -> usize {
        // The high half, scaled to the shard count (the low bits name the
        // home slot in the shard): uniform for any count, without a division.
        (((fingerprint >> 32) * self.shards) >> 32) as usize
    }

    /// The slot indices of `fingerprint`'s probe sequence, home first.
    #[inline]
    fn probe(&self, fingerprint: u64) -> impl Iterator<Item = usize> {
        let base = self.shard_of(fingerprint) * self.shard_len;
        let home = fingerprint as usize;
        let mask = self.shard_len - 1;
        (0..self.shard_len).map(move |i| base + (home.wrapping_add(i) & mask))
    }

    /// The slot holding `fingerprint` and its content, scanning without a
    /// lock; `None` once an empty slot ends the probe.
    #[inline]
    fn find(&self, fingerprint: u64) -> Option<(usize, u128)> {
        // The same sequence as `probe`, written out: every check runs this,
        // and the iterator's adapters cost it a dozen instructions a step.
        let base = self.shard_of(fingerprint) * self.shard_len;
        let mask = self.shard_len - 1;
        let mut home = fingerprint as usize;
        for _ in 0..self.shard_len {
            let index = base + (home & mask);
            let slot = self.slots[index].load(Ordering::Acquire);
            let key = key_of(slot);
            if key == fingerprint {
                return Some((index, slot));
            }
            if key == EMPTY {
                return None;
            }
            home = home.wrapping_add(1);
        }
        None
    }

    /// The state of `fingerprint`, if tracked.
    pub(crate) fn get(&self, fingerprint: u64) -> Option<u64> {
        self.find(fingerprint).map(|(_, slot)| state_of(slot))
    }

    /// Runs `decide` on the key's state (`None` for a new key) and stores
    /// the state it returns, atomically: `decide` may run more than once
    /// when other threads race, and only its last result counts.
    ///
    /// Always inlined: into every check's path, where the closure and
    /// its result then live in registers instead of being passed through
    /// memory.
    #[inline(always)]
    pub(crate) fn update<D: Decide>(&self, fingerprint: u64, mut decide: D) -> Update<D::Result> {
        debug_assert!(fingerprint >= MIN_FINGERPRINT);
        // One call of `decide` in the loop, so that it is inlined here: this
        // is every check's path.
        loop {
            let found = self.find(fingerprint);
            let (result, next) = decide.decide(found.map(|(_, slot)| state_of(slot)));
            let Some(next) = next else {
                // Unchanged, or nothing to remember for a new key (a report,
                // a denial): no row needed.
                return Update::Done(result);
            };
            match found {
                Some((_, slot)) if next == state_of(slot) => return Update::Done(result),
                Some((index, slot)) => {
                    let new = pack(fingerprint, next);
                    if self.slots[index]
                        .compare_exchange(slot, new, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return Update::Done(result);
                    }
                    // Updated, evicted or reused meanwhile: decide again.
                }
                None => match self.claim(fingerprint, next) {
                    Claim::Claimed => return Update::Done(result),
                    Claim::Full => return Update::Saturated,
                    // Another thread claimed the key first: decide again on its state.
                    Claim::Present => {}
                },
            }
        }
    }

    /// Like [`update`](SlotTable::update) for a key that is tracked; `None`,
    /// without calling `decide`, for one that is not (or was evicted while
    /// deciding).
    #[inline]
    pub(crate) fn update_existing<R>(
        &self,
        fingerprint: u64,
        mut decide: impl FnMut(u64) -> (R, Option<u64>),
    ) -> Option<R> {
        loop {
            let (index, slot) = self.find(fingerprint)?;
            let (result, next) = decide(state_of(slot));
            match next {
                Some(next) if next != state_of(slot) => {
                    let new = pack(fingerprint, next);
                    if self.slots[index]
                        .compare_exchange(slot, new, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return Some(result);
                    }
                }
                _ => return Some(result),
            }
        }
    }

    /// Gives `fingerprint` a slot holding `state`, under the shard's lock.
    /// Out of line: a key's first request takes it once, and inlined it
    /// would crowd every check's path with its registers and spills.
    #[cold]
    #[inline(never)]
    fn claim(&self, fingerprint: u64, state: u64) -> Claim {
        let _guard = lock(&self.locks[self.shard_of(fingerprint)]);
        let (index, slot) = match self.free_slot(fingerprint) {
            Ok(free) => free,
            Err(claim) => return claim,
        };
        if !self.reserve() {
            return Claim::Full;
        }
        self.fill(index, slot, fingerprint, state);
        Claim::Claimed
    }

    /// The first free slot of `fingerprint`'s probe, or why there is none
    /// (the key is there, or the shard is full). The caller holds the
    /// shard's lock.
    fn free_slot(&self, fingerprint: u64) -> Result<(usize, u128), Claim> {
        let mut free = None;
        for index in self.probe(fingerprint) {
            let slot = self.slots[index].load(Ordering::Acquire);
            match key_of(slot) {
                key if key == fingerprint => return Err(Claim::Present),
                EMPTY => {
                    free.get_or_insert((index, slot));
                    break;
                }
                TOMBSTONE => {
                    free.get_or_insert((index, slot));
                }
                _ => {}
            }
        }
        free.ok_or(Claim::Full)
    }

    /// Puts `fingerprint` and `state` in the free slot at `index`, which
    /// held `slot`, its room reserved. The caller holds the shard's lock.
    fn fill(&self, index: usize, slot: u128, fingerprint: u64, state: u64) {
        // Under the lock nobody else claims or frees slots in this shard, and
        // updates only swap slots holding their own key: this cannot fail.
        let claimed = self.slots[index].compare_exchange(
            slot,
            pack(fingerprint, state),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        debug_assert!(claimed.is_ok(), "a free slot changed under the shard lock");
        if key_of(slot) == EMPTY {
            self.occupied[self.shard_of(fingerprint)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives an untracked `fingerprint` a slot holding what `adopt`
    /// returns, if there is room: `adopt` runs under the shard's lock,
    /// once a slot is reserved, so that two threads adopting one key take
    /// its state once and the second finds it here. `None` from `adopt`
    /// claims nothing.
    #[cold]
    #[inline(never)]
    pub(crate) fn adopt(&self, fingerprint: u64, adopt: impl FnOnce() -> Option<u64>) {
        let _guard = lock(&self.locks[self.shard_of(fingerprint)]);
        let Ok((index, slot)) = self.free_slot(fingerprint) else {
            return;
        };
        if !self.reserve() {
            return;
        }
        match adopt() {
            Some(state) => self.fill(index, slot, fingerprint, state),
            None => {
                self.len.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Every tracked key's fingerprint, read without locks (a key claimed
    /// or evicted meanwhile may be missed or listed).
    pub(crate) fn fingerprints(&self) -> Vec<u64> {
        self.slots
            .iter()
            .map(|slot| key_of(slot.load(Ordering::Acquire)))
            .filter(|&key| key >= MIN_FINGERPRINT)
            .collect()
    }

    /// Forgets `fingerprint` and returns its state, if it was tracked.
    pub(crate) fn take(&self, fingerprint: u64) -> Option<u64> {
        let _guard = lock(&self.locks[self.shard_of(fingerprint)]);
        loop {
            let (index, slot) = self.find(fingerprint)?;
            if self.free(index, slot) {
                return Some(state_of(slot));
            }
        }
    }

    /// Counts one more key if there is room.
    fn reserve(&self) -> bool {
        self.len
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |len| {
                (len < self.max_keys).then_some(len + 1)
            })
            .is_ok()
    }

    /// Forgets `fingerprint`: whether it was tracked.
    pub(crate) fn remove(&self, fingerprint: u64) -> bool {
        let _guard = lock(&self.locks[self.shard_of(fingerprint)]);
        loop {
            let Some((index, slot)) = self.find(fingerprint) else {
                return false;
            };
            if self.free(index, slot) {
                return true;
            }
        }
    }

    /// Evicts every key whose state `is_fresh` says is the same as a fresh
    /// one, then trims tombstones; the number evicted. Takes one shard's lock
    /// at a time, so updates never wait and claims wait for one shard only.
    pub(crate) fn sweep(&self, mut is_fresh: impl FnMut(u64) -> bool) -> usize {
        (0..self.locks.len())
            .map(|shard| self.sweep_shard(shard, &mut is_fresh))
            .sum()
    }

    /// How many shards the table has.
    pub(crate) fn shard_count(&self) -> usize {
        self.locks.len()
    }

    /// [`sweep`](SlotTable::sweep) of one shard (none past the last):
    /// under its lock, as every eviction is.
    pub(crate) fn sweep_shard(&self, shard: usize, mut is_fresh: impl FnMut(u64) -> bool) -> usize {
        let (Some(shard_lock), Some(occupied)) = (self.locks.get(shard), self.occupied.get(shard))
        else {
            return 0;
        };
        // Only empty slots: nothing to evict or trim. A claim racing
        // with this read writes a state that is not fresh anyway.
        if occupied.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let _guard = lock(shard_lock);
        let base = shard * self.shard_len;
        let mut evicted = 0;
        // Tombstones come only from `free`, under this shard's lock
        // (held here), so a shard that had none and lost no key now
        // has none to trim: skipping it halves an idle sweep.
        let mut tombstones = 0;
        for index in base..base + self.shard_len {
            let slot = self.slots[index].load(Ordering::Acquire);
            let key = key_of(slot);
            if key == TOMBSTONE {
                tombstones += 1;
            // A failed swap means the key was just updated: not fresh.
            } else if key >= MIN_FINGERPRINT && is_fresh(state_of(slot)) && self.free(index, slot) {
                evicted += 1;
                tombstones += 1;
            }
        }
        if tombstones > 0 {
            self.trim(shard);
        }
        evicted
    }

    /// Turns the slot at `index`, expected to hold `slot`, into a tombstone;
    /// whether it did. The caller holds the shard's lock.
    fn free(&self, index: usize, slot: u128) -> bool {
        let freed = self.slots[index]
            .compare_exchange(
                slot,
                pack(TOMBSTONE, 0),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok();
        if freed {
            self.len.fetch_sub(1, Ordering::AcqRel);
        }
        freed
    }

    /// Turns tombstones that end a probe run (the next slot is empty) back
    /// into empty slots, so probes stay short. The caller holds the shard's
    /// lock. No probe can pass an empty slot, so no key sits beyond a run
    /// that ends in one: trimming hides nobody.
    fn trim(&self, shard: usize) {
        let base = shard * self.shard_len;
        let mask = self.shard_len - 1;
        let mut emptied = 0;
        for offset in 0..self.shard_len {
            if key_of(self.slots[base + offset].load(Ordering::Acquire)) != EMPTY {
                continue;
            }
            // Walk back from this empty slot over the tombstones before it.
            let mut back = offset;
            for _ in 1..self.shard_len {
                back = back.wrapping_sub(1) & mask;
                let cell = &self.slots[base + back];
                let slot = cell.load(Ordering::Acquire);
                if key_of(slot) != TOMBSTONE {
                    break;
                }
                // Under the lock only updates race, and they never touch
                // a tombstone: this swap succeeds.
                if cell
                    .compare_exchange(slot, pack(EMPTY, 0), Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    emptied += 1;
                }
            }
        }
        self.occupied[shard].fetch_sub(emptied, Ordering::Relaxed);
    }
}

/// The outcome of a claim.
enum Claim {
    Claimed,
    Present,
    Full,
}

fn lock(mutex: &Mutex<()>) -> impl Drop + '_ {
    // A panic while holding a shard lock cannot leave the slots inconsistent
    // (every change is one atomic swap), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
impl SlotTable {
    /// How many slots hold `fingerprint`: the protocol keeps it at most 1.
    fn slots_holding(&self, fingerprint: u64) -> usize {
        self.slots
            .iter()
            .filter(|slot| key_of(slot.load(Ordering::Acquire)) == fingerprint)
            .count()
    }
}

/// A counter policy for the tests: the state counts units, up to `limit`.
#[cfg(test)]
fn take(limit: u64, delta: i64) -> impl FnMut(Option<u64>) -> (bool, Option<u64>) {
    move |state| {
        let count = state.unwrap_or(0);
        match count.checked_add_signed(delta) {
            Some(next) if next <= limit => (true, Some(next)),
            _ => (false, None),
        }
    }
}

#[cfg(all(test, not(ratekeeper_loom)))]
mod tests {
    use super::*;

    #[test]
    fn adopt_takes_a_state_once_and_only_with_room() {
        let old = SlotTable::new(4);
        assert_eq!(old.update(7, take(9, 5)), Update::Done(true));
        let new = SlotTable::new(1);
        new.adopt(7, || old.take(7));
        assert_eq!((new.get(7), new.len()), (Some(5), 1));
        assert_eq!((old.get(7), old.len()), (None, 0));
        // Tracked already: `adopt` runs nothing.
        new.adopt(7, || panic!("a tracked key is not adopted again"));
        // Full: nothing is taken from the old table.
        assert_eq!(old.update(8, take(9, 2)), Update::Done(true));
        new.adopt(8, || old.take(8));
        assert_eq!((new.get(8), old.get(8)), (None, Some(2)));
        // Nothing to adopt: the room reserved is given back.
        let spare = SlotTable::new(1);
        spare.adopt(9, || None);
        assert_eq!(spare.len(), 0);
        assert_eq!(spare.update(10, take(9, 1)), Update::Done(true));
    }

    /// Each shard's count of slots that are not empty, as `occupied` should
    /// hold it.
    fn counted(table: &SlotTable) -> Vec<usize> {
        table
            .slots
            .chunks(table.shard_len)
            .map(|shard| {
                shard
                    .iter()
                    .filter(|s| key_of(s.load(Ordering::Relaxed)) != EMPTY)
                    .count()
            })
            .collect()
    }

    fn occupied(table: &SlotTable) -> Vec<usize> {
        table
            .occupied
            .iter()
            .map(|o| o.load(Ordering::Relaxed))
            .collect()
    }

    #[test]
    fn shards_count_their_occupied_slots_through_claims_removals_and_sweeps() {
        // 4,096 keys: several shards of 1,024 slots
        let table = SlotTable::new(4_096);
        assert!(table.locks.len() > 1);
        // Spread over all 64 bits, as the keyed hash spreads real keys: the
        // high half names the shard.
        let key = |i: u64| {
            (i + 1)
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .max(MIN_FINGERPRINT)
        };
        for i in 0..3_000 {
            assert_eq!(table.update(key(i), take(5, 1)), Update::Done(true));
        }
        assert_eq!(occupied(&table), counted(&table));
        for i in (0..3_000).step_by(3) {
            assert!(table.remove(key(i)));
        }
        // removals leave tombstones, still occupied
        assert_eq!(occupied(&table), counted(&table));
        // keys claimed again take tombstones or empty slots
        for i in (0..3_000).step_by(6) {
            assert_eq!(table.update(key(i), take(5, 1)), Update::Done(true));
        }
        assert_eq!(occupied(&table), counted(&table));
        // a sweep that evicts everything trims every shard back to empty
        let tracked = table.len();
        assert_eq!(table.sweep(|_| true), tracked);
        assert_eq!(table.len(), 0);
        assert_eq!(occupied(&table), counted(&table));
        assert!(occupied(&table).iter().all(|&o| o == 0));
        // and the table works as new
        assert_eq!(table.update(key(1), take(5, 1)), Update::Done(true));
        assert_eq!(table.get(key(1)), Some(1));
    }

    #[test]
    fn claims_updates_and_removals() {
        let table = SlotTable::new(4);
        assert_eq!(table.update(7, take(2, 1)), Update::Done(true));
        assert_eq!(table.update(7, take(2, 1)), Update::Done(true));
        assert_eq!(table.update(7, take(2, 1)), Update::Done(false));
        assert_eq!(table.get(7), Some(2));
        assert_eq!(table.len(), 1);
        assert!(table.remove(7));
        assert_eq!(table.get(7), None);
        assert_eq!(table.len(), 0);
        assert_eq!(table.slots_holding(7), 0);
    }

    #[test]
    fn a_full_table_saturates_only_new_keys() {
        let table = SlotTable::new(2);
        for key in [10, 11] {
            assert_eq!(table.update(key, take(5, 1)), Update::Done(true));
        }
        assert_eq!(table.update(12, take(5, 1)), Update::Saturated);
        assert_eq!(table.update(10, take(5, 1)), Update::Done(true));
        // A decision that stores nothing needs no slot.
        assert_eq!(table.update(12, take(0, 1)), Update::Done(false));
    }

    #[test]
    fn colliding_homes_probe_past_tombstones() {
        // Same shard and home slot (low and shard bits equal), different keys.
        let table = SlotTable::new(8);
        let keys = [2u64 | (1 << 50), 2 | (2 << 50), 2 | (3 << 50)];
        for key in keys {
            assert_eq!(table.update(key, take(9, 1)), Update::Done(true));
        }
        // Evict the first of the run: the others must still be found.
        assert!(table.remove(keys[0]));
        assert_eq!(table.get(keys[1]), Some(1));
        assert_eq!(table.get(keys[2]), Some(1));
        // The tombstone is reused, and no key lands twice.
        assert_eq!(table.update(keys[0], take(9, 1)), Update::Done(true));
        assert_eq!(table.update(keys[2], take(9, 1)), Update::Done(true));
        for key in keys {
            assert_eq!(table.slots_holding(key), 1);
        }
        // Sweeping everything trims the run back to empty slots.
        assert_eq!(table.sweep(|_| true), 3);
        assert!(table
            .slots
            .iter()
            .all(|slot| key_of(slot.load(Ordering::Acquire)) == EMPTY));
    }

    #[test]
    fn a_sweep_that_evicts_nothing_still_trims_what_removals_left() {
        let table = SlotTable::new(8);
        let keys = [2u64 | (1 << 50), 2 | (2 << 50)];
        for key in keys {
            assert_eq!(table.update(key, take(9, 1)), Update::Done(true));
        }
        // Removing the last of the run leaves a tombstone before an empty
        // slot; a sweep that finds nothing fresh must still trim it.
        assert!(table.remove(keys[1]));
        let tombstones = || {
            table
                .slots
                .iter()
                .filter(|slot| key_of(slot.load(Ordering::Acquire)) == TOMBSTONE)
                .count()
        };
        assert_eq!(tombstones(), 1);
        assert_eq!(table.sweep(|_| false), 0);
        assert_eq!(tombstones(), 0);
        assert_eq!(table.get(keys[0]), Some(1));
    }
}

/// Model checks of the slot protocol: `RUSTFLAGS="--cfg ratekeeper_loom" cargo test
/// -p ratekeeper --lib --release loom` (run by .ci/run).
#[cfg(all(test, ratekeeper_loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    const KEY: u64 = 42;

    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.check(f);
    }

    /// Two first hits on one new key under a limit of one: exactly one is
    /// allowed, and the key holds exactly one slot.
    #[test]
    fn loom_racing_first_hits_take_the_last_unit_once() {
        model(|| {
            let table = Arc::new(SlotTable::new(2));
            let other = Arc::clone(&table);
            let racer = thread::spawn(move || other.update(KEY, take(1, 1)));
            let mine = table.update(KEY, take(1, 1));
            let theirs = racer.join().unwrap();
            let allowed = [mine, theirs]
                .iter()
                .filter(|u| **u == Update::Done(true))
                .count();
            assert_eq!(allowed, 1);
            assert_eq!(table.get(KEY), Some(1));
            assert_eq!(table.slots_holding(KEY), 1);
            assert_eq!(table.len(), 1);
        });
    }

    /// An update racing a refund and a sweep that evicts the key when the
    /// refund leaves it fresh: no update is lost into an evicted slot.
    #[test]
    fn loom_updates_are_never_lost_to_an_eviction() {
        model(|| {
            let table = Arc::new(SlotTable::new(2));
            assert_eq!(table.update(KEY, take(9, 1)), Update::Done(true));
            let (adder, refunder) = (Arc::clone(&table), Arc::clone(&table));
            let add = thread::spawn(move || adder.update(KEY, take(9, 1)));
            let refund = thread::spawn(move || refunder.update(KEY, take(9, -1)));
            table.sweep(|count| count == 0);
            assert_eq!(add.join().unwrap(), Update::Done(true));
            assert_eq!(refund.join().unwrap(), Update::Done(true));
            // 1 + 1 - 1, whatever the order and whether the key was evicted.
            assert_eq!(table.get(KEY), Some(1));
            assert_eq!(table.slots_holding(KEY), 1);
            assert_eq!(table.len(), 1);
        });
    }

    /// Racing first hits of two new keys into a table with room for one:
    /// exactly one gets a slot.
    #[test]
    fn loom_the_cap_is_exact() {
        model(|| {
            let table = Arc::new(SlotTable::new(1));
            let other = Arc::clone(&table);
            let racer = thread::spawn(move || other.update(KEY + 1, take(1, 1)));
            let mine = table.update(KEY, take(1, 1));
            let theirs = racer.join().unwrap();
            let saturated = [mine, theirs]
                .iter()
                .filter(|u| **u == Update::Saturated)
                .count();
            assert_eq!(saturated, 1);
            assert_eq!(table.len(), 1);
        });
    }

    /// Two first hits of a key whose state is still in the table it moves
    /// from (a limit's numbers changed): the state is taken once, and the
    /// last unit it leaves goes to one of them.
    #[test]
    fn loom_a_moving_key_is_taken_once() {
        model(|| {
            let old = Arc::new(SlotTable::new(2));
            assert_eq!(old.update(KEY, take(9, 8)), Update::Done(true));
            let new = Arc::new(SlotTable::new(2));
            let (o, n) = (Arc::clone(&old), Arc::clone(&new));
            let racer = thread::spawn(move || {
                n.adopt(KEY, || o.take(KEY));
                n.update(KEY, take(9, 1))
            });
            new.adopt(KEY, || old.take(KEY));
            let mine = new.update(KEY, take(9, 1));
            let theirs = racer.join().unwrap();
            let allowed = [mine, theirs]
                .iter()
                .filter(|u| **u == Update::Done(true))
                .count();
            assert_eq!(allowed, 1);
            assert_eq!(new.get(KEY), Some(9));
            assert_eq!((old.get(KEY), old.len()), (None, 0));
            assert_eq!((new.slots_holding(KEY), new.len()), (1, 1));
        });
    }

    /// A reset racing an update of the same key: the key ends in at most one
    /// slot, and the count of keys matches the slots.
    #[test]
    fn loom_reset_racing_an_update() {
        model(|| {
            let table = Arc::new(SlotTable::new(2));
            assert_eq!(table.update(KEY, take(9, 1)), Update::Done(true));
            let other = Arc::clone(&table);
            let updater = thread::spawn(move || other.update(KEY, take(9, 1)));
            let removed = table.remove(KEY);
            assert_eq!(updater.join().unwrap(), Update::Done(true));
            assert!(removed);
            let holding = table.slots_holding(KEY);
            assert!(holding <= 1);
            assert_eq!(table.len(), holding);
            // The update landed either before the reset (and was forgotten
            // with it) or after, on a fresh state.
            assert!(matches!(table.get(KEY), None | Some(1)));
        });
    }
}
