//! The `[store]` section: which store, and how to reach it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use ratekeeper::store::lease::LeaseSettings;
use ratekeeper::store::FailureMode;

use super::{redact_url, StoreTls};

/// The store and what to do when it fails.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// Which store.
    pub backend: Backend,
    /// How many keys the in-memory table (the store, or the fallback) keeps,
    /// in `1..=`[`ratekeeper::memory::MAX_KEYS`].
    pub max_keys: usize,
    /// Whether requests pass while a remote store fails.
    pub on_failure: FailureMode,
    /// Whether to decide in memory while a remote store fails.
    pub fallback: bool,
    /// How long the start waits for a Redis store that does not answer
    /// (`start_wait_ms`, default 0: one attempt). Past it, a store whose
    /// failure policy answers without it (fail open, or the fallback)
    /// keeps connecting in the background while the service starts; one
    /// that fails closed stops the start.
    pub start_wait: Duration,
    /// The Redis stores' TLS files (`[store.tls]`), only with `rediss://`
    /// URLs; `None` otherwise, and for a `rediss://` URL verified by the
    /// system's roots without a client certificate.
    pub tls: Option<StoreTls>,
    /// Leasing (`lease = true`, the sqlite and redis stores): units taken
    /// in chunks and decided on this node (see
    /// [`ratekeeper::store::lease`]); `None` when off.
    pub lease: Option<LeaseSettings>,
}

/// Which store keeps the counts.
///
/// Its `Debug` hides the passwords in Redis URLs (see [`redact_url`]), so a
/// configuration can be logged.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// This process's memory.
    Memory,
    /// A SQLite database file.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// One Redis server.
    Redis {
        /// Its URL.
        url: String,
        /// The prefix of every key.
        prefix: String,
        /// The timeout of each call.
        timeout: Duration,
        /// How concurrent decisions share scripts.
        batching: ratekeeper_redis::Batching,
    },
    /// One Redis primary, found through Redis Sentinel and followed across
    /// a failover (`kind = "redis"` with `sentinels` and `master_name`).
    RedisSentinel {
        /// The Sentinels' URLs.
        sentinels: Vec<String>,
        /// The name the Sentinels know the primary by.
        master_name: String,
        /// The primary's username and password, when it asks for them
        /// (`master_username`, `master_password`).
        master_auth: Option<(Option<String>, String)>,
        /// The prefix of every key.
        prefix: String,
        /// The timeout of each call.
        timeout: Duration,
        /// How concurrent decisions share scripts.
        batching: ratekeeper_redis::Batching,
    },
    /// A Redis Cluster.
    RedisCluster {
        /// The URLs of some of its nodes.
        urls: Vec<String>,
        /// The prefix of every key.
        prefix: String,
        /// The timeout of each call.
        timeout: Duration,
    },
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => f.write_str("Memory"),
            Backend::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => f
                .debug_struct("Redis")
                .field("url", &redact_url(url))
                .field("prefix", prefix)
                .field("timeout", timeout)
                .field("batching", batching)
                .finish(),
            Backend::RedisSentinel {
                sentinels,
                master_name,
                master_auth,
                prefix,
                timeout,
                batching,
            } => {
                let sentinels: Vec<String> = sentinels.iter().map(|url| redact_url(url)).collect();
                let auth = master_auth
                    .as_ref()
                    .map(|(username, _)| (username, "<redacted>"));
                f.debug_struct("RedisSentinel")
                    .field("sentinels", &sentinels)
                    .field("master_name", master_name)
                    .field("master_auth", &auth)
                    .field("prefix", prefix)
                    .field("timeout", timeout)
                    .field("batching", batching)
                    .finish()
            }
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => {
                let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
                f.debug_struct("RedisCluster")
                    .field("urls", &urls)
                    .field("prefix", prefix)
                    .field("timeout", timeout)
                    .finish()
            }
        }
    }
}

impl Backend {
    /// The kind's name in the file: `memory`, `sqlite`, `redis` or
    /// `redis-cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite { .. } => "sqlite",
            Backend::Redis { .. } | Backend::RedisSentinel { .. } => "redis",
            Backend::RedisCluster { .. } => "redis-cluster",
        }
    }
}
