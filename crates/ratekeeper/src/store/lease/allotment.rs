//! The units one node holds for one key, and spending them.
//!
//! Pure: every method takes the node's time, so the property tests drive
//! it with a manual clock beside the policies' own transitions.

use std::sync::Arc;
use std::time::Duration;

use event_listener::{Event, EventListener};

use smallvec::SmallVec;

use super::demand::{Demand, Sharing};
use super::hold::Hold;
use super::stats::Counters;
use crate::store::Limit;
use crate::{Decision, Timestamp};

/// Units from one take: how many, when the node asked for them (its clock),
/// how long they hold, and how many are gone.
///
/// Think of the units as stacked in the order the store's refill would
/// reach them: those below `units - safe` are no longer safe (the
/// [`Hold`] says how many are), and `spent` counts from the bottom, so a
/// spend consumes the lowest units still safe, and units that stopped being
/// safe are never spent after a higher one was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub(crate) asked_at: Timestamp,
    /// The store's time of the take, when it told it.
    pub(crate) store_at: Option<Timestamp>,
    pub(crate) hold: Hold,
    pub(crate) units: u64,
    pub(crate) spent: u64,
}

impl Slice {
    /// Units still safe to spend at `now`: never more than are unspent, nor
    /// than the hold keeps.
    pub(crate) fn usable(&self, now: Timestamp) -> u64 {
        let elapsed = now.duration_since(self.asked_at);
        let safe = self.hold.safe(self.units, elapsed);
        safe.min(self.units - self.spent)
    }
}

/// What the store said at the last take, for answers decided here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StoreView {
    /// The node's time when it asked.
    pub(crate) at: Timestamp,
    pub(crate) decision: Decision,
}

/// The store's last refusal of a key: requests of at least `cost` are
/// refused here until `until`, as the store would refuse them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The node's time when it asked (before the store decided: the wait
    /// counts from then, ending no later than the store's own).
    pub(crate) at: Timestamp,
    pub(crate) cost: u64,
    pub(crate) decision: Decision,
    pub(crate) until: Timestamp,
}

/// One key's units on this node: the slices of its takes (oldest first,
/// spent first, as they stop being safe first), what the store last said,
/// and how fast the key is being asked for here.
#[derive(Clone, Debug)]
pub(crate) struct Allotment {
    /// The limit its units were taken under; `None` until the first take.
    pub(crate) limit: Option<Limit>,
    /// Its limit's counters, kept here so that a decision made here
    /// counts without looking them up.
    pub(crate) counters: Option<Arc<Counters>>,
    pub(crate) slices: SmallVec<[Slice; MAX_SLICES]>,
    pub(crate) view: Option<StoreView>,
    /// The store's last refusal, while it holds.
    pub(crate) refused: Option<Refusal>,
    pub(crate) demand: Demand,
    /// How many nodes share the key, from the store's answers.
    pub(crate) sharing: Sharing,
    /// A take for this key is on its way to the store: what the requests
    /// waiting for it listen to.
    fetching: Option<Arc<Event>>,
    pub(crate) last_used: Timestamp,
    dropped_unspent: u64,
}

/// The most slices a key keeps: two in use (one being spent, one
/// prefetched) and the records of recent decisions, for refunds.
const MAX_SLICES: usize = 4;

impl Allotment {
    pub(crate) fn new(now: Timestamp) -> Self {
        Allotment {
            limit: None,
            counters: None,
            slices: SmallVec::new(),
            view: None,
            refused: None,
            demand: Demand::default(),
            sharing: Sharing::default(),
            fetching: None,
            last_used: now,
            dropped_unspent: 0,
        }
    }

    /// Units safe to spend at `now`, over every slice.
    pub(crate) fn usable(&self, now: Timestamp) -> u64 {
        self.slices
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.usable(now)))
    }

    /// Spends `cost` units if the slices hold that many at `now`, oldest
    /// first; spends nothing otherwise.
    pub(crate) fn spend(&mut self, now: Timestamp, cost: u64) -> bool {
        if self.usable(now) < cost {
            return false;
        }
        let mut owed = cost;
        for slice in &mut self.slices {
            let take = slice.usable(now).min(owed);
            if take == 0 {
                continue;
            }
            // The units that stopped being safe are the lowest of the
            // slice (the first the store's refill reached): spending
            // starts above them.
            slice.spent = slice.units - slice.usable(now) + take;
            owed -= take;
            if owed == 0 {
                break;
            }
        }
        self.last_used = now;
        true
    }

    /// Gives `units` back to the slices they may have come from (a refund
    /// of a request decided here), newest first; returns what it could
    /// not place (for the store).
    pub(crate) fn unspend(&mut self, units: u64) -> u64 {
        let mut left = units;
        for slice in self.slices.iter_mut().rev() {
            let back = slice.spent.min(left);
            slice.spent -= back;
            left -= back;
            if left == 0 {
                break;
            }
        }
        left
    }

    /// Adds the units of a take; those its request spent are kept too, so
    /// that a refund of them finds where they came from.
    pub(crate) fn add(&mut self, slice: Slice) {
        if !slice.hold.can_hold() || slice.units == 0 {
            return;
        }
        if self.slices.len() == MAX_SLICES {
            // A spent slice goes first (the record of a request decided
            // at the store, kept for its refund): answers to requests sent
            // before a take landed would otherwise push the take's units
            // out unspent. Then the oldest: the first to stop being safe.
            let spent = self.slices.iter().position(|s| s.spent == s.units);
            let dropped = self.slices.remove(spent.unwrap_or(0));
            self.expired_on_drop(&dropped);
        }
        self.slices.push(slice);
    }

    /// Drops the slices none of whose units is safe any more at `now`;
    /// returns the units they held unspent (expired: the store counts them
    /// as used).
    pub(crate) fn forget_ended(&mut self, now: Timestamp) -> u64 {
        let mut expired = 0u64;
        self.slices.retain(|s| {
            let alive = s.hold.safe(s.units, now.duration_since(s.asked_at)) > 0;
            if !alive {
                expired = expired.saturating_add(s.units - s.spent);
            }
            alive
        });
        expired
    }

    fn expired_on_drop(&mut self, slice: &Slice) {
        self.dropped_unspent = self
            .dropped_unspent
            .saturating_add(slice.units - slice.spent);
    }

    /// Units of slices dropped to make room, unspent, since last asked.
    pub(crate) fn take_dropped(&mut self) -> u64 {
        std::mem::take(&mut self.dropped_unspent)
    }

    /// The answer to a request decided here, at `now`, `cost` taken: the
    /// store's last word, less what was spent since, plus what this node
    /// still holds (units the store counts as used but nobody has spent).
    pub(crate) fn local_decision(&self, now: Timestamp) -> Option<Decision> {
        let view = self.view?;
        let d = view.decision;
        let held = self.usable(now);
        let remaining = d.remaining().saturating_add(held).min(d.limit());
        let reset = d.reset().saturating_sub(now.duration_since(view.at));
        Some(Decision::allowed(d.limit(), remaining, reset))
    }

    /// Notes the store's refusal of `cost` asked at `at`: the same cost or
    /// more is refused here for as long as the store said it would be (at
    /// most `longest`: a refund elsewhere may give units back sooner).
    pub(crate) fn note_refusal(
        &mut self,
        at: Timestamp,
        cost: u64,
        decision: Decision,
        longest: Duration,
    ) {
        let wait = decision
            .retry_after()
            .duration()
            .map_or(longest, |wait| wait.min(longest));
        self.refused = Some(Refusal {
            at,
            cost,
            decision,
            until: at.saturating_add(wait),
        });
    }

    /// The answer to a request of `cost` at `now` that the store refused
    /// a moment ago, if it still would: its decision, its waits shortened
    /// by the time since.
    pub(crate) fn refusal(&self, now: Timestamp, cost: u64) -> Option<Decision> {
        let r = self.refused?;
        if cost < r.cost || now >= r.until {
            return None;
        }
        let since = now.duration_since(r.at);
        let d = r.decision;
        let retry = match d.retry_after() {
            crate::RetryAfter::After(wait) => crate::RetryAfter::After(wait.saturating_sub(since)),
            never => never,
        };
        Some(Decision::denied(
            d.limit(),
            d.remaining(),
            d.reset().saturating_sub(since),
            retry,
        ))
    }

    /// Whether a take for this key is on its way.
    pub(crate) fn is_fetching(&self) -> bool {
        self.fetching.is_some()
    }

    /// Marks a take as on its way.
    pub(crate) fn start_fetching(&mut self) {
        self.fetching = Some(Arc::new(Event::new()));
    }

    /// Marks the take as done (or abandoned), waking the requests waiting
    /// for it.
    pub(crate) fn end_fetching(&mut self) {
        if let Some(done) = self.fetching.take() {
            done.notify(usize::MAX);
        }
    }

    /// A listener for the end of the take on its way, if one is. Made
    /// under the table's lock, as the end is announced under it: none is
    /// missed.
    pub(crate) fn listen(&self) -> Option<EventListener> {
        self.fetching.as_ref().map(|done| done.listen())
    }

    /// Whether nothing here is worth keeping at `now` after `idle`.
    pub(crate) fn is_idle(&self, now: Timestamp, idle: Duration) -> bool {
        self.fetching.is_none() && now.duration_since(self.last_used) >= idle
    }
}
