//! A key longer than 64 bytes is kept as a readable prefix and a digest
//! (`ratekeeper::key::bounded`): a 100 KB key costs a row what a 64-byte one
//! does, and is still found as it was sent.

use futures_executor::block_on;
use ratekeeper::key::{bounded, MAX_KEY_LEN};
use ratekeeper::{clock::ManualClock, store::Check, Gcra, Limit, Store, Timestamp};
use ratekeeper_sqlite::SqliteStore;
use rusqlite::Connection;

/// Every row's key.
fn keys(raw: &Connection) -> Vec<Vec<u8>> {
    let mut statement = raw
        .prepare("SELECT key FROM ratekeeper ORDER BY key")
        .unwrap();
    let rows = statement.query_map([], |row| row.get(0)).unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

#[test]
fn a_long_key_keeps_a_bounded_row() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.db");
    let store = SqliteStore::builder(&path)
        .clock(ManualClock::new(Timestamp::from_secs(100)))
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    let limit = Limit::new("per-key", Gcra::per_minute(2).unwrap()).unwrap();
    let long = |last: u8| {
        let mut key = vec![b'k'; 100_000];
        key.push(last);
        key
    };
    let (a, b) = (long(b'a'), long(b'b'));

    assert!(block_on(store.check(&limit, &a, 1)).unwrap().is_allowed());
    // the length first: a failure should not print 100 KB
    assert_eq!(keys(&raw)[0].len(), MAX_KEY_LEN);
    assert_eq!(keys(&raw), [bounded(&a).into_owned()]);
    // the same long key finds its row; one differing at its end has its own
    assert!(block_on(store.check(&limit, &a, 1)).unwrap().is_allowed());
    assert!(!block_on(store.check(&limit, &a, 1)).unwrap().is_allowed());
    assert_eq!(block_on(store.peek(&limit, &a)).unwrap().remaining(), 0);
    assert!(block_on(store.check(&limit, &b, 1)).unwrap().is_allowed());
    assert_eq!(keys(&raw).len(), 2);
    let all = block_on(store.check_all(&[Check::new(&limit, &a, 1), Check::new(&limit, &b, 1)]));
    assert_eq!(all.unwrap().denied_by(), Some(0));
    block_on(store.refund(&limit, &b, 1)).unwrap();
    assert!(block_on(store.reset(&limit, &a)).unwrap());
    assert_eq!(keys(&raw), [bounded(&b).into_owned()]);
}
