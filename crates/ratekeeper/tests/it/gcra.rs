//! GCRA: decisions, precision and refunds.

use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, GcraState, PolicyError},
    Gcra, RetryAfter, Timestamp, TokenBucket,
};
use ratekeeper_test_support::ms;

/// 10 per second, burst 5: one every 100 ms.
fn gcra() -> Gcra {
    Gcra::new(10, Duration::from_secs(1), 5).unwrap()
}

#[test]
fn allows_the_burst_then_denies() {
    let g = gcra();
    assert_eq!(g.emission_interval(), Duration::from_millis(100));
    let d = g.simulate([(ms(0), 1); 6]);
    for (i, d) in d[..5].iter().enumerate() {
        assert!(d.is_allowed());
        assert_eq!((d.limit(), d.remaining()), (5, 4 - i as u64));
        assert_eq!(d.reset(), Duration::from_millis(100 * (i as u64 + 1)));
    }
    assert!(!d[5].is_allowed());
    assert_eq!(d[5].remaining(), 0);
    assert_eq!(d[5].reset(), Duration::from_millis(500));
    assert_eq!(
        d[5].retry_after(),
        RetryAfter::After(Duration::from_millis(100))
    );
}

#[test]
fn state_is_the_theoretical_arrival_time() {
    let g = gcra();
    let (_, state) = g.decide(&g.fresh(), ms(1_000), 3);
    assert_eq!(state, GcraState { tat: ms(1_300) });
    assert_eq!(g.expires_at(&state), ms(1_300));
    // Idle time is not banked: the TAT restarts from now.
    let (_, state) = g.decide(&state, ms(5_000), 1);
    assert_eq!(state.tat, ms(5_100));
}

#[test]
fn same_decisions_as_the_token_bucket_when_the_interval_is_whole() {
    let bucket = TokenBucket::new(100, Duration::from_secs(60), 20).unwrap();
    let gcra = Gcra::from_token_bucket(&bucket).unwrap();
    let requests: Vec<_> = (0..500u64)
        .map(|i| (Timestamp::from_nanos(i * 137_000_001), 1 + i % 3))
        .collect();
    assert_eq!(bucket.simulate(requests.clone()), gcra.simulate(requests));
}

#[test]
fn interval_rounds_up_when_not_whole() {
    // 3 per second: 333,333,333.3 ns, kept as 333,333,334 ns.
    let g = Gcra::per_second(3).unwrap();
    assert_eq!(g.emission_interval(), Duration::from_nanos(333_333_334));
}

#[test]
fn cost_above_the_burst_is_never() {
    let d = gcra().simulate([(ms(0), 6)]);
    assert_eq!(
        (d[0].is_allowed(), d[0].retry_after()),
        (false, RetryAfter::Never)
    );
}

#[test]
fn cost_zero_only_reports() {
    let g = gcra();
    let state = g.decide(&g.fresh(), ms(0), 2).1;
    let (d, next) = g.decide(&state, ms(50), 0);
    assert_eq!(next, state);
    assert_eq!((d.is_allowed(), d.remaining()), (true, 3));
}

#[test]
fn refund_moves_the_tat_back_but_not_before_now() {
    let g = gcra();
    let state = g.decide(&g.fresh(), ms(0), 5).1;
    assert_eq!(g.refund(&state, ms(0), 2).tat, ms(300));
    assert_eq!(g.refund(&state, ms(100), 100).tat, ms(100));
    assert_eq!(
        g.peek(&g.refund(&state, ms(100), 100), ms(100)).remaining(),
        5
    );
    assert_eq!(g.refund(&state, ms(0), 0), state);
}

#[test]
fn a_clock_going_back_grants_nothing() {
    let g = gcra();
    let state = g.decide(&g.fresh(), ms(1_000), 5).1;
    let (d, next) = g.decide(&state, ms(0), 1);
    assert!(!d.is_allowed());
    assert_eq!(next, state);
    assert!(d.retry_after() >= RetryAfter::After(Duration::from_millis(100)));
}

#[test]
fn constructors_validate() {
    let sec = Duration::from_secs(1);
    assert_eq!(
        Gcra::new(0, sec, 1),
        Err(PolicyError::Zero { field: "limit" })
    );
    assert_eq!(
        Gcra::new(1, sec, 0),
        Err(PolicyError::Zero { field: "burst" })
    );
    assert_eq!(
        Gcra::new(10, Duration::from_nanos(5), 1),
        Err(PolicyError::TooFine {
            rate: 10,
            period_nanos: 5
        })
    );
    assert!(matches!(
        Gcra::new(1, Duration::from_secs(1_000_000_000), 1 << 40),
        Err(PolicyError::Overflow { .. })
    ));
}
