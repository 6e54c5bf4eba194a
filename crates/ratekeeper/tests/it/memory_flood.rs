//! A flood of new keys cannot grow memory or switch limiting off.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, policy::PolicyKind, Clock, MemoryLimiter, Policy, Rate, Timestamp,
};

const CAP: usize = 10_000;
const FLOOD: u64 = 1_000_000;

#[test]
fn a_million_new_keys_into_a_table_of_ten_thousand() {
    let rate = Rate::new(2, Duration::from_secs(60)).unwrap();
    for kind in PolicyKind::ALL {
        let policy = Policy::new(kind, &rate).unwrap();
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let limiter = MemoryLimiter::builder(policy)
            .max_keys(CAP)
            .clock(clock.clone())
            .background_sweep(false)
            .build()
            .unwrap();

        // A victim is tracked before the flood and has used its quota.
        assert!(limiter.check("victim", 2).is_allowed());
        let memory_before = limiter.memory_bytes();

        // Two threads flood with a million distinct keys.
        let saturated = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        thread::scope(|scope| {
            for half in 0..2u64 {
                let (limiter, saturated, most) = (&limiter, &saturated, &most);
                scope.spawn(move || {
                    for i in (half..FLOOD).step_by(2) {
                        if limiter.check(i.to_le_bytes(), 1).is_saturated() {
                            saturated.fetch_add(1, Ordering::Relaxed);
                        }
                        if i % 1_000 == 0 {
                            most.fetch_max(limiter.len(), Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert!(most.into_inner() <= CAP, "{kind}");
        assert_eq!(limiter.len(), CAP, "{kind}");
        assert_eq!(
            saturated.into_inner() as u64,
            FLOOD - (CAP as u64 - 1),
            "{kind}"
        );

        // The victim is still limited, a new key is refused, and memory is bounded.
        assert!(
            !limiter.check("victim", 1).is_allowed(),
            "{kind}: the flood reset the victim"
        );
        assert!(limiter.check("newcomer", 1).is_saturated(), "{kind}");
        let memory = limiter.memory_bytes();
        // The lock-free table is allocated up front; the locked maps grow
        // only with tracked keys: both stay within 256 bytes per key.
        assert!(
            memory <= memory_before.max(CAP * 256),
            "{kind}: {memory} bytes"
        );

        // Nothing is fresh yet, so nothing can be swept...
        assert_eq!(limiter.sweep(), 0, "{kind}");
        // ...until the states are whole again: then the room comes back.
        // (A sliding window counter's count weighs for two windows.)
        clock.advance(Duration::from_secs(121));
        assert_eq!(limiter.sweep(), CAP, "{kind}");
        assert!(limiter.is_empty(), "{kind}");
        assert!(limiter.check("newcomer", 1).is_allowed(), "{kind}");
        assert!(clock.now() > Timestamp::from_secs(1_000));
    }
}

/// Threads flood a full table with new keys while time passes: the keys
/// made fresh are swept on demand and their rows reused by newcomers, and
/// the cap holds at every moment.
#[test]
fn sweeps_on_demand_under_a_racing_flood_keep_the_cap() {
    const SMALL: usize = 1_000;
    const FLOOD: u64 = 40_000;
    let rate = Rate::new(2, Duration::from_secs(60)).unwrap();
    for kind in PolicyKind::ALL {
        let policy = Policy::new(kind, &rate).unwrap();
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let limiter = MemoryLimiter::builder(policy)
            .max_keys(SMALL)
            .clock(clock.clone())
            .background_sweep(false)
            .build()
            .unwrap();
        let allowed = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        thread::scope(|scope| {
            for half in 0..2u64 {
                let (limiter, allowed, most, clock) = (&limiter, &allowed, &most, &clock);
                scope.spawn(move || {
                    for i in (half..FLOOD).step_by(2) {
                        // Time runs with the flood, whatever the scheduling:
                        // 280 s in all, every key fresh many times over (two
                        // windows for the sliding counter).
                        if half == 0 && i % 1_000 == 0 {
                            clock.advance(Duration::from_secs(7));
                        }
                        if limiter.check(i.to_le_bytes(), 1).is_allowed() {
                            allowed.fetch_add(1, Ordering::Relaxed);
                        }
                        most.fetch_max(limiter.len(), Ordering::Relaxed);
                    }
                });
            }
        });
        assert!(most.into_inner() <= SMALL, "{kind}");
        assert!(limiter.len() <= SMALL, "{kind}");
        // Rows were freed and reused while the flood ran.
        let allowed = allowed.into_inner();
        assert!(allowed > SMALL, "{kind}: {allowed} allowed");
        assert!(limiter.demand_sweeps() > 0, "{kind}");
    }
}
