//! The sharded fixed window for one hot key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock,
    memory::ShardedWindow,
    policy::{PolicyError, MAX_QUOTA},
    RetryAfter, Timestamp,
};
use ratekeeper_test_support::ms;

const SECOND: Duration = Duration::from_secs(1);

/// `limit` per second over `shards` shards on a manual clock at `start`.
fn limiter(
    limit: u64,
    shards: usize,
    start: Timestamp,
) -> (ShardedWindow<ManualClock>, ManualClock) {
    let clock = ManualClock::new(start);
    let limiter = ShardedWindow::with_shards(limit, SECOND, shards)
        .unwrap()
        .with_clock(clock.clone());
    (limiter, clock)
}

/// Takes single units until denied and returns how many were allowed.
fn drain(limiter: &ShardedWindow<ManualClock>) -> u64 {
    let mut allowed = 0;
    while limiter.check(1).is_allowed() {
        allowed += 1;
    }
    allowed
}

#[test]
fn one_thread_gets_the_whole_limit_through_the_sweep() {
    // Shards beyond the first are never this thread's home for every case,
    // so the whole limit is only reached if the caps add up to it and the
    // thread sweeps the other shards when its own is empty.
    for (limit, shards) in [
        (7, 4),
        (1, 1),
        (1, 8),
        (3, 8),
        (10, 3),
        (100, 7),
        (64, 64),
        (65, 64),
        (5, 64),
        (1_000, 2),
    ] {
        let (l, _clock) = limiter(limit, shards, ms(1_200));
        assert_eq!(l.remaining(), limit, "{limit}/{shards}");
        let mut expected = limit;
        for _ in 0..limit {
            let d = l.check(1);
            expected -= 1;
            assert!(d.is_allowed(), "{limit}/{shards}");
            assert_eq!(d.remaining(), expected, "{limit}/{shards}");
            assert_eq!(d.limit(), limit);
        }
        let d = l.check(1);
        assert!(!d.is_allowed(), "{limit}/{shards}");
        assert_eq!(d.remaining(), 0);
    }
}

#[test]
fn one_request_can_take_the_whole_limit_from_every_shard() {
    // 7 over 4 shards: caps 2, 2, 2, 1.
    let (l, _clock) = limiter(7, 4, ms(0));
    assert!(l.check(7).is_allowed());
    assert!(!l.check(1).is_allowed());

    // Three requests of 2 fit three shards whole; the fourth finds one unit.
    let (l, _clock) = limiter(7, 4, ms(0));
    for _ in 0..3 {
        assert!(l.check(2).is_allowed());
    }
    let d = l.check(2);
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 1);
    assert!(l.check(1).is_allowed());
    assert_eq!(l.remaining(), 0);
}

#[test]
fn a_request_that_cannot_be_gathered_gives_back_what_it_took() {
    // 10 over 4 shards (3, 3, 2, 2): after one unit, 9 are left in pieces.
    let (l, _clock) = limiter(10, 4, ms(0));
    assert!(l.check(1).is_allowed());
    let d = l.check(10);
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 9);
    assert_eq!(d.retry_after(), RetryAfter::After(SECOND));
    // Nothing was kept by the denied request.
    assert!(l.check(9).is_allowed());
    assert!(!l.check(1).is_allowed());
}

/// Runs 200 threads, started together, each making `attempts` requests at
/// the clock's time with costs from `cost`, and returns the units admitted.
fn contend(
    l: &ShardedWindow<ManualClock>,
    attempts: u64,
    cost: impl Fn(u64, u64) -> u64 + Sync,
) -> u64 {
    const THREADS: u64 = 200;
    let barrier = Barrier::new(THREADS as usize);
    let admitted = AtomicU64::new(0);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (l, barrier, admitted, cost) = (l.clone(), &barrier, &admitted, &cost);
            s.spawn(move || {
                barrier.wait();
                for a in 0..attempts {
                    let c = cost(t, a);
                    if l.check(c).is_allowed() {
                        admitted.fetch_add(c, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    admitted.into_inner()
}

#[test]
fn exactly_the_limit_under_contention() {
    for shards in [1, 2, 8, 64] {
        for limit in [137, 3, 64, 600] {
            let (l, _clock) = limiter(limit, shards, ms(5_500));
            // 200 threads x 4 attempts always ask for more than the limit.
            let admitted = contend(&l, 4, |_, _| 1);
            assert_eq!(admitted, limit, "limit {limit} over {shards} shards");
            assert_eq!(l.remaining(), 0);
            assert!(!l.check(1).is_allowed());
        }
    }
}

/// A small deterministic generator: costs 1..=4 from a thread and attempt.
fn random_cost(thread: u64, attempt: u64) -> u64 {
    let mut x = (thread << 32 | attempt).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    1 + x % 4
}

#[test]
fn mixed_costs_never_exceed_the_limit_and_lose_nothing() {
    for shards in [1, 2, 8, 64] {
        for limit in [137, 3, 600] {
            let (l, _clock) = limiter(limit, shards, ms(5_500));
            let admitted = contend(&l, 4, random_cost);
            assert!(admitted <= limit, "limit {limit} over {shards} shards");
            // Every unit not admitted is still there: rollbacks gave back all
            // they took, and nothing was counted twice.
            let mut rest = 0;
            while l.check(1).is_allowed() {
                rest += 1;
            }
            assert_eq!(admitted + rest, limit, "limit {limit} over {shards} shards");
        }
    }
}

#[test]
fn a_new_window_restores_the_quota() {
    let (l, clock) = limiter(5, 4, ms(1_200));
    assert_eq!(drain(&l), 5);
    clock.set(ms(1_999));
    assert!(!l.check(1).is_allowed());
    clock.set(ms(2_000));
    assert_eq!(l.peek().remaining(), 5);
    assert_eq!(drain(&l), 5);
    // Several windows later, too.
    clock.set(ms(9_300));
    assert_eq!(drain(&l), 5);
}

#[test]
fn the_boundary_burst_is_twice_the_limit() {
    // The fixed window's trade: the end of one window and the start of the
    // next are back to back, so 2x the limit passes within 2 ms.
    let (l, clock) = limiter(5, 4, ms(999));
    assert_eq!(drain(&l), 5);
    clock.set(ms(1_001));
    assert_eq!(drain(&l), 5);
}

#[test]
fn a_clock_going_back_does_not_restore_the_quota() {
    let (l, clock) = limiter(4, 2, ms(1_500));
    assert_eq!(drain(&l), 4);
    clock.set(ms(500));
    let d = l.check(1);
    assert!(!d.is_allowed());
    assert_eq!(d.remaining(), 0);
    // Counted in the later window, measured from its start.
    assert_eq!(d.retry_after(), RetryAfter::After(SECOND));
    clock.set(ms(0));
    assert_eq!(l.remaining(), 0);
    // Forward again into the same window: still spent.
    clock.set(ms(1_900));
    assert!(!l.check(1).is_allowed());
    clock.set(ms(2_000));
    assert_eq!(drain(&l), 4);
}

#[test]
fn a_clock_going_back_does_not_refill_untouched_shards_either() {
    // 8 over 4 shards; window 5 takes only from the home shard, the others
    // still hold an older window. Stepping back into window 4 must count in
    // window 5, or those shards would be filled twice within window 5.
    let (l, clock) = limiter(8, 4, ms(5_500));
    assert!(l.check(2).is_allowed());
    clock.set(ms(4_500));
    assert_eq!(drain(&l), 6);
    clock.set(ms(5_600));
    assert!(!l.check(1).is_allowed());
    assert_eq!(l.peek().remaining(), 0);
    clock.set(ms(6_000));
    assert_eq!(drain(&l), 8);
}

#[test]
fn cost_zero_only_reports() {
    let (l, clock) = limiter(5, 4, ms(1_200));
    let d = l.check(0);
    assert!(d.is_allowed());
    assert_eq!((d.remaining(), d.reset()), (5, Duration::ZERO));
    assert_eq!(l.peek(), d);
    assert!(l.check(2).is_allowed());
    clock.set(ms(1_700));
    for _ in 0..3 {
        let d = l.check(0);
        assert!(d.is_allowed());
        assert_eq!(d.remaining(), 3);
        assert_eq!(d.reset(), Duration::from_millis(300));
        assert_eq!(d.retry_after(), RetryAfter::NOW);
    }
    assert_eq!(l.peek(), l.check(0));
    assert!(l.admit(0));
    assert_eq!(drain(&l), 3);
    // Reporting on a spent window is still "allowed": it asks for nothing.
    assert!(l.check(0).is_allowed());
}

#[test]
fn cost_above_the_limit_is_never() {
    let (l, _clock) = limiter(5, 4, ms(0));
    let d = l.check(6);
    assert!(!d.is_allowed());
    assert_eq!(d.retry_after(), RetryAfter::Never);
    assert_eq!((d.limit(), d.remaining()), (5, 5));
    assert!(!l.admit(6));
    assert!(!l.check(u64::MAX).is_allowed());
    // It took nothing.
    assert!(l.check(5).is_allowed());
}

#[test]
fn retry_after_and_reset_run_to_the_end_of_the_window() {
    let (l, clock) = limiter(3, 2, ms(1_200));
    let d = l.check(1);
    assert!(d.is_allowed());
    assert_eq!(d.retry_after(), RetryAfter::NOW);
    assert_eq!(d.reset(), Duration::from_millis(800));
    assert!(l.check(2).is_allowed());
    clock.set(ms(1_700));
    let d = l.check(1);
    assert!(!d.is_allowed());
    assert_eq!(
        d.retry_after(),
        RetryAfter::After(Duration::from_millis(300))
    );
    assert_eq!(d.reset(), Duration::from_millis(300));
    clock.set(ms(1_999));
    assert_eq!(
        l.check(1).retry_after(),
        RetryAfter::After(Duration::from_millis(1))
    );
    // Exactly when it said: the next window.
    clock.set(ms(2_000));
    assert!(l.check(1).is_allowed());
}

#[test]
fn admit_decides_like_check() {
    let (l, clock) = limiter(7, 4, ms(1_200));
    let mut allowed = 0;
    while l.admit(1) {
        allowed += 1;
    }
    assert_eq!(allowed, 7);
    assert!(!l.check(1).is_allowed());
    clock.set(ms(2_000));
    assert!(l.admit(7));
    assert!(!l.admit(1));
    clock.set(ms(2_500));
    assert_eq!(l.peek().remaining(), 0);
}

#[test]
fn clones_share_the_count() {
    let (l, _clock) = limiter(4, 2, ms(0));
    let other = l.clone();
    assert!(l.check(3).is_allowed());
    assert_eq!(other.peek().remaining(), 1);
    assert!(other.check(1).is_allowed());
    assert!(!l.check(1).is_allowed());
}

#[test]
fn accessors_and_debug() {
    let l = ShardedWindow::with_shards(10, SECOND, 3).unwrap();
    assert_eq!((l.limit(), l.window(), l.shards()), (10, SECOND, 3));
    let l = l.with_clock(ManualClock::default());
    assert_eq!((l.limit(), l.window(), l.shards()), (10, SECOND, 3));
    let debug = format!("{l:?}");
    assert!(
        debug.contains("ShardedWindow") && debug.contains("limit: 10"),
        "{debug}"
    );

    let default = ShardedWindow::new(10, SECOND).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    assert_eq!(default.shards(), cores);

    fn send_sync<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    send_sync::<ShardedWindow>();
    send_sync::<ShardedWindow<ManualClock>>();
}

#[test]
fn refuses_numbers_it_cannot_count() {
    assert_eq!(
        ShardedWindow::new(0, SECOND).unwrap_err(),
        PolicyError::Zero { field: "limit" }
    );
    assert_eq!(
        ShardedWindow::new(1, Duration::ZERO).unwrap_err(),
        PolicyError::Zero { field: "window" }
    );
    assert_eq!(
        ShardedWindow::with_shards(1, SECOND, 0).unwrap_err(),
        PolicyError::Zero { field: "shards" }
    );
    assert!(matches!(
        ShardedWindow::new(MAX_QUOTA + 1, SECOND),
        Err(PolicyError::TooLarge { field: "limit", .. })
    ));
    // A shard counts in 32 bits.
    let max_one = u64::from(u32::MAX);
    assert!(ShardedWindow::with_shards(max_one, SECOND, 1).is_ok());
    assert_eq!(
        ShardedWindow::with_shards(max_one + 1, SECOND, 1).unwrap_err(),
        PolicyError::TooLarge {
            field: "limit",
            value: u128::from(max_one + 1),
            max: u128::from(max_one),
        }
    );
    assert!(ShardedWindow::with_shards(2 * max_one, SECOND, 2).is_ok());
    assert!(ShardedWindow::with_shards(2 * max_one + 1, SECOND, 2).is_err());
}

#[test]
fn a_large_limit_counts_exactly() {
    // The largest limit one shard holds, taken in two requests.
    let max_one = u64::from(u32::MAX);
    let clock = ManualClock::new(ms(0));
    let l = ShardedWindow::with_shards(max_one, SECOND, 1)
        .unwrap()
        .with_clock(clock);
    assert!(l.check(max_one - 1).is_allowed());
    assert!(l.check(1).is_allowed());
    assert!(!l.check(1).is_allowed());
    assert_eq!(l.peek().remaining(), 0);
}
