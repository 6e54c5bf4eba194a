//! In-flight caps on SQLite: slots kept in the file, so that another
//! process (here, another store on the same file) sees and releases them,
//! and freed at their lease's end on the store's clock.

use futures_executor::block_on;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock,
    store::{in_flight::InFlight, reservation::ReservationError, StoreError},
    Clock, Store, Timestamp,
};
use ratekeeper_sqlite::SqliteStore;

fn store(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStore<ManualClock> {
    SqliteStore::builder(dir.path().join("in-flight.db"))
        .clock(clock.clone())
        .open()
        .unwrap()
}

#[test]
fn slots_are_shared_by_every_store_on_the_file_and_freed_at_their_lease() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let (one, two) = (store(&dir, &clock), store(&dir, &clock));
    let lease = Duration::from_secs(30);
    let exports = InFlight::new("exports", 2, lease).unwrap();
    let first = block_on(one.acquire(&exports, b"k")).unwrap().slot.unwrap();
    let second = block_on(two.acquire(&exports, b"k")).unwrap().slot.unwrap();
    // Both stores count both slots.
    assert!(!block_on(one.acquire(&exports, b"k"))
        .unwrap()
        .outcome
        .is_allowed());
    // The other process releases the first one's slot, once.
    block_on(two.release(&exports, &first)).unwrap();
    assert!(matches!(
        block_on(one.release(&exports, &first)),
        Err(StoreError::Reservation(ReservationError::Unknown))
    ));
    let third = block_on(one.acquire(&exports, b"k")).unwrap();
    assert!(third.outcome.is_allowed());
    // Nobody releases the others: at their lease's end they free themselves,
    // and a late release of one finds nothing.
    clock.advance(lease);
    assert!(block_on(two.acquire(&exports, b"k"))
        .unwrap()
        .outcome
        .is_allowed());
    assert!(block_on(two.release(&exports, &second)).is_err());
    // A purge forgets the expired rows.
    clock.advance(lease);
    assert!(block_on(one.purge(clock.now())).unwrap() >= 1);
}
