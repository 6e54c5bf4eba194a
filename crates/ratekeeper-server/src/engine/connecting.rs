//! A Redis store that may not be connected yet: the service starts while
//! Redis is down and connects in the background.
//!
//! Under a failure policy that answers without the store (fail open, or
//! the in-memory fallback), an outage at start is no different from one
//! later: the service starts, its calls fail as "not connected yet" (and
//! the policy answers them) until an attempt connects; attempts back off
//! from 100 ms to 2 s. A policy that needs the store (fail closed) makes
//! the start wait for it up to `[store] start_wait_ms`, then give up with
//! the last attempt's error.

use std::sync::{Arc, OnceLock, PoisonError, RwLock, Weak};
use std::time::Duration;

use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::ReservationId;
use ratekeeper::store::{Check, MultiOutcome, StoreError, Taken};
use ratekeeper::{Decision, Limit, Outcome, Store, Timestamp};
use ratekeeper_redis::{ConnectError, RedisStore};
use thiserror::Error;

use crate::config::{Backend, StoreConfig};

/// The first wait between two attempts to connect; it doubles up to
/// [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// The longest wait between two attempts to connect.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Every how many failed background attempts one is logged (the first
/// always is).
const LOG_EVERY: u32 = 30;

/// A Redis or Redis Cluster store, connected now or later.
pub struct Connecting {
    shared: Arc<Shared>,
    cluster: bool,
}

/// What the attempts in the background fill in.
struct Shared {
    store: OnceLock<RedisStore>,
    /// Why the last attempt failed.
    last_error: RwLock<Arc<str>>,
}

impl std::fmt::Debug for Connecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connecting")
            .field("connected", &self.is_connected())
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// What a call answers before the store is connected.
#[derive(Debug, Error)]
#[error("not connected yet (the last attempt: {0})")]
struct NotConnected(Arc<str>);

/// How a Redis store is reached: what an attempt to connect needs,
/// owned, for the attempts in the background.
#[derive(Clone)]
pub(crate) struct Target {
    /// One of the Redis backends.
    backend: Backend,
    tls: Option<ratekeeper_redis::Tls>,
}

impl Target {
    /// The Redis store `config` names; `None` for the other stores.
    pub(crate) fn new(config: &StoreConfig) -> Option<Target> {
        if matches!(config.backend, Backend::Memory | Backend::Sqlite { .. }) {
            return None;
        }
        let tls = config.tls.as_ref().map(|tls| tls.settings.clone());
        Some(Target {
            backend: config.backend.clone(),
            tls,
        })
    }

    /// The URLs without their passwords (see
    /// [`redact_url`](crate::config::redact_url)).
    pub(crate) fn address(&self) -> String {
        match &self.backend {
            Backend::Redis { url, .. } => crate::config::redact_url(url),
            Backend::RedisCluster { urls, .. } => crate::config::redact_urls(urls),
            Backend::RedisSentinel {
                sentinels,
                master_name,
                ..
            } => format!(
                "{master_name} through {}",
                crate::config::redact_urls(sentinels)
            ),
            Backend::Memory | Backend::Sqlite { .. } => self.backend.kind().to_owned(),
        }
    }

    fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::RedisCluster { .. })
    }

    /// One attempt to connect.
    async fn connect(&self) -> Result<RedisStore, ConnectError> {
        let mut builder = RedisStore::builder();
        if let Some(tls) = &self.tls {
            builder = builder.tls(tls.clone());
        }
        match &self.backend {
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => {
                builder
                    .prefix(prefix.clone())
                    .timeout(*timeout)
                    .batching(*batching)
                    .connect(url)
                    .await
            }
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => {
                builder
                    .prefix(prefix.clone())
                    .timeout(*timeout)
                    .cluster(urls.iter().map(String::as_str))
                    .await
            }
            Backend::RedisSentinel {
                sentinels,
                master_name,
                master_auth,
                prefix,
                timeout,
                batching,
            } => {
                if let Some((username, password)) = master_auth {
                    builder = builder.sentinel_primary_auth(username.as_deref(), password);
                }
                // Boxed: the Sentinels' lookup would otherwise deepen
                // every future that starts the engine.
                let connecting = builder
                    .prefix(prefix.clone())
                    .timeout(*timeout)
                    .batching(*batching)
                    .sentinel(sentinels.iter().map(String::as_str), master_name);
                Box::pin(connecting).await
            }
            Backend::Memory | Backend::Sqlite { .. } => {
                unreachable!("Target::new keeps only the Redis backends")
            }
        }
    }
}

/// Whether trying again cannot help: the configuration itself is wrong.
fn is_permanent(error: &ConnectError) -> bool {
    matches!(
        error,
        ConnectError::BadPrefix(_) | ConnectError::TlsWithoutRediss | ConnectError::SentinelTls
    )
}

impl Connecting {
    /// Connects to `target`: at once if it answers; else, with
    /// `background`, returns a store that keeps trying in a task of its
    /// own; else keeps trying for up to `wait`, and fails with the last
    /// attempt's error.
    pub(crate) async fn open(
        target: Target,
        wait: Duration,
        background: bool,
    ) -> Result<Connecting, ConnectError> {
        let connecting = Connecting {
            shared: Arc::new(Shared {
                store: OnceLock::new(),
                last_error: RwLock::new(Arc::from("")),
            }),
            cluster: target.is_cluster(),
        };
        let deadline = tokio::time::Instant::now() + wait;
        let mut backoff = FIRST_BACKOFF;
        loop {
            match target.connect().await {
                Ok(store) => {
                    connecting.shared.connected(store);
                    return Ok(connecting);
                }
                Err(error) if is_permanent(&error) => return Err(error),
                Err(error) => {
                    connecting.shared.failed(&error);
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        if !background {
                            return Err(error);
                        }
                        tracing::warn!(
                            error = %crate::error_chain::error_chain(&error),
                            store = %target.address(),
                            "cannot connect to the Redis store yet: starting anyway (the failure \
                             policy answers until it connects) and connecting in the background"
                        );
                        tokio::spawn(keep_trying(
                            Arc::downgrade(&connecting.shared),
                            target,
                            backoff,
                        ));
                        return Ok(connecting);
                    }
                    tracing::info!(
                        error = %crate::error_chain::error_chain(&error),
                        store = %target.address(),
                        "waiting for the Redis store (store.start_wait_ms)"
                    );
                    tokio::time::sleep(backoff.min(deadline - now)).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
    }

    /// The store, once connected.
    pub fn get(&self) -> Option<&RedisStore> {
        self.shared.store.get()
    }

    /// Whether a connection was made.
    pub(crate) fn is_connected(&self) -> bool {
        self.get().is_some()
    }

    /// Whether the store is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// What a call answers while not connected; `None` once connected.
    pub(crate) fn not_connected(&self) -> Option<StoreError> {
        self.store().err()
    }

    fn store(&self) -> Result<&RedisStore, StoreError> {
        self.shared.store.get().ok_or_else(|| {
            let last = self
                .shared
                .last_error
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            StoreError::unavailable(NotConnected(last))
        })
    }
}

impl Shared {
    fn connected(&self, store: RedisStore) {
        let _ = self.store.set(store);
    }

    fn failed(&self, error: &ConnectError) {
        *self
            .last_error
            .write()
            .unwrap_or_else(PoisonError::into_inner) =
            Arc::from(crate::error_chain::error_chain(error));
    }
}

/// Tries to connect until an attempt does, or the store is dropped.
async fn keep_trying(connecting: Weak<Shared>, target: Target, mut backoff: Duration) {
    let mut failures: u32 = 1;
    loop {
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        if connecting.strong_count() == 0 {
            return;
        }
        let attempt = target.connect().await;
        let Some(connecting) = connecting.upgrade() else {
            return;
        };
        match attempt {
            Ok(store) => {
                connecting.connected(store);
                tracing::info!(
                    attempts = failures + 1,
                    store = %target.address(),
                    "connected to the Redis store"
                );
                return;
            }
            Err(error) => {
                connecting.failed(&error);
                failures = failures.saturating_add(1);
                if failures.is_multiple_of(LOG_EVERY) {
                    tracing::warn!(
                        error = %crate::error_chain::error_chain(&error),
                        store = %target.address(),
                        attempts = failures,
                        "still cannot connect to the Redis store"
                    );
                }
            }
        }
    }
}

impl Store for Connecting {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.store()?.check(limit, key, cost).await
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.store()?.peek(limit, key).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.store()?.refund(limit, key, units).await
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.store()?.report(limit, key, units).await
    }

    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        self.store()?.hold(limit, key, units, id, ttl).await
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        self.store()?.settle(limit, key, id, actual).await
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.store()?.check_all(checks).await
    }

    async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        self.store()?.take_slot(cap, key, id).await
    }

    async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.store()?.free_slot(cap, key, id).await
    }

    async fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> Result<Taken, StoreError> {
        self.store()?.take(limit, key, cost, up_to).await
    }

    async fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> Result<bool, StoreError> {
        self.store()?
            .refund_before(limit, key, units, deadline)
            .await
    }
}
