//! The store: its handle, its async methods and the `Store` trait.

use std::fmt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ratekeeper::store::in_flight::InFlight;
use ratekeeper::store::reservation::ReservationId;
use ratekeeper::{
    clock::UnixClock,
    store::{take_by, Check, MultiOutcome, StoreError, Taken},
    Clock, Decision, Limit, Outcome, Store, Timestamp,
};
use rusqlite::Connection;

use crate::builder::SqliteStoreBuilder;
use crate::connection::set_up_within;
use crate::transaction::{Inner, Sql};
use crate::SqliteError;

/// Rate-limit states in a SQLite file, shared by every process that opens
/// it: exact limits for several processes on one host.
///
/// # Layout
///
/// One table (named by [`SqliteStoreBuilder::table`]) holds one row per
/// `(limit name, key)`, a key over 64 bytes kept as
/// [`ratekeeper::key::bounded`] makes it (a readable prefix and a digest,
/// so a row's size does not grow with what a client sends, and a long key
/// is still found as it was sent): the key's state as the JSON of
/// [`ratekeeper::policy::State`] (readable with the `sqlite3` shell and its JSON
/// functions), and `expires_at`, the time the state becomes fresh again
/// ([`Algorithm::expires_at`](ratekeeper::policy::Algorithm::expires_at)) in **nanoseconds** of the store's clock —
/// nanoseconds since the Unix epoch with the default [`UnixClock`] —
/// saturating at `i64::MAX`. An index on `expires_at` serves
/// [`purge`](SqliteStore::purge).
///
/// The file is put in WAL mode with `synchronous=NORMAL`: readers never wait
/// for the writer, and a commit does not wait for the disk (a power loss may
/// forget the last decisions; a crash of the process forgets nothing).
///
/// # Decisions
///
/// Every decision is one `BEGIN IMMEDIATE` transaction: read the row, decide
/// with the policy ([`Algorithm::decide`](ratekeeper::policy::Algorithm::decide)) at the store clock's `now` (read
/// once the lock is held), write the row back only if the state changed
/// (and delete it when the state became fresh), commit. SQLite lets one
/// writer at a time into the file, so two requests can never both take a
/// key's last unit, whichever process they come from.
///
/// Every policy works. Rows outlive the configuration: when a limit's
/// policy changes under the same name, a row holding another kind of
/// policy's state counts as fresh, as [`Policy`](ratekeeper::Policy) defines it, while a state
/// of the same kind is read under the new numbers (a token bucket's state
/// records its unit, so it keeps its number of tokens, at most a full
/// bucket). To start a changed limit over,
/// give it a new name or [`reset`](SqliteStore::reset) its keys. (The
/// in-memory store starts every key of a changed limit over.) This store
/// never answers
/// [`Outcome::Saturated`]: rows are bounded by the keys seen within their
/// windows, and [`purge`](SqliteStore::purge) deletes the expired ones.
///
/// # Concurrency
///
/// A store (and its clones, which share it) has one connection behind a
/// mutex. That is enough: SQLite admits one writer to a file at a time, so
/// more connections in one process would only contend for the file's lock,
/// which is polled with pauses, instead of queueing on a mutex that hands
/// over at once. While another process holds the lock, a
/// decision waits up to the busy timeout
/// ([`SqliteStoreBuilder::busy_timeout`]), then fails with
/// [`StoreError::Busy`]. Other SQLite errors are
/// [`StoreError::Unavailable`]; a row whose state cannot be read is
/// [`StoreError::InvalidReply`]. Nothing panics.
///
/// # Async, and without a runtime
///
/// Every operation is one async method (the [`Store`] trait's, and
/// [`purge`](SqliteStore::purge), [`count`](SqliteStore::count),
/// [`reset`](SqliteStore::reset)). On a **Tokio runtime** the work runs on
/// [`tokio::task::spawn_blocking`], so the runtime's threads never wait for
/// the file; a decision whose future is dropped still completes there, so a
/// cancelled request may be counted. Polled outside a Tokio runtime (a
/// program without one, under any executor's `block_on`), the work runs on
/// the polling thread, which it blocks, and the future is ready at its
/// first poll: there is no second, blocking API to keep in step.
///
/// ```
/// use ratekeeper::{FixedWindow, Limit, Store};
/// use ratekeeper_sqlite::SqliteStore;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir()?;
/// let store = SqliteStore::open(dir.path().join("limits.db"))?;
/// let login = Limit::new("login", FixedWindow::new(3, Duration::from_secs(60))?)?;
///
/// let runtime = tokio::runtime::Builder::new_current_thread().build()?;
/// runtime.block_on(async {
///     for _ in 0..3 {
///         assert!(store.check(&login, b"alice", 1).await?.is_allowed());
///     }
///     assert!(!store.check(&login, b"alice", 1).await?.is_allowed());
///     Ok::<_, ratekeeper::store::StoreError>(())
/// })?;
/// // Without a runtime: the work runs on this thread.
/// assert_eq!(futures_executor::block_on(store.count())?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct SqliteStore<C = UnixClock> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for SqliteStore<C> {
    fn clone(&self) -> Self {
        SqliteStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for SqliteStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .field("table", &self.inner.table)
            .field("busy_timeout", &self.inner.busy_timeout)
            .finish_non_exhaustive()
    }
}

impl SqliteStore<UnixClock> {
    /// Opens (or creates) the database at `path` with the default table,
    /// busy timeout and [`UnixClock`].
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SqliteError> {
        Self::builder(path).open()
    }

    /// Options for opening the database at `path`.
    pub fn builder(path: impl AsRef<Path>) -> SqliteStoreBuilder<UnixClock> {
        SqliteStoreBuilder::new(path.as_ref())
    }
}

impl<C> SqliteStore<C> {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The table holding the states.
    pub fn table(&self) -> &str {
        &self.inner.table
    }

    /// How long a decision retries a locked database.
    pub fn busy_timeout(&self) -> Duration {
        self.inner.busy_timeout
    }

    /// The clock decisions read.
    pub fn clock(&self) -> &C {
        &self.inner.clock
    }

    /// How many statements so far found the file locked by another
    /// connection and waited for it (whether they then got it or ran out of
    /// [`busy_timeout`](Self::busy_timeout)): how often processes contend.
    /// A busy timeout of zero never waits, so it counts nothing.
    pub fn lock_waits(&self) -> u64 {
        self.inner.lock_waits.load(Ordering::Relaxed)
    }
}

impl<C: Clock> SqliteStore<C> {
    pub(crate) fn from_builder(builder: SqliteStoreBuilder<C>) -> Result<Self, SqliteError> {
        let SqliteStoreBuilder {
            path,
            table,
            busy_timeout,
            clock,
        } = builder;
        let mut conn = Connection::open(&path).map_err(|source| SqliteError::Open {
            path: path.clone(),
            source,
        })?;
        let sql = Sql::new(&table);
        let lock_waits = Arc::new(AtomicU64::new(0));
        if let Err(source) = set_up_within(&mut conn, &sql, busy_timeout, &lock_waits) {
            return Err(SqliteError::Setup {
                path,
                table,
                source,
            });
        }
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                clock,
                sql,
                path,
                table,
                busy_timeout,
                lock_waits,
                expired_reservations: AtomicU64::new(0),
            }),
        })
    }
}

impl<C: Clock + 'static> SqliteStore<C> {
    /// Deletes the rows whose state is fresh again at `now` (`expires_at`
    /// not after `now`), and returns how many.
    ///
    /// Forgetting them changes no decision. It deletes in batches of a
    /// thousand rows, one transaction each, so decisions go on meanwhile.
    /// Call it now and then, with `store.clock().now()`.
    pub async fn purge(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.run(move |inner| inner.purge(now)).await
    }

    /// How many rows the table holds, over all limits.
    pub async fn count(&self) -> Result<usize, StoreError> {
        self.run(|inner| inner.count()).await
    }

    /// How many reservations ([`Store::reserve`]) are open at `now`,
    /// over every limit and key: held, not settled, not past their ttl.
    /// One indexed count; a gauge's scrape may call it.
    pub async fn open_reservations(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.run(move |inner| inner.open_reservations(now)).await
    }

    /// How many reservations this handle (and its clones) found expired
    /// unsettled and deleted, since it was opened: on the next
    /// reservation of their key, or by [`purge`](SqliteStore::purge).
    /// They stay at their estimate. Each process counts its own.
    pub fn expired_reservations(&self) -> u64 {
        self.inner.expired_reservations.load(Ordering::Relaxed)
    }

    /// Forgets `key` under `limit`, which starts fresh; whether it had a
    /// row.
    pub async fn reset(&self, limit: &Limit, key: &[u8]) -> Result<bool, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.reset(&limit, &key)).await
    }

    /// Runs `work` on Tokio's blocking pool, or here without a runtime.
    async fn run<R, F>(&self, work: F) -> Result<R, StoreError>
    where
        F: FnOnce(&Inner<C>) -> Result<R, StoreError> + Send + 'static,
        R: Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => match runtime.spawn_blocking(move || work(&inner)).await {
                Ok(result) => result,
                // the task panicked or its runtime is shutting down
                Err(error) => Err(StoreError::unavailable(error)),
            },
            Err(_) => work(&inner),
        }
    }
}

impl<C: Clock + 'static> Store for SqliteStore<C> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.check(&limit, &key, cost)).await
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.peek(&limit, &key)).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.refund(&limit, &key, units))
            .await
    }

    /// One transaction: the units are counted whatever the limit says.
    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.report(&limit, &key, units))
            .await
    }

    /// One transaction: the key's open reservations counted, the check,
    /// and the reservation written beside the state.
    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.hold(&limit, &key, units, id, ttl))
            .await
    }

    /// One transaction: the reservation taken and the state charged.
    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.settle(&limit, &key, id, actual))
            .await
    }

    /// One transaction: the key's slots past their lease forgotten, the
    /// rest counted, and the new slot, in `{table}_in_flight`.
    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.take_slot(&limit, &key, id))
            .await
    }

    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.free_slot(&limit, &key, id))
            .await
    }

    /// A transaction of `up_to` when the key has that many left (a leasing
    /// node's usual case), another of what is left otherwise; with the
    /// store clock's time of the take.
    async fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> Result<Taken, StoreError> {
        take_by(cost, up_to, |units| {
            let (limit, key) = (limit.clone(), key.to_vec());
            async move {
                let (outcome, at) = self
                    .run(move |inner| inner.check_with_time(&limit, &key, units))
                    .await?;
                Ok((outcome, Some(at)))
            }
        })
        .await
    }

    /// One transaction that refunds only while the store clock is before
    /// `deadline`.
    async fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> Result<bool, StoreError> {
        let (limit, key) = (limit.clone(), key.to_vec());
        self.run(move |inner| inner.refund_before(&limit, &key, units, deadline))
            .await
    }

    /// One transaction for all the limits: each limit's outcome is
    /// reported; the first that denies is
    /// [`denied_by`](MultiOutcome::denied_by), and then no row is written.
    /// When one `(limit, key)` appears twice, the second decision sees the
    /// first.
    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        let owned: Vec<(Limit, Vec<u8>, u64)> = checks
            .iter()
            .map(|check| (check.limit.clone(), check.key.to_vec(), check.cost))
            .collect();
        self.run(move |inner| {
            let checks: Vec<Check<'_>> = owned
                .iter()
                .map(|(limit, key, cost)| Check::new(limit, key, *cost))
                .collect();
            inner.check_all(&checks)
        })
        .await
    }
}
