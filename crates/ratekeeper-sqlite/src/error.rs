//! What can go wrong while opening a store.

use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Why a [`SqliteStore`](crate::SqliteStore) could not be opened.
///
/// Errors of single decisions are [`StoreError`](ratekeeper::store::StoreError)s;
/// this type covers the configuration and the setup of the database file.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SqliteError {
    /// The table name is not a plain SQL identifier.
    #[error(
        "invalid table name {name:?}: {reason}; use a letter or underscore, then up to {max} \
         letters, digits or underscores in all",
        max = crate::MAX_TABLE_NAME
    )]
    InvalidTableName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The busy timeout is longer than SQLite can take.
    #[error("the busy timeout {given:?} is longer than the largest allowed, {max:?}", max = crate::MAX_BUSY_TIMEOUT)]
    BusyTimeoutTooLong {
        /// The timeout given.
        given: Duration,
    },
    /// SQLite could not open the file.
    #[error("cannot open the SQLite database {path:?}")]
    Open {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file opened, but setting it up (WAL mode, the table, its index)
    /// failed: a file that is not a database, a table of the same name with
    /// other columns, or a database locked past the busy timeout.
    #[error("cannot set up the rate-limit table {table:?} in {path:?}")]
    Setup {
        /// The file.
        path: PathBuf,
        /// The table.
        table: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
}
