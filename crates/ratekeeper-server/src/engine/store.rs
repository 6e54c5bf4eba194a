//! The store the service runs on, chosen by the configuration.
//!
//! [`Store`] is not object-safe (its methods return `impl Future`), so the
//! service keeps its store in an enum and dispatches by hand: one `match` per
//! call, no boxing on the decision path.

use std::sync::Arc;

use ratekeeper::{
    store::{Check, FailurePolicy, Immediate, MultiOutcome, Resilient, ResilientStats, StoreError},
    Clock, Decision, Limit, MemoryStore, Outcome, Store,
};
use ratekeeper_redis::{BatchStats, RedisStore};
use ratekeeper_sqlite::SqliteStore;

use super::StartError;
use crate::config::{redact_url, redact_urls, Backend, StoreConfig};

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
    Sqlite(Arc<Resilient<SqliteStore, SharedClock>>),
    /// Redis or Redis Cluster, with the failure policy.
    Redis(Arc<Resilient<RedisStore, SharedClock>>),
}

impl std::fmt::Debug for AnyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl AnyStore {
    /// Opens the store `config` names; the in-memory store (the store, or
    /// the fallback of a remote one) runs on `clock`.
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
        let redis = || {
            let builder = RedisStore::builder();
            match &config.tls {
                Some(tls) => builder.tls(tls.settings.clone()),
                None => builder,
            }
        };
        Ok(match &config.backend {
            Backend::Memory => AnyStore::Memory(memory()),
            Backend::Sqlite { path } => {
                let store = SqliteStore::open(path).map_err(StartError::Sqlite)?;
                AnyStore::Sqlite(Arc::new(Resilient::with_fallback_store(
                    store, policy, fallback,
                )))
            }
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => {
                let store = redis()
                    .prefix(prefix.clone())
                    .timeout(*timeout)
                    .batching(*batching)
                    .connect(url)
                    .await
                    .map_err(|source| StartError::Redis {
                        url: redact_url(url),
                        source,
                    })?;
                AnyStore::Redis(Arc::new(Resilient::with_fallback_store(
                    store, policy, fallback,
                )))
            }
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => {
                let store = redis()
                    .prefix(prefix.clone())
                    .timeout(*timeout)
                    .cluster(urls.iter().map(String::as_str))
                    .await
                    .map_err(|source| StartError::Redis {
                        url: redact_urls(urls),
                        source,
                    })?;
                AnyStore::Redis(Arc::new(Resilient::with_fallback_store(
                    store, policy, fallback,
                )))
            }
        })
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
    pub fn failure_stats(&self) -> Option<ResilientStats> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Sqlite(store) => Some(store.stats()),
            AnyStore::Redis(store) => Some(store.stats()),
        }
    }

    /// What the Redis store's coalescing of concurrent calls has done;
    /// `None` for the other stores, and for Redis with it off (or Redis
    /// Cluster).
    pub fn redis_batching(&self) -> Option<BatchStats> {
        match self {
            AnyStore::Redis(store) => store.inner().batch_stats(),
            _ => None,
        }
    }

    /// Keys tracked in memory (the in-memory store); `None` for the others.
    pub fn keys_in_memory(&self) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.len()),
            _ => None,
        }
    }

    /// Keys the in-memory store tracks for the limit called `name`;
    /// `None` for the other stores.
    pub fn keys_in_memory_of(&self, name: &str) -> Option<usize> {
        match self {
            AnyStore::Memory(store) => Some(store.keys_of(name)),
            _ => None,
        }
    }

    /// Asks the store itself (not the failure policy) whether it answers:
    /// a read of `probe`'s state for an unused key.
    pub async fn ping(&self, probe: &Limit) -> Result<(), StoreError> {
        const KEY: &[u8] = b"ratekeeper:readyz";
        match self {
            AnyStore::Memory(_) => Ok(()),
            AnyStore::Sqlite(store) => store.inner().peek(probe, KEY).await.map(drop),
            AnyStore::Redis(store) => store.inner().peek(probe, KEY).await.map(drop),
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
            AnyStore::Redis(store) => !store.inner().is_cluster(),
        }
    }
}

impl Store for AnyStore {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.check(limit, key, cost).await,
            AnyStore::Sqlite(store) => store.check(limit, key, cost).await,
            AnyStore::Redis(store) => store.check(limit, key, cost).await,
        }
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        match self {
            AnyStore::Memory(store) => store.peek(limit, key).await,
            AnyStore::Sqlite(store) => store.peek(limit, key).await,
            AnyStore::Redis(store) => store.peek(limit, key).await,
        }
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        match self {
            AnyStore::Memory(store) => store.refund(limit, key, units).await,
            AnyStore::Sqlite(store) => store.refund(limit, key, units).await,
            AnyStore::Redis(store) => store.refund(limit, key, units).await,
        }
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        match self {
            AnyStore::Memory(store) => store.check_all(checks).await,
            AnyStore::Sqlite(store) => store.check_all(checks).await,
            AnyStore::Redis(store) => store.check_all(checks).await,
        }
    }

    fn immediate(&self) -> Option<&dyn Immediate> {
        match self {
            AnyStore::Memory(store) => Some(store),
            _ => None,
        }
    }
}
