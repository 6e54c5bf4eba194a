//! Failures: bad options, unreadable rows, a locked database. None panics.

use futures_executor::block_on;
use std::time::{Duration, Instant};

use ratekeeper::{
    clock::ManualClock,
    store::{Check, StoreError},
    Gcra, Limit, Store, Timestamp,
};
use ratekeeper_sqlite::{SqliteError, SqliteStore, MAX_BUSY_TIMEOUT};
use ratekeeper_test_support::redis::UNHURRIED;
use rusqlite::Connection;

fn limit() -> Limit {
    Limit::new("login", Gcra::per_minute(5).unwrap()).unwrap()
}

#[test]
fn unreadable_states_are_invalid_replies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    let store = SqliteStore::builder(&path)
        .clock(ManualClock::new(Timestamp::from_secs(1)))
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    let limit = limit();
    assert!(block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());

    for garbage in [
        "'not json'",
        "'{\"policy\":\"leaky_bucket\",\"level\":1}'",
        "'{\"policy\":\"gcra\",\"tat\":-5}'",
        "42",
        "NULL",
        "x'00ff'",
    ] {
        // NOT NULL refuses a NULL: write an empty string instead.
        let garbage = if garbage == "NULL" { "''" } else { garbage };
        raw.execute(&format!("UPDATE ratekeeper SET state = {garbage}"), [])
            .unwrap();
        let check = block_on(store.check(&limit, b"k", 1)).unwrap_err();
        assert!(
            matches!(check, StoreError::InvalidReply(_)),
            "{garbage}: {check:?}"
        );
        // The message names the row, and says why (the column's TEXT
        // affinity stores even the number as text), each once.
        let message = check.to_string();
        assert!(message.contains("login"), "{message}");
        assert!(
            message.contains(": its JSON does not hold a state"),
            "{garbage}: {message}"
        );
        assert_eq!(message.matches("its JSON").count(), 1, "{message}");
        let peek = block_on(store.peek(&limit, b"k")).unwrap_err();
        assert!(matches!(peek, StoreError::InvalidReply(_)), "{peek:?}");
        let refund = block_on(store.refund(&limit, b"k", 1)).unwrap_err();
        assert!(matches!(refund, StoreError::InvalidReply(_)), "{refund:?}");
        let all = block_on(store.check_all(&[Check::new(&limit, b"k", 1)])).unwrap_err();
        assert!(matches!(all, StoreError::InvalidReply(_)), "{all:?}");
    }
    // Other keys still work, and a reset clears the bad row.
    assert!(block_on(store.check(&limit, b"other", 1))
        .unwrap()
        .is_allowed());
    assert!(block_on(store.reset(&limit, b"k")).unwrap());
    assert!(block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());
}

#[tokio::test]
async fn unreadable_states_are_invalid_replies_in_async_code_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage-async.db");
    let store = SqliteStore::open(&path).unwrap();
    let limit = limit();
    assert!(store.check(&limit, b"k", 1).await.unwrap().is_allowed());
    Connection::open(&path)
        .unwrap()
        .execute("UPDATE ratekeeper SET state = '{'", [])
        .unwrap();
    let error = store.check(&limit, b"k", 1).await.unwrap_err();
    assert!(matches!(error, StoreError::InvalidReply(_)), "{error:?}");
}

#[test]
fn a_locked_database_is_busy_within_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let timeout = Duration::from_millis(200);
    let store = SqliteStore::builder(&path)
        .busy_timeout(timeout)
        .open()
        .unwrap();
    // Waits for the lock as long as a stalled machine may need: its wait
    // is shown by `lock_waits`, not timed.
    let patient = SqliteStore::builder(&path)
        .busy_timeout(UNHURRIED)
        .open()
        .unwrap();
    let limit = limit();
    assert!(block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());
    assert_eq!(store.lock_waits(), 0);

    // Another connection (another process, as far as SQLite can tell)
    // holds the write lock.
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();

    for waits in 1..=2 {
        let started = Instant::now();
        let error = block_on(store.check(&limit, b"k", 1)).unwrap_err();
        let waited = started.elapsed();
        assert!(
            matches!(error, StoreError::Busy(t) if t == timeout),
            "{error:?}"
        );
        assert_eq!(store.lock_waits(), waits, "the call waited for the lock");
        assert!(waited >= timeout, "gave up after {waited:?}");
        // The lock is held until the end of the test: any bound shows
        // that the call gave up rather than waiting for it.
        assert!(waited < timeout + UNHURRIED, "waited {waited:?}");
    }
    let error = block_on(store.check_all(&[Check::new(&limit, b"k", 1)])).unwrap_err();
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    let error = block_on(store.refund(&limit, b"k", 1)).unwrap_err();
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    let error = block_on(store.purge(Timestamp::MAX)).unwrap_err();
    assert!(matches!(error, StoreError::Busy(_)), "{error:?}");
    // In WAL mode readers do not wait for the writer.
    assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 4);
    assert_eq!(block_on(store.count()).unwrap(), 1);

    // Released within the timeout, the lock is waited for: the lock goes
    // only once the check is seen waiting for it.
    let checker = {
        let (patient, limit) = (patient.clone(), limit.clone());
        std::thread::spawn(move || block_on(patient.check(&limit, b"k", 1)))
    };
    let deadline = Instant::now() + UNHURRIED;
    while patient.lock_waits() == 0 {
        assert!(Instant::now() < deadline, "the check never waited");
        assert!(
            !checker.is_finished(),
            "the check did not wait for the lock"
        );
        std::thread::yield_now();
    }
    holder.execute_batch("COMMIT").unwrap();
    assert!(checker.join().unwrap().unwrap().is_allowed());
    assert_eq!(patient.lock_waits(), 1);
}

#[test]
fn a_zero_busy_timeout_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("impatient.db");
    let store = SqliteStore::builder(&path)
        .busy_timeout(Duration::ZERO)
        .open()
        .unwrap();
    let holder = Connection::open(&path).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let error = block_on(store.check(&limit(), b"k", 1)).unwrap_err();
    assert!(
        matches!(error, StoreError::Busy(Duration::ZERO)),
        "{error:?}"
    );
    // Told by the store rather than timed: a stalled machine would make
    // even an immediate failure look slow.
    assert_eq!(store.lock_waits(), 0, "a zero busy timeout waited");
}

#[test]
fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("options.db");
    for table in [
        "",
        "1x",
        "a-b",
        "a;DROP TABLE x",
        "sqlite_x",
        &"t".repeat(64),
    ] {
        let error = SqliteStore::builder(&path).table(table).open().unwrap_err();
        assert!(
            matches!(error, SqliteError::InvalidTableName { ref name, .. } if name == table),
            "{table:?}: {error:?}"
        );
        assert!(error.to_string().contains("invalid table name"));
    }
    let error = SqliteStore::builder(&path)
        .busy_timeout(MAX_BUSY_TIMEOUT + Duration::from_millis(1))
        .open()
        .unwrap_err();
    assert!(
        matches!(error, SqliteError::BusyTimeoutTooLong { .. }),
        "{error:?}"
    );
    // Nothing was created by the refused options.
    assert!(!path.exists());
}

#[test]
fn bad_files_and_tables_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    // Not a database.
    let text = dir.path().join("text.db");
    std::fs::write(
        &text,
        "this is not a database, just some text to fill a page".repeat(100),
    )
    .unwrap();
    let error = SqliteStore::open(&text).unwrap_err();
    assert!(
        matches!(error, SqliteError::Setup { .. } | SqliteError::Open { .. }),
        "{error:?}"
    );
    // A directory that does not exist.
    let error = SqliteStore::open(dir.path().join("missing/dir/x.db")).unwrap_err();
    assert!(matches!(error, SqliteError::Open { .. }), "{error:?}");
    // A table of the same name with other columns.
    let other = dir.path().join("other.db");
    Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE ratekeeper (id INTEGER PRIMARY KEY, note TEXT)")
        .unwrap();
    let error = SqliteStore::open(&other).unwrap_err();
    assert!(
        matches!(error, SqliteError::Setup { ref table, .. } if table == "ratekeeper"),
        "{error:?}"
    );
    // Another table name in the same file works beside it.
    let store = SqliteStore::builder(&other).table("limits").open().unwrap();
    assert!(block_on(store.check(&limit(), b"k", 1))
        .unwrap()
        .is_allowed());
}

#[test]
fn the_file_is_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wal.db");
    let _store = SqliteStore::open(&path).unwrap();
    let mode: String = Connection::open(&path)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}
