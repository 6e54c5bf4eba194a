//! Tests of the concurrency limiter through the public API.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use futures_executor::block_on;
use ratekeeper::{
    concurrency::{AcquireError, ConcurrencyLimiter, Permit},
    policy::PolicyError,
};

/// Long enough never to expire on a slow CI machine; used where the test
/// expects success, so it only bounds a failing test's run time.
const GENEROUS: Duration = Duration::from_secs(10);

/// A real deadline expected to pass.
const SHORT: Duration = Duration::from_millis(20);

fn assert_send_sync<T: Send + Sync>(_: &T) {}
fn assert_send<T: Send>(_: &T) {}

#[test]
fn zero_max_is_an_error() {
    assert_eq!(
        ConcurrencyLimiter::new(0).unwrap_err(),
        PolicyError::Zero { field: "max" }
    );
}

#[test]
fn try_acquire_up_to_max_then_none() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    assert_eq!(limiter.max(), 3);
    assert_eq!(limiter.available(), 3);

    let permits: Vec<Permit> = (0..3).map(|_| limiter.try_acquire().unwrap()).collect();
    assert!(permits.iter().all(|p| p.count() == 1));
    assert_eq!(limiter.in_flight(), 3);
    assert_eq!(limiter.available(), 0);
    assert!(limiter.try_acquire().is_none());

    let mut permits = permits;
    drop(permits.pop());
    assert_eq!(limiter.in_flight(), 2);
    assert_eq!(limiter.available(), 1);
    let again = limiter.try_acquire().unwrap();
    assert!(limiter.try_acquire().is_none());

    drop(again);
    drop(permits);
    assert_eq!(limiter.in_flight(), 0);
    assert_eq!(limiter.available(), 3);
}

#[test]
fn try_acquire_many_is_all_or_nothing() {
    let limiter = ConcurrencyLimiter::new(5).unwrap();
    let three = limiter.try_acquire_many(3).unwrap();
    assert_eq!(three.count(), 3);
    assert!(limiter.try_acquire_many(3).is_none());
    assert_eq!(limiter.in_flight(), 3, "a refused request takes nothing");
    let two = limiter.try_acquire_many(2).unwrap();
    assert!(limiter.try_acquire_many(1).is_none());
    assert!(limiter.try_acquire_many(usize::MAX).is_none());

    let empty = limiter.try_acquire_many(0).unwrap();
    assert_eq!(empty.count(), 0);
    drop(empty);
    assert_eq!(limiter.in_flight(), 5);

    drop(three);
    assert_eq!(limiter.available(), 3);
    drop(two);
    assert_eq!(limiter.available(), 5);
}

#[test]
fn huge_max_does_not_overflow() {
    let limiter = ConcurrencyLimiter::new(usize::MAX).unwrap();
    let most = limiter.try_acquire_many(usize::MAX - 1).unwrap();
    let last = limiter.try_acquire().unwrap();
    assert!(limiter.try_acquire().is_none());
    assert!(limiter.try_acquire_many(usize::MAX).is_none());
    drop((most, last));
    assert_eq!(limiter.available(), usize::MAX);
}

#[test]
fn clones_share_one_cap() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let clone = limiter.clone();
    let permit = clone.try_acquire().unwrap();
    assert!(limiter.try_acquire().is_none());
    assert_eq!(limiter.in_flight(), 1);

    // A permit outlives every limiter handle.
    drop(limiter);
    drop(clone);
    drop(permit);
}

#[test]
fn types_are_send_sync_and_debug() {
    let limiter = ConcurrencyLimiter::new(2).unwrap();
    assert_send_sync(&limiter);
    let permit = limiter.try_acquire().unwrap();
    assert_send_sync(&permit);
    assert_send(&limiter.acquire());
    assert_send(&limiter.acquire_timeout(SHORT));
    assert_send(&limiter.acquire_many(2));

    let debug = format!("{limiter:?}");
    assert!(debug.contains("ConcurrencyLimiter"), "{debug}");
    assert!(debug.contains("max: 2"), "{debug}");
    assert!(debug.contains("in_flight: 1"), "{debug}");
    let debug = format!("{permit:?}");
    assert!(debug.contains("Permit"), "{debug}");
    assert!(debug.contains("count: 1"), "{debug}");
}

#[test]
fn hammering_threads_never_exceed_max() {
    const MAX: usize = 4;
    const THREADS: usize = 16;
    const ITERATIONS: usize = 20_000;

    let limiter = ConcurrencyLimiter::new(MAX).unwrap();
    let current = Arc::new(AtomicUsize::new(0));
    let high_water = Arc::new(AtomicUsize::new(0));
    let granted = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));

    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let limiter = limiter.clone();
            let current = Arc::clone(&current);
            let high_water = Arc::clone(&high_water);
            let granted = Arc::clone(&granted);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                for j in 0..ITERATIONS {
                    // Mix single and multi-permit requests.
                    let n = if (i + j) % 7 == 0 { 2 } else { 1 };
                    if let Some(permit) = limiter.try_acquire_many(n) {
                        let now = current.fetch_add(n, Ordering::SeqCst) + n;
                        high_water.fetch_max(now, Ordering::SeqCst);
                        assert!(now <= MAX, "{now} in flight, max {MAX}");
                        assert!(limiter.in_flight() <= MAX);
                        granted.fetch_add(1, Ordering::Relaxed);
                        current.fetch_sub(n, Ordering::SeqCst);
                        drop(permit);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }

    let high_water = high_water.load(Ordering::SeqCst);
    assert!(
        high_water <= MAX,
        "high-water mark {high_water} above {MAX}"
    );
    assert!(high_water >= 1);
    assert!(granted.load(Ordering::Relaxed) > 0);
    assert_eq!(limiter.in_flight(), 0, "every permit was released");
}

#[test]
fn async_acquire_wakes_when_another_thread_releases() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let held = limiter.try_acquire().unwrap();

    let (waiting_tx, waiting_rx) = mpsc::channel();
    let waiter = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            let acquire = limiter.acquire();
            waiting_tx.send(()).unwrap();
            let permit = block_on(acquire);
            assert_eq!(permit.count(), 1);
            permit
        })
    };

    // The waiter may or may not have parked yet; either way it must get the
    // permit once it is released.
    waiting_rx.recv().unwrap();
    assert!(limiter.try_acquire().is_none());
    drop(held);

    let permit = waiter.join().unwrap();
    assert_eq!(limiter.in_flight(), 1);
    drop(permit);
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn every_release_wakes_a_waiter() {
    // Several waiters parked on a full limiter; each released permit must
    // reach one of them, even when releases come back to back.
    const MAX: usize = 3;
    let limiter = ConcurrencyLimiter::new(MAX).unwrap();
    let held: Vec<Permit> = (0..MAX).map(|_| limiter.try_acquire().unwrap()).collect();

    let (got_tx, got_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(std::sync::Mutex::new(release_rx));
    let waiters: Vec<_> = (0..MAX)
        .map(|_| {
            let limiter = limiter.clone();
            let got_tx = got_tx.clone();
            let release_rx = Arc::clone(&release_rx);
            thread::spawn(move || {
                let permit = block_on(limiter.acquire_timeout(GENEROUS)).unwrap();
                got_tx.send(()).unwrap();
                // Hold it until the main thread has seen all three.
                release_rx.lock().unwrap().recv().unwrap();
                drop(permit);
            })
        })
        .collect();

    drop(held);
    for _ in 0..MAX {
        got_rx.recv_timeout(GENEROUS).unwrap();
    }
    assert_eq!(limiter.in_flight(), MAX);
    for _ in 0..MAX {
        release_tx.send(()).unwrap();
    }
    for waiter in waiters {
        waiter.join().unwrap();
    }
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn many_async_waiters_all_finish() {
    // More waiters than permits, each releasing after use: every waiter must
    // eventually be served, none left asleep.
    const MAX: usize = 2;
    const THREADS: usize = 8;
    const ROUNDS: usize = 200;
    let limiter = ConcurrencyLimiter::new(MAX).unwrap();
    let current = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));

    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let limiter = limiter.clone();
            let current = Arc::clone(&current);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                for j in 0..ROUNDS {
                    let permit = if (i + j) % 5 == 0 {
                        block_on(limiter.acquire_many_timeout(2, GENEROUS)).unwrap()
                    } else if j % 2 == 0 {
                        block_on(limiter.acquire_timeout(GENEROUS)).unwrap()
                    } else {
                        limiter.acquire_blocking_timeout(GENEROUS).unwrap()
                    };
                    let n = permit.count();
                    let now = current.fetch_add(n, Ordering::SeqCst) + n;
                    assert!(now <= MAX, "{now} in flight, max {MAX}");
                    current.fetch_sub(n, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn acquire_timeout_times_out_when_nothing_is_released() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let _held = limiter.try_acquire().unwrap();

    let started = Instant::now();
    let result = block_on(limiter.acquire_timeout(SHORT));
    assert_eq!(result.unwrap_err(), AcquireError::Timeout);
    assert!(started.elapsed() >= SHORT, "returned before the deadline");
    assert_eq!(limiter.in_flight(), 1);

    let result = block_on(limiter.acquire_until(Instant::now() + SHORT));
    assert_eq!(result.unwrap_err(), AcquireError::Timeout);
    let result = block_on(limiter.acquire_many_timeout(1, SHORT));
    assert_eq!(result.unwrap_err(), AcquireError::Timeout);
}

#[test]
fn acquire_timeout_takes_a_free_permit_at_once() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let permit = block_on(limiter.acquire_timeout(Duration::ZERO)).unwrap();
    drop(permit);
    // A past deadline still takes a free permit.
    let permit =
        block_on(limiter.acquire_until(Instant::now() - Duration::from_millis(1))).unwrap();
    drop(permit);
    // A timeout too large for `Instant` does not panic.
    let permit = block_on(limiter.acquire_timeout(Duration::MAX)).unwrap();
    drop(permit);
    let permit = limiter.acquire_blocking_timeout(Duration::MAX).unwrap();
    drop(permit);
}

#[test]
fn acquire_timeout_succeeds_when_released_in_time() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let held = limiter.try_acquire().unwrap();
    let (ready_tx, ready_rx) = mpsc::channel();
    let waiter = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            let acquire = limiter.acquire_timeout(GENEROUS);
            ready_tx.send(()).unwrap();
            block_on(acquire)
        })
    };
    ready_rx.recv().unwrap();
    drop(held);
    let permit = waiter.join().unwrap().unwrap();
    assert_eq!(permit.count(), 1);
}

#[test]
fn timed_out_waiter_does_not_leak_or_steal() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let held = limiter.try_acquire().unwrap();
    assert_eq!(
        block_on(limiter.acquire_timeout(SHORT)).unwrap_err(),
        AcquireError::Timeout
    );
    drop(held);
    assert_eq!(limiter.in_flight(), 0);
    assert!(limiter.try_acquire().is_some());
}

#[test]
fn acquire_many_beyond_max_fails_immediately() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let expected = AcquireError::ExceedsCapacity {
        requested: 4,
        max: 3,
    };
    assert_eq!(block_on(limiter.acquire_many(4)).unwrap_err(), expected);
    // Even when it could otherwise wait for a long time.
    let _held = limiter.try_acquire().unwrap();
    assert_eq!(
        block_on(limiter.acquire_many_timeout(4, GENEROUS)).unwrap_err(),
        expected
    );
    assert_eq!(limiter.in_flight(), 1);
    assert_eq!(
        expected.to_string(),
        "requested 4 permits but the limiter allows at most 3 in flight"
    );
    assert_eq!(
        AcquireError::Timeout.to_string(),
        "timed out waiting for a permit"
    );
}

#[test]
fn acquire_many_waits_for_enough_permits() {
    let limiter = ConcurrencyLimiter::new(3).unwrap();
    let first = limiter.try_acquire().unwrap();
    let second = limiter.try_acquire().unwrap();

    let (ready_tx, ready_rx) = mpsc::channel();
    let (got_tx, got_rx) = mpsc::channel();
    let waiter = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            let acquire = limiter.acquire_many(3);
            ready_tx.send(()).unwrap();
            let permit = block_on(acquire).unwrap();
            got_tx.send(()).unwrap();
            permit
        })
    };
    ready_rx.recv().unwrap();
    drop(first);
    // One free permit is not enough for the waiter.
    assert!(got_rx.recv_timeout(SHORT).is_err());
    drop(second);
    let permit = waiter.join().unwrap();
    assert_eq!(permit.count(), 3);
    assert_eq!(limiter.in_flight(), 3);
    drop(permit);
    assert_eq!(limiter.available(), 3);
}

#[test]
fn small_waiter_is_woken_while_a_large_one_waits() {
    // A waiter for 2 and a waiter for 1 on a full limiter of 2: releasing
    // one permit must serve the small waiter, not be swallowed by the large.
    let limiter = ConcurrencyLimiter::new(2).unwrap();
    let first = limiter.try_acquire().unwrap();
    let second = limiter.try_acquire().unwrap();

    let (ready_tx, ready_rx) = mpsc::channel();
    let large = {
        let limiter = limiter.clone();
        let ready_tx = ready_tx.clone();
        thread::spawn(move || {
            let acquire = limiter.acquire_many_timeout(2, GENEROUS);
            ready_tx.send(()).unwrap();
            block_on(acquire).unwrap()
        })
    };
    ready_rx.recv().unwrap();
    let small = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            let acquire = limiter.acquire_timeout(GENEROUS);
            ready_tx.send(()).unwrap();
            block_on(acquire).unwrap()
        })
    };
    ready_rx.recv().unwrap();

    drop(first);
    let small = small.join().unwrap();
    assert_eq!(small.count(), 1);
    drop(second);
    drop(small);
    let large = large.join().unwrap();
    assert_eq!(large.count(), 2);
}

#[test]
fn dropped_acquire_future_takes_nothing() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let held = limiter.try_acquire().unwrap();
    let pending = limiter.acquire();
    drop(pending);
    drop(held);
    assert_eq!(limiter.in_flight(), 0);
}

#[test]
fn blocking_acquire_times_out_then_succeeds() {
    let limiter = ConcurrencyLimiter::new(1).unwrap();
    let held = limiter.acquire_blocking();

    let started = Instant::now();
    assert_eq!(
        limiter.acquire_blocking_timeout(SHORT).unwrap_err(),
        AcquireError::Timeout
    );
    assert!(started.elapsed() >= SHORT, "returned before the deadline");

    let (ready_tx, ready_rx) = mpsc::channel();
    let waiter = {
        let limiter = limiter.clone();
        thread::spawn(move || {
            ready_tx.send(()).unwrap();
            limiter.acquire_blocking_timeout(GENEROUS)
        })
    };
    ready_rx.recv().unwrap();
    drop(held);
    let permit = waiter.join().unwrap().unwrap();
    assert_eq!(permit.count(), 1);
    drop(permit);

    let permit = limiter.acquire_blocking();
    assert_eq!(limiter.in_flight(), 1);
    drop(permit);
}
