//! One transaction per decision: the state shared by a store's clones,
//! its SQL, and reading, deciding and writing rows.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, State},
    store::reservation::{settle_state, ReservationError, ReservationId, MAX_OPEN_RESERVATIONS},
    store::{in_flight::InFlight, Check, MultiOutcome, StoreError},
    Clock, Decision, Limit, Outcome, Policy, Timestamp,
};
use rusqlite::types::ValueRef;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use ratekeeper::key::bounded;

/// How many expired rows one transaction of [`SqliteStore::purge`] deletes,
/// so that a large purge does not hold the write lock for long.
const PURGE_BATCH: i64 = 1_000;

/// The SQL of a store, made once for its table.
pub(crate) struct Sql {
    pub(crate) create: String,
    pub(crate) select: String,
    pub(crate) upsert: String,
    pub(crate) delete: String,
    pub(crate) count: String,
    pub(crate) purge: String,
    /// Reservations (`{table}_reservations`): those of a key past their
    /// expiry forgotten; a key's open ones counted; one added; one taken
    /// (deleted, its units returned) while open; expired ones purged;
    /// every open one counted.
    pub(crate) reservations_expire: String,
    pub(crate) reservations_count: String,
    pub(crate) reservations_open: String,
    pub(crate) reservation_insert: String,
    pub(crate) reservation_take: String,
    pub(crate) reservations_purge: String,
    /// In-flight slots (`{table}_in_flight`), likewise: those of a key
    /// past their lease forgotten; a key's counted; one taken; one freed
    /// while taken; expired ones purged.
    pub(crate) slots_expire: String,
    pub(crate) slots_count: String,
    pub(crate) slot_insert: String,
    pub(crate) slot_free: String,
    pub(crate) slots_purge: String,
}

impl Sql {
    pub(crate) fn new(table: &str) -> Self {
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
                 CREATE INDEX IF NOT EXISTS \"{table}_expires_at\" ON \"{table}\" (expires_at);
                 CREATE TABLE IF NOT EXISTS \"{table}_reservations\" (
                    id BLOB NOT NULL PRIMARY KEY,
                    name TEXT NOT NULL,
                    key BLOB NOT NULL,
                    units INTEGER NOT NULL,
                    expires_at INTEGER NOT NULL
                 ) WITHOUT ROWID;
                 CREATE INDEX IF NOT EXISTS \"{table}_reservations_key\"
                    ON \"{table}_reservations\" (name, key, expires_at);
                 CREATE INDEX IF NOT EXISTS \"{table}_reservations_expires_at\"
                    ON \"{table}_reservations\" (expires_at);
                 CREATE TABLE IF NOT EXISTS \"{table}_in_flight\" (
                    id BLOB NOT NULL PRIMARY KEY,
                    name TEXT NOT NULL,
                    key BLOB NOT NULL,
                    expires_at INTEGER NOT NULL
                 ) WITHOUT ROWID;
                 CREATE INDEX IF NOT EXISTS \"{table}_in_flight_key\"
                    ON \"{table}_in_flight\" (name, key, expires_at);
                 CREATE INDEX IF NOT EXISTS \"{table}_in_flight_expires_at\"
                    ON \"{table}_in_flight\" (expires_at);"
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
            reservations_expire: format!(
                "DELETE FROM \"{table}_reservations\"
                 WHERE name = ?1 AND key = ?2 AND expires_at <= ?3"
            ),
            reservations_count: format!(
                "SELECT COUNT(*) FROM \"{table}_reservations\" WHERE name = ?1 AND key = ?2"
            ),
            reservations_open: format!(
                "SELECT COUNT(*) FROM \"{table}_reservations\" WHERE expires_at > ?1"
            ),
            reservation_insert: format!(
                "INSERT INTO \"{table}_reservations\" (id, name, key, units, expires_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)"
            ),
            reservation_take: format!(
                "DELETE FROM \"{table}_reservations\"
                 WHERE id = ?1 AND name = ?2 AND key = ?3 AND expires_at > ?4
                 RETURNING units"
            ),
            reservations_purge: format!(
                "DELETE FROM \"{table}_reservations\" WHERE id IN
                 (SELECT id FROM \"{table}_reservations\" WHERE expires_at <= ?1 LIMIT ?2)"
            ),
            slots_expire: format!(
                "DELETE FROM \"{table}_in_flight\"
                 WHERE name = ?1 AND key = ?2 AND expires_at <= ?3"
            ),
            slots_count: format!(
                "SELECT COUNT(*) FROM \"{table}_in_flight\" WHERE name = ?1 AND key = ?2"
            ),
            slot_insert: format!(
                "INSERT INTO \"{table}_in_flight\" (id, name, key, expires_at)
                 VALUES (?1, ?2, ?3, ?4)"
            ),
            slot_free: format!(
                "DELETE FROM \"{table}_in_flight\"
                 WHERE id = ?1 AND name = ?2 AND key = ?3 AND expires_at > ?4"
            ),
            slots_purge: format!(
                "DELETE FROM \"{table}_in_flight\" WHERE id IN
                 (SELECT id FROM \"{table}_in_flight\" WHERE expires_at <= ?1 LIMIT ?2)"
            ),
        }
    }

    /// The statements decisions run, prepared at open to check the table.
    pub(crate) fn statements(&self) -> [&str; 16] {
        [
            &self.select,
            &self.upsert,
            &self.delete,
            &self.count,
            &self.purge,
            &self.reservations_expire,
            &self.reservations_count,
            &self.reservations_open,
            &self.reservation_insert,
            &self.reservation_take,
            &self.reservations_purge,
            &self.slots_expire,
            &self.slots_count,
            &self.slot_insert,
            &self.slot_free,
            &self.slots_purge,
        ]
    }
}

/// What a store shares between its clones.
pub(crate) struct Inner<C> {
    /// The one connection; see [`SqliteStore`] for why one is enough.
    pub(crate) conn: Mutex<Connection>,
    pub(crate) clock: C,
    pub(crate) sql: Sql,
    pub(crate) path: PathBuf,
    pub(crate) table: String,
    pub(crate) busy_timeout: Duration,
    /// Statements that found the file locked and waited for it.
    pub(crate) lock_waits: Arc<AtomicU64>,
    /// Reservations found expired and deleted, by committed transactions.
    pub(crate) expired_reservations: AtomicU64,
}

/// Why one operation failed, before it becomes a [`StoreError`].
enum Failure {
    Sql(rusqlite::Error),
    Unreadable(UnreadableState),
    Encode(serde_json::Error),
    /// An answer about a reservation (unknown, too many): nothing written.
    Reservation(ReservationError),
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
            Failure::Reservation(error) => StoreError::Reservation(error),
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

    pub(crate) fn check(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<Outcome, StoreError> {
        self.check_with_time(limit, key, cost)
            .map(|(outcome, _)| outcome)
    }

    /// [`check`](Self::check), and the store clock's time it decided at.
    pub(crate) fn check_with_time(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<(Outcome, ratekeeper::Timestamp), StoreError> {
        self.update(limit, key, |policy, current, now| {
            let (decision, next) = policy.decide(current, now, cost);
            ((Outcome::Decided(decision), now), next)
        })
    }

    /// Charges `units` whatever the limit says, in one transaction.
    pub(crate) fn report(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> Result<Outcome, StoreError> {
        self.update(limit, key, |policy, current, now| {
            let (decision, next) = policy.report(current, now, units);
            (Outcome::Decided(decision), next)
        })
    }

    /// Refunds `units` if the store clock, in the transaction, is still
    /// before `deadline`; whether it did.
    pub(crate) fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: ratekeeper::Timestamp,
    ) -> Result<bool, StoreError> {
        self.update(limit, key, |policy, current, now| {
            if now >= deadline {
                (false, current.clone())
            } else {
                (true, policy.refund(current, now, units))
            }
        })
    }

    /// Reads `key`'s state under `limit` (fresh if it has none), lets
    /// `change` compute a result and the next state, and writes that state
    /// back, all in one immediate transaction.
    pub(crate) fn update<R>(
        &self,
        limit: &Limit,
        key: &[u8],
        change: impl FnOnce(&Policy, &State, ratekeeper::Timestamp) -> (R, State),
    ) -> Result<R, StoreError> {
        self.update_with(limit, key, |_, policy, current, now| {
            Ok(change(policy, current, now))
        })
    }

    /// [`update`](Self::update), with `change` given the transaction too
    /// (for the key's reservations) and able to fail, writing nothing.
    fn update_with<R>(
        &self,
        limit: &Limit,
        key: &[u8],
        change: impl FnOnce(
            &rusqlite::Transaction<'_>,
            &Policy,
            &State,
            ratekeeper::Timestamp,
        ) -> Result<(R, State), Failure>,
    ) -> Result<R, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = self.clock.now();
            let policy = limit.policy();
            let stored = read(&tx, &self.sql, limit.name(), key)?;
            let stored = stored.map(|row| row.under(policy, now));
            let fresh;
            let current = match &stored {
                Some(carried) => &carried.state,
                None => {
                    fresh = policy.fresh();
                    &fresh
                }
            };
            let (result, next) = change(&tx, policy, current, now)?;
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

    /// In one transaction: the key's expired reservations forgotten, its
    /// open ones counted, `units` decided as a check, and when allowed the
    /// reservation `id` added until `ttl` from now.
    pub(crate) fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let bounded_key = bounded(key);
        // Counted once the transaction that deleted them has committed.
        let expired = std::cell::Cell::new(0);
        let outcome = self.update_with(limit, key, |tx, policy, current, now| {
            let owner = params![limit.name(), &*bounded_key];
            expired.set(
                tx.prepare_cached(&self.sql.reservations_expire)?
                    .execute(params![limit.name(), &*bounded_key, sql_time(now)])?,
            );
            let open: i64 = tx
                .prepare_cached(&self.sql.reservations_count)?
                .query_row(owner, |row| row.get(0))?;
            if usize::try_from(open).unwrap_or(usize::MAX) >= MAX_OPEN_RESERVATIONS {
                return Err(Failure::Reservation(ReservationError::TooMany));
            }
            let (decision, next) = policy.decide(current, now, units);
            if decision.is_allowed() {
                tx.prepare_cached(&self.sql.reservation_insert)?
                    .execute(params![
                        &id.to_bytes()[..],
                        limit.name(),
                        &*bounded_key,
                        i64::try_from(units).unwrap_or(i64::MAX),
                        sql_time(now.saturating_add(ttl)),
                    ])?;
            }
            Ok((Outcome::Decided(decision), next))
        });
        if outcome.is_ok() {
            self.expired_reservations
                .fetch_add(expired.get() as u64, Ordering::Relaxed);
        }
        outcome
    }

    /// In one transaction: reservation `id` of the key taken while open,
    /// and `actual` units charged instead of the ones it held.
    pub(crate) fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let bounded_key = bounded(key);
        self.update_with(limit, key, |tx, policy, current, now| {
            let held: Option<i64> = tx
                .prepare_cached(&self.sql.reservation_take)?
                .query_row(
                    params![
                        &id.to_bytes()[..],
                        limit.name(),
                        &*bounded_key,
                        sql_time(now)
                    ],
                    |row| row.get(0),
                )
                .optional()?;
            let held = held.ok_or(Failure::Reservation(ReservationError::Unknown))?;
            let held = u64::try_from(held).unwrap_or(0);
            let (decision, next) = settle_state(policy, current, now, held, actual);
            Ok((Outcome::Decided(decision), next))
        })
    }

    pub(crate) fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            // One statement reads atomically; no transaction needed.
            let stored = read(conn, &self.sql, limit.name(), key)?;
            let now = self.clock.now();
            let policy = limit.policy();
            let stored = stored.map(|row| row.under(policy, now));
            Ok(match &stored {
                Some(carried) => policy.peek(&carried.state, now),
                None => policy.peek(&policy.fresh(), now),
            })
        })
    }

    pub(crate) fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.update(limit, key, |policy, current, now| {
            ((), policy.refund(current, now, units))
        })
    }

    pub(crate) fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        /// One distinct `(limit name, key)` of the request.
        struct Row<'a> {
            name: &'a str,
            key: &'a [u8],
            policy: &'a Policy,
            stored: Option<Carried>,
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
                        let stored =
                            read(&tx, &self.sql, name, key)?.map(|row| row.under(policy, now));
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
                let current = match row.next.as_ref().or(row.stored.as_ref().map(|c| &c.state)) {
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
            } else {
                // Denied: nothing is taken. Only the states carried from
                // other numbers are written, as carried, so that a change
                // of numbers happens once, now, as a single check's does.
                let mut carried = false;
                for row in &rows {
                    if let Some(stored) = row.stored.as_ref().filter(|s| !s.as_stored) {
                        let policy = row.policy;
                        write(
                            &tx,
                            &self.sql,
                            policy,
                            row.name,
                            row.key,
                            Some(stored),
                            &stored.state,
                        )?;
                        carried = true;
                    }
                }
                if carried {
                    tx.commit()?;
                }
            }
            Ok(MultiOutcome::new(outcomes, denied_by))
        })
    }

    pub(crate) fn purge(&self, now: Timestamp) -> Result<usize, StoreError> {
        let mut purged = 0;
        loop {
            // One batch per transaction and per hold of the mutex.
            let deleted = self.with_conn(|conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let states = tx
                    .prepare_cached(&self.sql.purge)?
                    .execute(params![sql_time(now), PURGE_BATCH])?;
                let reservations = tx
                    .prepare_cached(&self.sql.reservations_purge)?
                    .execute(params![sql_time(now), PURGE_BATCH])?;
                let slots = tx
                    .prepare_cached(&self.sql.slots_purge)?
                    .execute(params![sql_time(now), PURGE_BATCH])?;
                tx.commit()?;
                self.expired_reservations
                    .fetch_add(reservations as u64, Ordering::Relaxed);
                Ok(states + reservations + slots)
            })?;
            purged += deleted;
            if (deleted as i64) < PURGE_BATCH {
                return Ok(purged);
            }
        }
    }

    pub(crate) fn count(&self) -> Result<usize, StoreError> {
        self.with_conn(|conn| {
            let count: i64 = conn
                .prepare_cached(&self.sql.count)?
                .query_row([], |row| row.get(0))?;
            Ok(usize::try_from(count).unwrap_or(usize::MAX))
        })
    }

    /// In one transaction: `key`'s slots past their lease forgotten, the
    /// rest counted, and slot `id` taken when under the cap.
    pub(crate) fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let now = self.clock.now();
            let owner = params![limit.name(), key];
            tx.prepare_cached(&self.sql.slots_expire)?.execute(params![
                limit.name(),
                key,
                sql_time(now)
            ])?;
            let taken: i64 = tx
                .prepare_cached(&self.sql.slots_count)?
                .query_row(owner, |row| row.get(0))?;
            let decision = limit.decide(u64::try_from(taken).unwrap_or(0));
            if decision.is_allowed() {
                tx.prepare_cached(&self.sql.slot_insert)?.execute(params![
                    &id.to_bytes()[..],
                    limit.name(),
                    key,
                    sql_time(now.saturating_add(limit.lease())),
                ])?;
            }
            tx.commit()?;
            Ok(Outcome::Decided(decision))
        })
    }

    /// Slot `id` of `key` freed while taken, in one statement.
    pub(crate) fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let now = self.clock.now();
            let freed = conn.prepare_cached(&self.sql.slot_free)?.execute(params![
                &id.to_bytes()[..],
                limit.name(),
                key,
                sql_time(now),
            ])?;
            match freed {
                0 => Err(Failure::Reservation(ReservationError::Unknown)),
                _ => Ok(()),
            }
        })
    }

    pub(crate) fn open_reservations(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.with_conn(|conn| {
            let count: i64 = conn
                .prepare_cached(&self.sql.reservations_open)?
                .query_row(params![sql_time(now)], |row| row.get(0))?;
            Ok(usize::try_from(count).unwrap_or(usize::MAX))
        })
    }

    pub(crate) fn reset(&self, limit: &Limit, key: &[u8]) -> Result<bool, StoreError> {
        let key = &*bounded(key);
        self.with_conn(|conn| {
            let deleted = conn
                .prepare_cached(&self.sql.delete)?
                .execute(params![limit.name(), key])?;
            Ok(deleted > 0)
        })
    }
}

/// A row's state column: the state, and the policy whose numbers made it
/// (`None` in rows written before it was recorded, read as made by the
/// policy reading them).
struct Stored {
    state: State,
    made_by: Option<Policy>,
}

/// A row's state as the policy reading it sees it.
struct Carried {
    state: State,
    /// Whether the row already holds `state`, made by these numbers, so
    /// that an unchanged state needs no write.
    as_stored: bool,
}

impl Stored {
    /// The state as `policy` reads it at `now`: [carried](Policy::carry)
    /// from the numbers that made it when they were others, fresh when
    /// they were another kind of policy.
    fn under(self, policy: &Policy, now: Timestamp) -> Carried {
        match self.made_by {
            Some(made_by) if made_by != *policy => Carried {
                state: policy
                    .carry(&made_by, &self.state, now)
                    .unwrap_or_else(|| policy.fresh()),
                as_stored: false,
            },
            _ => Carried {
                state: self.state,
                as_stored: true,
            },
        }
    }
}

/// The field of the state's JSON that names the policy that made it.
const MADE_BY: &str = "made_by";

/// A state's JSON, with the policy that made it.
fn encode(state: &State, made_by: &Policy) -> Result<String, serde_json::Error> {
    let mut json = serde_json::to_value(state)?;
    if let serde_json::Value::Object(fields) = &mut json {
        fields.insert(MADE_BY.to_owned(), serde_json::to_value(made_by)?);
    }
    serde_json::to_string(&json)
}

/// A state column's JSON: the state and, if recorded, its policy.
fn decode(json: &[u8]) -> Result<Stored, serde_json::Error> {
    let mut value: serde_json::Value = serde_json::from_slice(json)?;
    let made_by = match value.as_object_mut().and_then(|f| f.remove(MADE_BY)) {
        Some(policy) => Some(serde_json::from_value(policy)?),
        None => None,
    };
    Ok(Stored {
        state: serde_json::from_value(value)?,
        made_by,
    })
}

/// The stored state of `(name, key)`, if it has a row.
fn read(conn: &Connection, sql: &Sql, name: &str, key: &[u8]) -> Result<Option<Stored>, Failure> {
    let mut statement = conn.prepare_cached(&sql.select)?;
    let mut rows = statement.query(params![name, key])?;
    let Some(row) = rows.next()? else {
        return Ok(None);
    };
    let parsed = match row.get_ref(0)? {
        ValueRef::Text(json) | ValueRef::Blob(json) => decode(json).map_err(Unreadable::from),
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
/// if it is unchanged, a delete if it is fresh, an upsert (recording
/// `policy` with the state) otherwise.
fn write(
    conn: &Connection,
    sql: &Sql,
    policy: &Policy,
    name: &str,
    key: &[u8],
    stored: Option<&Carried>,
    next: &State,
) -> Result<(), Failure> {
    if stored.is_some_and(|stored| stored.as_stored && stored.state == *next) {
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
    let json = encode(next, policy).map_err(Failure::Encode)?;
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
