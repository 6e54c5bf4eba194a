//! Rows record the policy that made their state, so a change of a limit's
//! numbers carries each key's state; rows written before that was recorded
//! read as made by the policy reading them; a record that is not a policy
//! is an unreadable state, never a panic.

use futures_executor::block_on;

use ratekeeper::{clock::ManualClock, store::StoreError, Gcra, Limit, Store, Timestamp};
use ratekeeper_sqlite::SqliteStore;
use rusqlite::Connection;

fn per_minute(n: u64) -> Limit {
    Limit::new("login", Gcra::per_minute(n).unwrap()).unwrap()
}

#[test]
fn rows_record_their_numbers_and_older_rows_read_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("carry.db");
    let store = SqliteStore::builder(&path)
        .clock(ManualClock::new(Timestamp::from_secs(1_000)))
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    let state = || -> String {
        raw.query_row("SELECT state FROM ratekeeper", [], |row| row.get(0))
            .unwrap()
    };

    // 2 of 5 a minute: the theoretical arrival time is 24 s ahead.
    assert!(block_on(store.check(&per_minute(5), b"k", 2))
        .unwrap()
        .is_allowed());
    let written: serde_json::Value = serde_json::from_str(&state()).unwrap();
    let made_by = serde_json::json!({
        "kind": "gcra", "limit": 5, "period_ns": 60_000_000_000u64, "burst": 5
    });
    assert_eq!(written["made_by"], made_by, "{written}");
    // Read under 10 a minute: the 2 units used stay used (12 s ahead).
    let carried = block_on(store.peek(&per_minute(10), b"k")).unwrap();
    assert_eq!(carried.remaining(), 8);

    // A row of an earlier version, without the record: read as made by
    // the policy reading it, 24 s ahead at 6 s a unit.
    let tat = Timestamp::from_secs(1_024).as_nanos();
    raw.execute(
        &format!(r#"UPDATE ratekeeper SET state = '{{"policy":"gcra","tat":{tat}}}'"#),
        [],
    )
    .unwrap();
    assert_eq!(
        block_on(store.peek(&per_minute(10), b"k"))
            .unwrap()
            .remaining(),
        6
    );

    // A record that is no valid policy: an unreadable state.
    raw.execute(
        &format!(
            r#"UPDATE ratekeeper SET state = '{{"policy":"gcra","tat":{tat},"made_by":{{"kind":"gcra","limit":0,"period_ns":1,"burst":1}}}}'"#
        ),
        [],
    )
    .unwrap();
    let error = block_on(store.check(&per_minute(10), b"k", 1)).unwrap_err();
    assert!(matches!(error, StoreError::InvalidReply(_)), "{error:?}");
}
