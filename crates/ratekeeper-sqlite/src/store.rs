//! The store: one row per `(limit, key)`, one transaction per decision.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ratekeeper::{
    clock::UnixClock,
    policy::{Algorithm, State},
    store::{Check, MultiOutcome, StoreError},
    Clock, Decision, Limit, Outcome, Policy, Store, Timestamp,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, TransactionBehavior};

use ratekeeper::key::bounded;

use crate::builder::SqliteStoreBuilder;
use crate::SqliteError;

/// How many expired rows one transaction of [`SqliteStore::purge`] deletes,
/// so that a large purge does not hold the write lock for long.
const PURGE_BATCH: i64 = 1_000;

/// The SQL of a store, made once for its table.
struct Sql {
    create: String,
    select: String,
    upsert: String,
    delete: String,
    count: String,
    purge: String,
}

impl Sql {
    fn new(table: &str) -> Self {
        // `table` was checked to be a plain identifier; it is quoted anyway.
        Sql {
            create: format!(
                "CREATE TABLE IF NOT EXISTS \"{table}\" (
                    name TEXT NOT NULL,
                    key BLOB NOT NULL,
                    state TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    PRIMARY KEY (name, key)
                 ) WITHOUT ROWID;
                 CREATE INDEX IF NOT EXISTS \"{table}_expires_at\" ON \"{table}\" (expires_at);"
            ),
            select: format!("SELECT state FROM \"{table}\" WHERE name = ?1 AND key = ?2"),
            upsert: format!(
                "INSERT INTO \"{table}\" (name, key, state, expires_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (name, key)
                 DO UPDATE SET state = excluded.state, expires_at = excluded.expires_at"
            ),
            delete: format!("DELETE FROM \"{table}\" WHERE name = ?1 AND key = ?2"),
            count: format!("SELECT COUNT(*) FROM \"{table}\""),
            purge: format!(
                "DELETE FROM \"{table}\" WHERE (name, key) IN
                 (SELECT name, key FROM \"{table}\" WHERE expires_at <= ?1 LIMIT ?2)"
            ),
        }
    }

    /// The statements decisions run, prepared at open to check the table.
    fn statements(&self) -> [&str; 5] {
        [
            &self.select,
            &self.upsert,
            &self.delete,
            &self.count,
            &self.purge,
        ]
    }
}

/// What a store shares between its clones.
struct Inner<C> {
    /// The one connection; see [`SqliteStore`] for why one is enough.
    conn: Mutex<Connection>,
    clock: C,
    sql: Sql,
    path: PathBuf,
    table: String,
    busy_timeout: Duration,
}

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
/// ([`Algorithm::expires_at`]) in **nanoseconds** of the store's clock —
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
/// with the policy ([`Algorithm::decide`]) at the store clock's `now` (read
/// once the lock is held), write the row back only if the state changed
/// (and delete it when the state became fresh), commit. SQLite lets one
/// writer at a time into the file, so two requests can never both take a
/// key's last unit, whichever process they come from.
///
/// Every policy works. Rows outlive the configuration: when a limit's
/// policy changes under the same name, a row holding another kind of
/// policy's state counts as fresh, as [`Policy`] defines it, while a state
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
        if let Err(source) = set_up_within(&mut conn, &sql, busy_timeout) {
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

/// Sets a fresh connection up: busy timeout, WAL, the table and its index,
/// and the statements (which checks the columns of an existing table).
/// [`set_up`], tried again while the file is busy, for at most
/// `busy_timeout`.
///
/// Connections opening a new file together race to switch it to WAL and
/// create the table, and SQLite answers some of those races with
/// "database is locked" without calling the busy handler (it cannot wait
/// for a lock while holding one another waiter needs). Every step of the
/// set-up is idempotent, so trying it again is safe.
fn set_up_within(conn: &mut Connection, sql: &Sql, busy_timeout: Duration) -> rusqlite::Result<()> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        match set_up(conn, sql, busy_timeout) {
            Err(rusqlite::Error::SqliteFailure(error, _))
                if error.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() + pause < busy_timeout =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
            result => return result,
        }
    }
}

fn set_up(conn: &mut Connection, sql: &Sql, busy_timeout: Duration) -> rusqlite::Result<()> {
    conn.busy_handler(Some(busy_handler(busy_timeout)))?;
    let mode: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
    // Switching takes an exclusive lock: only do it once per file.
    if !mode.eq_ignore_ascii_case("wal") {
        let _mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.execute_batch(&sql.create)?;
    conn.set_prepared_statement_cache_capacity(16);
    for statement in sql.statements() {
        conn.prepare_cached(statement)?;
    }
    Ok(())
}

/// SQLite's busy handler: retries a locked database until `timeout` has
/// passed since the first try.
///
/// SQLite's own (`sqlite3_busy_timeout`) sleeps 1, 2, 5, 10, ... up to
/// 100 ms between tries, so a process that lost the lock a few times
/// sleeps while the others take turns: under contention from several
/// processes some decisions waited over half a second. This one yields,
/// then sleeps 50 µs, doubling up to 1 ms: waits stay short and the
/// processes take turns more evenly.
fn busy_handler(timeout: Duration) -> impl FnMut(i32) -> bool + Send + 'static {
    let mut first_try = Instant::now();
    move |retries| {
        if retries == 0 {
            first_try = Instant::now();
        }
        let waited = first_try.elapsed();
        if waited >= timeout {
            return false;
        }
        if retries < 4 {
            std::thread::yield_now();
        } else {
            let shift = (retries - 4).min(5) as u32;
            let pause = Duration::from_micros(50 << shift).min(Duration::from_millis(1));
            std::thread::sleep(pause.min(timeout - waited));
        }
        true
    }
}

/// Why one operation failed, before it becomes a [`StoreError`].
enum Failure {
    Sql(rusqlite::Error),
    Unreadable(UnreadableState),
    Encode(serde_json::Error),
}

impl From<rusqlite::Error> for Failure {
    fn from(error: rusqlite::Error) -> Self {
        Failure::Sql(error)
    }
}

impl Failure {
    fn into_store_error(self, busy_timeout: Duration) -> StoreError {
        match self {
            Failure::Sql(error) => match error.sqlite_error_code() {
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                    StoreError::Busy(busy_timeout)
                }
                _ => StoreError::unavailable(error),
            },
            Failure::Unreadable(error) => StoreError::invalid_reply(error),
            Failure::Encode(error) => StoreError::unavailable(error),
        }
    }
}

/// A row whose state column is not a state.
#[derive(Debug, thiserror::Error)]
#[error("the state of key {key:?} under limit {limit:?} is unreadable")]
struct UnreadableState {
    limit: String,
    key: String,
    #[source]
    reason: Unreadable,
}

/// What is wrong with a row's state column.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    /// Text or bytes that are not a state's JSON.
    #[error("its JSON does not hold a state")]
    Json(#[from] serde_json::Error),
    /// A number or NULL where the JSON should be.
    #[error("the state column holds {0}")]
    ColumnType(rusqlite::types::Type),
}

impl<C: Clock> Inner<C> {
    /// Runs `work` on the connection, holding the mutex.
    fn with_conn<R>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<R, Failure>,
    ) -> Result<R, StoreError> {
        // A panic while the lock was held (there is none to expect) cannot
        // leave a transaction open: rusqlite's transactions roll back when
        // dropped. Make sure anyway.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        work(&mut conn).map_err(|failure| failure.into_store_error(self.busy_timeout))
    }

    fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.update(limit, key, |policy, current, now| {
            let (decision, next) = policy.decide(current, now, cost);
            (Outcome::Decided(decision), next)
        })
    }

    /// Reads `key`'s state under `limit` (fresh if it has none), lets
    /// `change` compute a result and the next state, and writes that state
    /// back, all in one immediate transaction.
    fn update<R>(
        &self,
        limit: &Limit,
        key: &[u8],
        change: impl FnOnce(&Policy, &State, ratekeeper::Timestamp) -> (R, State),
    ) -> Result<R, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = self.clock.now();
            let policy = limit.policy();
            let stored = read(&tx, &self.sql, limit.name(), key)?;
            let fresh;
            let current = match &stored {
                Some(state) => state,
                None => {
                    fresh = policy.fresh();
                    &fresh
                }
            };
            let (result, next) = change(policy, current, now);
            write(
                &tx,
                &self.sql,
                policy,
                limit.name(),
                key,
                stored.as_ref(),
                &next,
            )?;
            tx.commit()?;
            Ok(result)
        })
    }

    fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            // One statement reads atomically; no transaction needed.
            let stored = read(conn, &self.sql, limit.name(), key)?;
            let now = self.clock.now();
            let policy = limit.policy();
            Ok(match &stored {
                Some(state) => policy.peek(state, now),
                None => policy.peek(&policy.fresh(), now),
            })
        })
    }

    fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.update(limit, key, |policy, current, now| {
            ((), policy.refund(current, now, units))
        })
    }

    fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        /// One distinct `(limit name, key)` of the request.
        struct Row<'a> {
            name: &'a str,
            key: &'a [u8],
            policy: &'a Policy,
            stored: Option<State>,
            next: Option<State>,
        }

        let keys: Vec<_> = checks.iter().map(|check| bounded(check.key)).collect();
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = self.clock.now();
            let mut rows: Vec<Row<'_>> = Vec::with_capacity(checks.len());
            let mut outcomes = Vec::with_capacity(checks.len());
            let mut denied_by = None;
            for (index, (check, key)) in checks.iter().zip(&keys).enumerate() {
                let (limit, key) = (check.limit, &**key);
                let policy = limit.policy();
                let name = limit.name();
                let slot = match rows.iter().position(|r| r.name == name && r.key == key) {
                    Some(slot) => slot,
                    None => {
                        let stored = read(&tx, &self.sql, name, key)?;
                        rows.push(Row {
                            name,
                            key,
                            policy,
                            stored,
                            next: None,
                        });
                        rows.len() - 1
                    }
                };
                let row = &mut rows[slot];
                let fresh;
                let current = match row.next.as_ref().or(row.stored.as_ref()) {
                    Some(state) => state,
                    None => {
                        fresh = policy.fresh();
                        &fresh
                    }
                };
                let (decision, next) = policy.decide(current, now, check.cost);
                if denied_by.is_none() {
                    if decision.is_allowed() {
                        row.next = Some(next);
                        row.policy = policy;
                    } else {
                        denied_by = Some(index);
                    }
                }
                outcomes.push(Outcome::Decided(decision));
            }
            if denied_by.is_none() {
                for row in &rows {
                    if let Some(next) = &row.next {
                        write(
                            &tx,
                            &self.sql,
                            row.policy,
                            row.name,
                            row.key,
                            row.stored.as_ref(),
                            next,
                        )?;
                    }
                }
                tx.commit()?;
            }
            // Denied: the transaction rolls back on drop; it wrote nothing.
            Ok(MultiOutcome::new(outcomes, denied_by))
        })
    }

    fn purge(&self, now: Timestamp) -> Result<usize, StoreError> {
        let mut purged = 0;
        loop {
            // One batch per transaction and per hold of the mutex.
            let deleted = self.with_conn(|conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let deleted = tx
                    .prepare_cached(&self.sql.purge)?
                    .execute(params![sql_time(now), PURGE_BATCH])?;
                tx.commit()?;
                Ok(deleted)
            })?;
            purged += deleted;
            if (deleted as i64) < PURGE_BATCH {
                return Ok(purged);
            }
        }
    }

    fn count(&self) -> Result<usize, StoreError> {
        self.with_conn(|conn| {
            let count: i64 = conn
                .prepare_cached(&self.sql.count)?
                .query_row([], |row| row.get(0))?;
            Ok(usize::try_from(count).unwrap_or(usize::MAX))
        })
    }

    fn reset(&self, limit: &Limit, key: &[u8]) -> Result<bool, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let deleted = conn
                .prepare_cached(&self.sql.delete)?
                .execute(params![limit.name(), key])?;
            Ok(deleted > 0)
        })
    }
}

/// The stored state of `(name, key)`, if it has a row.
fn read(conn: &Connection, sql: &Sql, name: &str, key: &[u8]) -> Result<Option<State>, Failure> {
    let mut statement = conn.prepare_cached(&sql.select)?;
    let mut rows = statement.query(params![name, key])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let parsed = match row.get_ref(0)? {
        ValueRef::Text(json) | ValueRef::Blob(json) => {
            serde_json::from_slice::<State>(json).map_err(Unreadable::from)
        }
        other => Err(Unreadable::ColumnType(other.data_type())),
    };
    parsed.map(Some).map_err(|reason| {
        Failure::Unreadable(UnreadableState {
            limit: name.to_owned(),
            key: String::from_utf8_lossy(key).into_owned(),
            reason,
        })
    })
}

/// Writes `next` as the state of `(name, key)`, which was `stored`: nothing
/// if it is unchanged, a delete if it is fresh, an upsert otherwise.
fn write(
    conn: &Connection,
    sql: &Sql,
    policy: &Policy,
    name: &str,
    key: &[u8],
    stored: Option<&State>,
    next: &State,
) -> Result<(), Failure> {
    if stored == Some(next) {
        return Ok(());
    }
    if *next == policy.fresh() {
        // A fresh state is the same as no row.
        if stored.is_some() {
            conn.prepare_cached(&sql.delete)?
                .execute(params![name, key])?;
        }
        return Ok(());
    }
    let json = serde_json::to_string(next).map_err(Failure::Encode)?;
    conn.prepare_cached(&sql.upsert)?.execute(params![
        name,
        key,
        json,
        sql_time(policy.expires_at(next))
    ])?;
    Ok(())
}

/// A timestamp as an SQLite integer, saturating at `i64::MAX` (past the year
/// 2262 in Unix time).
fn sql_time(t: Timestamp) -> i64 {
    i64::try_from(t.as_nanos()).unwrap_or(i64::MAX)
}
