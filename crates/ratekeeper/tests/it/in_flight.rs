//! In-flight caps on the in-memory store, on a manual clock: a slot nobody
//! releases frees itself at its lease's end, and the slots of every cap
//! together are bounded by the store's `max_keys`.

use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{
    clock::ManualClock,
    store::{in_flight::InFlight, reservation::ReservationError, StoreError},
    MemoryStore, Outcome, Store, Timestamp,
};

#[test]
fn a_slot_nobody_releases_frees_itself_at_its_lease() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder().clock(clock.clone()).build().unwrap();
    let lease = Duration::from_secs(30);
    let exports = InFlight::new("exports", 1, lease).unwrap();
    let crashed = block_on(store.acquire(&exports, b"k")).unwrap();
    let crashed = crashed.slot.expect("taken");
    assert_eq!(store.slots_taken(), 1);
    clock.advance(lease - Duration::from_nanos(1));
    assert!(!block_on(store.acquire(&exports, b"k"))
        .unwrap()
        .outcome
        .is_allowed());
    clock.advance(Duration::from_nanos(1));
    assert_eq!(store.slots_taken(), 0);
    let next = block_on(store.acquire(&exports, b"k")).unwrap();
    assert!(next.outcome.is_allowed());
    // The crashed caller's late release finds nothing: it frees no place
    // that is not its own.
    assert!(matches!(
        block_on(store.release(&exports, &crashed)),
        Err(StoreError::Reservation(ReservationError::Unknown))
    ));
    assert!(!block_on(store.acquire(&exports, b"k"))
        .unwrap()
        .outcome
        .is_allowed());
}

#[test]
fn slots_over_every_cap_are_bounded_by_max_keys() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .max_keys(4)
        .build()
        .unwrap();
    let lease = Duration::from_secs(30);
    let a = InFlight::new("a", 10, lease).unwrap();
    let b = InFlight::new("b", 10, lease).unwrap();
    for key in [b"1", b"2", b"3"] {
        assert!(block_on(store.acquire(&a, key))
            .unwrap()
            .outcome
            .is_allowed());
    }
    let last = block_on(store.acquire(&b, b"1")).unwrap();
    assert!(last.outcome.is_allowed());
    // Full: a fifth slot, of any cap and key, is saturated and takes nothing.
    let full = block_on(store.acquire(&a, b"4")).unwrap();
    assert!(
        matches!(full.outcome, Outcome::Saturated { .. }),
        "{full:?}"
    );
    assert!(full.slot.is_none());
    assert_eq!(store.slots_taken(), 4);
    // A release makes room; so does a lease's end.
    block_on(store.release(&b, &last.slot.unwrap())).unwrap();
    assert!(block_on(store.acquire(&a, b"4"))
        .unwrap()
        .outcome
        .is_allowed());
    assert!(block_on(store.acquire(&a, b"5"))
        .unwrap()
        .outcome
        .is_saturated());
    clock.advance(lease);
    assert!(block_on(store.acquire(&a, b"5"))
        .unwrap()
        .outcome
        .is_allowed());
    assert_eq!(store.slots_taken(), 1);
}
