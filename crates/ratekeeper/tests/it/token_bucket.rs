//! The token bucket: decisions, reservations and refunds.

use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, BucketReserveError, PolicyError},
    RetryAfter, Timestamp, TokenBucket,
};
use ratekeeper_test_support::ms;

/// 10 per second, burst 5: a token every 100 ms.
fn bucket() -> TokenBucket {
    TokenBucket::new(10, Duration::from_secs(1), 5).unwrap()
}

#[test]
fn allows_the_burst_then_denies() {
    let b = bucket();
    let d = b.simulate([(ms(0), 1); 6]);
    for (i, d) in d[..5].iter().enumerate() {
        assert!(d.is_allowed());
        assert_eq!(d.limit(), 5);
        assert_eq!(d.remaining(), 4 - i as u64);
        assert_eq!(d.reset(), Duration::from_millis(100 * (i as u64 + 1)));
        assert_eq!(d.retry_after(), RetryAfter::NOW);
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
fn refills_continuously_and_exactly() {
    // 3 per second does not divide a second into whole nanoseconds; the
    // bucket still gains exactly 3 tokens each second.
    let b = TokenBucket::new(3, Duration::from_secs(1), 3).unwrap();
    let mut state = b.fresh();
    for _ in 0..3 {
        state = b.decide(&state, ms(0), 1).1;
    }
    let (d, _) = b.decide(&state, ms(0), 1);
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_nanos(333_333_334))
    );
    assert!(!b
        .decide(&state, Timestamp::from_nanos(333_333_333), 1)
        .0
        .is_allowed());
    assert!(b
        .decide(&state, Timestamp::from_nanos(333_333_334), 1)
        .0
        .is_allowed());
    let (d, _) = b.decide(&state, Timestamp::from_secs(1), 3);
    assert!(d.is_allowed(), "three whole tokens after one second");
    assert_eq!(d.reset(), Duration::from_secs(1));
}

#[test]
fn cost_above_the_burst_is_never() {
    let d = bucket().simulate([(ms(0), 6)]);
    assert!(!d[0].is_allowed());
    assert_eq!(d[0].retry_after(), RetryAfter::Never);
    assert_eq!(d[0].remaining(), 5);
    assert!(bucket().simulate([(ms(0), u64::MAX)])[0]
        .retry_after()
        .is_never());
}

#[test]
fn cost_zero_only_reports() {
    let b = bucket();
    let state = b.decide(&b.fresh(), ms(0), 2).1;
    let (d, next) = b.decide(&state, ms(50), 0);
    assert_eq!(next, state);
    assert!(d.is_allowed());
    assert_eq!(d.remaining(), 3);
    assert_eq!(b.peek(&state, ms(50)), d);
}

#[test]
fn weighted_costs() {
    let b = bucket();
    let (d, state) = b.decide(&b.fresh(), ms(0), 4);
    assert_eq!(d.remaining(), 1);
    let (d, _) = b.decide(&state, ms(0), 3);
    assert!(!d.is_allowed());
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_millis(200))
    );
}

#[test]
fn refund_gives_units_back_up_to_full() {
    let b = bucket();
    let state = b.decide(&b.fresh(), ms(0), 5).1;
    let refunded = b.refund(&state, ms(0), 2);
    assert_eq!(b.peek(&refunded, ms(0)).remaining(), 2);
    let over = b.refund(&state, ms(0), 1_000);
    assert_eq!(b.peek(&over, ms(0)).remaining(), 5, "never past the burst");
    assert_eq!(b.refund(&state, ms(0), 0), state);
}

#[test]
fn a_clock_going_back_grants_nothing() {
    let b = bucket();
    let mut state = b.fresh();
    for _ in 0..5 {
        state = b.decide(&state, ms(1_000), 1).1;
    }
    // Earlier than the state's time: the bucket is measured at its own time
    // (empty at 1 s), the wait told from the caller's clock.
    let (d, next) = b.decide(&state, ms(0), 1);
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_millis(1_100))
    );
    assert_eq!(next, state);
    assert!(b.decide(&state, ms(1_100), 1).0.is_allowed());
}

#[test]
fn expires_when_full_again() {
    let b = bucket();
    let state = b.decide(&b.fresh(), ms(1_000), 3).1;
    assert_eq!(b.expires_at(&state), ms(1_300));
    assert_eq!(b.peek(&state, ms(1_300)).remaining(), 5);
    assert_eq!(b.peek(&state, ms(1_299)).remaining(), 4);
    assert_eq!(b.window(), Duration::from_millis(500));
}

#[test]
fn reserve_goes_into_debt_within_the_max_wait() {
    let b = bucket();
    let state = b.decide(&b.fresh(), ms(0), 5).1;
    let (r, state) = b
        .reserve(&state, ms(0), 2, Duration::from_millis(200))
        .unwrap();
    assert_eq!(r.cost(), 2);
    assert_eq!(r.delay(), Duration::from_millis(200));
    assert_eq!(r.act_at(), ms(200));
    assert_eq!(b.tokens(&state, ms(0)), -2);
    assert_eq!(b.tokens(&state, ms(50)), -2, "rounded down");
    assert_eq!(b.tokens(&state, ms(100)), -1);

    // The debt delays everyone after.
    assert_eq!(
        b.wait(&state, ms(0), 1),
        RetryAfter::After(Duration::from_millis(300))
    );
    let refused = b.reserve(&state, ms(0), 1, Duration::from_millis(299));
    assert_eq!(
        refused,
        Err(BucketReserveError::TooLong {
            wait: Duration::from_millis(300)
        })
    );
    assert_eq!(
        b.reserve(&state, ms(0), 6, Duration::MAX),
        Err(BucketReserveError::Never)
    );
    assert_eq!(b.wait(&state, ms(0), 6), RetryAfter::Never);
}

#[test]
fn cancel_returns_tokens_not_yet_used() {
    let b = bucket();
    let state = b.decide(&b.fresh(), ms(0), 5).1;
    let (r, reserved) = b.reserve(&state, ms(0), 3, Duration::from_secs(1)).unwrap();
    assert_eq!(b.tokens(&reserved, ms(0)), -3);
    let cancelled = b.cancel(&reserved, &r, ms(100));
    assert_eq!(b.tokens(&cancelled, ms(100)), 1);
    // Once the reservation's time has come, it is spent.
    assert_eq!(b.cancel(&reserved, &r, ms(300)), reserved);
}

#[test]
fn constructors_validate() {
    let sec = Duration::from_secs(1);
    assert_eq!(
        TokenBucket::new(0, sec, 1),
        Err(PolicyError::Zero { field: "rate" })
    );
    assert_eq!(
        TokenBucket::new(1, sec, 0),
        Err(PolicyError::Zero { field: "burst" })
    );
    assert_eq!(
        TokenBucket::new(1, Duration::ZERO, 1),
        Err(PolicyError::Zero { field: "period" })
    );
    assert!(matches!(
        TokenBucket::new(u64::MAX, sec, 1),
        Err(PolicyError::TooLarge { field: "rate", .. })
    ));
    assert!(matches!(
        TokenBucket::new(1, Duration::MAX, 1),
        Err(PolicyError::TooLarge {
            field: "period",
            ..
        })
    ));
    assert!(matches!(
        TokenBucket::new(7, Duration::from_secs(3600), 1 << 40),
        Err(PolicyError::Overflow { .. })
    ));
    // The usual extremes fit.
    assert!(TokenBucket::new(1_000_000_000, sec, 1_000_000_000).is_ok());
    assert!(TokenBucket::new(1_000_000, Duration::from_secs(86_400), 1_000_000).is_ok());
}

#[test]
fn extreme_times_do_not_overflow() {
    let b = bucket();
    let state = b.decide(&b.fresh(), Timestamp::MAX, 5).1;
    let (d, _) = b.decide(&state, Timestamp::MAX, 1);
    assert!(!d.is_allowed());
    assert_eq!(b.expires_at(&state), Timestamp::MAX);
    assert!(b
        .decide(&state, Timestamp::ZERO, 1)
        .0
        .retry_after()
        .duration()
        .is_some());
}

#[test]
fn a_state_written_under_other_numbers_keeps_its_tokens() {
    // 1 per second, burst 10, five tokens taken at t=0...
    let before = TokenBucket::new(1, Duration::from_secs(1), 10).unwrap();
    let state = before.decide(&before.fresh(), ms(0), 5).1;
    assert_eq!(before.tokens(&state, ms(0)), 5);
    // ...read by 10 per second, burst 10 (another unit): still five tokens.
    let after = TokenBucket::new(10, Duration::from_secs(1), 10).unwrap();
    assert_eq!(after.tokens(&state, ms(0)), 5);
    assert_eq!(after.peek(&state, ms(0)).remaining(), 5);
    // And by 3 per second, burst 10, where a token is not a whole number of
    // the old units: rounded down, never up.
    let thirds = TokenBucket::new(3, Duration::from_secs(1), 10).unwrap();
    assert_eq!(thirds.tokens(&state, ms(0)), 5);
    let debt = before
        .reserve(&state, ms(0), 7, Duration::from_secs(10))
        .unwrap()
        .1;
    assert_eq!(thirds.tokens(&debt, ms(0)), -2);
}
