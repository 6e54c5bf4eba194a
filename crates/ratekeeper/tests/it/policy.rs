//! Choosing a policy at run time: `Policy`, `State` and `PolicyKind`.

use std::time::Duration;

use ratekeeper::{
    policy::{
        Algorithm, FixedWindowState, GcraState, Hit, PolicyKind, SlidingLogState,
        SlidingWindowState, State, TokenBucketState,
    },
    Policy, Rate, Timestamp,
};
use ratekeeper_test_support::policies::every_kind;

/// One policy of each kind at 4 per second: a whole number of nanoseconds
/// per request, so GCRA's window is exact too.
fn policies() -> Vec<Policy> {
    every_kind(&Rate::per_second(4).unwrap())
}

#[test]
fn every_kind_limits_to_its_quota() {
    for policy in policies() {
        let d = policy.simulate([(Timestamp::from_secs(10), 1); 5]);
        let allowed: Vec<_> = d.iter().map(|d| d.is_allowed()).collect();
        assert_eq!(
            allowed,
            [true, true, true, true, false],
            "{:?}",
            policy.kind()
        );
        assert_eq!(policy.quota(), 4);
        assert_eq!(
            policy.window(),
            Duration::from_secs(1),
            "{:?}",
            policy.kind()
        );
    }
}

#[test]
fn a_state_of_another_shape_counts_as_fresh() {
    let policies = policies();
    let now = Timestamp::from_secs(10);
    for used in &policies {
        // Exhaust a key under one policy...
        let mut state = used.fresh();
        for _ in 0..4 {
            state = used.decide(&state, now, 1).1;
        }
        for other in &policies {
            // ...then switch the key to every other: it starts over.
            if other.kind() == used.kind() {
                assert!(!other.decide(&state, now, 1).0.is_allowed());
            } else {
                let (d, next) = other.decide(&state, now, 1);
                assert!(d.is_allowed(), "{:?} after {:?}", other.kind(), used.kind());
                assert_eq!(d.remaining(), 3);
                assert_eq!(
                    std::mem::discriminant(&next),
                    std::mem::discriminant(&other.fresh())
                );
                assert_eq!(other.expires_at(&state), other.expires_at(&other.fresh()));
            }
        }
    }
}

#[test]
fn states_round_trip_through_serde() {
    let t = Timestamp::from_nanos;
    let states = [
        State::TokenBucket(TokenBucketState {
            level: -5,
            at: t(7),
            unit: 3,
        }),
        State::Gcra(GcraState { tat: t(u64::MAX) }),
        State::FixedWindow(FixedWindowState {
            start: t(60),
            count: 3,
        }),
        State::SlidingLog(SlidingLogState {
            hits: vec![Hit { at: t(1), cost: 2 }, Hit { at: t(5), cost: 1 }],
        }),
        State::SlidingWindow(SlidingWindowState {
            start: t(60),
            previous: 4,
            current: 1,
        }),
    ];
    for state in states {
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(
            serde_json::from_str::<State>(&json).unwrap(),
            state,
            "{json}"
        );
    }
    assert_eq!(
        serde_json::to_string(&states_example()).unwrap(),
        r#"{"policy":"fixed_window","start":60,"count":3}"#
    );
    assert!(serde_json::from_str::<State>(r#"{"policy":"leaky","x":1}"#).is_err());
    // A token bucket state without its unit still reads.
    let old: State = serde_json::from_str(r#"{"policy":"token_bucket","level":4,"at":9}"#).unwrap();
    assert_eq!(
        old,
        State::TokenBucket(TokenBucketState {
            level: 4,
            at: t(9),
            unit: 0
        })
    );
}

fn states_example() -> State {
    State::FixedWindow(FixedWindowState {
        start: Timestamp::from_nanos(60),
        count: 3,
    })
}

#[test]
fn policy_kinds_parse_by_name() {
    for kind in PolicyKind::ALL {
        assert_eq!(kind.name().parse::<PolicyKind>(), Ok(kind));
        assert_eq!(kind.to_string(), kind.name());
    }
    assert_eq!(
        "Sliding-Window".parse::<PolicyKind>(),
        Ok(PolicyKind::SlidingWindow)
    );
    let err = "leaky_bucket".parse::<PolicyKind>().unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"unknown policy "leaky_bucket"; expected token_bucket, gcra, fixed_window, sliding_log or sliding_window"#
    );
}

#[test]
fn rates_with_a_burst_build_buckets_not_windows() {
    let rate: Rate = "10/s burst 20".parse().unwrap();
    assert_eq!(
        Policy::new(PolicyKind::TokenBucket, &rate).unwrap().quota(),
        20
    );
    assert_eq!(Policy::new(PolicyKind::Gcra, &rate).unwrap().quota(), 20);
    for kind in [
        PolicyKind::FixedWindow,
        PolicyKind::SlidingLog,
        PolicyKind::SlidingWindow,
    ] {
        let err = Policy::new(kind, &rate).unwrap_err();
        assert!(err.to_string().contains("takes no burst"), "{err}");
    }
}
