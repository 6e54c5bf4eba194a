//! The fixed window.

use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, FixedWindowState, PolicyError},
    FixedWindow, RetryAfter, Timestamp,
};
use ratekeeper_test_support::ms;

/// 3 per second.
fn window() -> FixedWindow {
    FixedWindow::new(3, Duration::from_secs(1)).unwrap()
}

#[test]
fn counts_per_aligned_window() {
    let w = window();
    let d = w.simulate([
        (ms(1_200), 1),
        (ms(1_300), 1),
        (ms(1_400), 1),
        (ms(1_500), 1),
        (ms(2_000), 1),
    ]);
    assert_eq!(
        d.iter().map(|d| d.is_allowed()).collect::<Vec<_>>(),
        [true, true, true, false, true]
    );
    assert_eq!(
        d.iter().map(|d| d.remaining()).collect::<Vec<_>>(),
        [2, 1, 0, 0, 2]
    );
    assert_eq!(d[0].reset(), Duration::from_millis(800));
    assert_eq!(d[3].reset(), Duration::from_millis(500));
    assert_eq!(
        d[3].retry_after(),
        RetryAfter::After(Duration::from_millis(500))
    );
    assert_eq!(d[3].limit(), 3);
}

#[test]
fn cost_above_the_limit_is_never() {
    let d = window().simulate([(ms(0), 4)]);
    assert_eq!(
        (d[0].is_allowed(), d[0].retry_after()),
        (false, RetryAfter::Never)
    );
}

#[test]
fn cost_zero_only_reports() {
    let w = window();
    let state = w.decide(&w.fresh(), ms(100), 2).1;
    let (d, next) = w.decide(&state, ms(5_000), 0);
    assert_eq!(next, state);
    // A new window is whole, and resets at its end (5 s to 6 s).
    assert_eq!((d.remaining(), d.reset()), (3, Duration::from_secs(1)));
}

/// A report (cost 0) on a key nothing has used tells when the window ends,
/// as it does for a used key (as envoyproxy/ratelimit does), not 0.
#[test]
fn a_report_on_a_fresh_key_tells_the_window_end() {
    let w = window();
    let (d, next) = w.decide(&w.fresh(), ms(1_250), 0);
    assert_eq!(next, w.fresh());
    assert_eq!((d.remaining(), d.reset()), (3, Duration::from_millis(750)));
    let used = w.decide(&w.fresh(), ms(1_250), 1).0;
    assert_eq!(d.reset(), used.reset());
}

#[test]
fn refund_gives_back_within_the_window() {
    let w = window();
    let state = w.decide(&w.fresh(), ms(100), 3).1;
    assert_eq!(
        w.refund(&state, ms(200), 2),
        FixedWindowState {
            start: ms(0),
            count: 1
        }
    );
    assert_eq!(w.refund(&state, ms(200), 9).count, 0);
    assert_eq!(
        w.refund(&state, ms(1_200), 2),
        state,
        "a later window has nothing to refund"
    );
}

#[test]
fn a_clock_going_back_keeps_counting_the_later_window() {
    let w = window();
    let state = w.decide(&w.fresh(), ms(5_100), 3).1;
    let (d, next) = w.decide(&state, ms(4_900), 1);
    assert!(
        !d.is_allowed(),
        "going back into an earlier window grants nothing"
    );
    assert_eq!(next, state);
    // Told from the caller's clock: the later window ends 1.1 s after 4.9 s.
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_millis(1_100))
    );
}

#[test]
fn expires_at_the_end_of_the_window() {
    let w = window();
    let state = w.decide(&w.fresh(), ms(2_500), 1).1;
    assert_eq!(w.expires_at(&state), ms(3_000));
    assert_eq!(w.expires_at(&w.fresh()), Timestamp::ZERO);
    assert_eq!(w.window_start(ms(2_999)), ms(2_000));
}

#[test]
fn constructors_validate() {
    assert_eq!(
        FixedWindow::new(0, Duration::from_secs(1)),
        Err(PolicyError::Zero { field: "limit" })
    );
    assert_eq!(
        FixedWindow::new(1, Duration::ZERO),
        Err(PolicyError::Zero { field: "window" })
    );
    let rate = "10/s burst 20".parse().unwrap();
    assert_eq!(
        FixedWindow::from_rate(&rate),
        Err(PolicyError::BurstNotSupported {
            policy: "fixed_window"
        })
    );
}

/// 3 per second, each window opening at the key's first hit.
fn from_first_hit() -> FixedWindow {
    FixedWindow::from_first_hit(3, Duration::from_secs(1)).unwrap()
}

#[test]
fn a_window_from_the_first_hit_opens_with_it() {
    let w = from_first_hit();
    assert!(w.is_from_first_hit() && !window().is_from_first_hit());
    let d = w.simulate([
        (ms(1_700), 1),
        (ms(1_800), 1),
        (ms(2_100), 1), // an aligned window would have started again at 2 s
        (ms(2_600), 1),
        (ms(2_700), 1), // 1 s after the first: a new window
        (ms(2_750), 1),
    ]);
    assert_eq!(
        d.iter().map(|d| d.is_allowed()).collect::<Vec<_>>(),
        [true, true, true, false, true, true]
    );
    assert_eq!(
        d.iter().map(|d| d.remaining()).collect::<Vec<_>>(),
        [2, 1, 0, 0, 2, 1]
    );
    // The reset runs to a second after the window's first hit.
    assert_eq!(d[0].reset(), Duration::from_secs(1));
    assert_eq!(d[3].reset(), Duration::from_millis(100));
    assert_eq!(
        d[3].retry_after(),
        RetryAfter::After(Duration::from_millis(100))
    );
    assert_eq!(d[5].reset(), Duration::from_millis(950));
}

#[test]
fn a_window_from_the_first_hit_ignores_reports_and_the_clock_going_back() {
    let w = from_first_hit();
    // A report (cost 0) opens no window.
    let (report, state) = w.decide(&w.fresh(), ms(5_000), 0);
    assert_eq!((report.remaining(), report.reset()), (3, Duration::ZERO));
    assert_eq!(state, w.fresh());
    let (_, state) = w.decide(&state, ms(5_500), 2);
    assert_eq!(
        state,
        FixedWindowState {
            start: ms(5_500),
            count: 2
        }
    );
    // Back before the window opened: the open window still counts.
    let (back, state) = w.decide(&state, ms(5_000), 1);
    assert_eq!(back.remaining(), 0);
    assert!(!w.decide(&state, ms(5_100), 1).0.is_allowed());
    // A refund gives back within the window; after it, nothing is left
    // to give back and the state is fresh by then.
    let refunded = w.refund(&state, ms(6_000), 2);
    assert_eq!(refunded.count, 1);
    assert_eq!(w.expires_at(&state), ms(6_500));
    assert_eq!(w.decide(&state, ms(6_500), 3).0.remaining(), 0);
    assert!(w.decide(&state, ms(6_500), 3).0.is_allowed());
}
