//! Every policy decides through the store exactly as the pure core does.

use futures_executor::block_on;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock,
    policy::{Algorithm, State},
    Decision, FixedWindow, Gcra, Limit, Outcome, Policy, SlidingLog, SlidingWindow, Store,
    Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;
use rusqlite::Connection;

/// One of each policy, with small quotas so the sequences deny often.
fn policies() -> Vec<Policy> {
    vec![
        TokenBucket::new(5, Duration::from_secs(1), 8)
            .unwrap()
            .into(),
        Gcra::new(5, Duration::from_secs(1), 8).unwrap().into(),
        FixedWindow::new(8, Duration::from_secs(1)).unwrap().into(),
        FixedWindow::from_first_hit(8, Duration::from_secs(1))
            .unwrap()
            .into(),
        SlidingLog::new(8, Duration::from_secs(1)).unwrap().into(),
        SlidingWindow::new(8, Duration::from_secs(1))
            .unwrap()
            .into(),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Check(u64),
    Refund(u64),
    Peek,
}

/// A deterministic sequence of `(time, op)`: mostly forwards in steps of up
/// to 300 ms, sometimes a step back, costs 0 to 3.
fn sequence(seed: u64, len: usize) -> Vec<(Timestamp, Op)> {
    let mut x = seed;
    let mut next = move || {
        x = x
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        x >> 33
    };
    let mut now: u64 = 1_700_000_000_000; // ms
    (0..len)
        .map(|_| {
            let r = next();
            if r % 17 == 0 {
                now = now.saturating_sub(next() % 200);
            } else {
                now += next() % 300;
            }
            let op = match next() % 10 {
                0 => Op::Refund(next() % 3 + 1),
                1 => Op::Peek,
                _ => Op::Check(next() % 4),
            };
            (Timestamp::from_millis(now), op)
        })
        .collect()
}

/// What the pure core answers for each op of `seq`: a decision for checks
/// and peeks, `None` for refunds.
fn model(policy: &Policy, seq: &[(Timestamp, Op)]) -> Vec<Option<Decision>> {
    let mut state = policy.fresh();
    seq.iter()
        .map(|&(now, op)| match op {
            Op::Check(cost) => {
                let (decision, next) = policy.decide(&state, now, cost);
                state = next;
                Some(decision)
            }
            Op::Refund(units) => {
                state = policy.refund(&state, now, units);
                None
            }
            Op::Peek => Some(policy.peek(&state, now)),
        })
        .collect()
}

fn decision(outcome: Outcome) -> Decision {
    *outcome.decision().expect("a SQLite store never saturates")
}

#[test]
fn each_policy_decides_as_the_core_does() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::ZERO);
    let store = SqliteStore::builder(dir.path().join("policies.db"))
        .clock(clock.clone())
        .open()
        .unwrap();
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("p{index}"), policy.clone()).unwrap();
        for seed in 0..3 {
            let key = format!("key-{seed}");
            let seq = sequence(seed * 31 + index as u64, 300);
            let expected = model(&policy, &seq);
            let mut allowed = 0;
            for (step, (&(now, op), expected)) in seq.iter().zip(&expected).enumerate() {
                clock.set(now);
                let got = match op {
                    Op::Check(cost) => Some(decision(
                        block_on(store.check(&limit, key.as_bytes(), cost)).unwrap(),
                    )),
                    Op::Refund(units) => {
                        block_on(store.refund(&limit, key.as_bytes(), units)).unwrap();
                        None
                    }
                    Op::Peek => Some(block_on(store.peek(&limit, key.as_bytes())).unwrap()),
                };
                assert_eq!(
                    &got, expected,
                    "{policy:?}, seed {seed}, step {step}: {op:?}"
                );
                allowed +=
                    usize::from(matches!(op, Op::Check(c) if c > 0) && got.unwrap().is_allowed());
            }
            // The sequences exercise both answers.
            assert!(allowed > 10, "{policy:?}: only {allowed} allowed");
        }
    }
}

#[test]
fn rows_hold_the_core_state_and_its_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.db");
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = SqliteStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("p{index}"), policy.clone()).unwrap();
        let mut state = policy.fresh();
        for step in 0..5u64 {
            let now = Timestamp::from_secs(1_000) + Duration::from_millis(step * 70);
            clock.set(now);
            state = policy.decide(&state, now, 1).1;
            assert!(block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());
            let (json, expires_at): (String, i64) = raw
                .query_row(
                    "SELECT state, expires_at FROM ratekeeper WHERE name = ?1 AND key = ?2",
                    (limit.name(), b"k".as_slice()),
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .unwrap();
            let stored: State = serde_json::from_str(&json).unwrap();
            assert_eq!(stored, state, "{policy:?}");
            assert_eq!(expires_at as u64, policy.expires_at(&state).as_nanos());
        }
    }
}

/// Counts the writes to the table, by triggers in the database file.
fn count_writes(raw: &Connection) {
    raw.execute_batch(
        "CREATE TABLE writes (n INTEGER NOT NULL);
         INSERT INTO writes VALUES (0);
         CREATE TRIGGER w_insert AFTER INSERT ON ratekeeper BEGIN UPDATE writes SET n = n + 1; END;
         CREATE TRIGGER w_update AFTER UPDATE ON ratekeeper BEGIN UPDATE writes SET n = n + 1; END;
         CREATE TRIGGER w_delete AFTER DELETE ON ratekeeper BEGIN UPDATE writes SET n = n + 1; END;",
    )
    .unwrap();
}

fn writes(raw: &Connection) -> i64 {
    raw.query_row("SELECT n FROM writes", [], |row| row.get(0))
        .unwrap()
}

#[test]
fn only_changed_states_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("writes.db");
    let clock = ManualClock::new(Timestamp::from_secs(10));
    let store = SqliteStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    let raw = Connection::open(&path).unwrap();
    count_writes(&raw);
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("p{index}"), policy).unwrap();
        // Cost 0 on a new key reports and writes nothing.
        let before = writes(&raw);
        let rows = block_on(store.count()).unwrap();
        assert!(block_on(store.check(&limit, b"k", 0)).unwrap().is_allowed());
        assert_eq!(block_on(store.count()).unwrap(), rows);
        assert_eq!(writes(&raw), before);
        // Taking the whole quota writes one row.
        assert!(block_on(store.check(&limit, b"k", 8)).unwrap().is_allowed());
        assert_eq!(block_on(store.count()).unwrap(), rows + 1);
        assert_eq!(writes(&raw), before + 1);
        // Denied requests (one now, one never possible), a cost of 0 and a
        // peek write nothing.
        assert!(!block_on(store.check(&limit, b"k", 1)).unwrap().is_allowed());
        let never = block_on(store.check(&limit, b"k", 9)).unwrap();
        assert!(never.retry_after().is_never());
        let _ = block_on(store.check(&limit, b"k", 0)).unwrap();
        let _ = block_on(store.peek(&limit, b"k")).unwrap();
        assert_eq!(writes(&raw), before + 1);
        // A refund is written (an update, or a delete when the state is
        // fresh again), and gives the quota back.
        block_on(store.refund(&limit, b"k", 8)).unwrap();
        assert_eq!(writes(&raw), before + 2);
        assert_eq!(block_on(store.peek(&limit, b"k")).unwrap().remaining(), 8);
    }
}

#[test]
fn another_policys_state_counts_as_fresh() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::from_secs(10));
    let path = dir.path().join("shape.db");
    let store = SqliteStore::builder(&path)
        .clock(clock.clone())
        .open()
        .unwrap();
    let window = Limit::new(
        "changing",
        FixedWindow::new(2, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    let gcra = Limit::new("changing", Gcra::per_minute(3).unwrap()).unwrap();
    for _ in 0..2 {
        assert!(block_on(store.check(&window, b"k", 1))
            .unwrap()
            .is_allowed());
    }
    assert!(!block_on(store.check(&window, b"k", 1))
        .unwrap()
        .is_allowed());
    // The limit's policy changes under the same name: the key starts over.
    let peek = block_on(store.peek(&gcra, b"k")).unwrap();
    assert_eq!(peek.remaining(), 3);
    for _ in 0..3 {
        assert!(block_on(store.check(&gcra, b"k", 1)).unwrap().is_allowed());
    }
    assert!(!block_on(store.check(&gcra, b"k", 1)).unwrap().is_allowed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_async_api_decides_as_the_blocking_one() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(Timestamp::ZERO);
    let store = SqliteStore::builder(dir.path().join("async.db"))
        .clock(clock.clone())
        .open()
        .unwrap();
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("p{index}"), policy.clone()).unwrap();
        let seq = sequence(99 + index as u64, 200);
        let expected = model(&policy, &seq);
        for (&(now, op), expected) in seq.iter().zip(&expected) {
            clock.set(now);
            let got = match op {
                Op::Check(cost) => Some(decision(store.check(&limit, b"k", cost).await.unwrap())),
                Op::Refund(units) => {
                    store.refund(&limit, b"k", units).await.unwrap();
                    None
                }
                Op::Peek => Some(store.peek(&limit, b"k").await.unwrap()),
            };
            assert_eq!(&got, expected, "{policy:?}: {op:?}");
        }
    }
    assert_eq!(
        store.count().await.unwrap(),
        block_on(store.count()).unwrap()
    );
}

#[test]
fn the_async_api_runs_without_a_tokio_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("no-runtime.db")).unwrap();
    let limit = Limit::new("one", Gcra::per_hour(1).unwrap()).unwrap();
    // A minimal executor: the futures are ready at once without a runtime.
    let outcome = poll_once(store.check(&limit, b"k", 1)).unwrap();
    assert!(outcome.is_allowed());
    assert!(!poll_once(store.check(&limit, b"k", 1))
        .unwrap()
        .is_allowed());
}

fn poll_once<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Waker};
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the future was not ready"),
    }
}
