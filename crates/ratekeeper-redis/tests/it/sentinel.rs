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
        let (mut allowed, mut failed) = (0, 0);
        loop {
            match store.check(&limit, b"k", 1).await {
                Ok(outcome) if outcome.is_allowed() => allowed += 1,
                Ok(_) => break,
                Err(_) => {
                    failed += 1;
                    assert!(failed < 100, "the store never found the new primary");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
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
