//! purge, count and reset.

use futures_executor::block_on;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, policy::Algorithm, Clock, FixedWindow, Gcra, Limit, SlidingWindow, Store,
    Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;

fn store(dir: &tempfile::TempDir, clock: &ManualClock) -> SqliteStore<ManualClock> {
    SqliteStore::builder(dir.path().join("maintenance.db"))
        .clock(clock.clone())
        .open()
        .unwrap()
}

#[test]
fn purge_deletes_exactly_the_expired_rows() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = store(&dir, &clock);
    // A 10 s window and a 60 s window.
    let short = Limit::new(
        "short",
        FixedWindow::new(5, Duration::from_secs(10)).unwrap(),
    )
    .unwrap();
    let long = Limit::new(
        "long",
        SlidingWindow::new(5, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    for key in 0..10u32 {
        let key = key.to_be_bytes();
        assert!(block_on(store.check(&short, &key, 1)).unwrap().is_allowed());
        assert!(block_on(store.check(&long, &key, 1)).unwrap().is_allowed());
    }
    assert_eq!(block_on(store.count()).unwrap(), 20);
    // Nothing has expired yet.
    assert_eq!(block_on(store.purge(clock.now())).unwrap(), 0);
    // The fixed window's rows expire at its end (t = 1010 s).
    let end = Timestamp::from_secs(1_010);
    assert_eq!(
        block_on(store.purge(end - Duration::from_nanos(1))).unwrap(),
        0
    );
    assert_eq!(block_on(store.purge(end)).unwrap(), 10);
    assert_eq!(block_on(store.count()).unwrap(), 10);
    // The sliding window's rows two windows after the start of theirs
    // (windows are aligned to the clock's epoch: it began at 960 s).
    let end = Timestamp::from_secs(960 + 120);
    assert_eq!(
        block_on(store.purge(end - Duration::from_nanos(1))).unwrap(),
        0
    );
    assert_eq!(block_on(store.purge(end)).unwrap(), 10);
    assert_eq!(block_on(store.count()).unwrap(), 0);
}

#[test]
fn purging_changes_no_decision() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(50));
    let store = store(&dir, &clock);
    let bucket = TokenBucket::new(2, Duration::from_secs(1), 4).unwrap();
    let limit = Limit::new("bucket", bucket).unwrap();
    let mut state = bucket.fresh();
    for step in 0..40u64 {
        let now = Timestamp::from_secs(50) + Duration::from_millis(step * 450);
        clock.set(now);
        let cost = step % 3 + 1;
        let (expected, next) = bucket.decide(&state, now, cost);
        state = next;
        let got = block_on(store.check(&limit, b"k", cost)).unwrap();
        assert_eq!(got.decision(), Some(&expected), "step {step}");
        // Purging at every step forgets only states that are whole again.
        block_on(store.purge(now)).unwrap();
    }
}

#[test]
fn purge_works_in_batches() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1));
    let store = store(&dir, &clock);
    let limit = Limit::new("many", Gcra::per_second(1).unwrap()).unwrap();
    for key in 0..2_500u32 {
        assert!(block_on(store.check(&limit, &key.to_be_bytes(), 1))
            .unwrap()
            .is_allowed());
    }
    assert_eq!(block_on(store.count()).unwrap(), 2_500);
    assert_eq!(
        block_on(store.purge(Timestamp::from_secs(2))).unwrap(),
        2_500
    );
    assert_eq!(block_on(store.count()).unwrap(), 0);
}

#[test]
fn reset_forgets_one_key_of_one_limit() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1));
    let store = store(&dir, &clock);
    let a = Limit::new("a", Gcra::per_hour(1).unwrap()).unwrap();
    let b = Limit::new("b", Gcra::per_hour(1).unwrap()).unwrap();
    for limit in [&a, &b] {
        for key in [b"x".as_slice(), b"y"] {
            assert!(block_on(store.check(limit, key, 1)).unwrap().is_allowed());
            assert!(!block_on(store.check(limit, key, 1)).unwrap().is_allowed());
        }
    }
    assert_eq!(block_on(store.count()).unwrap(), 4);
    assert!(block_on(store.reset(&a, b"x")).unwrap());
    assert!(!block_on(store.reset(&a, b"x")).unwrap());
    assert!(!block_on(store.reset(&a, b"never-seen")).unwrap());
    assert_eq!(block_on(store.count()).unwrap(), 3);
    // The key starts fresh; the others are still limited.
    assert!(block_on(store.check(&a, b"x", 1)).unwrap().is_allowed());
    assert!(!block_on(store.check(&a, b"y", 1)).unwrap().is_allowed());
    assert!(!block_on(store.check(&b, b"x", 1)).unwrap().is_allowed());
}

#[tokio::test]
async fn the_async_maintenance_methods() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(1));
    let store = store(&dir, &clock);
    let limit = Limit::new("a", Gcra::per_second(1).unwrap()).unwrap();
    for key in [b"x".as_slice(), b"y", b"z"] {
        assert!(block_on(store.check(&limit, key, 1)).unwrap().is_allowed());
    }
    assert_eq!(store.count().await.unwrap(), 3);
    assert!(store.reset(&limit, b"x").await.unwrap());
    assert_eq!(store.purge(Timestamp::from_secs(2)).await.unwrap(), 2);
    assert_eq!(store.count().await.unwrap(), 0);
}
