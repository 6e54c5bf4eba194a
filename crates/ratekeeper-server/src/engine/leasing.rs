//! A shared store, leased from or asked directly (`[store] lease`), which
//! a reload can switch.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::lease::{LeaseSettings, LeaseStats, Leased};
use ratekeeper::store::reservation::ReservationId;
use ratekeeper::store::{Check, Limit, MultiOutcome, StoreError};
use ratekeeper::{Decision, Outcome, Store};

/// A shared store, with or without [`Leased`] in front of it.
pub struct Leasable<S> {
    store: Arc<S>,
    leased: ArcSwapOption<Leased<Arc<S>>>,
    /// What the leasing stores that a reload replaced did, by limit.
    earlier: Mutex<BTreeMap<String, LeaseStats>>,
}

impl<S: Store + 'static> Leasable<S> {
    /// `store`, leased with `settings` when they are given. Chunks of busy
    /// keys are prefetched on the tokio runtime the decisions run on.
    pub fn new(store: S, settings: Option<LeaseSettings>) -> Self {
        let store = Arc::new(store);
        let leased = settings.map(|settings| Arc::new(lease(&store, settings)));
        Leasable {
            store,
            leased: ArcSwapOption::new(leased),
            earlier: Mutex::new(BTreeMap::new()),
        }
    }

    /// The store itself, behind the leases.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The leasing store, when leasing is on.
    pub fn leased(&self) -> Option<Arc<Leased<Arc<S>>>> {
        self.leased.load_full()
    }

    /// The settings leasing runs on; `None` when it is off.
    pub fn settings(&self) -> Option<LeaseSettings> {
        self.leased.load().as_ref().map(|l| l.settings().clone())
    }

    /// Puts `settings` in force (a reload): leasing starts, stops, or takes
    /// the new settings; a leasing store replaced gives back every unit it
    /// holds first. Returns the units given back.
    pub async fn apply(&self, settings: Option<LeaseSettings>) -> u64 {
        if self.settings() == settings {
            return 0;
        }
        let next = settings.map(|settings| Arc::new(lease(&self.store, settings)));
        let Some(before) = self.leased.swap(next) else {
            return 0;
        };
        let returned = before.give_back_all().await;
        let mut earlier = self.earlier.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, stats) in before.stats_by_limit() {
            *earlier.entry(name).or_default() += stats;
        }
        returned
    }

    /// Gives back the units of keys gone quiet ([`Leased::sweep`]); 0
    /// when leasing is off.
    pub async fn sweep(&self) -> u64 {
        match self.leased() {
            Some(leased) => leased.sweep().await,
            None => 0,
        }
    }

    /// Gives back every unit held ([`Leased::give_back_all`]); 0 when
    /// leasing is off.
    pub async fn give_back_all(&self) -> u64 {
        match self.leased() {
            Some(leased) => leased.give_back_all().await,
            None => 0,
        }
    }

    /// Gives back the units held for the limit named `name`
    /// ([`Leased::give_back_limit`]); 0 when leasing is off.
    pub async fn give_back_limit(&self, name: &str) -> u64 {
        match self.leased() {
            Some(leased) => leased.give_back_limit(name).await,
            None => 0,
        }
    }

    /// What leasing did so far, for each limit, by name; `None` when it
    /// has never been on.
    pub fn stats_by_limit(&self) -> Option<Vec<(String, LeaseStats)>> {
        let leased = self.leased.load();
        let mut all = self
            .earlier
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if leased.is_none() && all.is_empty() {
            return None;
        }
        if let Some(leased) = leased.as_ref() {
            for (name, stats) in leased.stats_by_limit() {
                *all.entry(name).or_default() += stats;
            }
        }
        Some(all.into_iter().collect())
    }

    /// What leasing did so far, over every limit; `None` when it has
    /// never been on.
    pub(crate) fn lease_stats(&self) -> Option<LeaseStats> {
        self.stats_by_limit().map(|each| {
            each.into_iter()
                .fold(LeaseStats::default(), |mut total, (_, stats)| {
                    total += stats;
                    total
                })
        })
    }
}

/// `store` leased with `settings`, prefetching on the tokio runtime.
fn lease<S: Store + 'static>(store: &Arc<S>, settings: LeaseSettings) -> Leased<Arc<S>> {
    Leased::builder(Arc::clone(store))
        .settings(settings)
        .spawn_with(|task| {
            tokio::spawn(task);
        })
        .build()
}

impl<S: Store + 'static> Store for Leasable<S> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        // (A guard held while the store is asked: a replaced leasing store
        // lives until its requests are answered.)
        match self.leased.load().as_ref() {
            None => self.store.check(limit, key, cost).await,
            Some(leased) => leased.check(limit, key, cost).await,
        }
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.peek(limit, key).await,
            Some(leased) => leased.peek(limit, key).await,
        }
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.refund(limit, key, units).await,
            Some(leased) => leased.refund(limit, key, units).await,
        }
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.report(limit, key, units).await,
            Some(leased) => leased.report(limit, key, units).await,
        }
    }

    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.hold(limit, key, units, id, ttl).await,
            Some(leased) => leased.hold(limit, key, units, id, ttl).await,
        }
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.settle(limit, key, id, actual).await,
            Some(leased) => leased.settle(limit, key, id, actual).await,
        }
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.check_all(checks).await,
            // Each limit from what this process holds, all or nothing by
            // the crate's one algorithm (refunds go back to the holdings).
            Some(leased) => leased.check_all(checks).await,
        }
    }

    async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.take_slot(cap, key, id).await,
            Some(leased) => leased.take_slot(cap, key, id).await,
        }
    }

    async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        match self.leased.load().as_ref() {
            None => self.store.free_slot(cap, key, id).await,
            Some(leased) => leased.free_slot(cap, key, id).await,
        }
    }
}
