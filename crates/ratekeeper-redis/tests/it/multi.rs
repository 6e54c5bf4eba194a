//! Several limits at once on one server: one script, all or nothing, with
//! the same decisions as the pure policies.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::time::Duration;

use harness::{RedisServer, Rng};
use ratekeeper::{
    policy::Algorithm, store::Check, FixedWindow, Gcra, Limit, Outcome, Policy, SlidingLog,
    SlidingWindow, Store, Timestamp,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_all_matches_the_core_all_or_nothing() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let policies: Vec<Policy> = vec![
        FixedWindow::new(6, Duration::from_secs(1)).unwrap().into(),
        Gcra::new(3, Duration::from_secs(1), 2).unwrap().into(),
        SlidingWindow::new(4, Duration::from_millis(800))
            .unwrap()
            .into(),
        SlidingLog::new(5, Duration::from_millis(900))
            .unwrap()
            .into(),
    ];
    let limits: Vec<Limit> = policies
        .iter()
        .enumerate()
        .map(|(i, p)| Limit::new(format!("multi-{i}"), p.clone()).unwrap())
        .collect();
    let keys: [&[u8]; 4] = [b"global", b"ip", b"session", b"route"];
    let mut states: Vec<_> = policies.iter().map(|p| p.fresh()).collect();
    let mut rng = Rng::new(7);
    let mut now = 1_760_000_000_000_000u64;
    let (mut allowed, mut denied) = (0, 0);
    for step in 0..300 {
        now += rng.below(120_000);
        let at = Timestamp::from_micros(now);
        // each limit its own cost, as Envoy's descriptors carry their own
        let costs: Vec<u64> = (0..4)
            .map(|_| if rng.below(8) == 0 { 2 } else { 1 })
            .collect();
        let decided: Vec<_> = policies
            .iter()
            .zip(&states)
            .zip(&costs)
            .map(|((p, s), &cost)| p.decide(s, at, cost))
            .collect();
        let first_denied = decided.iter().position(|(d, _)| !d.is_allowed());
        if first_denied.is_none() {
            states = decided.iter().map(|(_, s)| s.clone()).collect();
            allowed += 1;
        } else {
            denied += 1;
        }
        let checks: Vec<Check<'_>> = limits
            .iter()
            .zip(keys)
            .zip(&costs)
            .map(|((limit, key), &cost)| Check::new(limit, key, cost))
            .collect();
        let outcome = store.pinned(at).check_all(&checks).await.unwrap();
        assert_eq!(outcome.denied_by(), first_denied, "step {step}");
        let expected: Vec<Outcome> = decided.iter().map(|(d, _)| Outcome::Decided(*d)).collect();
        assert_eq!(outcome.outcomes(), &expected[..], "step {step}");
    }
    assert!(
        allowed > 30 && denied > 30,
        "{allowed} allowed, {denied} denied"
    );
}

/// A key named twice in one request sees its first charge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_twice_counts_twice() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let limit = Limit::new(
        "twice",
        FixedWindow::new(3, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    let at = Timestamp::from_secs(1_760_000_000);
    let checks = [Check::new(&limit, b"k", 1), Check::new(&limit, b"k", 1)];
    assert!(store
        .pinned(at)
        .check_all(&checks)
        .await
        .unwrap()
        .is_allowed());
    let second = store.pinned(at).check_all(&checks).await.unwrap();
    assert_eq!(second.denied_by(), Some(1));
    // The denied request kept nothing: one unit is still left.
    assert_eq!(
        store
            .pinned(at)
            .peek(&limit, b"k")
            .await
            .unwrap()
            .remaining(),
        1
    );
    assert!(store.pinned(at).check_all(&[]).await.unwrap().is_allowed());
}

/// A limit whose numbers changed, checked with another, refused: the
/// request takes nothing, but the changed limit's state is carried (and
/// written) at that instant, as a check of it alone would be, so the change
/// happens once and the old rate stops counting there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_check_of_several_limits_still_carries_new_numbers() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let old: Policy = Gcra::new(10, Duration::from_secs(1), 10).unwrap().into();
    let new: Policy = Gcra::new(5, Duration::from_secs(1), 5).unwrap().into();
    let tight: Policy = FixedWindow::new(1, Duration::from_secs(3_600))
        .unwrap()
        .into();
    let (before, after) = (
        Limit::new("carry-multi", old.clone()).unwrap(),
        Limit::new("carry-multi", new.clone()).unwrap(),
    );
    let refusing = Limit::new("carry-multi-tight", tight).unwrap();
    let t0 = 1_760_000_000_000_000u64;
    let at = |us: u64| Timestamp::from_micros(t0 + us);
    assert!(store
        .pinned(at(0))
        .check(&before, b"k", 8)
        .await
        .unwrap()
        .is_allowed());
    assert!(store
        .pinned(at(0))
        .check(&refusing, b"k", 1)
        .await
        .unwrap()
        .is_allowed());

    let checks = [Check::new(&after, b"k", 1), Check::new(&refusing, b"k", 1)];
    let refused = store.pinned(at(50_000)).check_all(&checks).await.unwrap();
    assert!(!refused.is_allowed());

    // The core: 8 taken under 10/s, carried to 5/s 50 ms later, read
    // 500 ms after that.
    let state = old.decide(&old.fresh(), at(0), 8).1;
    let carried = new.carry(&old, &state, at(50_000)).unwrap();
    let expected = new.peek(&carried, at(550_000));
    // Carried only at the peek, the old rate would have run 500 ms more.
    let late = new.peek(&new.carry(&old, &state, at(550_000)).unwrap(), at(550_000));
    assert_ne!(expected.remaining(), late.remaining());
    let peeked = store.pinned(at(550_000)).peek(&after, b"k").await.unwrap();
    assert_eq!(peeked, expected);
}
