//! Making a store: the builder, its defaults, and why connecting failed.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::RedisError;
use thiserror::Error;

use crate::batch::{Batcher, Batching};
use crate::key::KeyTags;
use crate::script::SCRIPT;
use crate::store::{Caller, Connection, Inner, RedisStore};
use crate::tls::{install_ring, is_tls_url, Tls};

/// The key prefix used unless the builder sets another.
pub const DEFAULT_PREFIX: &str = "ratekeeper:";

/// The per-call timeout used unless the builder sets another.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// The time allowed to establish the first connection unless the builder
/// sets another.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a [`RedisStore`] could not be made.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The URL was refused or the server could not be reached.
    #[error("could not connect to Redis")]
    Redis(#[from] RedisError),
    /// No connection was established within the connect timeout.
    #[error("could not connect to Redis within {0:?}")]
    Timeout(Duration),
    /// The key prefix holds a brace, which would break Redis Cluster hash
    /// tags in the keys.
    #[error("the key prefix {0:?} contains a brace; hash tags belong in the keys")]
    BadPrefix(String),
    /// TLS settings were given ([`RedisStoreBuilder::tls`]) for a URL that
    /// is not `rediss://`, which would have connected without TLS.
    #[error("TLS settings were given, but the URL is not rediss://")]
    TlsWithoutRediss,
    /// TLS was asked of a store that finds its primary through Sentinels
    /// ([`RedisStoreBuilder::sentinel`]), which speaks plain TCP to the
    /// Sentinels and the primary for now.
    #[error("TLS through Redis Sentinel is not supported yet: connect to the Sentinels over plain TCP on a private network")]
    SentinelTls,
}

/// What [`RedisStore::check_all`](ratekeeper::Store::check_all) does on Redis Cluster
/// when the keys of one request are in different hash slots (one script can
/// only touch keys of one slot).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CrossSlot {
    /// One script per slot, in order of the limits; each slot's limits are
    /// decided all or nothing, and when a later slot denies, the earlier
    /// slots are refunded (as [`Store::check_all`](ratekeeper::Store::check_all)'s default does). No limit
    /// ever admits more than its quota, and a denied request keeps nothing
    /// once the refunds land, but for that instant other requests may see
    /// the earlier limits tighter than they end up; a failure between the
    /// calls can leave the earlier slots charged (stricter, never looser).
    /// Each script has its own timeout, so such a check can take up to one
    /// timeout per slot.
    #[default]
    Compensate,
    /// Refuse with [`StoreError::UnsupportedOperation`](ratekeeper::store::StoreError::UnsupportedOperation). Keys share a slot
    /// only by chance, or by a hash tag in keys no client chooses (see
    /// [`RedisStoreBuilder::hash_tags_in_keys`]).
    Refuse,
}

/// Settings for a [`RedisStore`]; made by [`RedisStore::builder`].
#[derive(Clone, Debug)]
pub struct RedisStoreBuilder {
    prefix: String,
    timeout: Duration,
    connect_timeout: Duration,
    cross_slot: CrossSlot,
    batching: Batching,
    tags: KeyTags,
    tls: Option<Tls>,
    primary_auth: Option<PrimaryAuth>,
}

/// The credentials of a primary found through Sentinel; never shown.
#[derive(Clone)]
struct PrimaryAuth {
    username: Option<String>,
    password: String,
}

impl std::fmt::Debug for PrimaryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimaryAuth")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Default for RedisStoreBuilder {
    fn default() -> Self {
        RedisStoreBuilder {
            prefix: DEFAULT_PREFIX.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            cross_slot: CrossSlot::default(),
            batching: Batching::default(),
            tags: KeyTags::default(),
            tls: None,
            primary_auth: None,
        }
    }
}

impl RedisStoreBuilder {
    /// The prefix of every key (default [`DEFAULT_PREFIX`]); it must not
    /// contain `{` or `}`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The most time one call may take, round trip included (default
    /// [`DEFAULT_TIMEOUT`]); past it the call fails with
    /// [`StoreError::Timeout`](ratekeeper::store::StoreError::Timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most time establishing the first connection may take (default
    /// [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Whether a hash tag (`{...}`) in a key chooses the key's Redis Cluster
    /// slot (default `false`: `{` and `}` in keys are escaped, and every key
    /// lands in the slot its whole Redis key hashes to).
    ///
    /// Clients choose much of a key (an address, a header), and a key that
    /// chose its slot would let one client put all its keys on one master.
    /// Turn this on only when no client chooses the part of a key in braces
    /// (the application writes `{user42}` from an authenticated account),
    /// so that a request's limits share a slot and a multi-limit check stays
    /// one atomic script. A tag must lie in a key's first 24 bytes if the key
    /// is longer than 64 (see [`ratekeeper::key::bounded`]).
    pub fn hash_tags_in_keys(mut self, kept: bool) -> Self {
        self.tags = if kept {
            KeyTags::Kept
        } else {
            KeyTags::Escaped
        };
        self
    }

    /// What a multi-limit check does across Redis Cluster hash slots
    /// (default [`CrossSlot::Compensate`]).
    pub fn cross_slot(mut self, cross_slot: CrossSlot) -> Self {
        self.cross_slot = cross_slot;
        self
    }

    /// How concurrent calls on one server share script calls (default
    /// [`Batching::DEFAULT`]; [`Batching::OFF`] gives every call its own).
    /// Redis Cluster connections never coalesce.
    pub fn batching(mut self, batching: Batching) -> Self {
        self.batching = batching;
        self
    }

    /// The TLS settings of `rediss://` connections: the CA bundle that
    /// verifies the server and the client certificate (default: the
    /// system's roots, no client certificate). Every URL must then be
    /// `rediss://`, or connecting fails with
    /// [`ConnectError::TlsWithoutRediss`].
    ///
    /// TLS is rustls on the ring provider: connecting to a `rediss://` URL
    /// installs ring as rustls's process-wide default provider unless the
    /// application installed one before.
    pub fn tls(mut self, tls: Tls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Connects to one Redis server, `redis://host:port/db`, or
    /// `rediss://host:port/db` over TLS (see [`tls`](Self::tls)).
    ///
    /// The connection is multiplexed (many calls in flight at once) and
    /// reconnects on its own after a failure.
    pub async fn connect(self, url: &str) -> Result<RedisStore, ConnectError> {
        self.check_prefix()?;
        self.check_tls([url])?;
        let client = match &self.tls {
            Some(tls) => redis::Client::build_with_tls(url, tls.certificates())?,
            None => redis::Client::open(url)?,
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout.max(Duration::from_millis(50))))
            .set_response_timeout(Some(self.timeout))
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            .set_number_of_retries(3);
        let manager = tokio::time::timeout(
            self.connect_timeout,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| ConnectError::Timeout(self.connect_timeout))??;
        Ok(self.build(Connection::Node(manager)))
    }

    /// The password (and ACL username) of the primary that
    /// [`sentinel`](Self::sentinel) finds, for a primary with
    /// `requirepass` or ACL users; the Sentinels' own credentials are in
    /// their URLs (`redis://:password@host:26379`). Never shown in
    /// `Debug`.
    pub fn sentinel_primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary_auth = Some(PrimaryAuth {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        });
        self
    }

    /// Connects to the primary that the Sentinels at `sentinels`
    /// (`redis://host:port`) know as `master_name`, and follows it across a
    /// failover without a restart.
    ///
    /// The Sentinels are asked which server is the primary, and redis-rs
    /// checks with `ROLE` that it is one. A call that fails in a way that
    /// says the server may not be the primary any more (the connection
    /// broke or timed out, or the server answered `READONLY`) makes the
    /// next call ask the Sentinels again. The failed call is the store's
    /// failure, for the caller's failure policy: decisions during a
    /// failover fail (or are answered by that policy) and are exact again
    /// after it, and no write goes to a replica, which refuses writes.
    ///
    /// TLS is not supported here yet: [`tls`](Self::tls) settings or a
    /// `rediss://` URL are refused with [`ConnectError::SentinelTls`].
    pub async fn sentinel<I, S>(
        self,
        sentinels: I,
        master_name: &str,
    ) -> Result<RedisStore, ConnectError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
        self.check_prefix()?;
        let urls: Vec<String> = sentinels
            .into_iter()
            .map(|u| u.as_ref().to_owned())
            .collect();
        if self.tls.is_some() || urls.iter().any(|url| is_tls_url(url)) {
            return Err(ConnectError::SentinelTls);
        }
        let mut node = SentinelNodeConnectionInfo::default();
        if let Some(auth) = &self.primary_auth {
            let mut info = redis::RedisConnectionInfo::default().set_password(&auth.password);
            if let Some(username) = &auth.username {
                info = info.set_username(username);
            }
            node = node.set_redis_connection_info(info);
        }
        let client =
            SentinelClient::build(urls, master_name, Some(node), SentinelServerType::Master)?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout.max(Duration::from_millis(50))))
            .set_response_timeout(Some(self.timeout));
        let primary = tokio::time::timeout(
            self.connect_timeout,
            crate::sentinel::SentinelPrimary::connect(client, config),
        )
        .await
        .map_err(|_| ConnectError::Timeout(self.connect_timeout))??;
        Ok(self.build(Connection::Sentinel(primary)))
    }

    /// Connects to a Redis Cluster through any of its nodes.
    pub async fn cluster<I, S>(self, urls: I) -> Result<RedisStore, ConnectError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.check_prefix()?;
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        self.check_tls(&urls)?;
        let mut client = ClusterClient::builder(urls)
            .connection_timeout(self.timeout.max(Duration::from_millis(50)))
            .response_timeout(self.timeout)
            .retries(2)
            .min_retry_wait(10)
            .max_retry_wait(100);
        if let Some(tls) = &self.tls {
            client = client.certs(tls.certificates());
        }
        let client = client.build()?;
        let connection = tokio::time::timeout(self.connect_timeout, client.get_async_connection())
            .await
            .map_err(|_| ConnectError::Timeout(self.connect_timeout))??;
        Ok(self.build(Connection::Cluster(connection)))
    }

    /// Refuses TLS settings for URLs that are not `rediss://`, and readies
    /// rustls's provider for those that are.
    fn check_tls<I: IntoIterator<Item = S>, S: AsRef<str>>(
        &self,
        urls: I,
    ) -> Result<(), ConnectError> {
        let mut any = false;
        for url in urls {
            let tls = is_tls_url(url.as_ref());
            if self.tls.is_some() && !tls {
                return Err(ConnectError::TlsWithoutRediss);
            }
            any |= tls;
        }
        if any {
            install_ring();
        }
        Ok(())
    }

    fn check_prefix(&self) -> Result<(), ConnectError> {
        if self.prefix.contains(['{', '}']) {
            return Err(ConnectError::BadPrefix(self.prefix.clone()));
        }
        Ok(())
    }

    fn build(self, connection: Connection) -> RedisStore {
        let node = matches!(connection, Connection::Node(_) | Connection::Sentinel(_));
        let caller = Arc::new(Caller {
            connection,
            timeout: self.timeout,
            sha: redis::Script::new(SCRIPT).get_hash().to_owned(),
            functions: AtomicBool::new(true),
        });
        let batcher = (node && self.batching.is_on())
            .then(|| Batcher::start(Arc::clone(&caller), self.batching));
        RedisStore {
            inner: Arc::new(Inner {
                caller,
                batcher,
                batching: if node { self.batching } else { Batching::OFF },
                prefix: self.prefix.into_bytes(),
                tags: self.tags,
                cross_slot: self.cross_slot,
            }),
        }
    }
}
