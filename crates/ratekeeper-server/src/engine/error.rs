//! What can go wrong when the engine starts or decides.

use ratekeeper::store::StoreError;
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

/// Why a request could not be decided.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DecideError {
    /// The store failed and the failure policy says fail closed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A named limit does not exist.
    #[error("no limit is named {0:?}")]
    UnknownLimit(String),
    /// A limit's key needs a part the request did not give.
    #[error("limit {limit:?} needs the key part {part:?}")]
    MissingPart {
        /// The limit.
        limit: String,
        /// The part, as written in the configuration (`client_ip`,
        /// `header:x-api-key`, ...).
        part: String,
    },
}
