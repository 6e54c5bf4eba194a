//! A store across a network: every call waits the one-way latency there
//! and back, in virtual time, around an in-memory store that decides at
//! the moment between.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::store::{Check, MultiOutcome, StoreError, Taken};
use ratekeeper::{Decision, Limit, Outcome, Store, Timestamp};

use crate::sim::{self, Handle};

/// `inner` behind a link of `one_way` each way. Counts its round trips.
///
/// Clones are the same store (every node holds one), counting together.
#[derive(Clone)]
pub(crate) struct Remote<S> {
    inner: S,
    one_way: Duration,
    sim: Handle,
    calls: Arc<AtomicU64>,
}

impl<S> Remote<S> {
    /// `inner`, reached in `one_way` each way on `sim`'s clock.
    pub(crate) fn new(inner: S, one_way: Duration, sim: Handle) -> Self {
        Remote {
            inner,
            one_way,
            sim,
            calls: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Round trips so far, of every kind (give-backs included, which
    /// `LeaseStats::store_calls` leaves out).
    pub(crate) fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The trip there; the caller then decides, and [`Remote::back`].
    async fn there(&self) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.sim.sleep(self.one_way).await;
    }

    /// Notes the store's moment of decision on the calling task (see
    /// [`sim::note`]), then the trip back.
    async fn back(&self) {
        sim::note(self.sim.now());
        self.sim.sleep(self.one_way).await;
    }
}

impl<S: Store> Store for Remote<S> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.there().await;
        let outcome = self.inner.check(limit, key, cost).await;
        self.back().await;
        outcome
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.there().await;
        let decision = self.inner.peek(limit, key).await;
        self.back().await;
        decision
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.there().await;
        let done = self.inner.refund(limit, key, units).await;
        self.back().await;
        done
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.there().await;
        let outcome = self.inner.check_all(checks).await;
        self.back().await;
        outcome
    }

    async fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> Result<Taken, StoreError> {
        self.there().await;
        let taken = self.inner.take(limit, key, cost, up_to).await;
        self.back().await;
        taken
    }

    async fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> Result<bool, StoreError> {
        // The deadline is judged on the store's side, after the trip
        // there: a give-back that arrives late is refused, as it must be.
        self.there().await;
        let back = self.inner.refund_before(limit, key, units, deadline).await;
        self.back().await;
        back
    }
}
