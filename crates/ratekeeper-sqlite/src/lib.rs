//! A SQLite store for [`ratekeeper`]: exact rate limits shared by several
//! processes on one host, through one database file.
//!
//! [`SqliteStore`] keeps one row per `(limit, key)` with the key's state and
//! when it expires, and decides every request in one `BEGIN IMMEDIATE`
//! transaction, so the limits stay exact however many processes (and
//! threads) share the file: two requests never both take a key's last unit.
//! Every ratekeeper policy works. SQLite is built in (rusqlite's `bundled`
//! feature): there is nothing to install.
//!
//! Each row's state (JSON) records the policy that made it (`made_by`), so
//! that when a limit's numbers change under the same name (a reload) the
//! state is [carried](ratekeeper::Policy::carry) to the new ones on the
//! key's next request rather than misread; rows written before it was
//! recorded are read as made by the policy reading them.
//!
//! The store implements [`ratekeeper::Store`]: on a Tokio runtime the work
//! runs on [`tokio::task::spawn_blocking`]; in a program without one, under
//! any executor's `block_on`, it runs on the calling thread.
//!
//! # Example
//!
//! ```
//! use futures_executor::block_on;
//! use ratekeeper::{Clock, Gcra, Limit, Store};
//! use ratekeeper_sqlite::SqliteStore;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("limits.db");
//! let per_user = Limit::new("per-user", Gcra::per_minute(2)?)?;
//!
//! // Two stores on one file, as two processes would open it.
//! let a = SqliteStore::open(&path)?;
//! let b = SqliteStore::open(&path)?;
//! assert!(block_on(a.check(&per_user, b"alice", 1))?.is_allowed());
//! assert!(block_on(b.check(&per_user, b"alice", 1))?.is_allowed());
//! // The quota is shared: the third request is denied, whoever asks.
//! let third = block_on(a.check(&per_user, b"alice", 1))?;
//! assert!(!third.is_allowed());
//! assert!(third.retry_after().duration().is_some());
//!
//! // The async API, on a Tokio runtime.
//! let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! let bob = runtime.block_on(b.check(&per_user, b"bob", 1))?;
//! assert!(bob.is_allowed());
//!
//! // Expired rows can be purged now and then.
//! let purged = block_on(a.purge(a.clock().now()))?;
//! assert_eq!(purged, 0); // both keys are still limited
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod builder;
mod connection;
mod error;
mod store;
mod transaction;

pub use builder::{
    SqliteStoreBuilder, DEFAULT_BUSY_TIMEOUT, DEFAULT_TABLE, MAX_BUSY_TIMEOUT, MAX_TABLE_NAME,
};
pub use error::SqliteError;
pub use store::SqliteStore;

/// Compiles and runs the example in README.md as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
