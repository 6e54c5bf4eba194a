//! The store the service runs on, chosen by the configuration.
//!
//! [`Store`] is not object-safe (its methods return `impl Future`), so the
//! service keeps its store in an enum and dispatches by hand: one `match` per
//! call, no boxing on the decision path.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::ReservationId;

use ratekeeper::{
    store::{
        lease::{LeaseSettings, LeaseStats},
        Check, FailureMode, FailurePolicy, Immediate, MultiOutcome, Resilient, ResilientStats,
        StoreError,
    },
    Clock, Decision, Limit, MemoryStore, Outcome, Store,
};
use ratekeeper_redis::BatchStats;
use ratekeeper_sqlite::SqliteStore;

use super::connecting::{Connecting, Target};
use super::leasing::Leasable;
use super::StartError;
use crate::config::{Backend, StoreConfig};

/// `$then` with `$leasable` bound to the remote store's [`Leasable`], or
/// `$memory` for the in-memory store.
macro_rules! on_leasable {
    ($store:expr, $leasable:ident => $then:expr, $memory:expr) => {
        match $store {
            AnyStore::Memory(_) => $memory,
            AnyStore::Sqlite(store) => {
                let $leasable = store.inner();
                $then
            }
            AnyStore::Redis(store) => {
                let $leasable = store.inner();
                $then
            }
        }
    };
}

/// The clock of the in-memory store: the monotonic clock in the service,
/// a [`ManualClock`](ratekeeper::clock::ManualClock) in tests.
pub type SharedClock = Arc<dyn Clock>;

/// Any of the stores the service can run on.
#[derive(Clone)]
#[non_exhaustive]
pub enum AnyStore {
    /// This process's memory.
    Memory(MemoryStore<SharedClock>),
    /// A SQLite file, with the failure policy.
    Sqlite(Arc<Resilient<Leasable<SqliteStore>, SharedClock>>),
    /// Redis or Redis Cluster, with the failure policy; connected at
    /// start, or in the background when the policy answers without it
    /// (see [`Connecting`]).
    Redis(Arc<Resilient<Leasable<Connecting>, SharedClock>>),
}

impl std::fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl AnyStore {
    /// Opens the store `config` names; the in-memory store (the store, or
    /// the fallback of a remote one) runs on `clock`.
    ///
    /// A Redis store that does not answer yet is waited for up to
    /// `config.start_wait`; then, if the failure policy answers without
    /// it (`on_failure = "open"` or `fallback = true`), the store is
    /// returned and connects in the background; if not, opening fails
    /// with the last attempt's error.
    pub async fn open(config: &StoreConfig, clock: SharedClock) -> Result<AnyStore, StartError> {
        let memory = || {
            MemoryStore::builder()
                .max_keys(config.max_keys)
                .clock(Arc::clone(&clock))
                .background_sweep(true)
                .build()
                // The configuration checked max_keys against the same bounds.
                .expect("a checked max_keys")
        };
        let policy = FailurePolicy::new(config.on_failure).with_fallback(config.fallback);
        let fallback = config.fallback.then(memory);
        Ok(match &config.backend {
            Backend::Memory => AnyStore::Memory(memory()),
            Backend::Sqlite { path } => {
                let store = SqliteStore::open(path).map_err(|source| StartError::Sqlite {
                    path: path.display().to_string(),
                    source: Box::new(source),
                })?;
                let address = format!("sqlite:{}", path.display());
                let store = Leasable::new(store, config.lease.clone());
                AnyStore::Sqlite(Arc::new(
                    Resilient::with_fallback_store(store, policy, fallback).at(address),
                ))
            }
            Backend::Redis { .. }
            | Backend::RedisSentinel { .. }
            | Backend::RedisCluster { .. } => {
                // Target::new knows every Redis backend: this is not reached.
                let Some(target) = Target::new(config) else {
                    return Ok(AnyStore::Memory(memory()));
                };
                let url = target.address();
                let background = answers_without_store(config);
                let store = Connecting::open(target, config.start_wait, background)
                    .await
                    .map_err(|source| StartError::Redis {
                        url: url.clone(),
                        source,
                    })?;
                let store = Leasable::new(store, config.lease.clone());
                AnyStore::Redis(Arc::new(
                    Resilient::with_fallback_store(store, policy, fallback).at(url),
                ))
            }
        })
    }

    /// Where the store is: the Redis URLs without their passwords, the
    /// SQLite path; `None` for the in-memory store.
    pub fn address(&self) -> Option<&str> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Sqlite(store) => store.address(),
            AnyStore::Redis(store) => store.address(),
        }
    }

    /// Whether the store can fail: all but the in-memory store.
    pub(crate) fn can_fail(&self) -> bool {
        !matches!(self, AnyStore::Memory(_))
    }

    /// Why the store does not answer as it is opened: a Redis store not
    /// connected yet (see [`AnyStore::open`]); `None` otherwise.
    pub(crate) fn opening_error(&self) -> Option<StoreError> {
        match self {
            AnyStore::Redis(store) => {
                let error = store.inner().store().not_connected()?;
                Some(match store.address() {
                    Some(address) => error.at(address),
                    None => error,
                })
            }
            _ => None,
        }
    }

    /// Whether decisions are answered without the store while it fails:
    /// the in-memory store (which cannot fail), fail open, or the fallback.
    pub(crate) fn answers_while_down(&self) -> bool {
        let policy = match self {
            AnyStore::Memory(_) => return true,
            AnyStore::Sqlite(store) => store.policy(),
            AnyStore::Redis(store) => store.policy(),
        };
        policy.fallback || policy.mode == FailureMode::Open
    }

    /// `memory`, `sqlite` or `redis`.
    pub fn kind(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Sqlite(_) => "sqlite",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// What the failure policy has done so far; `None` for the in-memory
    /// store, which cannot fail.
    pub(crate) fn failure_stats(&self) -> Option<ResilientStats> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Sqlite(store) => Some(store.stats()),
            AnyStore::Redis(store) => Some(store.stats()),
        }
    }

    /// What the Redis store's coalescing of concurrent calls has done;
    /// `None` for the other stores, and for Redis with it off (or Redis
    /// Cluster).
    pub(crate) fn redis_batching(&self) -> Option<BatchStats> {
        match self {
            AnyStore::Redis(store) => store.inner().store().get()?.batch_stats(),
            _ => None,
        }
    }

    /// What leasing did so far; `None` when it has never been on (and for
    /// the in-memory store, which has nothing to lease from).
    pub(crate) fn lease_stats(&self) -> Option<LeaseStats> {
        on_leasable!(self, leasable => leasable.lease_stats(), None)
    }

    /// What leasing did so far for each limit, by name; `None` as for
    /// [`AnyStore::lease_stats`].
    pub(crate) fn lease_stats_by_limit(&self) -> Option<Vec<(String, LeaseStats)>> {
        on_leasable!(self, leasable => leasable.stats_by_limit(), None)
    }

    /// The settings leasing runs on now; `None` when it is off.
    pub(crate) fn lease_settings(&self) -> Option<LeaseSettings> {
        on_leasable!(self, leasable => leasable.settings(), None)
    }

    /// Puts `[store]`'s leasing settings in force (a reload): leasing
    /// starts, stops or takes the new settings, a replaced leasing store
    /// giving its units back; returns the units given back.
    pub(crate) async fn apply_lease(&self, settings: Option<LeaseSettings>) -> u64 {
        on_leasable!(self, leasable => leasable.apply(settings).await, 0)
    }

    /// Gives back the units of keys unused for a while (leasing); returns
    /// the units given back. The service runs it every second.
    pub(crate) async fn sweep_leases(&self) -> u64 {
        on_leasable!(self, leasable => leasable.sweep().await, 0)
    }

    /// Gives back every unit leased (at shutdown); returns the units.
    pub(crate) async fn give_back_leases(&self) -> u64 {
        on_leasable!(self, leasable => leasable.give_back_all().await, 0)
    }

    /// Gives back every unit leased for the limit named `name` (its
    /// numbers changed, or it went); returns the units.
    pub async fn give_back_limit(&self, name: &str) -> u64 {
        on_leasable!(self, leasable => leasable.give_back_limit(name).await, 0)
    }

    /// Keys tracked in memory (the in-memory store); `None` for the others.
    pub fn keys_in_memory(&self) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.len()),
            _ => None,
        }
    }

    /// Reservations open in the store (held, not settled, not past their
    /// ttl), over every limit and key: the in-memory store's ledger, or
    /// one indexed count in SQLite; `None` for Redis, which keeps them in
    /// a hash per key that only a scan of the keyspace could count, and
    /// when the count fails.
    pub async fn open_reservations(&self) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.open_reservations()),
            AnyStore::Sqlite(store) => {
                let sqlite = store.inner().store();
                sqlite.open_reservations(sqlite.clock().now()).await.ok()
            }
            AnyStore::Redis(_) => None,
        }
    }

    /// Reservations that expired before anyone settled them, since the
    /// store was opened, as this process saw them (the in-memory ledger;
    /// SQLite's deletes of expired ones, by this process's purges and
    /// reservations); `None` for Redis, whose keys expire on their own.
    pub fn expired_reservations(&self) -> Option<u64> {
        match self {
            AnyStore::Memory(store) => Some(store.expired_reservations()),
            AnyStore::Sqlite(store) => Some(store.inner().store().expired_reservations()),
            AnyStore::Redis(_) => None,
        }
    }

    /// Keys the in-memory store tracks for the limit called `name`;
    /// `None` for the other stores.
    pub(crate) fn keys_in_memory_of(&self, name: &str) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.keys_of(name)),
            _ => None,
        }
    }

    /// Asks the store itself (not the failure policy) whether it answers:
    /// a read of `probe`'s state for an unused key. The error names the
    /// store's address.
    pub async fn ping(&self, probe: &Limit) -> Result<(), StoreError> {
        const KEY: &[u8] = b"ratekeeper:readyz";
        let result = match self {
            AnyStore::Memory(_) => Ok(()),
            AnyStore::Sqlite(store) => store.inner().store().peek(probe, KEY).await.map(drop),
            AnyStore::Redis(store) => store.inner().store().peek(probe, KEY).await.map(drop),
        };
        match (result, self.address()) {
            (Err(error), Some(address)) => Err(error.at(address)),
            (result, _) => result,
        }
    }
}

impl AnyStore {
    /// Whether [`check_all`](Store::check_all) decides in one step, with
    /// nothing to cut short between a charge and its refund: in memory, in
    /// one SQLite transaction, in one script on one Redis server (Redis
    /// Cluster decides keys in different hash slots one slot at a time).
    pub fn decides_in_one_step(&self) -> bool {
        match self {
            AnyStore::Memory(_) | AnyStore::Sqlite(_) => true,
            AnyStore::Redis(store) => !store.inner().store().is_cluster(),
        }
    }
}

// The remote stores' futures are boxed: they are kilobytes (a script
// call, the failure policy, leasing), and unboxed they would make every
// decision's future as large, copied at each level of every request even
// on the in-memory store.
impl Store for AnyStore {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.check(limit, key, cost).await,
            AnyStore::Sqlite(store) => Box::pin(store.check(limit, key, cost)).await,
            AnyStore::Redis(store) => Box::pin(store.check(limit, key, cost)).await,
        }
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(store) => store.peek(limit, key).await,
            AnyStore::Sqlite(store) => Box::pin(store.peek(limit, key)).await,
            AnyStore::Redis(store) => Box::pin(store.peek(limit, key)).await,
        }
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.refund(limit, key, units).await,
            AnyStore::Sqlite(store) => Box::pin(store.refund(limit, key, units)).await,
            AnyStore::Redis(store) => Box::pin(store.refund(limit, key, units)).await,
        }
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.report(limit, key, units).await,
            AnyStore::Sqlite(store) => Box::pin(store.report(limit, key, units)).await,
            AnyStore::Redis(store) => Box::pin(store.report(limit, key, units)).await,
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
        match self {
            AnyStore::Memory(store) => store.hold(limit, key, units, id, ttl).await,
            AnyStore::Sqlite(store) => Box::pin(store.hold(limit, key, units, id, ttl)).await,
            AnyStore::Redis(store) => Box::pin(store.hold(limit, key, units, id, ttl)).await,
        }
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.settle(limit, key, id, actual).await,
            AnyStore::Sqlite(store) => Box::pin(store.settle(limit, key, id, actual)).await,
            AnyStore::Redis(store) => Box::pin(store.settle(limit, key, id, actual)).await,
        }
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.check_all(checks).await,
            AnyStore::Sqlite(store) => Box::pin(store.check_all(checks)).await,
            AnyStore::Redis(store) => Box::pin(store.check_all(checks)).await,
        }
    }

    async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.take_slot(cap, key, id).await,
            AnyStore::Sqlite(store) => Box::pin(store.take_slot(cap, key, id)).await,
            AnyStore::Redis(store) => Box::pin(store.take_slot(cap, key, id)).await,
        }
    }

    async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.free_slot(cap, key, id).await,
            AnyStore::Sqlite(store) => Box::pin(store.free_slot(cap, key, id)).await,
            AnyStore::Redis(store) => Box::pin(store.free_slot(cap, key, id)).await,
        }
    }

    fn immediate(&self) -> Option<&dyn Immediate> {
        match self {
            AnyStore::Memory(store) => Some(store),
            _ => None,
        }
    }
}

/// Whether `config`'s failure policy answers decisions while the store is
/// down: then the service may start before it answers.
fn answers_without_store(config: &StoreConfig) -> bool {
    config.fallback || config.on_failure == FailureMode::Open
}
