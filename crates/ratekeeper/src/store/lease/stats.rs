//! What leasing did, per limit and over all of them.

use std::collections::HashMap;
use std::ops::AddAssign;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

/// What a [`Leased`](super::Leased) store did, since it was made: over
/// every limit ([`Leased::stats`](super::Leased::stats)) or for one
/// ([`Leased::stats_by_limit`](super::Leased::stats_by_limit)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Requests decided on this node from units it held.
    pub decided_here: u64,
    /// Requests refused on this node because the store refused the same
    /// cost a moment before and said it would until later (at most
    /// [`LeaseSettings::lifetime`](super::LeaseSettings::lifetime)).
    pub refused_here: u64,
    /// Calls to the store: takes of a chunk, prefetches, plain checks and
    /// reports.
    pub store_calls: u64,
    /// Of the calls, those made in the background, ahead of the requests
    /// (prefetches of the next chunk).
    pub prefetches: u64,
    /// Takes of more than a request's cost (leases).
    pub leases: u64,
    /// Units taken beyond the requests that asked: what leases held.
    pub units_leased: u64,
    /// Units given back to the store before they were spent.
    pub units_returned: u64,
    /// Units that stopped being safe before they were spent or given back
    /// (counted as used in the store: the leases' under-admission).
    pub units_expired: u64,
    /// Units refunded on this node for a token bucket or GCRA key after
    /// the store's refill had already given them back (see the module's
    /// "Refunds").
    pub refunds_dropped: u64,
    /// Units refunded at the store, for keys this node held nothing for.
    pub refunded_at_store: u64,
}

impl LeaseStats {
    /// Decisions made: here (allowed or refused), or by a call to the store.
    pub fn decisions(&self) -> u64 {
        self.decided_here
            .saturating_add(self.refused_here)
            .saturating_add(self.store_calls)
            .saturating_sub(self.prefetches)
    }

    /// Store calls saved: without leasing each decision is one call; with
    /// it, the decisions made here cost none, and the prefetches made in
    /// the background for them cost one each.
    pub fn calls_saved(&self) -> u64 {
        self.decided_here
            .saturating_add(self.refused_here)
            .saturating_sub(self.prefetches)
    }
}

impl AddAssign for LeaseStats {
    /// Sums two records (of two limits, or of a store and the one it
    /// replaced).
    fn add_assign(&mut self, other: LeaseStats) {
        self.decided_here += other.decided_here;
        self.refused_here += other.refused_here;
        self.store_calls += other.store_calls;
        self.prefetches += other.prefetches;
        self.leases += other.leases;
        self.units_leased += other.units_leased;
        self.units_returned += other.units_returned;
        self.units_expired += other.units_expired;
        self.refunds_dropped += other.refunds_dropped;
        self.refunded_at_store += other.refunded_at_store;
    }
}

/// One limit's counts, as they change.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) decided_here: AtomicU64,
    pub(crate) refused_here: AtomicU64,
    pub(crate) store_calls: AtomicU64,
    pub(crate) prefetches: AtomicU64,
    pub(crate) leases: AtomicU64,
    pub(crate) units_leased: AtomicU64,
    pub(crate) units_returned: AtomicU64,
    pub(crate) units_expired: AtomicU64,
    pub(crate) refunds_dropped: AtomicU64,
    pub(crate) refunded_at_store: AtomicU64,
}

impl Counters {
    /// Adds `n` to `counter` (one of this record's fields).
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    fn read(&self) -> LeaseStats {
        let read = |n: &AtomicU64| n.load(Ordering::Relaxed);
        LeaseStats {
            decided_here: read(&self.decided_here),
            refused_here: read(&self.refused_here),
            store_calls: read(&self.store_calls),
            prefetches: read(&self.prefetches),
            leases: read(&self.leases),
            units_leased: read(&self.units_leased),
            units_returned: read(&self.units_returned),
            units_expired: read(&self.units_expired),
            refunds_dropped: read(&self.refunds_dropped),
            refunded_at_store: read(&self.refunded_at_store),
        }
    }
}

/// Every limit's counts, by name. Limits come from configuration, not
/// from requests, so the map stays as small as the limits are few.
#[derive(Debug, Default)]
pub(crate) struct ByLimit {
    limits: RwLock<HashMap<Box<str>, Arc<Counters>, ahash::RandomState>>,
}

impl ByLimit {
    /// The counters of the limit named `name`, made on first use.
    /// Allotments keep theirs, so that the decisions made here count
    /// without looking it up.
    pub(crate) fn of(&self, name: &str) -> Arc<Counters> {
        if let Some(counters) = self
            .limits
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
        {
            return Arc::clone(counters);
        }
        let mut limits = self.limits.write().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(limits.entry(name.into()).or_default())
    }

    /// Every limit's record, by name.
    pub(crate) fn each(&self) -> Vec<(String, LeaseStats)> {
        let limits = self.limits.read().unwrap_or_else(PoisonError::into_inner);
        let mut each: Vec<_> = limits
            .iter()
            .map(|(name, counters)| (name.to_string(), counters.read()))
            .collect();
        each.sort_by(|a, b| a.0.cmp(&b.0));
        each
    }

    /// The sum over every limit.
    pub(crate) fn total(&self) -> LeaseStats {
        let limits = self.limits.read().unwrap_or_else(PoisonError::into_inner);
        let mut total = LeaseStats::default();
        for counters in limits.values() {
            total += counters.read();
        }
        total
    }
}
