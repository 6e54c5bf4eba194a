//! Clients whose clocks disagree get the same decisions: the store never
//! reads the client's clock, only Redis's.
//!
//! Two stores stand for two hosts. The pure policy, replayed at the times the
//! script reports, reproduces every decision of both; the same replay at
//! each host's own clock, minutes apart, would not.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::time::Duration;

use harness::RedisServer;
use ratekeeper::{
    policy::Algorithm, Gcra, Limit, Outcome, Policy, SlidingWindow, Timestamp, TokenBucket,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_clients_share_one_clock() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let host_a = unhurried::connect(&server.url()).await;
    let host_b = unhurried::connect(&server.url()).await;
    // What the hosts' clocks would say: B runs five minutes ahead of A.
    let skew = Duration::from_secs(300);
    let policies: Vec<Policy> = vec![
        Gcra::per_second(5).unwrap().into(),
        TokenBucket::new(5, Duration::from_secs(1), 5)
            .unwrap()
            .into(),
        SlidingWindow::new(5, Duration::from_secs(600))
            .unwrap()
            .into(),
    ];
    for (index, policy) in policies.into_iter().enumerate() {
        let limit = Limit::new(format!("skew-{index}"), policy.clone()).unwrap();
        let mut shared = policy.fresh();
        let mut local_view = policy.fresh();
        let mut differs = false;
        for call in 0..12 {
            let (store, offset) = if call % 2 == 0 {
                (&host_a, Duration::ZERO)
            } else {
                (&host_b, skew)
            };
            let (outcome, server_time) = store.check_with_time(&limit, b"k", 1).await.unwrap();
            let (expected, next) = policy.decide(&shared, server_time, 1);
            shared = next;
            assert_eq!(
                outcome,
                Outcome::Decided(expected),
                "{policy:?} call {call}"
            );
            // The replay on each host's own clock: B's calls land 5 minutes
            // later, refilling the quota for B and leaving A behind.
            let local = Timestamp::from_nanos(server_time.as_nanos()) + offset;
            let (would, next) = policy.decide(&local_view, local, 1);
            local_view = next;
            differs |= Outcome::Decided(would) != outcome;
        }
        assert!(
            differs,
            "{policy:?}: a client clock would have changed the decisions; the store's did not"
        );
    }
}
