//! Reservations on the in-memory store, on a manual clock: expiry at the
//! ttl (settled at the estimate), and the counts of open and expired ones.

use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{
    clock::ManualClock,
    store::{reservation::ReservationError, Reservation, StoreError},
    FixedWindow, Limit, MemoryStore, Store, Timestamp,
};

#[test]
fn an_expired_reservation_stays_at_its_estimate() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let limit = Limit::new(
        "w",
        FixedWindow::new(100, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let ttl = Duration::from_secs(30);
    let first = block_on(store.reserve(&limit, b"k", 30, ttl)).unwrap();
    let second = block_on(store.reserve(&limit, b"k", 20, ttl * 2)).unwrap();
    assert_eq!(store.open_reservations(), 2);
    clock.advance(ttl - Duration::from_nanos(1));
    assert_eq!(store.open_reservations(), 2);
    assert_eq!(store.expired_reservations(), 0);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(store.open_reservations(), 1);
    assert_eq!(store.expired_reservations(), 1);
    let late = block_on(store.commit(&limit, first.reservation.as_ref().unwrap(), 0));
    assert!(matches!(
        late,
        Err(StoreError::Reservation(ReservationError::Unknown))
    ));
    assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 50);
    // The other one is open still, and settles from its token.
    let token = second.reservation.unwrap().to_token();
    let second = Reservation::from_token(&token).unwrap();
    assert!(block_on(store.commit(&limit, &second, 5))
        .unwrap()
        .is_allowed());
    assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 65);
    assert_eq!(store.open_reservations(), 0);
    // Settled, not expired.
    assert_eq!(store.expired_reservations(), 1);
}
