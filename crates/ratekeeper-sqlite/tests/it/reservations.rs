//! Reservations on SQLite: kept in the file beside the states, so that they
//! outlive the store that made them, expire at their ttl on the store's
//! clock (settled at their estimate), and go with a purge.

use futures_executor::block_on;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock,
    store::{reservation::ReservationError, StoreError},
    Clock, Limit, Store, Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;

fn store(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStore<ManualClock> {
    SqliteStore::builder(dir.path().join("reservations.db"))
        .clock(clock.clone())
        .open()
        .unwrap()
}

fn tokens() -> Limit {
    Limit::new("tokens", TokenBucket::per_hour(1_000).unwrap()).unwrap()
}

#[test]
fn a_reservation_outlives_the_store_that_made_it() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let limit = tokens();
    let token = {
        let first = store(&dir, &clock);
        let reserved = block_on(first.reserve(&limit, b"k", 300, Duration::from_secs(60))).unwrap();
        reserved.reservation.unwrap().to_token()
    };
    // A new process, on the same file, settles it from its token.
    let second = store(&dir, &clock);
    let reservation = ratekeeper::store::Reservation::from_token(&token).unwrap();
    assert_eq!(
        block_on(second.peek(&limit, b"k")).unwrap().remaining(),
        700
    );
    assert!(block_on(second.commit(&limit, &reservation, 100))
        .unwrap()
        .is_allowed());
    assert_eq!(
        block_on(second.peek(&limit, b"k")).unwrap().remaining(),
        900
    );
}

#[test]
fn an_expired_reservation_stays_at_its_estimate_and_is_purged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = store(&dir, &clock);
    let limit = Limit::new(
        "window",
        ratekeeper::FixedWindow::new(1_000, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let ttl = Duration::from_secs(30);
    let open = block_on(store.reserve(&limit, b"k", 300, ttl)).unwrap();
    let open = open.reservation.unwrap();
    let late = block_on(store.reserve(&limit, b"k", 100, ttl * 2)).unwrap();
    let late = late.reservation.unwrap();
    // At its ttl it can no longer be settled.
    clock.advance(ttl);
    let unknown = block_on(store.commit(&limit, &open, 0));
    assert!(matches!(
        unknown,
        Err(StoreError::Reservation(ReservationError::Unknown))
    ));
    // Settled at its estimate: the 300 stay taken.
    assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 600);
    // A purge forgets it (and the row of the one still open stays).
    assert_eq!(block_on(store.purge(clock.now())).unwrap(), 1);
    block_on(store.cancel(&limit, &late)).unwrap();
    assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 700);
}

#[test]
fn open_reservations_are_counted_until_settled_or_past_their_ttl() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = store(&dir, &clock);
    let limit = tokens();
    let open = |store: &SqliteStore<ManualClock>| block_on(store.open_reservations(clock.now()));
    assert_eq!(open(&store).unwrap(), 0);
    let short = block_on(store.reserve(&limit, b"a", 10, Duration::from_secs(30))).unwrap();
    let long = block_on(store.reserve(&limit, b"b", 10, Duration::from_secs(90))).unwrap();
    block_on(store.reserve(&limit, b"b", 10, Duration::from_secs(90))).unwrap();
    assert_eq!(open(&store).unwrap(), 3);
    // Settled: no longer open.
    let committed = block_on(store.commit(&limit, &long.reservation.unwrap(), 5)).unwrap();
    assert!(committed.is_allowed());
    assert_eq!(open(&store).unwrap(), 2);
    // Past its ttl, before any purge: no longer open either.
    clock.advance(Duration::from_secs(30));
    assert_eq!(open(&store).unwrap(), 1);
    assert!(block_on(store.cancel(&limit, &short.reservation.unwrap())).is_err());
    // Another store on the file counts the same.
    assert_eq!(open(&self::store(&dir, &clock)).unwrap(), 1);
    // The expired one is counted when it is deleted: by a purge, or by
    // the next reservation of its key.
    assert_eq!(store.expired_reservations(), 0);
    block_on(store.purge(clock.now())).unwrap();
    assert_eq!(store.expired_reservations(), 1);
    let b = block_on(store.reserve(&limit, b"b", 10, Duration::from_secs(30))).unwrap();
    clock.advance(Duration::from_secs(60));
    block_on(store.reserve(&limit, b"b", 10, Duration::from_secs(30))).unwrap();
    assert_eq!(store.expired_reservations(), 3, "{b:?}");
}
