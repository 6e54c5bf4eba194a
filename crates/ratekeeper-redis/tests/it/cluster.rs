//! Redis Cluster: three masters on loopback, joined by `redis-cli --cluster
//! create`. Exact limits on keys spread over the slots, one atomic script
//! for hash-tagged multi-limit checks, and the cross-slot behaviours.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::collections::HashSet;
use std::time::Duration;

use harness::RedisCluster;
use ratekeeper::{
    store::{Check, StoreError},
    FixedWindow, Gcra, Limit, Outcome, Store, Timestamp, TokenBucket,
};
use ratekeeper_redis::internals::hash_slot;
use ratekeeper_redis::{CrossSlot, RedisStore, RedisStoreBuilder};

const LIMIT: u64 = 20;

async fn connect(cluster: &RedisCluster, cross_slot: CrossSlot) -> RedisStore {
    connect_with(cluster, unhurried::builder().cross_slot(cross_slot)).await
}

async fn connect_with(cluster: &RedisCluster, builder: RedisStoreBuilder) -> RedisStore {
    builder.cluster(cluster.urls()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_limits() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let store = connect(&cluster, CrossSlot::Compensate).await;
    let day = Duration::from_secs(86_400);
    let at = Timestamp::from_secs(1_760_000_000);

    // Exact per key, for keys all over the slots (so on all three nodes),
    // with 8 concurrent tasks per key.
    let limit = Limit::new("spread", Gcra::new(LIMIT, day, LIMIT).unwrap()).unwrap();
    let keys: Vec<Vec<u8>> = (0..12).map(|i| format!("user-{i}").into_bytes()).collect();
    let slots: HashSet<u16> = keys
        .iter()
        .map(|k| hash_slot(&store.key(&limit, k)))
        .collect();
    assert!(slots.len() > 6, "the keys spread over slots");
    let mut tasks = tokio::task::JoinSet::new();
    for key in &keys {
        for _ in 0..8 {
            let (store, limit, key) = (store.clone(), limit.clone(), key.clone());
            tasks.spawn(async move {
                let mut allowed = 0u64;
                for _ in 0..5 {
                    let outcome = store.pinned(at).check(&limit, &key, 1).await.unwrap();
                    allowed += u64::from(outcome.is_allowed());
                }
                (key, allowed)
            });
        }
    }
    let mut per_key = std::collections::HashMap::new();
    while let Some(joined) = tasks.join_next().await {
        let (key, allowed) = joined.unwrap();
        *per_key.entry(key).or_insert(0u64) += allowed;
    }
    for key in &keys {
        assert_eq!(per_key[key], LIMIT, "key {}", String::from_utf8_lossy(key));
    }
    // On Redis's clock, on every node.
    for key in &keys {
        let live = Limit::new("spread-live", Gcra::new(3, day, 3).unwrap()).unwrap();
        let mut allowed = 0;
        for _ in 0..5 {
            allowed += u64::from(store.check(&live, key, 1).await.unwrap().is_allowed());
        }
        assert_eq!(allowed, 3);
    }

    // Several limits on hash-tagged keys (in a store told that no client
    // chooses its keys): one slot, one atomic script.
    let store = connect_with(&cluster, unhurried::builder().hash_tags_in_keys(true)).await;
    let per_user = Limit::new("per-user", FixedWindow::new(3, day).unwrap()).unwrap();
    let per_route = Limit::new("per-route", TokenBucket::new(5, day, 5).unwrap()).unwrap();
    let (user_key, route_key) = (&b"{u42}"[..], &b"{u42}:upload"[..]);
    assert_eq!(
        hash_slot(&store.key(&per_user, user_key)),
        hash_slot(&store.key(&per_route, route_key))
    );
    let checks = [
        Check::new(&per_user, user_key, 1),
        Check::new(&per_route, route_key, 1),
    ];
    for _ in 0..3 {
        assert!(store
            .pinned(at)
            .check_all(&checks)
            .await
            .unwrap()
            .is_allowed());
    }
    let denied = store.pinned(at).check_all(&checks).await.unwrap();
    assert_eq!(denied.denied_by(), Some(0));
    // The denied request took nothing from the route's bucket: 2 left.
    let route = store.pinned(at).peek(&per_route, route_key).await.unwrap();
    assert_eq!(route.remaining(), 2);

    // Untagged keys in different slots: decided slot by slot, refunded
    // when a later slot denies.
    let a = Limit::new("xa", FixedWindow::new(5, day).unwrap()).unwrap();
    let b = Limit::new("xb", FixedWindow::new(1, day).unwrap()).unwrap();
    let (ka, kb) = pick_keys_in_different_slots(&store, &a, &b);
    let checks = [Check::new(&a, &ka, 1), Check::new(&b, &kb, 1)];
    assert!(store
        .pinned(at)
        .check_all(&checks)
        .await
        .unwrap()
        .is_allowed());
    let denied = store.pinned(at).check_all(&checks).await.unwrap();
    assert_eq!(denied.denied_by(), Some(1));
    assert!(matches!(denied.outcomes()[0], Outcome::Decided(d) if d.is_allowed()));
    let left = store.pinned(at).peek(&a, &ka).await.unwrap();
    assert_eq!(left.remaining(), 4, "the first slot was refunded");

    // ...or refused, when asked.
    let strict = connect(&cluster, CrossSlot::Refuse).await;
    let error = strict.pinned(at).check_all(&checks).await.unwrap_err();
    assert!(
        matches!(error, StoreError::UnsupportedOperation(_)),
        "{error:?}"
    );
}

fn pick_keys_in_different_slots(store: &RedisStore, a: &Limit, b: &Limit) -> (Vec<u8>, Vec<u8>) {
    let ka = b"alpha".to_vec();
    let slot = hash_slot(&store.key(a, &ka));
    let kb = (0..)
        .map(|i| format!("beta-{i}").into_bytes())
        .find(|k| hash_slot(&store.key(b, k)) != slot)
        .unwrap();
    (ka, kb)
}

/// The number of keys on each node.
fn keys_per_node(cluster: &RedisCluster) -> Vec<u64> {
    cluster
        .nodes
        .iter()
        .map(|node| redis::cmd("DBSIZE").query(&mut node.connection()).unwrap())
        .collect()
}

/// A client's `{a}` does not choose the slot: keys `{a}0`, `{a}1`, ...
/// spread over the slots and the masters as plain keys do, unless the store
/// is told that its keys' tags are the application's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hash_tag_in_a_client_key_does_not_choose_the_slot() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let store = connect(&cluster, CrossSlot::Compensate).await;
    let limit = Limit::new("tagged", Gcra::per_minute(10).unwrap()).unwrap();
    let keys: Vec<Vec<u8>> = (0..30).map(|i| format!("{{a}}{i}").into_bytes()).collect();
    let slots: HashSet<u16> = keys
        .iter()
        .map(|k| hash_slot(&store.key(&limit, k)))
        .collect();
    assert!(slots.len() > 20, "{} slots for 30 keys", slots.len());
    for key in &keys {
        assert!(store.check(&limit, key, 1).await.unwrap().is_allowed());
    }
    let spread = keys_per_node(&cluster);
    assert_eq!(spread.iter().sum::<u64>(), 30, "{spread:?}");
    assert!(
        spread.iter().all(|&n| n > 0),
        "every master holds some of the keys: {spread:?}"
    );

    // Told the tags are the application's, the store puts them in a's slot.
    let tagged = connect_with(&cluster, unhurried::builder().hash_tags_in_keys(true)).await;
    let slots: HashSet<u16> = keys
        .iter()
        .map(|k| hash_slot(&tagged.key(&limit, k)))
        .collect();
    assert_eq!(slots.into_iter().collect::<Vec<_>>(), [hash_slot(b"a")]);
}
