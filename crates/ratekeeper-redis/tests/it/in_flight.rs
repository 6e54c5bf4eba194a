//! In-flight caps on Redis: a key's slots in one sorted set, which every
//! store on the server shares, freed at their lease's end on the store's
//! time, and gone from Redis when the last lease ends.

use std::time::Duration;

use ratekeeper::{
    store::{in_flight::InFlight, reservation::ReservationError, StoreError},
    Store, Timestamp,
};
use ratekeeper_test_support::redis::RedisServer;

use crate::unhurried;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_shared_by_every_store_and_freed_at_their_lease() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (one, two) = (
        unhurried::connect(&server.url()).await,
        unhurried::connect(&server.url()).await,
    );
    let lease = Duration::from_secs(30);
    let exports = InFlight::new("exports", 2, lease).unwrap();
    let t0 = Timestamp::from_micros(1_760_000_000_000_000);
    let at = |offset: Duration| t0 + offset;
    let first = one.pinned(t0).acquire(&exports, b"k").await.unwrap();
    let second = two.pinned(t0).acquire(&exports, b"k").await.unwrap();
    let (first, second) = (first.slot.unwrap(), second.slot.unwrap());
    assert!(!one
        .pinned(t0)
        .acquire(&exports, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
    // The other store releases the first one's slot, once.
    two.pinned(t0).release(&exports, &first).await.unwrap();
    let again = one.pinned(t0).release(&exports, &first).await;
    assert!(
        matches!(
            again,
            Err(StoreError::Reservation(ReservationError::Unknown))
        ),
        "{again:?}"
    );
    let third = one.pinned(t0).acquire(&exports, b"k").await.unwrap();
    assert!(third.outcome.is_allowed());
    // Just before the lease's end the cap is still full; at it, the slots
    // nobody released are free, and a late release finds nothing.
    let before = one.pinned(at(lease - Duration::from_micros(1)));
    assert!(!before
        .acquire(&exports, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
    let after = one.pinned(at(lease));
    assert!(after.release(&exports, &second).await.is_err());
    assert!(after
        .acquire(&exports, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
    assert!(after
        .acquire(&exports, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
    assert!(!after
        .acquire(&exports, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keys_slots_live_in_redis_no_longer_than_its_last_lease() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let exports = InFlight::new("exports", 5, Duration::from_secs(30)).unwrap();
    let slot = store.acquire(&exports, b"k").await.unwrap().slot.unwrap();
    let mut redis = server.connection();
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*in-flight")
        .query(&mut redis)
        .unwrap();
    assert_eq!(keys.len(), 1, "one sorted set per key");
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut redis).unwrap();
    assert!((1..=31_000).contains(&ttl), "{ttl}");
    store.release(&exports, &slot).await.unwrap();
    let left: i64 = redis::cmd("ZCARD").arg(&keys[0]).query(&mut redis).unwrap();
    assert_eq!(left, 0);
}
