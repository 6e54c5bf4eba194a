//! The worked examples of the documents ratekeeper grew from, as tests.

use std::collections::HashMap;
use std::time::Duration;

use ratekeeper::{
    policy::Algorithm, FixedWindow, Gcra, RetryAfter, SlidingWindow, Timestamp, TokenBucket,
};
use ratekeeper_test_support::ms;

fn wait_ms(n: u64) -> RetryAfter {
    RetryAfter::After(Duration::from_millis(n))
}

/// Seed 001's first transcript: two per second.
/// t=0 allowed with 1 left, t=10 allowed with 0 left, t=20 denied with a
/// retry in 480 ms, t=600 allowed with 0 left.
#[test]
fn two_per_second_transcript() {
    let requests = [(ms(0), 1), (ms(10), 1), (ms(20), 1), (ms(600), 1)];
    let bucket = TokenBucket::per_second(2).unwrap().simulate(requests);
    let gcra = Gcra::per_second(2).unwrap().simulate(requests);
    assert_eq!(
        bucket, gcra,
        "GCRA and the token bucket agree on the transcript"
    );

    let seen: Vec<_> = bucket
        .iter()
        .map(|d| (d.is_allowed(), d.remaining(), d.retry_after()))
        .collect();
    assert_eq!(
        seen,
        [
            (true, 1, RetryAfter::NOW),
            (true, 0, RetryAfter::NOW),
            (false, 0, wait_ms(480)),
            (true, 0, RetryAfter::NOW),
        ]
    );
}

/// Seed 001's second transcript in core terms: two per minute gives
/// `r=1;t=30`, then `r=0;t=60`, then a 429 with `t=60` and Retry-After 30.
#[test]
fn two_per_minute_transcript() {
    let d = TokenBucket::per_minute(2)
        .unwrap()
        .simulate([(ms(0), 1); 3]);
    let secs = |d: Duration| d.as_secs_f64();
    assert_eq!((d[0].remaining(), secs(d[0].reset())), (1, 30.0));
    assert_eq!((d[1].remaining(), secs(d[1].reset())), (0, 60.0));
    assert!(!d[2].is_allowed());
    assert_eq!((d[2].remaining(), secs(d[2].reset())), (0, 60.0));
    assert_eq!(
        d[2].retry_after(),
        RetryAfter::After(Duration::from_secs(30))
    );
}

/// Seed 002's bucket: three tokens, one more every 200 ms.
#[test]
fn three_tokens_one_every_200ms() {
    let bucket = TokenBucket::new(1, Duration::from_millis(200), 3).unwrap();
    let mut state = bucket.fresh();
    for n in 1..=3 {
        let (d, next) = bucket.decide(&state, ms(0), 1);
        assert!(d.is_allowed(), "request {n} at t=0");
        state = next;
    }
    let (d, state) = bucket.decide(&state, ms(0), 1);
    assert_eq!(
        (d.is_allowed(), d.retry_after()),
        (false, wait_ms(200)),
        "4th at t=0"
    );

    let (d, state) = bucket.decide(&state, ms(150), 1);
    assert_eq!(
        (d.is_allowed(), d.retry_after()),
        (false, wait_ms(50)),
        "at t=150"
    );

    let (d, state) = bucket.decide(&state, ms(200), 1);
    assert!(d.is_allowed(), "exactly one token at t=200");
    let (d, _) = bucket.decide(&state, ms(200), 1);
    assert!(!d.is_allowed(), "refused again at t=200");
}

/// Seed 002's keyed limiter: each key has its own bucket of 2, one token a
/// second.
#[test]
fn one_bucket_per_key() {
    let bucket = TokenBucket::new(1, Duration::from_secs(1), 2).unwrap();
    let mut states: HashMap<&str, _> = HashMap::new();
    let mut allow = |key, now| {
        let state = states.entry(key).or_insert_with(|| bucket.fresh());
        let (d, next) = bucket.decide(state, now, 1);
        *state = next;
        d.retry_after()
    };
    let at_zero: Vec<_> = ["alice", "alice", "alice", "bob"]
        .map(|k| allow(k, ms(0)))
        .into();
    assert_eq!(
        at_zero,
        [
            RetryAfter::NOW,
            RetryAfter::NOW,
            wait_ms(1000),
            RetryAfter::NOW
        ]
    );
    assert_eq!(allow("alice", ms(1000)), RetryAfter::NOW);
}

/// Seed 002's pitfall: a fixed window of 5 per second lets 10 through
/// between t=999 and t=1001.
#[test]
fn fixed_window_boundary_burst() {
    let window = FixedWindow::new(5, Duration::from_secs(1)).unwrap();
    let requests = [(ms(999), 1); 5].into_iter().chain([(ms(1001), 1); 5]);
    let allowed = window
        .simulate(requests)
        .iter()
        .filter(|d| d.is_allowed())
        .count();
    assert_eq!(allowed, 10);

    // The token bucket and the sliding window do not have the gap.
    let requests = [(ms(999), 1); 5].into_iter().chain([(ms(1001), 1); 5]);
    let bucket = TokenBucket::per_second(5).unwrap();
    assert_eq!(
        bucket
            .simulate(requests.clone())
            .iter()
            .filter(|d| d.is_allowed())
            .count(),
        5
    );
    let sliding = SlidingWindow::new(5, Duration::from_secs(1)).unwrap();
    assert_eq!(
        sliding
            .simulate(requests)
            .iter()
            .filter(|d| d.is_allowed())
            .count(),
        5
    );
}

/// Seed 004's weighting: 30% into a window, 70% of the previous window's
/// count is added.
#[test]
fn sliding_window_weighs_the_previous_window() {
    let minute = Duration::from_secs(60);
    let policy = SlidingWindow::new(100, minute).unwrap();
    let mut state = policy.fresh();
    for _ in 0..40 {
        state = policy.decide(&state, Timestamp::from_secs(30), 1).1;
    }
    // 18 s into the next minute is 30% in: 70% of 40 = 28 still count.
    let d = policy.peek(&state, Timestamp::from_secs(78));
    assert_eq!(d.remaining(), 100 - 28);
    // Half way: 20 count. At the end of the window, none.
    assert_eq!(
        policy.peek(&state, Timestamp::from_secs(90)).remaining(),
        80
    );
    assert_eq!(
        policy.peek(&state, Timestamp::from_secs(120)).remaining(),
        100
    );

    // The current window's allowed requests add to the weighted count, and
    // denied ones are not counted.
    let mut at_78 = state;
    let mut allowed = 0;
    for _ in 0..100 {
        let (d, next) = policy.decide(&at_78, Timestamp::from_secs(78), 1);
        allowed += u64::from(d.is_allowed());
        at_78 = next;
    }
    assert_eq!(allowed, 72);
    assert_eq!(at_78.current, 72);
}
