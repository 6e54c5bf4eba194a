//! Sweeps on demand: how a full table makes room for a new key as soon as
//! known keys are fresh again, instead of at the next background sweep.
//!
//! A new key that finds the table full runs a round of shard sweeps, going
//! round the table from where the last round stopped, until one shard
//! evicts a key. Two gates bound the work, both on the limiter's clock:
//!
//! - each shard's: a sweep closes it until its shard's first remaining key
//!   turns fresh, and at least [`MIN_DEMAND_SWEEP_GAP`]; a round passes
//!   over closed shards. So a shard is swept on demand only when it may
//!   have something to evict, and at most once per gap.
//! - the table's: one round at a time (claimed by a compare-and-swap, so
//!   exactly one thread sweeps and the others answer at once), and after a
//!   round that evicted nothing, none until the earliest shard gate opens.
//!   A saturated answer costs one atomic load while it is closed, however
//!   large the table.
//!
//! The table's gate also says when room can return, which makes a
//! saturated answer's retry-after honest: the time until the first known
//! key is fresh again, not a whole sweep interval.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::Timestamp;

/// The shortest time between two on-demand sweeps of one shard.
pub const MIN_DEMAND_SWEEP_GAP: Duration = Duration::from_millis(5);

/// The gates of a table and its shards, and a count of the sweeps they let
/// pass. Times are nanoseconds of the limiter's clock.
#[derive(Debug)]
pub(crate) struct DemandGates {
    /// When the next round may start.
    round_at: AtomicU64,
    /// Where the next round starts; written by a round's owner only.
    cursor: AtomicUsize,
    /// Per shard: when it may next be swept; written by a round's owner
    /// only.
    open_at: Box<[AtomicU64]>,
    /// Shard sweeps run on demand.
    sweeps: AtomicU64,
}

/// What one shard's sweep found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ShardSwept {
    /// Keys evicted.
    pub(crate) evicted: usize,
    /// When the first key it kept turns fresh, if it kept any.
    pub(crate) next_fresh: Option<Timestamp>,
}

fn gap_nanos() -> u64 {
    u64::try_from(MIN_DEMAND_SWEEP_GAP.as_nanos()).unwrap_or(u64::MAX)
}

impl DemandGates {
    /// Gates for `shards` shards, all open.
    pub(crate) fn new(shards: usize) -> Self {
        DemandGates {
            round_at: AtomicU64::new(0),
            cursor: AtomicUsize::new(0),
            open_at: (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect(),
            sweeps: AtomicU64::new(0),
        }
    }

    /// Shard sweeps run on demand so far.
    pub(crate) fn sweeps(&self) -> u64 {
        self.sweeps.load(Ordering::Relaxed)
    }

    /// Runs a round of sweeps for room at `now`, if the table's gate is
    /// open and no other round runs: whether a key was evicted. `sweep`
    /// sweeps the shard it is given.
    pub(crate) fn make_room(
        &self,
        now: Timestamp,
        mut sweep: impl FnMut(usize) -> ShardSwept,
    ) -> bool {
        let now = now.as_nanos();
        let round_at = self.round_at.load(Ordering::Acquire);
        let soonest = now.saturating_add(gap_nanos());
        // While a round runs the gate holds `soonest`, past any `now` a
        // racing thread read: rounds never overlap.
        if now < round_at
            || self
                .round_at
                .compare_exchange(round_at, soonest, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return false;
        }
        let shards = self.open_at.len();
        let start = self.cursor.load(Ordering::Relaxed) % shards;
        let mut earliest = u64::MAX;
        for step in 0..shards {
            let shard = (start + step) % shards;
            let gate = &self.open_at[shard];
            let open_at = gate.load(Ordering::Relaxed);
            if now < open_at {
                earliest = earliest.min(open_at);
                continue;
            }
            self.sweeps.fetch_add(1, Ordering::Relaxed);
            let swept = sweep(shard);
            let next = swept
                .next_fresh
                .map_or(soonest, |fresh| fresh.as_nanos().max(soonest));
            gate.store(next, Ordering::Relaxed);
            if swept.evicted > 0 {
                // Room now; the next round goes on from the next shard.
                self.cursor.store((shard + 1) % shards, Ordering::Relaxed);
                self.round_at.store(now, Ordering::Release);
                return true;
            }
            earliest = earliest.min(next);
        }
        // Nothing anywhere: no round until a shard may have room. Every
        // shard's gate is past `now` by now, so this closes the table.
        self.round_at.store(earliest, Ordering::Release);
        false
    }

    /// How long from `now` until the next round may start: when room may
    /// return. Zero when a round may start now (room was just made, and
    /// others took it).
    pub(crate) fn wait(&self, now: Timestamp) -> Duration {
        let round_at = self.round_at.load(Ordering::Acquire);
        Duration::from_nanos(round_at.saturating_sub(now.as_nanos()))
    }
}

#[cfg(all(test, not(ratekeeper_loom)))]
mod tests {
    use super::*;

    fn at(millis: u64) -> Timestamp {
        Timestamp::from_millis(millis)
    }

    #[test]
    fn gates_open_at_the_first_fresh_key_and_never_within_the_gap() {
        let gates = DemandGates::new(2);
        let kept = |fresh: u64| {
            move |_| ShardSwept {
                evicted: 0,
                next_fresh: Some(at(fresh)),
            }
        };
        // Nothing to evict in either shard: both are swept, then the table
        // is closed until the first key turns fresh.
        assert!(!gates.make_room(at(100), kept(700)));
        assert_eq!(gates.sweeps(), 2);
        assert_eq!(gates.wait(at(100)), Duration::from_millis(600));
        assert!(!gates.make_room(at(699), kept(700)));
        assert_eq!(gates.sweeps(), 2);
        // A key fresh sooner than the gap still waits for the gap.
        assert!(!gates.make_room(at(700), kept(701)));
        assert_eq!(gates.sweeps(), 4);
        assert_eq!(gates.wait(at(700)), MIN_DEMAND_SWEEP_GAP);
        let evicts = |_| ShardSwept {
            evicted: 1,
            next_fresh: None,
        };
        assert!(!gates.make_room(at(704), evicts));
        assert_eq!(gates.sweeps(), 4);
        // One eviction ends the round, and the table stays open...
        assert!(gates.make_room(at(705), evicts));
        assert_eq!(gates.sweeps(), 5);
        assert_eq!(gates.wait(at(705)), Duration::ZERO);
        // ...but the shard just swept is not swept again within the gap:
        // the next round takes the other one, then finds none open.
        assert!(gates.make_room(at(706), evicts));
        assert_eq!(gates.sweeps(), 6);
        assert!(!gates.make_room(at(707), evicts));
        assert_eq!(gates.sweeps(), 6);
        assert_eq!(gates.wait(at(707)), Duration::from_millis(3));
    }
}
