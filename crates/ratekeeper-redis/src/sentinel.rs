//! A Redis primary found through Sentinels and followed across a
//! failover.
//!
//! The Sentinels name the primary; its connection is kept until a call on
//! it fails in a way that says it may no longer be the primary (the
//! connection broke, timed out or was refused, or the server answered
//! `READONLY`: it is a replica now). The next call then asks the Sentinels
//! again, and redis-rs checks with `ROLE` that the server it names is a
//! primary. The failed call is not retried here: it is the store's
//! failure, which the caller's failure policy answers, so a failover shows
//! as a few failed decisions and never as a write to a replica.

use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::MultiplexedConnection;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Cmd, RedisError, RedisResult};

/// The primary the Sentinels name, and the connection to it.
#[derive(Clone)]
pub(crate) struct SentinelPrimary {
    sentinels: Arc<tokio::sync::Mutex<SentinelClient>>,
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
    config: AsyncConnectionConfig,
}

impl SentinelPrimary {
    /// Asks `sentinels` for the primary and connects to it.
    pub(crate) async fn connect(
        sentinels: SentinelClient,
        config: AsyncConnectionConfig,
    ) -> RedisResult<SentinelPrimary> {
        let primary = SentinelPrimary {
            sentinels: Arc::new(tokio::sync::Mutex::new(sentinels)),
            current: Arc::new(Mutex::new(None)),
            config,
        };
        primary.connection().await?;
        Ok(primary)
    }

    /// Runs `cmd` on the primary, forgetting the connection when the
    /// failure says the server may not be the primary any more.
    pub(crate) async fn query(&self, cmd: &Cmd) -> RedisResult<Vec<u8>> {
        let mut connection = self.connection().await?;
        let result = cmd.query_async(&mut connection).await;
        if let Err(error) = &result {
            if lost_the_primary(error) {
                self.forget();
            }
        }
        result
    }

    /// The connection to the primary, asking the Sentinels first when there
    /// is none.
    async fn connection(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(connection) = self.cached() {
            return Ok(connection);
        }
        // One caller asks the Sentinels; the others wait for its answer.
        let mut sentinels = self.sentinels.lock().await;
        if let Some(connection) = self.cached() {
            return Ok(connection);
        }
        let client = sentinels.async_get_client().await?;
        let connection = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Some(connection.clone());
        Ok(connection)
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn forget(&self) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// Whether `error` says the connected server may no longer be the
/// primary: it is gone, unreachable, too slow, or a replica now.
fn lost_the_primary(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.to_string().contains("READONLY")
}
