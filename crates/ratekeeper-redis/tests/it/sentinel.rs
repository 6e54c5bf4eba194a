//! A store that finds its primary through Redis Sentinel: the conformance
//! suite on it, and a failover followed without a restart, exact after it,
//! with no call on the old primary once it is a replica.

use std::time::Duration;

use ratekeeper::policy::FixedWindow;
use ratekeeper::{Limit, Store};
use ratekeeper_redis::{ConnectError, RedisStore};
use ratekeeper_test_support::conformance::Supports;
use ratekeeper_test_support::redis_sentinel::{SentinelSet, MASTER_NAME};

use crate::unhurried;

async fn sentinel() -> Option<(SentinelSet, RedisStore)> {
    let set = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap()?;
    let store = unhurried::builder()
        .sentinel(set.sentinel_urls(), MASTER_NAME)
        .await
        .expect("connect through the Sentinels");
    Some((set, store))
}

// Two servers and three Sentinels per store: one store for the suite.
ratekeeper_test_support::store_conformance!(sentinel, Supports::EVERYTHING, one store);

/// Script calls the server has answered (`FCALL`, `EVALSHA`, `EVAL`).
fn script_calls(server: &ratekeeper_test_support::redis::RedisServer) -> u64 {
    ["fcall", "evalsha", "eval"]
        .iter()
        .map(|command| server.command_stats(command).0)
        .sum()
}

/// How many checks of `key` the store allowed before the first refusal,
/// and how many failed on the way (waiting 50 ms after each; at most 200,
/// ten seconds and more: a store that never answers again fails here).
async fn allowed_until_refused(store: &RedisStore, limit: &Limit, key: &[u8]) -> (u32, u32) {
    let (mut allowed, mut failed) = (0, 0);
    loop {
        match store.check(limit, key, 1).await {
            Ok(outcome) if outcome.is_allowed() => allowed += 1,
            Ok(_) => return (allowed, failed),
            Err(_) => {
                failed += 1;
                assert!(failed < 200, "the store never found the new primary");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

#[test]
fn a_failover_is_followed_without_a_restart_and_counts_stay_exact() {
    ratekeeper_test_support::conformance::runtime().block_on(async {
        let Some((set, store)) = sentinel().await else {
            return;
        };
        // A window of 30 days: no test run crosses one.
        let window = FixedWindow::new(10, Duration::from_secs(30 * 24 * 3600)).unwrap();
        let limit = Limit::new("failover", window).unwrap();
        for _ in 0..4 {
            assert!(store.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        let set = tokio::task::spawn_blocking(move || {
            set.wait_for_replica_sync();
            set.fail_over();
            set
        })
        .await
        .unwrap();
        let old_primary_calls = script_calls(set.replica());
        let new_primary_calls = script_calls(set.master());

        // The first calls after the switch may fail (the old primary, a
        // replica now, refuses writes); then the new primary answers, with
        // the 4 already used.
        let (allowed, failed) = allowed_until_refused(&store, &limit, b"k").await;
        assert_eq!(
            allowed, 6,
            "exact across the failover ({failed} calls failed)"
        );
        assert!(
            failed <= 1,
            "{failed} calls failed after the Sentinels had switched"
        );
        assert!(script_calls(set.master()) > new_primary_calls);
        assert_eq!(
            script_calls(set.replica()),
            old_primary_calls,
            "a call reached the old primary after it became a replica"
        );
    });
}

#[test]
fn tls_through_sentinel_is_refused_until_it_is_supported() {
    ratekeeper_test_support::conformance::runtime().block_on(async {
        let refused = RedisStore::builder()
            .sentinel(["rediss://127.0.0.1:1"], MASTER_NAME)
            .await;
        assert!(matches!(refused, Err(ConnectError::SentinelTls)));
    });
}

#[test]
fn a_crashed_primary_is_replaced_under_load_and_never_written_to_again() {
    ratekeeper_test_support::conformance::runtime().block_on(async {
        let Some((set, store)) = sentinel().await else {
            return;
        };
        let store = std::sync::Arc::new(store);
        let window = FixedWindow::new(10, Duration::from_secs(30 * 24 * 3600)).unwrap();
        let limit = Limit::new("crash", window).unwrap();
        for _ in 0..4 {
            assert!(store.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        // Load on other keys while the primary dies: each call is a
        // decision or the store's error, never a hang past its timeout.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut load = Vec::new();
        for worker in 0..4u8 {
            let (store, stop) = (std::sync::Arc::clone(&store), std::sync::Arc::clone(&stop));
            let limit = Limit::new(
                "load",
                FixedWindow::new(1_000_000, Duration::from_secs(60)).unwrap(),
            )
            .unwrap();
            load.push(tokio::spawn(async move {
                let (mut decided, mut failed) = (0u32, 0u32);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    match store.check(&limit, &[worker], 1).await {
                        Ok(_) => decided += 1,
                        Err(_) => {
                            failed += 1;
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
                (decided, failed)
            }));
        }
        let set = tokio::task::spawn_blocking(move || {
            let mut set = set;
            set.wait_for_replica_sync();
            let dead = set.kill_primary();
            (set, dead)
        })
        .await
        .unwrap();
        let (mut set, dead) = set;

        // The store finds the new primary; "k" keeps its 4 (synced before
        // the crash) and counts exactly from there.
        let (allowed, failed) = allowed_until_refused(&store, &limit, b"k").await;
        assert_eq!(
            allowed, 6,
            "exact after the failover ({failed} calls failed)"
        );

        // The old primary comes back, empty, and is made a replica: no
        // call of the store reaches it.
        set = tokio::task::spawn_blocking(move || {
            set.restart_as_replica(dead);
            set
        })
        .await
        .unwrap();
        for _ in 0..20 {
            let _ = store.check(&limit, b"k", 1).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut decided_after_all = 0;
        for worker in load {
            let (decided, _) = worker.await.unwrap();
            decided_after_all += decided;
        }
        assert!(decided_after_all > 0, "the load decided nothing");
        assert_eq!(
            script_calls(&set.servers[dead]),
            0,
            "a call reached the old primary after it came back"
        );
        assert!(!store.check(&limit, b"k", 1).await.unwrap().is_allowed());
    });
}

#[test]
fn a_primary_with_a_password_is_reached_with_its_credentials() {
    ratekeeper_test_support::conformance::runtime().block_on(async {
        let start = || SentinelSet::start_with_password("s3cret");
        let Some(set) = tokio::task::spawn_blocking(start).await.unwrap() else {
            return;
        };
        let builder = || unhurried::builder().connect_timeout(Duration::from_secs(10));
        let store = builder()
            .sentinel_primary_auth(None, "s3cret")
            .sentinel(set.sentinel_urls(), MASTER_NAME)
            .await
            .expect("the primary takes the password");
        let limit = Limit::new(
            "auth",
            FixedWindow::new(2, Duration::from_secs(3600)).unwrap(),
        )
        .unwrap();
        let decided: Vec<bool> = [
            store.check(&limit, b"k", 1).await.unwrap().is_allowed(),
            store.check(&limit, b"k", 1).await.unwrap().is_allowed(),
            store.check(&limit, b"k", 1).await.unwrap().is_allowed(),
        ]
        .into();
        assert_eq!(decided, [true, true, false]);
        // Without it the primary refuses the connection.
        let refused = builder().sentinel(set.sentinel_urls(), MASTER_NAME).await;
        assert!(refused.is_err());
        let shown = format!(
            "{:?}",
            builder().sentinel_primary_auth(Some("rk"), "s3cret")
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    });
}
