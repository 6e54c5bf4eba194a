//! What leasing asks of a store: a take of as many units as are left, with
//! Redis's time of it, and a refund applied only before a deadline on that
//! clock; and leasing itself over one real Redis, exact for two nodes.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::time::Duration;

use harness::RedisServer;
use ratekeeper::store::lease::Leased;
use ratekeeper::{FixedWindow, Limit, Store};

#[tokio::test]
async fn a_take_takes_what_is_left_and_a_late_refund_changes_nothing() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let limit = Limit::new(
        "take",
        FixedWindow::from_first_hit(10, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let first = store.take(&limit, b"k", 1, 8).await.unwrap();
    assert_eq!(first.units, 8);
    let at = first.at.expect("Redis's time of the take");
    // 2 left: both taken, in one call or two.
    assert_eq!(store.take(&limit, b"k", 1, 8).await.unwrap().units, 2);
    let refused = store.take(&limit, b"k", 1, 8).await.unwrap();
    assert_eq!(refused.units, 0);
    assert!(!refused.outcome.is_allowed());

    // A deadline already past on Redis's clock: nothing given back.
    assert!(!store.refund_before(&limit, b"k", 3, at).await.unwrap());
    assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 0);
    // One ahead of it: given back.
    let later = at.saturating_add(Duration::from_secs(3_600));
    assert!(store.refund_before(&limit, b"k", 3, later).await.unwrap());
    assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_leasing_nodes_on_one_redis_admit_the_limit_and_give_back_what_they_hold() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limit = Limit::new(
        "leased",
        FixedWindow::from_first_hit(500, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let nodes = [
        Leased::new(unhurried::connect(&server.url()).await),
        Leased::new(unhurried::connect(&server.url()).await),
    ];
    let mut allowed = 0;
    for _ in 0..200 {
        for node in &nodes {
            allowed += u64::from(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
    }
    assert_eq!(allowed, 400, "below the limit, every request passes");
    let held: u64 = nodes.iter().map(Leased::held).sum();
    assert!(held > 0, "busy nodes hold units");
    let store = nodes[0].store();
    assert_eq!(
        store.peek(&limit, b"k").await.unwrap().remaining() + held + 400,
        500
    );
    // Given back before the window ends, they are the store's again.
    let mut returned = 0;
    for node in &nodes {
        returned += node.give_back_all().await;
    }
    assert_eq!(returned, held);
    assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 100);
    // And the rest of the limit, no more, from both.
    for _ in 0..100 {
        for node in &nodes {
            allowed += u64::from(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
    }
    assert_eq!(allowed, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leasing_nodes_take_in_flight_slots_at_the_store() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let cap =
        ratekeeper::store::in_flight::InFlight::new("jobs", 1, Duration::from_secs(60)).unwrap();
    let nodes = [
        Leased::new(unhurried::connect(&server.url()).await),
        Leased::new(unhurried::connect(&server.url()).await),
    ];
    let slot = nodes[0].acquire(&cap, b"k").await.unwrap().slot.unwrap();
    // The other node sees the one slot taken: nothing is leased.
    assert!(!nodes[1]
        .acquire(&cap, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
    nodes[1].release(&cap, &slot).await.unwrap();
    assert!(nodes[0]
        .acquire(&cap, b"k")
        .await
        .unwrap()
        .outcome
        .is_allowed());
}
