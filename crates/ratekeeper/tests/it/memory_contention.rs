//! Exactness under contention: threads hammering one key admit exactly the
//! quota, whatever the policy.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, policy::PolicyKind, MemoryLimiter, Policy, Rate, Timestamp};

fn limiter(policy: Policy, max_keys: usize) -> MemoryLimiter<ManualClock> {
    MemoryLimiter::builder(policy)
        .max_keys(max_keys)
        .clock(ManualClock::new(Timestamp::from_secs(1_000)))
        .background_sweep(false)
        .build()
        .unwrap()
}

/// Every policy at `limit` per hour: nothing refills while the clock stands.
fn every_policy(limit: u64) -> Vec<Policy> {
    let rate = Rate::new(limit, Duration::from_secs(3_600)).unwrap();
    PolicyKind::ALL
        .iter()
        .map(|&kind| Policy::new(kind, &rate).unwrap())
        .collect()
}

/// Runs `threads` threads, released together, each calling `check` `calls`
/// times; the number of allowed calls.
fn hammer(threads: usize, calls: usize, check: impl Fn(usize) -> bool + Sync) -> usize {
    let allowed = AtomicUsize::new(0);
    let start = Barrier::new(threads);
    thread::scope(|scope| {
        for thread in 0..threads {
            let (allowed, start, check) = (&allowed, &start, &check);
            scope.spawn(move || {
                start.wait();
                for _ in 0..calls {
                    if check(thread) {
                        allowed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
    });
    allowed.into_inner()
}

#[test]
fn a_hundred_callers_under_a_limit_of_ten_admit_ten() {
    for policy in every_policy(10) {
        let kind = policy.kind();
        let limiter = limiter(policy, 100);
        let allowed = hammer(100, 1, |_| limiter.check("api", 1).is_allowed());
        assert_eq!(allowed, 10, "{kind:?}");
        assert_eq!(
            limiter.len(),
            1,
            "{kind:?}: one key, one row, however many first hits raced"
        );
    }
}

#[test]
fn two_hundred_callers_under_a_limit_of_n_admit_n() {
    for n in [1, 137, 1_000] {
        for policy in every_policy(n) {
            let kind = policy.kind();
            let limiter = limiter(policy, 100);
            let allowed = hammer(200, 10, |_| limiter.check("hot", 1).is_allowed());
            assert_eq!(allowed as u64, n, "{kind:?} limit {n}");
        }
    }
}

#[test]
fn weighted_costs_never_exceed_the_quota() {
    for policy in every_policy(500) {
        let kind = policy.kind();
        let limiter = limiter(policy, 100);
        let units = AtomicU64::new(0);
        hammer(16, 200, |thread| {
            let cost = 1 + (thread as u64 % 4);
            let allowed = limiter.check("k", cost).is_allowed();
            if allowed {
                units.fetch_add(cost, Ordering::Relaxed);
            }
            allowed
        });
        let units = units.into_inner();
        assert!(units <= 500, "{kind:?} admitted {units}");
        // With costs of 1 to 4 and 3,200 requests, at most 3 units go unused.
        assert!(units >= 497, "{kind:?} admitted only {units}");
    }
}

#[test]
fn racing_first_hits_never_overshoot_the_cap() {
    for policy in every_policy(5) {
        let kind = policy.kind();
        let limiter = limiter(policy, 50);
        let tracked = hammer(200, 5, |thread| {
            // Each thread its own keys, all new.
            let key = format!("t{thread}-{}", thread * 7);
            !limiter.check(key, 1).is_saturated()
        });
        assert_eq!(limiter.len(), 50, "{kind:?}");
        // Each of the 50 tracked keys took its 5 calls; everyone else was saturated.
        assert_eq!(tracked, 50 * 5, "{kind:?}");
    }
}

#[test]
fn many_keys_from_many_threads_each_get_their_own_quota() {
    for policy in every_policy(3) {
        let kind = policy.kind();
        let limiter = limiter(policy, 10_000);
        // 8 threads spread 16,000 calls over 500 keys, 32 calls a key.
        let next = AtomicUsize::new(0);
        let allowed = hammer(8, 2_000, |_| {
            let key = next.fetch_add(1, Ordering::Relaxed) % 500;
            limiter.check(key.to_string(), 1).is_allowed()
        });
        assert_eq!(allowed, 500 * 3, "{kind:?}");
        assert_eq!(limiter.len(), 500);
    }
}
