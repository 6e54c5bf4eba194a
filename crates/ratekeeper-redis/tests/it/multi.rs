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
