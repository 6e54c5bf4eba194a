//! Waiting instead of refusing: units reserved ahead on a keyed limiter
//! (`MemoryLimiter::reserve`, `until_ready`), exact whatever the waits,
//! and given back when the wait is dropped.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::clock::ManualClock;
use ratekeeper::memory::WaitError;
use ratekeeper::policy::PolicyKind;
use ratekeeper::{FixedWindow, Gcra, MemoryLimiter, RetryAfter, Timestamp, TokenBucket};

fn new_limiter(
    policy: impl Into<ratekeeper::Policy>,
) -> (MemoryLimiter<Arc<ManualClock>>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(100)));
    let limiter = MemoryLimiter::builder(policy)
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

#[test]
fn reservations_queue_behind_each_other_and_never_admit_more_than_the_rate() {
    for policy in [
        ratekeeper::Policy::TokenBucket(TokenBucket::per_second(10).unwrap()),
        ratekeeper::Policy::Gcra(Gcra::per_second(10).unwrap()),
    ] {
        let kind = policy.kind();
        let (limiter, clock) = new_limiter(policy);
        let max = Duration::from_secs(1);
        // The burst of 10 goes at once; then one every 100 ms.
        let mut delays = Vec::new();
        loop {
            match limiter.reserve("k", 1, max) {
                Ok(reserved) => {
                    delays.push(reserved.delay());
                    reserved.keep();
                }
                Err(WaitError::TooLong { due }) => {
                    assert_eq!(
                        due,
                        RetryAfter::After(Duration::from_millis(1_100)),
                        "{kind}"
                    );
                    break;
                }
                Err(other) => panic!("{kind}: {other}"),
            }
        }
        let expected: Vec<Duration> = (0..20)
            .map(|i: u64| Duration::from_millis(i.saturating_sub(9) * 100))
            .collect();
        assert_eq!(delays, expected, "{kind}");
        // Everything reserved is counted: a check is refused until the
        // last reservation is due.
        assert!(!limiter.check("k", 1).is_allowed(), "{kind}");
        clock.advance(Duration::from_millis(1_100));
        assert!(limiter.check("k", 1).is_allowed(), "{kind}");
        assert!(!limiter.check("k", 1).is_allowed(), "{kind}");
    }
}

#[test]
fn a_dropped_reservation_gives_its_units_back_and_a_kept_one_does_not() {
    let (limiter, _clock) = new_limiter(TokenBucket::per_second(2).unwrap());
    let max = Duration::from_secs(5);
    limiter.reserve("k", 2, max).unwrap().keep();
    let first = limiter.reserve("k", 1, max).unwrap();
    assert_eq!(first.delay(), Duration::from_millis(500));
    let second = limiter.reserve("k", 1, max).unwrap();
    assert_eq!(second.delay(), Duration::from_secs(1));
    drop(first);
    drop(second);
    // Both came back: the next is due at 500 ms again.
    let third = limiter.reserve("k", 1, max).unwrap();
    assert_eq!(third.delay(), Duration::from_millis(500));
    third.keep();
    assert_eq!(
        limiter.reserve("k", 1, max).unwrap().delay(),
        Duration::from_secs(1)
    );
}

#[test]
fn what_cannot_be_reserved_charges_nothing() {
    let (limiter, _clock) = new_limiter(TokenBucket::per_second(2).unwrap());
    // More than the burst: never.
    assert_eq!(
        limiter
            .reserve("k", 3, Duration::from_secs(60))
            .unwrap_err(),
        WaitError::TooLong {
            due: RetryAfter::Never
        }
    );
    limiter.reserve("k", 2, Duration::ZERO).unwrap().keep();
    // Due in 500 ms, and only 100 ms of waiting allowed.
    let refused = limiter
        .reserve("k", 1, Duration::from_millis(100))
        .unwrap_err();
    assert_eq!(
        refused,
        WaitError::TooLong {
            due: RetryAfter::After(Duration::from_millis(500))
        }
    );
    assert_eq!(
        limiter
            .reserve("k", 1, Duration::from_secs(1))
            .unwrap()
            .delay(),
        Duration::from_millis(500)
    );
    // A window forgets what it counted when it moves on: no reservation.
    let (windowed, _clock) = new_limiter(FixedWindow::new(2, Duration::from_secs(1)).unwrap());
    assert_eq!(
        windowed
            .reserve("k", 1, Duration::from_secs(1))
            .unwrap_err(),
        WaitError::NotReservable(PolicyKind::FixedWindow)
    );
    assert!(windowed.check("k", 2).is_allowed());
}

#[test]
fn until_ready_waits_then_keeps_and_a_dropped_wait_gives_back() {
    let (limiter, _clock) = new_limiter(TokenBucket::per_second(1_000).unwrap());
    block_on(async {
        for _ in 0..1_000 {
            limiter
                .until_ready("k", 1, Duration::ZERO, Duration::ZERO)
                .await
                .unwrap();
        }
    });
    // The bucket is empty and the manual clock stands still: the next
    // unit is due in 1 ms of its time, waited for on a real timer, and
    // kept.
    block_on(limiter.until_ready("k", 1, Duration::from_secs(1), Duration::from_millis(1)))
        .unwrap();
    assert_eq!(
        limiter
            .reserve("k", 1, Duration::from_secs(1))
            .unwrap()
            .delay(),
        Duration::from_millis(2)
    );

    // One a minute: a wait that is still waiting however slow the machine.
    let (slow, _clock) = new_limiter(TokenBucket::new(1, Duration::from_secs(60), 1).unwrap());
    assert!(slow.check("k", 1).is_allowed());
    let max = Duration::from_secs(300);
    let mut wait = Box::pin(slow.until_ready("k", 1, max, Duration::ZERO));
    let mut context = Context::from_waker(Waker::noop());
    assert!(wait.as_mut().poll(&mut context).is_pending());
    // Reserved while it waits: another caller is due later.
    assert_eq!(
        slow.reserve("k", 1, max).unwrap().delay(),
        Duration::from_secs(120)
    );
    // The waiting caller gives up: its unit goes back.
    drop(wait);
    assert_eq!(
        slow.reserve("k", 1, max).unwrap().delay(),
        Duration::from_secs(60)
    );
}
