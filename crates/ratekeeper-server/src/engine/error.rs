//! What can go wrong when the engine starts or decides.

use thiserror::Error;

/// Why the engine could not start on a configuration.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StartError {
    /// The SQLite database could not be opened.
    #[error("cannot open the SQLite store at {path}")]
    Sqlite {
        /// The database file.
        path: String,
        /// Why (boxed: it is large, and start errors are rare).
        #[source]
        source: Box<ratekeeper_sqlite::SqliteError>,
    },
    /// Redis could not be reached.
    #[error("cannot open the Redis store at {url}")]
    Redis {
        /// The URL, or the cluster's URLs separated by spaces, with the
        /// passwords hidden ([`redact_url`](crate::config::redact_url)).
        url: String,
        /// Why.
        #[source]
        source: ratekeeper_redis::ConnectError,
    },
}
