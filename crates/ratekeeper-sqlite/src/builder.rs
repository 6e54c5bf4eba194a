//! Options for opening a store.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ratekeeper::{clock::UnixClock, Clock};

use crate::store::SqliteStore;
use crate::SqliteError;

/// The table a store uses unless told otherwise.
pub const DEFAULT_TABLE: &str = "ratekeeper";

/// The longest table name accepted, in bytes.
pub const MAX_TABLE_NAME: usize = 63;

/// How long a decision waits for a database locked by other writers unless
/// told otherwise: one second.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest busy timeout accepted: one day. Longer is surely a mistake
/// (seconds read as milliseconds) and would hang requests.
pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// Options for opening a [`SqliteStore`]: the table, the busy timeout and
/// the clock. Made by [`SqliteStore::builder`].
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{Timestamp, clock::ManualClock};
/// use ratekeeper_sqlite::SqliteStore;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::builder(dir.path().join("limits.db"))
///     .table("api_limits")
///     .busy_timeout(Duration::from_millis(250))
///     .clock(ManualClock::new(Timestamp::ZERO))
///     .open()?;
/// assert_eq!(store.table(), "api_limits");
///
/// // Table names are plain SQL identifiers.
/// assert!(SqliteStore::builder(dir.path().join("limits.db")).table("x; DROP").open().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct SqliteStoreBuilder<C = UnixClock> {
    pub(crate) path: PathBuf,
    pub(crate) table: String,
    pub(crate) busy_timeout: Duration,
    pub(crate) clock: C,
}

impl SqliteStoreBuilder<UnixClock> {
    pub(crate) fn new(path: &Path) -> Self {
        SqliteStoreBuilder {
            path: path.to_owned(),
            table: DEFAULT_TABLE.to_owned(),
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
            clock: UnixClock,
        }
    }
}

impl<C: Clock> SqliteStoreBuilder<C> {
    /// The table to keep states in, [`DEFAULT_TABLE`] by default; it is made
    /// if missing. Several stores (of one process or several) share states
    /// when they use the same file and table.
    ///
    /// The name is a letter or underscore followed by letters, digits and
    /// underscores, at most [`MAX_TABLE_NAME`] bytes, and does not start
    /// with `sqlite_` (SQLite's own tables); [`open`](Self::open) refuses
    /// anything else.
    pub fn table(mut self, name: impl Into<String>) -> Self {
        self.table = name.into();
        self
    }

    /// How long a decision keeps retrying a database that other writers
    /// hold locked before it fails with
    /// [`StoreError::Busy`](ratekeeper::store::StoreError::Busy),
    /// [`DEFAULT_BUSY_TIMEOUT`] by default, at most [`MAX_BUSY_TIMEOUT`].
    /// Zero fails at once.
    ///
    /// The lock is retried at once a few times, then after pauses of 50 µs
    /// doubling up to 1 ms, so waiting processes take turns closely. The
    /// timeout bounds the wait for the file's lock; a decision may also
    /// wait for the decisions of the same store ahead of it (they share one
    /// connection), each of which is bounded the same way.
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// The clock decisions read, [`UnixClock`] by default.
    ///
    /// Every process sharing a table must use clocks with the same epoch:
    /// keep the default outside tests. Tests use a
    /// [`ManualClock`](ratekeeper::clock::ManualClock).
    pub fn clock<D: Clock>(self, clock: D) -> SqliteStoreBuilder<D> {
        SqliteStoreBuilder {
            path: self.path,
            table: self.table,
            busy_timeout: self.busy_timeout,
            clock,
        }
    }

    /// Opens (or creates) the database file and the table, in WAL mode.
    pub fn open(self) -> Result<SqliteStore<C>, SqliteError> {
        check_table_name(&self.table)?;
        if self.busy_timeout > MAX_BUSY_TIMEOUT {
            return Err(SqliteError::BusyTimeoutTooLong {
                given: self.busy_timeout,
            });
        }
        SqliteStore::from_builder(self)
    }
}

/// Checks that `name` is a plain identifier that needs no quoting.
fn check_table_name(name: &str) -> Result<(), SqliteError> {
    let refuse = |reason| {
        Err(SqliteError::InvalidTableName {
            name: name.to_owned(),
            reason,
        })
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return refuse("it is empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => {
            return refuse("it must start with a letter or an underscore")
        }
        Some(_) => {}
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return refuse("it may hold only letters, digits and underscores");
    }
    if name.len() > MAX_TABLE_NAME {
        return refuse("it is too long");
    }
    if name
        .get(..7)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("sqlite_"))
    {
        return refuse("names starting with sqlite_ are SQLite's own");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        for good in ["ratekeeper", "_t", "T1", "a_b_9", &"x".repeat(63)] {
            assert!(check_table_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "1abc",
            "a-b",
            "a b",
            "a\"b",
            "é",
            "sqlite_master",
            "SQLITE_x",
            &"x".repeat(64),
        ] {
            assert!(check_table_name(bad).is_err(), "{bad}");
        }
    }
}
