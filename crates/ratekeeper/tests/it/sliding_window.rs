//! The sliding window counter.

use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, PolicyError, SlidingWindowState},
    RetryAfter, SlidingWindow, Timestamp,
};

fn secs(n: u64) -> Timestamp {
    Timestamp::from_secs(n)
}

/// 10 per minute.
fn counter() -> SlidingWindow {
    SlidingWindow::new(10, Duration::from_secs(60)).unwrap()
}

fn state(start: u64, previous: u64, current: u64) -> SlidingWindowState {
    SlidingWindowState {
        start: secs(start),
        previous,
        current,
    }
}

#[test]
fn allows_within_the_weighted_count() {
    let c = counter();
    let d = c.simulate([(secs(10), 1); 11]);
    assert!(d[..10].iter().all(|d| d.is_allowed()));
    assert_eq!(d[9].remaining(), 0);
    assert!(!d[10].is_allowed());
    assert_eq!(d[0].limit(), 10);
    // Whole again when the current count has slid out: the end of the next window.
    assert_eq!(d[9].reset(), Duration::from_secs(110));
}

#[test]
fn rounds_the_weighted_count_up() {
    let c = counter();
    // 7 previous, 1/60 into the window: ceil(7 * 59 / 60) = 7.
    assert_eq!(c.peek(&state(0, 0, 7), secs(61)).remaining(), 3);
    // Half way: ceil(3.5) = 4.
    assert_eq!(c.peek(&state(0, 0, 7), secs(90)).remaining(), 6);
}

#[test]
fn retry_after_is_when_the_weight_has_dropped_enough() {
    let c = counter();
    // 10 in the previous window: at t=60 none left; one unit needs the
    // weighted count at 9 or less: ceil(10 * (60 - e) / 60) <= 9, e >= 6 s.
    let (d, _) = c.decide(&state(0, 0, 10), secs(60), 1);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), RetryAfter::After(Duration::from_secs(6)));
    assert!(c.decide(&state(0, 0, 10), secs(66), 1).0.is_allowed());
    assert!(!c
        .decide(&state(0, 0, 10), secs(66) - Duration::from_nanos(1), 1)
        .0
        .is_allowed());

    // The current window full: wait into the next window.
    let (d, _) = c.decide(&state(60, 0, 10), secs(70), 10);
    assert_eq!(d.retry_after(), RetryAfter::After(Duration::from_secs(110)));
    let (d, _) = c.decide(&state(60, 0, 10), secs(70), 5);
    assert_eq!(d.retry_after(), RetryAfter::After(Duration::from_secs(80)));
}

#[test]
fn denied_requests_are_not_counted() {
    let c = counter();
    let full = state(60, 0, 10);
    let (d, next) = c.decide(&full, secs(70), 1);
    assert!(!d.is_allowed());
    assert_eq!(next, full);
}

#[test]
fn never_cost_zero_and_refund() {
    let c = counter();
    assert!(c.simulate([(secs(0), 11)])[0].retry_after().is_never());
    let s = state(60, 4, 5);
    let (d, next) = c.decide(&s, secs(90), 0);
    assert_eq!(next, s);
    assert_eq!(d.remaining(), 3);
    assert_eq!(c.refund(&s, secs(90), 7), state(60, 2, 0));
    // Refund in the next window comes off what is now the previous count.
    assert_eq!(c.refund(&s, secs(130), 2), state(120, 3, 0));
}

#[test]
fn a_clock_going_back_grants_nothing() {
    let c = counter();
    let s = state(120, 10, 2);
    let later = c.peek(&s, secs(150));
    let earlier = c.peek(&s, secs(30));
    assert!(earlier.remaining() <= later.remaining());
    assert_eq!(
        earlier.remaining(),
        0,
        "measured at the window's start, where the previous count weighs fully"
    );
    let (d, next) = c.decide(&s, secs(30), 1);
    assert!(!d.is_allowed());
    assert_eq!(next, s);
}

#[test]
fn expires_after_both_counts_slide_out() {
    let c = counter();
    assert_eq!(c.expires_at(&state(60, 3, 2)), secs(180));
    assert_eq!(c.expires_at(&state(60, 3, 0)), secs(120));
    assert_eq!(c.expires_at(&state(60, 0, 0)), secs(60));
}

#[test]
fn constructors_validate() {
    assert_eq!(
        SlidingWindow::new(0, Duration::from_secs(1)),
        Err(PolicyError::Zero { field: "limit" })
    );
    assert_eq!(
        SlidingWindow::new(1, Duration::ZERO),
        Err(PolicyError::Zero { field: "window" })
    );
}
