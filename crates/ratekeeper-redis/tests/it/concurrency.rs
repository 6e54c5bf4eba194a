//! Many clients on one key admit exactly the limit: 8 stores (8 connections)
//! and 8 tasks on one multiplexed connection, for every policy.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::sync::Arc;
use std::time::Duration;

use harness::RedisServer;
use ratekeeper::{
    FixedWindow, Gcra, Limit, Policy, SlidingLog, SlidingWindow, Store, Timestamp, TokenBucket,
};
use ratekeeper_redis::RedisStore;

const CLIENTS: usize = 8;
const CALLS_PER_CLIENT: usize = 60;
const LIMIT: u64 = 100;

/// Quotas of 100 that refill slowly (or not at all within the test).
fn policies() -> Vec<Policy> {
    let day = Duration::from_secs(86_400);
    vec![
        TokenBucket::new(LIMIT, day, LIMIT).unwrap().into(),
        Gcra::new(LIMIT, day, LIMIT).unwrap().into(),
        FixedWindow::new(LIMIT, day).unwrap().into(),
        SlidingLog::new(LIMIT, day).unwrap().into(),
        SlidingWindow::new(LIMIT, day).unwrap().into(),
    ]
}

/// Runs `CLIENTS` tasks, each with its own store from `stores`, hitting one
/// key; returns how many calls were allowed. `at` pins the time (so window
/// boundaries cannot split the run); `None` uses Redis's clock.
async fn hammer(stores: &[RedisStore], limit: &Limit, at: Option<Timestamp>) -> u64 {
    let barrier = Arc::new(tokio::sync::Barrier::new(stores.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for store in stores {
        let (store, limit, barrier) = (store.clone(), limit.clone(), Arc::clone(&barrier));
        tasks.spawn(async move {
            barrier.wait().await;
            let mut allowed = 0u64;
            for _ in 0..CALLS_PER_CLIENT {
                let outcome = match at {
                    Some(at) => store.pinned(at).check(&limit, b"hot", 1).await,
                    None => store.check(&limit, b"hot", 1).await,
                };
                allowed += u64::from(outcome.unwrap().is_allowed());
            }
            allowed
        });
    }
    let mut total = 0;
    while let Some(allowed) = tasks.join_next().await {
        total += allowed.unwrap();
    }
    total
}

async fn connect(server: &RedisServer) -> RedisStore {
    unhurried::connect(&server.url()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_connections_admit_exactly_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut stores = Vec::new();
    for _ in 0..CLIENTS {
        stores.push(connect(&server).await);
    }
    let at = Timestamp::from_secs(1_760_000_000);
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("eight-{index}"), policy.clone()).unwrap();
        let allowed = hammer(&stores, &limit, Some(at)).await;
        assert_eq!(allowed, LIMIT, "{policy:?}");
    }
    // On Redis's clock too, for the policies without window boundaries.
    for (index, policy) in policies().into_iter().take(2).enumerate() {
        let limit = Limit::new(format!("eight-live-{index}"), policy.clone()).unwrap();
        let allowed = hammer(&stores, &limit, None).await;
        assert_eq!(allowed, LIMIT, "{policy:?} on Redis's clock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_tasks_on_one_multiplexed_connection_admit_exactly_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server).await;
    let stores = vec![store; CLIENTS];
    let at = Timestamp::from_secs(1_760_000_000);
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("shared-{index}"), policy.clone()).unwrap();
        let allowed = hammer(&stores, &limit, Some(at)).await;
        assert_eq!(allowed, LIMIT, "{policy:?}");
    }
    for (index, policy) in policies().into_iter().take(2).enumerate() {
        let limit = Limit::new(format!("shared-live-{index}"), policy.clone()).unwrap();
        let allowed = hammer(&stores, &limit, None).await;
        assert_eq!(allowed, LIMIT, "{policy:?} on Redis's clock");
    }
}
