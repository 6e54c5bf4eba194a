//! What leasing asks of a store, on SQLite: a take of as many units as
//! are left with the store clock's time of it, and a refund applied only
//! before a deadline on that clock.

use std::time::Duration;

use futures_executor::block_on;

use ratekeeper::{clock::ManualClock, FixedWindow, Limit, Store, Timestamp};
use ratekeeper_sqlite::SqliteStore;

#[test]
fn a_take_takes_what_is_left_and_a_late_refund_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = SqliteStore::builder(dir.path().join("lease.db"))
        .clock(clock.clone())
        .open()
        .unwrap();
    let limit = Limit::new(
        "take",
        FixedWindow::new(10, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    block_on(async {
        let first = store.take(&limit, b"k", 1, 8).await.unwrap();
        assert_eq!(first.units, 8);
        assert_eq!(first.at, Some(Timestamp::from_secs(1_000)));
        assert_eq!(store.take(&limit, b"k", 1, 8).await.unwrap().units, 2);
        assert_eq!(store.take(&limit, b"k", 1, 8).await.unwrap().units, 0);

        let deadline = Timestamp::from_secs(1_010);
        clock.set(deadline);
        assert!(!store
            .refund_before(&limit, b"k", 3, deadline)
            .await
            .unwrap());
        assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 0);
        clock.set(Timestamp::from_secs(1_009));
        assert!(store
            .refund_before(&limit, b"k", 3, deadline)
            .await
            .unwrap());
        assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 3);
    });
}
