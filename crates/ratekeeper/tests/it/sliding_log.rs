//! The sliding log.

use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, Hit, PolicyError, SlidingLogState},
    RetryAfter, SlidingLog,
};
use ratekeeper_test_support::ms;

/// 3 per second, sliding.
fn log() -> SlidingLog {
    SlidingLog::new(3, Duration::from_secs(1)).unwrap()
}

#[test]
fn limits_any_window_long_interval() {
    let l = log();
    let t = [0, 300, 600, 900, 1_000, 1_100, 1_299, 1_300];
    let d = l.simulate(t.map(|t| (ms(t), 1)));
    assert_eq!(
        d.iter().map(|d| d.is_allowed()).collect::<Vec<_>>(),
        [true, true, true, false, true, false, false, true]
    );
    assert_eq!(
        d[3].retry_after(),
        RetryAfter::After(Duration::from_millis(100))
    );
    assert_eq!(
        d[5].retry_after(),
        RetryAfter::After(Duration::from_millis(200))
    );
    assert_eq!(d[2].remaining(), 0);
    // The quota is whole when the newest hit leaves.
    assert_eq!(d[2].reset(), Duration::from_secs(1));
}

#[test]
fn weighted_retry_walks_out_enough_hits() {
    let l = SlidingLog::new(5, Duration::from_secs(1)).unwrap();
    let d = l.simulate([(ms(0), 1), (ms(100), 1), (ms(200), 3), (ms(300), 3)]);
    assert!(!d[3].is_allowed());
    // 3 units need the hits at 0 and 100 and 200 gone: 1 + 1 frees 2, the
    // third hit frees 3 more.
    assert_eq!(
        d[3].retry_after(),
        RetryAfter::After(Duration::from_millis(900))
    );
}

#[test]
fn hits_at_one_instant_merge() {
    let l = log();
    let mut state = l.fresh();
    for _ in 0..3 {
        state = l.decide(&state, ms(5), 1).1;
    }
    assert_eq!(
        state,
        SlidingLogState {
            hits: vec![Hit { at: ms(5), cost: 3 }]
        }
    );
    // Expired hits are dropped on the next allowed request.
    let state = l.decide(&state, ms(2_000), 1).1;
    assert_eq!(
        state.hits,
        [Hit {
            at: ms(2_000),
            cost: 1
        }]
    );
}

#[test]
fn never_cost_zero_and_refund() {
    let l = log();
    assert!(l.simulate([(ms(0), 4)])[0].retry_after().is_never());
    let state = l.decide(&l.fresh(), ms(0), 2).1;
    let state = l.decide(&state, ms(10), 1).1;
    let (d, next) = l.decide(&state, ms(20), 0);
    assert_eq!((next, d.remaining()), (state.clone(), 0));
    let refunded = l.refund(&state, ms(20), 2);
    assert_eq!(refunded.hits, [Hit { at: ms(0), cost: 1 }]);
    assert_eq!(l.peek(&refunded, ms(20)).remaining(), 2);
}

#[test]
fn a_clock_going_back_grants_nothing() {
    let l = log();
    let state = l.decide(&l.fresh(), ms(5_000), 3).1;
    let (d, next) = l.decide(&state, ms(100), 1);
    assert!(!d.is_allowed());
    assert_eq!(next, state);
    // Told from the caller's clock: the hits at 5 s leave at 6 s.
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_millis(5_900))
    );
    assert_eq!(l.expires_at(&state), ms(6_000));
}

#[test]
fn constructors_validate() {
    assert_eq!(
        SlidingLog::new(0, Duration::from_secs(1)),
        Err(PolicyError::Zero { field: "limit" })
    );
    assert_eq!(
        SlidingLog::new(1, Duration::ZERO),
        Err(PolicyError::Zero { field: "window" })
    );
}
