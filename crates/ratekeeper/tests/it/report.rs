//! Reports: units charged after the fact, per policy (how long an
//! overdraft blocks) and as properties over random histories:
//!
//! 1. a report that fits is a check: the same decision and state;
//! 2. an overdraft is told (denied, nothing remaining, a wait that is not
//!    "never"), and a check of one unit is refused until that wait ends and
//!    allowed when it does (for the sliding window counter: allowed by
//!    then);
//! 3. no units, time or state make a report panic, and a report of 0 is a
//!    check of 0 (a peek).

use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{
    policy::{Algorithm, PolicyKind},
    FixedWindow, Gcra, MemoryLimiter, Policy, RetryAfter, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};

use crate::properties::{any_u64, config, policy_and_any_state, scenario, wild_scenario};

fn secs(s: f64) -> Timestamp {
    Timestamp::from_nanos((s * 1e9) as u64)
}

/// Reports `units` at `at` on a fresh key of `policy`, and returns the wait
/// it tells, checking that a unit is refused just before it and allowed at
/// it.
fn block(policy: impl Into<Policy>, at: Timestamp, units: u64) -> Duration {
    let policy = policy.into();
    let (decision, state) = policy.report(&policy.fresh(), at, units);
    assert!(!decision.is_allowed(), "{policy:?}: {decision:?}");
    assert_eq!(decision.remaining(), 0);
    let RetryAfter::After(wait) = decision.retry_after() else {
        panic!("{policy:?}: an overdraft blocks for a while, not for good");
    };
    let end = at + wait;
    assert!(!policy
        .decide(&state, end - Duration::from_nanos(1), 1)
        .0
        .is_allowed());
    assert!(policy.decide(&state, end, 1).0.is_allowed());
    wait
}

#[test]
fn a_bucket_in_debt_refills_the_debt_and_a_token_first() {
    // 10 a minute, one every 6 s: 15 on a full bucket is 5 in debt, and
    // one token more is 6 tokens' refill.
    let bucket = TokenBucket::per_minute(10).unwrap();
    assert_eq!(block(bucket, secs(1.0), 15), Duration::from_secs(36));
    let gcra = Gcra::per_minute(10).unwrap();
    assert_eq!(block(gcra, secs(1.0), 15), Duration::from_secs(36));
}

#[test]
fn a_window_forgets_its_overdraft_when_it_ends() {
    let window = FixedWindow::new(10, Duration::from_secs(60)).unwrap();
    // However large, the overdraft ends with the window.
    assert_eq!(block(window, secs(10.0), 15), Duration::from_secs(50));
    assert_eq!(
        block(window, secs(10.0), 1_000_000),
        Duration::from_secs(50)
    );
}

#[test]
fn a_sliding_window_counter_waits_for_the_overdraft_to_weigh_less() {
    // 15 counted at the start of a window; in the next one they weigh
    // 15 x (60 - e) / 60, at most 9 from e = 24 s: 84 s in all.
    let counter = SlidingWindow::new(10, Duration::from_secs(60)).unwrap();
    assert_eq!(block(counter, secs(0.0), 15), Duration::from_secs(84));
}

#[test]
fn a_sliding_log_waits_for_the_report_to_leave_the_window() {
    let log = SlidingLog::new(10, Duration::from_secs(60)).unwrap();
    assert_eq!(block(log, secs(5.0), 15), Duration::from_secs(60));
}

#[test]
fn a_full_sliding_log_adds_reports_to_its_newest_hit() {
    let log = SlidingLog::new(3, Duration::from_secs(60)).unwrap();
    let mut state = log.fresh();
    // A thousand reports within one window.
    for i in 0..1_000u32 {
        state = log.report(&state, secs(f64::from(i) / 100.0), 2).1;
    }
    // The log stays as long as the limit allows, plus one.
    assert!(state.hits.len() <= 4, "{} hits", state.hits.len());
    assert_eq!(state.hits.iter().map(|h| h.cost).sum::<u64>(), 2_000);
}

#[test]
fn the_memory_limiter_counts_reports_on_each_table() {
    let policies: [Policy; 5] = [
        TokenBucket::per_minute(10).unwrap().into(),
        Gcra::per_minute(10).unwrap().into(),
        FixedWindow::new(10, Duration::from_secs(60))
            .unwrap()
            .into(),
        SlidingLog::new(10, Duration::from_secs(60)).unwrap().into(),
        SlidingWindow::new(10, Duration::from_secs(60))
            .unwrap()
            .into(),
    ];
    for policy in policies {
        let kind = policy.kind();
        let clock = ratekeeper::clock::ManualClock::new(Timestamp::from_secs(600));
        let limiter = MemoryLimiter::builder(policy)
            .clock(clock.clone())
            .build()
            .unwrap();
        assert!(limiter.report("k", 4).is_allowed(), "{kind}");
        assert_eq!(limiter.peek("k").remaining(), 6, "{kind}");
        let over = limiter.report("k", 20);
        assert!(!over.is_allowed(), "{kind}");
        let wait = over.retry_after().duration().expect("a wait");
        clock.advance(wait - Duration::from_nanos(1));
        assert!(!limiter.check("k", 1).is_allowed(), "{kind}");
        clock.advance(Duration::from_nanos(1));
        assert!(limiter.check("k", 1).is_allowed(), "{kind}");
    }
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn a_report_that_fits_is_a_check(s in scenario(), units in 0u64..40, later in 0u64..1 << 34) {
        let (_, state) = s.run();
        let now = s.last() + Duration::from_nanos(later);
        let checked = s.policy.decide(&state, now, units);
        if checked.0.is_allowed() {
            prop_assert_eq!(s.policy.report(&state, now, units), checked);
        }
    }

    #[test]
    fn an_overdraft_blocks_until_its_wait_ends(
        s in scenario(),
        units in 1u64..200,
        later in 0u64..1 << 34,
    ) {
        let (_, state) = s.run();
        let now = s.last() + Duration::from_nanos(later);
        let (decision, next) = s.policy.report(&state, now, units);
        prop_assume!(!decision.is_allowed());
        prop_assert_eq!(decision.remaining(), 0);
        let RetryAfter::After(wait) = decision.retry_after() else {
            return Err(TestCaseError::fail(format!("never: {decision:?}")));
        };
        prop_assert!(s.policy.decide(&next, now + wait, 1).0.is_allowed(), "{:?}", decision);
        if s.policy.kind() != PolicyKind::SlidingWindow && !wait.is_zero() {
            let before = now + wait - Duration::from_nanos(1);
            prop_assert!(!s.policy.decide(&next, before, 1).0.is_allowed(), "{:?}", decision);
        }
    }

    #[test]
    fn no_report_panics(s in wild_scenario(), units in any_u64(), pick in any_u64()) {
        let (_, state) = s.run();
        let now = Timestamp::from_nanos(s.last().as_nanos().saturating_add(pick % (1 << 40)));
        let (decision, next) = s.policy.report(&state, now, units);
        prop_assert!(decision.remaining() <= decision.limit());
        if !decision.is_allowed() && units > 0 {
            prop_assert!(!decision.retry_after().is_never(), "{:?}", decision);
        }
        // Reporting again on the saturated state neither panics nor grants.
        let (again, _) = s.policy.report(&next, now, units);
        if !decision.is_allowed() {
            prop_assert!(!again.is_allowed() || units == 0);
        }
    }

    #[test]
    fn a_report_of_nothing_is_a_peek((policy, state) in policy_and_any_state(), at in any_u64()) {
        let now = Timestamp::from_nanos(at);
        prop_assert_eq!(policy.report(&state, now, 0), policy.decide(&state, now, 0));
    }
}
