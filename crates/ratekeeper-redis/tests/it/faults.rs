//! Faults: a killed server, a restarted one, a frozen one (SIGSTOP). Every
//! call returns with the error its timeout makes (or as `Resilient`
//! decides), within a bound that only has to be finite; decisions resume soon after a restart (within a
//! second on an idle machine; the bound here leaves a loaded one margin).

use ratekeeper_test_support::redis as harness;

use std::time::{Duration, Instant};

use harness::RedisServer;
use ratekeeper::{
    store::{FailureMode, FailurePolicy, Resilient, StoreError},
    Gcra, Limit, Store, Timestamp,
};
use ratekeeper_redis::RedisStore;

const TIMEOUT: Duration = Duration::from_millis(100);
/// How late past its timeout a call may end. A frozen or dead server stays
/// so until every bound is checked, so a call that its timeout did not end
/// would never end: any finite bound tells the two apart, and the error
/// (`Timeout` with the configured duration) says which ended it. Generous,
/// so that a 2-core machine stalling the test for seconds does not fail it.
const SLACK: Duration = harness::UNHURRIED;
/// How soon decisions must resume after a restart or SIGCONT.
const RESUMED: Duration = Duration::from_secs(5);
/// How long a healthy server may take to answer the first check: the
/// 100 ms timeout is under test only once the fault is in place.
const WARM_UP: Duration = Duration::from_secs(10);

fn limit() -> Limit {
    Limit::new("faults", Gcra::per_second(1_000).unwrap()).unwrap()
}

async fn connect(server: &RedisServer) -> RedisStore {
    RedisStore::builder()
        .timeout(TIMEOUT)
        .connect(&server.url())
        .await
        .unwrap()
}

/// Calls `check` `n` times; each must fail within the timeout plus slack.
async fn every_call_fails_in_time<S: Store>(store: &S, n: usize) -> Vec<StoreError> {
    let limit = limit();
    let mut errors = Vec::new();
    for _ in 0..n {
        let start = Instant::now();
        let result = store.check(&limit, b"k", 1).await;
        let took = start.elapsed();
        assert!(took <= TIMEOUT + SLACK, "a call took {took:?}");
        errors.push(result.expect_err("the server is gone"));
    }
    errors
}

/// Polls until a decision comes from the store; returns how long it took.
async fn recovers_within<S: Store>(store: &S, deadline: Duration) -> Duration {
    let limit = limit();
    let start = Instant::now();
    loop {
        if store.check(&limit, b"k", 1).await.is_ok() {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < deadline,
            "decisions did not resume within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_then_restarted() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server).await;
    recovers_within(&store, WARM_UP).await;

    server.kill();
    let errors = every_call_fails_in_time(&store, 20).await;
    assert!(
        errors
            .iter()
            .all(|e| matches!(e, StoreError::Unavailable(_) | StoreError::Timeout(_))),
        "{errors:?}"
    );

    server.restart();
    let took = recovers_within(&store, RESUMED).await;
    eprintln!("decisions resumed {took:?} after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_times_out() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server).await;
    recovers_within(&store, WARM_UP).await;

    server.pause();
    let errors = every_call_fails_in_time(&store, 5).await;
    assert!(
        errors
            .iter()
            .all(|e| matches!(e, StoreError::Timeout(t) if *t == TIMEOUT)),
        "{errors:?}"
    );
    // Concurrent calls time out too.
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let store = store.clone();
        tasks.spawn(async move {
            let start = Instant::now();
            let result = store.check(&limit(), b"k", 1).await;
            (start.elapsed(), result)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let (took, result) = joined.unwrap();
        assert!(
            matches!(result, Err(StoreError::Timeout(t)) if t == TIMEOUT),
            "{result:?}"
        );
        assert!(took <= TIMEOUT + SLACK, "{took:?}");
    }

    server.resume();
    let took = recovers_within(&store, RESUMED).await;
    eprintln!("decisions resumed {took:?} after SIGCONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resilient_fails_open_or_closed() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let retry = Duration::from_millis(50);
    let open = Resilient::new(
        connect(&server).await,
        FailurePolicy::new(FailureMode::Open).with_retry_after(retry),
    );
    let closed = Resilient::new(
        connect(&server).await,
        FailurePolicy::new(FailureMode::Closed).with_retry_after(retry),
    );
    let limit = limit();
    recovers_within(&closed, WARM_UP).await;

    server.kill();
    for _ in 0..10 {
        let start = Instant::now();
        let outcome = open.check(&limit, b"k", 1).await.expect("fails open");
        assert!(outcome.is_allowed());
        let error = closed
            .check(&limit, b"k", 1)
            .await
            .expect_err("fails closed");
        assert!(
            matches!(
                error,
                StoreError::Unavailable(_) | StoreError::Timeout(_) | StoreError::Down { .. }
            ),
            "{error:?}"
        );
        assert!(start.elapsed() <= 2 * TIMEOUT + SLACK);
    }
    assert!(open.stats().failed_open >= 10);
    assert!(closed.stats().failed_closed >= 10);

    server.restart();
    recovers_within(&closed, RESUMED).await;
    // The open store always answers; it is back when an answer comes from
    // Redis rather than from failing open.
    let start = Instant::now();
    loop {
        let before = open.stats().failed_open;
        let outcome = open.check(&limit, b"k", 1).await.unwrap();
        if open.stats().failed_open == before {
            assert!(outcome.is_allowed());
            break;
        }
        assert!(start.elapsed() < RESUMED, "not back within {RESUMED:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The pinned test hook goes through the same timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_calls_are_bounded_too() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server).await;
    recovers_within(&store, WARM_UP).await;
    server.pause();
    let start = Instant::now();
    let pinned = store.pinned(Timestamp::from_secs(1_760_000_000));
    let error = pinned.check(&limit(), b"k", 1).await.unwrap_err();
    assert!(matches!(error, StoreError::Timeout(_)), "{error:?}");
    assert!(start.elapsed() <= TIMEOUT + SLACK);
    server.resume();
}
