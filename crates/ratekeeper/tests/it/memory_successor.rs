//! A limiter's successor for new numbers ([`MemoryLimiter::successor`]):
//! each key's state moves to it on the key's first request, carried; a
//! change of kind starts fresh; chains of changes reach the oldest table;
//! racing threads take a moved key's units exactly once.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, FixedWindow, Gcra, MemoryLimiter, Policy, SlidingLog, SlidingWindow,
    Timestamp, TokenBucket,
};

fn limiter(policy: impl Into<Policy>) -> (MemoryLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let limiter = MemoryLimiter::builder(policy)
        .max_keys(100)
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap();
    (limiter, clock)
}

const MINUTE: Duration = Duration::from_secs(60);

#[test]
fn every_kind_carries_what_a_key_used_to_its_successor() {
    let pairs: Vec<(Policy, Policy)> = vec![
        (
            TokenBucket::new(10, MINUTE, 10).unwrap().into(),
            TokenBucket::new(6, MINUTE, 6).unwrap().into(),
        ),
        (
            Gcra::new(10, MINUTE, 10).unwrap().into(),
            Gcra::new(6, MINUTE * 2, 6).unwrap().into(),
        ),
        (
            FixedWindow::new(10, MINUTE).unwrap().into(),
            FixedWindow::new(6, MINUTE).unwrap().into(),
        ),
        // From the lock-free table to the locked one: a window from the
        // first hit keeps its start in full.
        (
            FixedWindow::new(10, MINUTE).unwrap().into(),
            FixedWindow::from_first_hit(6, MINUTE).unwrap().into(),
        ),
        (
            SlidingLog::new(10, MINUTE).unwrap().into(),
            SlidingLog::new(6, MINUTE / 2).unwrap().into(),
        ),
        (
            SlidingWindow::new(10, MINUTE).unwrap().into(),
            SlidingWindow::new(6, MINUTE * 3).unwrap().into(),
        ),
    ];
    for (old, new) in pairs {
        let (before, _) = limiter(old.clone());
        assert!(before.check("k", 4).is_allowed(), "{old:?}");
        let after = before.successor(new.clone()).unwrap();
        assert_eq!(after.peek("k").remaining(), 2, "{old:?} to {new:?}");
        assert!(!after.check("k", 3).is_allowed(), "{new:?}");
        assert!(after.check("k", 2).is_allowed(), "{new:?}");
        assert_eq!(after.peek("other").remaining(), 6, "{new:?}");
        // The key moved: it is tracked by the successor, not the old table.
        assert_eq!((before.len(), after.len()), (0, 1), "{new:?}");
    }
}

#[test]
fn another_kind_starts_fresh_and_a_chain_reaches_the_oldest_table() {
    let (first, _) = limiter(Gcra::new(10, MINUTE, 10).unwrap());
    assert!(first.check("k", 7).is_allowed());
    let window = first
        .successor(FixedWindow::new(10, MINUTE).unwrap())
        .unwrap();
    assert_eq!(window.peek("k").remaining(), 10);

    let (first, _) = limiter(Gcra::new(10, MINUTE, 10).unwrap());
    assert!(first.check("k", 7).is_allowed());
    let second = first.successor(Gcra::new(8, MINUTE, 8).unwrap()).unwrap();
    let third = second.successor(Gcra::new(9, MINUTE, 9).unwrap()).unwrap();
    // "k" never went to `second`: `third` finds it through it.
    assert_eq!(third.peek("k").remaining(), 2);
}

#[test]
fn racing_threads_take_a_moved_key_s_quota_exactly_once() {
    const THREADS: usize = 8;
    for round in 0..20 {
        let (before, _) = limiter(Gcra::new(100, MINUTE, 100).unwrap());
        assert!(before.check("hot", 60).is_allowed());
        let after = before
            .successor(Gcra::new(80, MINUTE, 80).unwrap())
            .unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (after, barrier) = (after.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    (0..10)
                        .filter(|_| after.check("hot", 1).is_allowed())
                        .count()
                })
            })
            .collect();
        let allowed: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        // 60 of 100 used: 20 are left of 80, taken once among all threads.
        assert_eq!(allowed, 20, "round {round}");
    }
}

#[test]
fn many_changes_in_a_row_keep_every_key_s_use() {
    let (first, _) = limiter(Gcra::new(100, MINUTE, 100).unwrap());
    for key in 0..10 {
        assert!(first.check(format!("k{key}"), 50).is_allowed());
    }
    // Twelve changes while the first states still count: the tables kept
    // stay few, and each key still has what it used.
    let mut current = first;
    for step in 0..12u64 {
        current = current
            .successor(Gcra::new(100 + step % 2, MINUTE, 100 + step % 2).unwrap())
            .unwrap();
    }
    for key in 0..10 {
        let left = current.peek(format!("k{key}")).remaining();
        assert!((49..=51).contains(&left), "k{key}: {left} left");
    }
}
