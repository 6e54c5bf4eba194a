//! A shared store, leased from or asked directly (`[store] lease`).

use ratekeeper::store::lease::{LeaseSettings, LeaseStats, Leased};
use ratekeeper::store::{Check, Limit, MultiOutcome, StoreError};
use ratekeeper::{Decision, Outcome, Store};

/// A shared store, with or without [`Leased`] in front of it.
pub enum Leasable<S> {
    /// Every decision a round trip.
    Direct(S),
    /// Units taken in chunks and decided in this process.
    Leased(Leased<S>),
}

impl<S: Store + 'static> Leasable<S> {
    /// `store`, leased with `settings` when they are given. Chunks of busy
    /// keys are prefetched on the tokio runtime the decisions run on.
    pub fn new(store: S, settings: Option<LeaseSettings>) -> Self {
        match settings {
            None => Leasable::Direct(store),
            Some(settings) => Leasable::Leased(
                Leased::builder(store)
                    .settings(settings)
                    .spawn_with(|task| {
                        tokio::spawn(task);
                    })
                    .build(),
            ),
        }
    }

    /// The store itself, behind the leases.
    pub fn store(&self) -> &S {
        match self {
            Leasable::Direct(store) => store,
            Leasable::Leased(leased) => leased.store(),
        }
    }

    /// The leasing store, when leasing is on.
    pub fn leased(&self) -> Option<&Leased<S>> {
        match self {
            Leasable::Direct(_) => None,
            Leasable::Leased(leased) => Some(leased),
        }
    }

    /// What leasing did so far; `None` when it is off.
    pub fn lease_stats(&self) -> Option<LeaseStats> {
        self.leased().map(Leased::stats)
    }
}

impl<S: Store + 'static> Store for Leasable<S> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        match self {
            Leasable::Direct(store) => store.check(limit, key, cost).await,
            Leasable::Leased(leased) => leased.check(limit, key, cost).await,
        }
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        match self {
            Leasable::Direct(store) => store.peek(limit, key).await,
            Leasable::Leased(leased) => leased.peek(limit, key).await,
        }
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        match self {
            Leasable::Direct(store) => store.refund(limit, key, units).await,
            Leasable::Leased(leased) => leased.refund(limit, key, units).await,
        }
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        match self {
            Leasable::Direct(store) => store.check_all(checks).await,
            // Each limit from what this process holds, all or nothing by
            // the crate's one algorithm (refunds go back to the holdings).
            Leasable::Leased(leased) => leased.check_all(checks).await,
        }
    }
}
