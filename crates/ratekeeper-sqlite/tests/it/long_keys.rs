//! A key longer than 64 bytes is kept as a readable prefix and a digest
//! (`ratekeeper::key::bounded`): a 100 KB key costs a row what a 64-byte one
//! does, and is still found as it was sent.

use ratekeeper::key::{bounded, MAX_KEY_LEN};
use ratekeeper::{clock::ManualClock, Gcra, Limit, Timestamp};
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

    assert!(store.check_blocking(&limit, &a, 1).unwrap().is_allowed());
    // the length first: a failure should not print 100 KB
    assert_eq!(keys(&raw)[0].len(), MAX_KEY_LEN);
    assert_eq!(keys(&raw), [bounded(&a).into_owned()]);
    // the same long key finds its row; one differing at its end has its own
    assert!(store.check_blocking(&limit, &a, 1).unwrap().is_allowed());
    assert!(!store.check_blocking(&limit, &a, 1).unwrap().is_allowed());
    assert_eq!(store.peek_blocking(&limit, &a).unwrap().remaining(), 0);
    assert!(store.check_blocking(&limit, &b, 1).unwrap().is_allowed());
    assert_eq!(keys(&raw).len(), 2);
    let all = store.check_all_blocking(&[(&limit, &a[..]), (&limit, &b[..])], 1);
    assert_eq!(all.unwrap().denied_by(), Some(0));
    store.refund_blocking(&limit, &b, 1).unwrap();
    assert!(store.reset_blocking(&limit, &a).unwrap());
    assert_eq!(keys(&raw), [bounded(&b).into_owned()]);
}
