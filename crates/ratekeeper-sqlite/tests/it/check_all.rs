//! Several limits in one transaction, all or nothing.

use futures_executor::block_on;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, store::Check, FixedWindow, Gcra, Limit, SlidingLog, Store, Timestamp,
};
use ratekeeper_sqlite::SqliteStore;
use rusqlite::Connection;

/// Every row of the table, in order.
fn rows(raw: &Connection) -> Vec<(String, Vec<u8>, String, i64)> {
    let mut statement = raw
        .prepare("SELECT name, key, state, expires_at FROM ratekeeper ORDER BY name, key")
        .unwrap();
    let rows = statement
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

struct Fixture {
    _dir: tempfile::TempDir,
    clock: ManualClock,
    store: SqliteStore<ManualClock>,
    raw: Connection,
    global: Limit,
    per_ip: Limit,
    per_route: Limit,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("multi.db");
    let clock = ManualClock::new(Timestamp::from_secs(100));
    let store = SqliteStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    Fixture {
        _dir: dir,
        clock,
        store,
        raw,
        global: Limit::new(
            "global",
            FixedWindow::new(1_000, Duration::from_secs(60)).unwrap(),
        )
        .unwrap(),
        per_ip: Limit::new("per-ip", Gcra::per_minute(2).unwrap()).unwrap(),
        per_route: Limit::new(
            "per-route",
            SlidingLog::new(3, Duration::from_secs(60)).unwrap(),
        )
        .unwrap(),
    }
}

#[test]
fn a_denied_request_changes_no_row() {
    let f = fixture();
    let checks = |ip: &'static [u8]| {
        [
            Check::new(&f.global, b"all", 1),
            Check::new(&f.per_ip, ip, 1),
            Check::new(&f.per_route, b"/search", 1),
        ]
    };
    for _ in 0..2 {
        let outcome = block_on(f.store.check_all(&checks(b"192.0.2.1"))).unwrap();
        assert!(outcome.is_allowed());
        assert_eq!(outcome.outcomes().len(), 3);
    }
    assert_eq!(rows(&f.raw).len(), 3);

    // The per-IP limit (the second) denies: nothing is written anywhere.
    let before = rows(&f.raw);
    let denied = block_on(f.store.check_all(&checks(b"192.0.2.1"))).unwrap();
    assert!(!denied.is_allowed());
    assert_eq!(denied.denied_by(), Some(1));
    // Every limit is reported: the others say what they would have done.
    let outcomes = denied.outcomes();
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes[0].is_allowed() && !outcomes[1].is_allowed() && outcomes[2].is_allowed());
    assert_eq!(outcomes[0].decision().unwrap().remaining(), 997);
    assert_eq!(outcomes[2].decision().unwrap().remaining(), 0);
    assert!(denied.retry_after().duration().unwrap() > Duration::ZERO);
    assert_eq!(rows(&f.raw), before);

    // Another address passes per IP, takes the route's last unit...
    let other = block_on(f.store.check_all(&checks(b"192.0.2.2"))).unwrap();
    assert!(other.is_allowed());
    // ...so now the route (the third) denies, and the new address's row
    // and the global count stay as they were.
    let before = rows(&f.raw);
    let denied = block_on(f.store.check_all(&checks(b"192.0.2.3"))).unwrap();
    assert_eq!(denied.denied_by(), Some(2));
    assert_eq!(rows(&f.raw), before);
    assert!(before.iter().all(|(_, key, _, _)| key != b"192.0.2.3"));

    // A minute later everything has room again.
    f.clock.advance(Duration::from_secs(60));
    assert!(block_on(f.store.check_all(&checks(b"192.0.2.1")))
        .unwrap()
        .is_allowed());
}

#[test]
fn the_first_denying_limit_is_reported() {
    let f = fixture();
    let checks = [
        Check::new(&f.per_ip, b"a", 5),
        Check::new(&f.per_route, b"r", 5),
    ];
    // A cost above both quotas: both deny, the first is named.
    let denied = block_on(f.store.check_all(&checks)).unwrap();
    assert_eq!(denied.denied_by(), Some(0));
    assert!(denied.outcomes().iter().all(|o| !o.is_allowed()));
    assert_eq!(block_on(f.store.count()).unwrap(), 0);
    // No limits at all: allowed, nothing written.
    let empty = block_on(f.store.check_all(&[])).unwrap();
    assert!(empty.is_allowed() && empty.outcomes().is_empty());
}

#[test]
fn one_limit_and_key_twice_counts_twice() {
    let f = fixture();
    let twice = [
        Check::new(&f.per_route, b"r", 1),
        Check::new(&f.per_route, b"r", 1),
    ];
    let outcome = block_on(f.store.check_all(&twice)).unwrap();
    assert!(outcome.is_allowed());
    let remaining: Vec<u64> = outcome
        .outcomes()
        .iter()
        .map(|o| o.decision().unwrap().remaining())
        .collect();
    assert_eq!(remaining, [2, 1]);
    assert_eq!(
        block_on(f.store.peek(&f.per_route, b"r"))
            .unwrap()
            .remaining(),
        1
    );
    // 1 left: the second of the pair is denied and neither is counted.
    let denied = block_on(f.store.check_all(&twice)).unwrap();
    assert_eq!(denied.denied_by(), Some(1));
    assert_eq!(
        block_on(f.store.peek(&f.per_route, b"r"))
            .unwrap()
            .remaining(),
        1
    );
}

#[tokio::test]
async fn the_async_check_all_is_one_transaction_too() {
    let f = fixture();
    let checks = [
        Check::new(&f.global, b"all", 1),
        Check::new(&f.per_ip, b"x", 1),
    ];
    for _ in 0..2 {
        assert!(f.store.check_all(&checks).await.unwrap().is_allowed());
    }
    let before = rows(&f.raw);
    let denied = f.store.check_all(&checks).await.unwrap();
    assert_eq!(denied.denied_by(), Some(1));
    assert_eq!(rows(&f.raw), before);
    assert_eq!(
        f.store.peek(&f.global, b"all").await.unwrap().remaining(),
        998
    );
}
