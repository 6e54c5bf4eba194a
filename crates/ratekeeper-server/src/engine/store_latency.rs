//! How long the store's calls take, by operation, for `/metrics`
//! (`ratekeeper_store_operation_duration_seconds`).
//!
//! Only the SQLite and Redis stores are timed: an in-memory call takes
//! well under the first bucket (1 µs), so its histogram would say nothing
//! the decision latency does not, at two clock reads a call.

use std::time::{Duration, Instant};

use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::ReservationId;
use ratekeeper::store::{Check, Immediate, MultiOutcome, StoreError};
use ratekeeper::{Decision, Limit, Outcome, Store};

use super::histogram::{Histogram, LatencyHistogram};
use super::AnyStore;

/// A store operation, as `/metrics` labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreOperation {
    /// One limit decided ([`Store::check`]).
    Check,
    /// Several limits decided at once ([`Store::check_all`]).
    CheckAll,
    /// Units given back ([`Store::refund`]).
    Refund,
    /// A state read ([`Store::peek`]).
    Peek,
    /// Units charged after the fact ([`Store::report`]).
    Report,
    /// Units decided and held as a reservation ([`Store::hold`]).
    Hold,
    /// A reservation settled ([`Store::settle`]).
    Settle,
    /// A slot of an in-flight cap taken ([`Store::take_slot`]).
    TakeSlot,
    /// A slot given back ([`Store::free_slot`]).
    FreeSlot,
}

impl StoreOperation {
    /// Every operation, in the order of [`StoreLatency::snapshot`].
    pub const ALL: [StoreOperation; 9] = [
        StoreOperation::Check,
        StoreOperation::CheckAll,
        StoreOperation::Refund,
        StoreOperation::Peek,
        StoreOperation::Report,
        StoreOperation::Hold,
        StoreOperation::Settle,
        StoreOperation::TakeSlot,
        StoreOperation::FreeSlot,
    ];

    /// The `operation` label.
    pub fn as_str(self) -> &'static str {
        match self {
            StoreOperation::Check => "check",
            StoreOperation::CheckAll => "check_all",
            StoreOperation::Refund => "refund",
            StoreOperation::Peek => "peek",
            StoreOperation::Report => "report",
            StoreOperation::Hold => "hold",
            StoreOperation::Settle => "settle",
            StoreOperation::TakeSlot => "take_slot",
            StoreOperation::FreeSlot => "free_slot",
        }
    }
}

/// The latency of each store operation, failed calls included.
#[derive(Debug, Default)]
pub struct StoreLatency {
    histograms: [Histogram; StoreOperation::ALL.len()],
}

impl StoreLatency {
    /// Each operation's histogram now, in [`StoreOperation::ALL`]'s order.
    pub fn snapshot(&self) -> Vec<(StoreOperation, LatencyHistogram)> {
        StoreOperation::ALL
            .iter()
            .zip(&self.histograms)
            .map(|(operation, histogram)| (*operation, histogram.snapshot()))
            .collect()
    }

    fn observe(&self, operation: StoreOperation, started: Instant) {
        self.histograms[operation as usize].observe(started.elapsed());
    }
}

/// The engine's store, its remote calls timed into a [`StoreLatency`].
pub(super) struct Timed<'a> {
    pub(super) store: &'a AnyStore,
    pub(super) latency: &'a StoreLatency,
}

impl Timed<'_> {
    /// Runs `call`, timed as `operation` unless the store is in memory.
    async fn time<T>(
        &self,
        operation: StoreOperation,
        call: impl std::future::Future<Output = T>,
    ) -> T {
        if matches!(self.store, AnyStore::Memory(_)) {
            return call.await;
        }
        let started = Instant::now();
        let result = call.await;
        self.latency.observe(operation, started);
        result
    }
}

impl Store for Timed<'_> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.time(StoreOperation::Check, self.store.check(limit, key, cost))
            .await
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.time(StoreOperation::Peek, self.store.peek(limit, key))
            .await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.time(StoreOperation::Refund, self.store.refund(limit, key, units))
            .await
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.time(StoreOperation::Report, self.store.report(limit, key, units))
            .await
    }

    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        self.time(
            StoreOperation::Hold,
            self.store.hold(limit, key, units, id, ttl),
        )
        .await
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        self.time(
            StoreOperation::Settle,
            self.store.settle(limit, key, id, actual),
        )
        .await
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.time(StoreOperation::CheckAll, self.store.check_all(checks))
            .await
    }

    async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        self.time(StoreOperation::TakeSlot, self.store.take_slot(cap, key, id))
            .await
    }

    async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.time(StoreOperation::FreeSlot, self.store.free_slot(cap, key, id))
            .await
    }

    fn immediate(&self) -> Option<&dyn Immediate> {
        self.store.immediate()
    }
}
