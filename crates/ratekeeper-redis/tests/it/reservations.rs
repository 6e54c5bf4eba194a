//! Reservations on Redis: kept beside the key's state, in its slot, so
//! that they outlive the store that made them and expire on Redis's time.

use std::time::Duration;

use ratekeeper::{
    store::{reservation::ReservationError, Reservation, StoreError},
    Limit, Store, Timestamp, TokenBucket,
};
use ratekeeper_test_support::redis::RedisServer;

use crate::unhurried;

fn tokens() -> Limit {
    Limit::new("tokens", TokenBucket::per_hour(1_000).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_outlives_the_store_that_made_it() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limit = tokens();
    let token = {
        let first = unhurried::connect(&server.url()).await;
        let reserved = first
            .reserve(&limit, b"k", 300, Duration::from_secs(60))
            .await
            .unwrap();
        reserved.reservation.unwrap().to_token()
    };
    // The key of the reservations lives no longer than they do.
    let mut redis = server.connection();
    let reservations = |redis: &mut redis::Connection| -> Vec<Vec<u8>> {
        redis::cmd("KEYS")
            .arg("*reservations")
            .query(redis)
            .unwrap()
    };
    let keys = reservations(&mut redis);
    assert_eq!(keys.len(), 1, "{keys:?}");
    let pttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut redis).unwrap();
    assert!(pttl > 0 && pttl <= 60_001, "{pttl}");
    let second = unhurried::connect(&server.url()).await;
    let reservation = Reservation::from_token(&token).unwrap();
    assert_eq!(second.peek(&limit, b"k").await.unwrap().remaining(), 700);
    let settled = second.commit(&limit, &reservation, 100).await.unwrap();
    assert!(settled.is_allowed());
    assert_eq!(settled.decision().unwrap().remaining(), 900);
    // Settled, the last one: no key is left.
    assert!(reservations(&mut redis).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_expires_on_the_stores_time() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let limit = tokens();
    let t0 = Timestamp::from_micros(1_760_000_000_000_000);
    let ttl = Duration::from_secs(30);
    let held = store
        .pinned(t0)
        .reserve(&limit, b"k", 10, ttl)
        .await
        .unwrap()
        .reservation
        .unwrap();
    let before = store.pinned(t0 + ttl - Duration::from_micros(1));
    let other = before.reserve(&limit, b"k", 10, ttl).await.unwrap();
    assert!(before
        .cancel(&limit, &other.reservation.unwrap())
        .await
        .is_ok());
    let late = store.pinned(t0 + ttl).commit(&limit, &held, 0).await;
    assert!(
        matches!(
            late,
            Err(StoreError::Reservation(ReservationError::Unknown))
        ),
        "{late:?}"
    );
}
