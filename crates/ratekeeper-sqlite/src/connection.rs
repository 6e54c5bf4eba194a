//! Opening the file: the connection's set-up (WAL, the table, its index
//! and the statements) and the busy handler.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;

use crate::transaction::Sql;

/// Sets a fresh connection up: busy timeout, WAL, the table and its index,
/// and the statements (which checks the columns of an existing table).
/// [`set_up`], tried again while the file is busy, for at most
/// `busy_timeout`; `lock_waits` counts the statements that waited (see
/// [`busy_handler`]).
///
/// Connections opening a new file together race to switch it to WAL and
/// create the table, and SQLite answers some of those races with
/// "database is locked" without calling the busy handler (it cannot wait
/// for a lock while holding one another waiter needs). Every step of the
/// set-up is idempotent, so trying it again is safe.
pub(crate) fn set_up_within(
    conn: &mut Connection,
    sql: &Sql,
    busy_timeout: Duration,
    lock_waits: &Arc<AtomicU64>,
) -> rusqlite::Result<()> {
    let started = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        match set_up(conn, sql, busy_timeout, lock_waits) {
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

fn set_up(
    conn: &mut Connection,
    sql: &Sql,
    busy_timeout: Duration,
    lock_waits: &Arc<AtomicU64>,
) -> rusqlite::Result<()> {
    conn.busy_handler(Some(busy_handler(busy_timeout, Arc::clone(lock_waits))))?;
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
///
/// `waits` counts the statements that found the file locked and waited
/// (once each, however many tries): contention made visible, to operators
/// and to tests that must know a wait happened without timing it.
fn busy_handler(
    timeout: Duration,
    waits: Arc<AtomicU64>,
) -> impl FnMut(i32) -> bool + Send + 'static {
    let mut first_try = Instant::now();
    move |retries| {
        if retries == 0 {
            first_try = Instant::now();
        }
        let waited = first_try.elapsed();
        if waited >= timeout {
            return false;
        }
        if retries == 0 {
            waits.fetch_add(1, Ordering::Relaxed);
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
