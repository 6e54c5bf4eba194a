//! Coalescing: calls made while the store's script calls are all running
//! wait and go together in one script, each decided as if it ran alone, in
//! the order queued; exact under load; bounded by each call's timeout.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::RedisServer;
use ratekeeper::{
    store::{Check, StoreError},
    FixedWindow, Gcra, Limit, Outcome, Policy, SlidingLog, SlidingWindow, Store, Timestamp,
    TokenBucket,
};
use ratekeeper_redis::{Batching, RedisStore};

const AT: u64 = 1_760_000_000;

fn policies(quota: u64) -> Vec<Policy> {
    let minute = Duration::from_secs(60);
    vec![
        TokenBucket::new(quota, minute, quota).unwrap().into(),
        Gcra::new(quota, minute, quota).unwrap().into(),
        FixedWindow::new(quota, minute).unwrap().into(),
        SlidingLog::new(quota, minute).unwrap().into(),
        SlidingWindow::new(quota, minute).unwrap().into(),
    ]
}

async fn connect(server: &RedisServer, prefix: &str, batching: Batching) -> RedisStore {
    unhurried::builder()
        .prefix(prefix)
        .batching(batching)
        .connect(&server.url())
        .await
        .unwrap()
}

/// A check of `key` in a task of its own: it runs up to its first wait
/// when this (current-thread) runtime next yields.
fn spawn_check(
    store: &RedisStore,
    limit: &Limit,
    key: &'static [u8],
) -> tokio::task::JoinHandle<Result<Outcome, StoreError>> {
    let (store, limit) = (store.clone(), limit.clone());
    tokio::spawn(async move { store.check(&limit, key, 1).await })
}

/// One call of the mixed sequence.
#[derive(Clone)]
enum Op {
    Check(usize, &'static str, u64),
    Peek(usize, &'static str),
    Refund(usize, &'static str, u64),
    CheckAll(Vec<(usize, &'static str)>, u64),
}

/// What a call gave, comparable across stores (errors by kind only).
async fn apply(store: &RedisStore, limits: &[Limit], op: &Op) -> String {
    let at = store.pinned(Timestamp::from_secs(AT));
    let result = match op {
        Op::Check(l, key, cost) => at
            .check(&limits[*l], key.as_bytes(), *cost)
            .await
            .map(|o| format!("{o:?}")),
        Op::Peek(l, key) => at
            .peek(&limits[*l], key.as_bytes())
            .await
            .map(|d| format!("{d:?}")),
        Op::Refund(l, key, units) => at
            .refund(&limits[*l], key.as_bytes(), *units)
            .await
            .map(|()| "refunded".to_owned()),
        Op::CheckAll(checks, cost) => {
            let checks: Vec<Check<'_>> = checks
                .iter()
                .map(|(l, key)| Check::new(&limits[*l], key.as_bytes(), *cost))
                .collect();
            at.check_all(&checks).await.map(|o| format!("{o:?}"))
        }
    };
    result.unwrap_or_else(|error| match error {
        StoreError::Unavailable(_) => "unavailable".to_owned(),
        other => format!("unexpected error: {other}"),
    })
}

/// Every policy: charges and denials on a shared key, a key of another
/// type, peeks and refunds, and limits checked together (one denying).
fn sequence() -> Vec<Op> {
    let mut ops = Vec::new();
    for l in 0..5 {
        ops.extend([
            Op::Check(l, "hot", 1),
            Op::Check(l, "hot", 2),
            Op::Check(l, "wrong", 1),
            Op::Check(l, "hot", 1),
            Op::Peek(l, "hot"),
            Op::Check(l, "hot", 2),
            Op::Refund(l, "hot", 1),
            Op::Check(l, "cold", 9),
            Op::Check(l, "hot", 1),
        ]);
    }
    ops.extend([
        Op::CheckAll(vec![(1, "pair"), (2, "pair")], 2),
        Op::CheckAll(vec![(1, "pair"), (2, "pair")], 2),
        // the second limit denies: the first keeps nothing
        Op::CheckAll(vec![(0, "pair"), (2, "pair")], 2),
        Op::CheckAll(vec![(3, "pair"), (3, "pair")], 1),
        Op::Peek(0, "pair"),
        Op::CheckAll(vec![(4, "wrong"), (4, "pair")], 1),
        Op::Check(4, "pair", 1),
    ]);
    ops
}

#[tokio::test]
async fn calls_queued_together_are_decided_in_order_as_if_each_ran_alone() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let batched = connect(&server, "batched:", Batching::new(1, 64)).await;
    let alone = connect(&server, "alone:", Batching::OFF).await;
    let limits: Vec<Limit> = policies(5)
        .into_iter()
        .enumerate()
        .map(|(i, p)| Limit::new(format!("p{i}"), p).unwrap())
        .collect();
    let mut redis = server.connection();
    for prefix in ["batched:", "alone:"] {
        for limit in &limits {
            let key = format!("{prefix}{}:{}:wrong", limit.name().len(), limit.name());
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg("field")
                .arg(1)
                .query(&mut redis)
                .unwrap();
        }
    }
    let ops = sequence();
    let mut expected = Vec::new();
    for op in &ops {
        expected.push(apply(&alone, &limits, op).await);
    }
    assert!(expected.iter().any(|e| e == "unavailable"));
    assert!(expected.iter().any(|e| e.contains("allowed: false")));

    // Load the function, then freeze the server: the first call takes the
    // store's one script slot and waits; every later one queues behind it.
    let warm = Limit::new("warm", Gcra::per_second(10).unwrap()).unwrap();
    assert!(batched.check(&warm, b"w", 1).await.unwrap().is_allowed());
    let (fcalls_before, _) = server.command_stats("fcall");
    server.pause();
    let first = spawn_check(&batched, &warm, b"w");
    tokio::task::yield_now().await;
    let limits = Arc::new(limits);
    let queued: Vec<_> = ops
        .iter()
        .cloned()
        .map(|op| {
            let (store, limits) = (batched.clone(), Arc::clone(&limits));
            tokio::spawn(async move { apply(&store, &limits, &op).await })
        })
        .collect();
    // this (current-thread) runtime polls each spawned call, in order, up
    // to its wait in the queue before coming back here
    tokio::task::yield_now().await;
    server.resume();
    assert!(first.await.unwrap().unwrap().is_allowed());
    let mut got = Vec::new();
    for call in queued {
        got.push(call.await.unwrap());
    }
    let (fcalls_after, _) = server.command_stats("fcall");
    assert_eq!(
        fcalls_after - fcalls_before,
        2,
        "the first call alone, then one script for the {} queued",
        ops.len()
    );
    let stats = batched.batch_stats().expect("batching is on");
    let queued = ops.len() as u64;
    assert_eq!(
        (stats.sent_at_once, stats.queued, stats.batches),
        (2, queued, 1),
        "{stats:?}: the warm-up and the first call at once, the rest in one script"
    );
    assert_eq!(
        (stats.batched_calls, stats.abandoned),
        (queued, 0),
        "{stats:?}"
    );
    assert_eq!(alone.batch_stats(), None);
    for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "call {i}");
    }
    // the keys of another type were read with the batch's other keys (as
    // missing, by MGET) and are still what they were
    for prefix in ["batched:", "alone:"] {
        for limit in limits.iter() {
            let key = format!("{prefix}{}:{}:wrong", limit.name().len(), limit.name());
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut redis).unwrap();
            assert_eq!(kind, "hash", "{key}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_load_scripts_decide_many_calls_and_admit_exactly_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    const TASKS: usize = 64;
    const CALLS: usize = 10;
    const QUOTA: u64 = 100;
    let store = connect(&server, "load:", Batching::new(2, 64)).await;
    let (fcalls_before, _) = server.command_stats("fcall");
    for (i, policy) in policies(QUOTA).into_iter().enumerate() {
        let limit = Limit::new(format!("p{i}"), policy.clone()).unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..TASKS {
            let (store, limit, barrier) = (store.clone(), limit.clone(), Arc::clone(&barrier));
            tasks.spawn(async move {
                barrier.wait().await;
                let at = store.pinned(Timestamp::from_secs(AT));
                let (mut hot, mut own) = (0, 0);
                for _ in 0..CALLS {
                    hot += u64::from(at.check(&limit, b"hot", 1).await.unwrap().is_allowed());
                    // 8 tasks share each of 8 keys
                    let key = format!("key{}", task % 8);
                    own += u64::from(
                        at.check(&limit, key.as_bytes(), 1)
                            .await
                            .unwrap()
                            .is_allowed(),
                    );
                }
                (task % 8, hot, own)
            });
        }
        let mut hot = 0;
        let mut per_key = [0u64; 8];
        while let Some(result) = tasks.join_next().await {
            let (key, h, own) = result.unwrap();
            hot += h;
            per_key[key] += own;
        }
        assert_eq!(hot, QUOTA, "{policy:?}: the shared key");
        // 8 tasks x 10 calls = 80 per key, under the quota: all allowed
        assert_eq!(per_key, [80; 8], "{policy:?}: keys of 8 tasks");
    }
    let (fcalls_after, _) = server.command_stats("fcall");
    let decisions = (5 * TASKS * CALLS * 2) as u64;
    let scripts = fcalls_after - fcalls_before;
    assert!(
        scripts < decisions / 2,
        "{scripts} script calls for {decisions} decisions: calls did not go together"
    );
}

#[tokio::test]
async fn a_queued_call_ends_in_its_timeout_and_the_store_recovers() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let timeout = Duration::from_millis(200);
    // The server stays frozen until every call is checked: a call that its
    // timeout did not end would never end, so any finite bound shows it,
    // and this one leaves a machine that stalls the test seconds to spare.
    // The error (`Timeout` of this duration) says what ended the call.
    let bound = timeout + harness::UNHURRIED;
    let store = RedisStore::builder()
        .timeout(timeout)
        .batching(Batching::new(1, 64))
        .connect(&server.url())
        .await
        .unwrap();
    let limit = Limit::new("frozen", Gcra::per_second(1_000).unwrap()).unwrap();
    // The timeout is under test once the server is frozen, not before: on a
    // loaded machine the first call may miss it.
    let warm_up = Instant::now() + harness::UNHURRIED;
    while store.check(&limit, b"k", 1).await.is_err() {
        assert!(Instant::now() < warm_up, "the server never answered");
    }
    server.pause();
    let start = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                let result = store.check(&limit, b"k", 1).await;
                (result, Instant::now())
            })
        })
        .collect();
    for call in calls {
        let (result, ended) = call.await.unwrap();
        assert!(
            matches!(result, Err(StoreError::Timeout(t)) if t == timeout),
            "{result:?}"
        );
        assert!(ended - start <= bound, "a call took {:?}", ended - start);
    }
    server.resume();
    // Answers to the frozen calls may still arrive; the next call is
    // decided within its own timeout once they have.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match store.check(&limit, b"k", 1).await {
            Ok(outcome) => {
                assert!(outcome.is_allowed());
                break;
            }
            Err(error) => assert!(Instant::now() < deadline, "no recovery: {error}"),
        }
    }
}

#[tokio::test]
async fn a_queued_call_dropped_by_its_caller_is_not_sent() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server, "dropped:", Batching::new(1, 64)).await;
    let limit = Limit::new("dropped", Gcra::per_second(10).unwrap()).unwrap();
    assert!(store.check(&limit, b"warm", 1).await.unwrap().is_allowed());
    let (fcalls_before, _) = server.command_stats("fcall");
    server.pause();
    let first = spawn_check(&store, &limit, b"first");
    tokio::task::yield_now().await;
    // five calls wait behind it; their callers give up
    let waiting: Vec<_> = (0..5)
        .map(|_| spawn_check(&store, &limit, b"given-up"))
        .collect();
    tokio::task::yield_now().await;
    for call in &waiting {
        call.abort();
    }
    for call in waiting {
        assert!(call.await.unwrap_err().is_cancelled());
    }
    server.resume();
    assert!(first.await.unwrap().unwrap().is_allowed());
    // a later call goes after the dropped ones have left the queue
    assert!(store.check(&limit, b"later", 1).await.unwrap().is_allowed());
    let (fcalls_after, _) = server.command_stats("fcall");
    let stats = store.batch_stats().expect("batching is on");
    assert_eq!((stats.queued, stats.abandoned), (5, 5), "{stats:?}");
    assert_eq!((stats.batches, stats.batched_calls), (0, 0), "{stats:?}");
    // the frozen call and the later one: none for the five
    assert_eq!(fcalls_after - fcalls_before, 2);
    let peek = store.peek(&limit, b"given-up").await.unwrap();
    assert_eq!(peek.remaining(), 10, "the dropped calls took nothing");
}

#[tokio::test]
async fn a_batch_writes_each_key_once_with_the_expiry_its_last_state_needs() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = connect(&server, "ttl:", Batching::new(1, 64)).await;
    // 5 per minute: each hit is 12 s of the token bucket's state
    let bucket = Limit::new("bucket", policies(5).remove(0)).unwrap();
    let log = Limit::new("log", policies(5).remove(3)).unwrap();
    let warm = Limit::new("warm", Gcra::per_second(10).unwrap()).unwrap();
    assert!(store.check(&warm, b"w", 1).await.unwrap().is_allowed());
    let (sets_before, _) = server.command_stats("psetex");
    server.pause();
    let first = {
        let (store, warm) = (store.clone(), warm.clone());
        // a peek: it writes nothing
        tokio::spawn(async move { store.peek(&warm, b"w").await })
    };
    tokio::task::yield_now().await;
    let mut calls = Vec::new();
    for limit in [&bucket, &bucket, &log, &bucket, &log] {
        calls.push(spawn_check(&store, limit, b"k"));
    }
    tokio::task::yield_now().await;
    server.resume();
    assert!(first.await.unwrap().unwrap().is_allowed());
    for call in calls {
        assert!(call.await.unwrap().unwrap().is_allowed());
    }
    let (sets_after, _) = server.command_stats("psetex");
    assert_eq!(sets_after - sets_before, 2, "one write per key");
    let mut redis = server.connection();
    let pttl = |key: Vec<u8>, redis: &mut redis::Connection| -> i64 {
        redis::cmd("PTTL").arg(key).query(redis).unwrap()
    };
    // three hits: fresh again in 36 s (rounded up to the ms, plus one)
    let bucket_ttl = pttl(store.key(&bucket, b"k"), &mut redis);
    assert!((35_000..=36_002).contains(&bucket_ttl), "{bucket_ttl}");
    // the log forgets its hits a window after the last
    let log_ttl = pttl(store.key(&log, b"k"), &mut redis);
    assert!((59_000..=60_002).contains(&log_ttl), "{log_ttl}");
}
