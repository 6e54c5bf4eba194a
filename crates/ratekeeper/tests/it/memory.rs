//! The in-memory limiter: keys, peek, reset, saturation and sweeping.

use std::time::Duration;

use ratekeeper::{
    clock::ManualClock,
    memory::BuildError,
    policy::{Algorithm, PolicyKind},
    Clock, FixedWindow, Gcra, MemoryLimiter, Outcome, Policy, Rate, RetryAfter, SlidingLog,
    SlidingWindow, Timestamp, TokenBucket,
};
use ratekeeper_test_support::policies::every_kind;

fn limiter(
    policy: impl Into<Policy>,
    max_keys: usize,
) -> (MemoryLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let limiter = MemoryLimiter::builder(policy)
        .max_keys(max_keys)
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap();
    (limiter, clock)
}

/// One policy of each kind at 4 per second: a whole number of nanoseconds
/// per request, so GCRA's window is exact too.
fn every_policy() -> Vec<Policy> {
    every_kind(&Rate::per_second(4).unwrap())
}

#[test]
fn each_key_has_its_own_quota_under_every_policy() {
    for policy in every_policy() {
        let (limiter, _) = limiter(policy.clone(), 100);
        for key in ["alice", "bob"] {
            let allowed = (0..6)
                .filter(|_| limiter.check(key, 1).is_allowed())
                .count();
            assert_eq!(allowed, 4, "{:?} {key}", policy.kind());
        }
        assert_eq!(limiter.len(), 2);
    }
}

#[test]
fn decisions_match_the_pure_policy() {
    // The table must decide exactly as the policy does on its own.
    for policy in every_policy() {
        let (limiter, clock) = limiter(policy.clone(), 100);
        let mut state = policy.fresh();
        for step in 0..200u64 {
            clock.advance(Duration::from_millis(37 * (step % 5)));
            let cost = step % 3;
            let (expected, next) = policy.decide(&state, clock.now(), cost);
            state = next;
            assert_eq!(
                limiter.check(b"key", cost),
                Outcome::Decided(expected),
                "{:?} step {step}",
                policy.kind()
            );
        }
    }
}

#[test]
fn token_buckets_run_as_gcra_with_the_same_decisions() {
    let bucket = TokenBucket::new(10, Duration::from_secs(1), 5).unwrap();
    let (limiter, clock) = limiter(bucket, 10);
    let requests: Vec<_> = (0..100u64)
        .map(|i| {
            (
                Timestamp::from_secs(1_000) + Duration::from_millis(i * 23),
                1,
            )
        })
        .collect();
    let expected = bucket.simulate(requests.clone());
    for ((now, cost), expected) in requests.into_iter().zip(expected) {
        clock.set(now);
        assert_eq!(limiter.check("k", cost), Outcome::Decided(expected));
    }
}

#[test]
fn keys_are_any_bytes_and_long_keys_cost_the_same() {
    let (limiter, _) = limiter(Gcra::per_second(1).unwrap(), 10);
    let long = vec![b'x'; 10_000];
    assert!(limiter.check(&long, 1).is_allowed());
    assert!(!limiter.check(&long, 1).is_allowed());
    assert!(limiter.check([0u8, 159, 146, 150], 1).is_allowed());
    assert!(limiter.check(String::from("key"), 1).is_allowed());
    assert!(
        !limiter.check("key", 1).is_allowed(),
        "a String and a &str are the same key"
    );
    assert_eq!(limiter.len(), 3);
}

#[test]
fn peek_takes_nothing_and_reset_forgets() {
    for policy in every_policy() {
        let (limiter, _) = limiter(policy.clone(), 10);
        assert_eq!(limiter.peek("k").remaining(), 4);
        assert!(limiter.is_empty(), "peeking does not track a key");
        let _ = limiter.check("k", 3);
        assert_eq!(limiter.peek("k").remaining(), 1, "{:?}", policy.kind());
        assert_eq!(limiter.peek("k").remaining(), 1);
        assert!(limiter.reset("k"));
        assert!(!limiter.reset("k"));
        assert_eq!(limiter.peek("k").remaining(), 4);
        assert!(limiter.is_empty());
    }
}

#[test]
fn a_new_key_past_the_cap_is_saturated_and_known_keys_stay_limited() {
    for policy in every_policy() {
        let (limiter, _) = limiter(policy.clone(), 3);
        for key in ["a", "b", "c"] {
            assert!(limiter.check(key, 4).is_allowed());
        }
        let outcome = limiter.check("d", 1);
        assert!(outcome.is_saturated(), "{:?}", policy.kind());
        // Room returns when the first key is whole again: within a window
        // (two for the sliding window counter, whose last window counts).
        let RetryAfter::After(wait) = outcome.retry_after() else {
            panic!("a saturated answer has a wait");
        };
        assert!(
            wait > Duration::ZERO && wait <= policy.window() * 2,
            "{:?}: {wait:?}",
            policy.kind()
        );
        assert!(!outcome.is_allowed());
        assert_eq!(limiter.len(), 3);
        // Known keys keep being limited...
        assert!(!limiter.check("a", 1).is_allowed());
        assert!(limiter.check("a", 1).decision().is_some());
        // ...and a request that stores nothing needs no row.
        assert!(limiter.check("d", 0).decision().is_some());
        assert!(limiter
            .check("d", 5)
            .decision()
            .is_some_and(|d| d.retry_after().is_never()));
    }
}

/// Every policy at 100 per minute.
fn hundred_a_minute() -> Vec<Policy> {
    let rate = Rate::per_minute(100).unwrap();
    PolicyKind::ALL
        .iter()
        .map(|&kind| Policy::new(kind, &rate).unwrap())
        .collect()
}

#[test]
fn a_full_table_makes_room_as_soon_as_its_keys_are_fresh_again() {
    const KEYS: usize = 10_000;
    for policy in hundred_a_minute() {
        let kind = policy.kind();
        // No background sweeper: only the new keys' own sweeps make room.
        let (limiter, clock) = limiter(policy, KEYS);
        for i in 0..KEYS {
            assert!(limiter.check(format!("flood-{i}"), 1).is_allowed());
        }
        let outcome = limiter.check("newcomer", 1);
        assert!(outcome.is_saturated(), "{kind:?}");
        let RetryAfter::After(wait) = outcome.retry_after() else {
            panic!("{kind:?}: a saturated answer has a wait");
        };
        if matches!(kind, PolicyKind::Gcra | PolicyKind::TokenBucket) {
            // One request under 100/minute is paid back in 600 ms.
            assert_eq!(wait, Duration::from_millis(600), "{kind:?}");
        }
        // Not a moment before the flood keys are fresh...
        clock.advance(wait - Duration::from_nanos(1));
        assert!(limiter.check("newcomer", 1).is_saturated(), "{kind:?}");
        // ...and at once when they are, without any sweep being called.
        clock.advance(Duration::from_nanos(1));
        assert!(limiter.check("newcomer", 1).is_allowed(), "{kind:?}");
        assert!(limiter.check("another", 1).is_allowed(), "{kind:?}");
        // The flood keys that were swept start whole; the rest stay.
        assert!(limiter.len() <= KEYS, "{kind:?}");
    }
}

#[test]
fn sweeps_on_demand_run_at_most_once_per_shard_until_a_key_may_be_fresh() {
    let (limiter, clock) = limiter(Gcra::per_minute(100).unwrap(), 4_096);
    for i in 0..4_096 {
        assert!(limiter.check(format!("flood-{i}"), 1).is_allowed());
    }
    assert_eq!(limiter.demand_sweeps(), 0);
    // A thousand newcomers at once: each shard is swept at most once.
    for i in 0..1_000 {
        assert!(limiter.check(format!("new-{i}"), 1).is_saturated());
    }
    let first = limiter.demand_sweeps();
    assert!((1..=8).contains(&first), "{first} sweeps of 8 shards");
    // Until the flood keys may be fresh, no shard is swept again.
    for _ in 0..59 {
        clock.advance(Duration::from_millis(10));
        assert!(limiter.check("late", 1).is_saturated());
        let _ = ratekeeper::memory::check_all(&[(&limiter, "multi", 1)]);
    }
    assert_eq!(limiter.demand_sweeps(), first);
    clock.advance(Duration::from_millis(10));
    assert!(limiter.check("late", 1).is_allowed());
    assert!(limiter.demand_sweeps() > first);
}

#[test]
fn a_shard_is_swept_on_demand_at_most_once_per_gap() {
    // 1,000 a second: a key is fresh 1 ms after its one request, sooner
    // than the gap between two sweeps of a shard.
    let (limiter, clock) = limiter(Gcra::per_second(1_000).unwrap(), 2);
    let start = clock.now();
    assert!(limiter.check("a", 1).is_allowed());
    assert!(limiter.check("b", 1).is_allowed());
    assert!(limiter.check("c", 1).is_saturated());
    assert_eq!(limiter.demand_sweeps(), 1);
    // "a" and "b" are fresh, but the shard was swept under a gap ago.
    clock.set(start + Duration::from_millis(2));
    let outcome = limiter.check("c", 1);
    assert!(outcome.is_saturated());
    assert_eq!(
        outcome.retry_after(),
        RetryAfter::After(ratekeeper::memory::MIN_DEMAND_SWEEP_GAP - Duration::from_millis(2))
    );
    assert_eq!(limiter.demand_sweeps(), 1);
    clock.set(start + ratekeeper::memory::MIN_DEMAND_SWEEP_GAP);
    assert!(limiter.check("c", 1).is_allowed());
    assert_eq!(limiter.demand_sweeps(), 2);
}

#[test]
fn a_sweep_evicts_only_fresh_states() {
    for policy in every_policy() {
        let (limiter, clock) = limiter(policy.clone(), 2);
        let _ = limiter.check("early", 4);
        clock.advance(Duration::from_millis(500));
        let _ = limiter.check("late", 4);
        assert!(limiter.check("new", 1).is_saturated());

        // Nothing is fresh yet: nothing goes, and nobody's limit resets.
        assert_eq!(limiter.sweep(), 0);
        assert!(limiter.peek("early").remaining() < 4, "{:?}", policy.kind());
        assert_eq!(limiter.len(), 2);

        // Once "early" is whole again it is evicted, and "new" fits.
        let early_expiry = Timestamp::from_secs(1_000) + policy.window() * 2;
        clock.set(early_expiry);
        let evicted = limiter.sweep();
        assert!(evicted >= 1, "{:?}", policy.kind());
        assert!(limiter.check("new", 1).is_allowed(), "{:?}", policy.kind());
    }
}

#[test]
fn sweeping_keeps_probe_chains_intact() {
    // Many keys in a small table make long probe runs; evicting some in the
    // middle of runs must not hide the others.
    let window = FixedWindow::new(1, Duration::from_secs(1)).unwrap();
    let (limiter, clock) = limiter(window, 64);
    let start = clock.now();
    for i in 0..64 {
        if i % 2 == 1 {
            clock.set(start + Duration::from_secs(1));
        } else {
            clock.set(start);
        }
        assert!(limiter.check(format!("key-{i}"), 1).is_allowed());
    }
    // The even keys' window has ended; the odd keys' has not.
    clock.set(start + Duration::from_millis(1_500));
    assert_eq!(limiter.sweep(), 32);
    assert_eq!(limiter.len(), 32);
    for i in (1..64).step_by(2) {
        assert!(
            !limiter.check(format!("key-{i}"), 1).is_allowed(),
            "key-{i} lost its state"
        );
    }
    assert_eq!(limiter.len(), 32);
    for i in (0..64).step_by(2) {
        assert!(limiter.check(format!("key-{i}"), 1).is_allowed());
    }
    assert_eq!(limiter.len(), 64);
}

#[test]
fn wide_policies_report_their_memory() {
    let log = SlidingLog::new(100, Duration::from_secs(60)).unwrap();
    let (logs, _) = limiter(log, 1_000);
    let empty = logs.memory_bytes();
    for i in 0..500 {
        let _ = logs.check(format!("k{i}"), 1);
    }
    assert!(logs.memory_bytes() > empty);
    let counter = SlidingWindow::new(100, Duration::from_secs(60)).unwrap();
    let (counters, _) = limiter(counter, 1_000);
    let _ = counters.check("k", 1);
    assert_eq!(counters.len(), 1);
}

#[test]
fn builder_validates() {
    let policy = Gcra::per_second(1).unwrap();
    assert!(matches!(
        MemoryLimiter::builder(policy).max_keys(0).build(),
        Err(BuildError::ZeroMaxKeys)
    ));
    assert!(matches!(
        MemoryLimiter::builder(policy).max_keys(usize::MAX).build(),
        Err(BuildError::TooManyKeys { .. })
    ));
    let limiter = MemoryLimiter::new(policy).unwrap();
    assert_eq!(limiter.max_keys(), ratekeeper::memory::DEFAULT_MAX_KEYS);
    assert_eq!(limiter.sweep_interval(), Duration::from_secs(1));
    let minute =
        MemoryLimiter::new(FixedWindow::new(1, Duration::from_secs(3_600)).unwrap()).unwrap();
    assert_eq!(
        minute.sweep_interval(),
        ratekeeper::memory::MAX_SWEEP_INTERVAL
    );
}

#[test]
fn clones_share_one_table() {
    let (limiter, _) = limiter(Gcra::per_second(2).unwrap(), 10);
    let other = limiter.clone();
    assert!(limiter.check("k", 2).is_allowed());
    assert!(!other.check("k", 1).is_allowed());
    assert_eq!(other.len(), 1);
    assert!(format!("{limiter:?}").contains("MemoryLimiter"));
}

/// A clock that counts its readings.
#[derive(Clone, Default)]
struct CountingClock(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl Clock for CountingClock {
    fn now(&self) -> Timestamp {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Timestamp::from_secs(1_000)
    }
}

#[test]
fn a_check_reads_the_clock_once_whatever_its_path() {
    // The read is deferred until the key's row is found; a new key, a
    // saturated table and the sweep a full table runs must all use that
    // one reading, under every policy.
    for policy in every_policy() {
        let clock = CountingClock::default();
        let limiter = MemoryLimiter::builder(policy.clone())
            .max_keys(1)
            .clock(clock.clone())
            .background_sweep(false)
            .build()
            .unwrap();
        let reads = || clock.0.load(std::sync::atomic::Ordering::Relaxed);
        assert!(limiter.check("a", 1).is_allowed(), "{policy:?}"); // a new key
        assert_eq!(reads(), 1, "{policy:?}");
        assert!(limiter.check("a", 1).is_allowed(), "{policy:?}"); // a tracked key
        assert_eq!(reads(), 2, "{policy:?}");
        // The table is full: this check sweeps for room, finds none, and
        // answers saturated.
        assert!(limiter.check("b", 1).is_saturated(), "{policy:?}");
        assert_eq!(reads(), 3, "{policy:?}");
    }
}

#[test]
fn a_window_from_the_first_hit_counts_each_key_as_the_policy_does() {
    let policy = FixedWindow::from_first_hit(3, Duration::from_secs(1)).unwrap();
    let (limiter, clock) = limiter(policy, 100);
    // (ms to wait, key, cost): the keys' windows open at different times.
    let steps = [
        (0, "a", 1),
        (300, "b", 2),
        (400, "a", 2),
        (200, "a", 1),
        (400, "b", 2),
        (100, "a", 1),
        (50, "b", 1),
        (900, "a", 3),
        (0, "b", 0),
        (1_500, "b", 4),
    ];
    let mut states = std::collections::HashMap::new();
    for (wait, key, cost) in steps {
        clock.advance(Duration::from_millis(wait));
        let state = states.entry(key).or_insert_with(|| policy.fresh());
        let (expected, next) = policy.decide(state, clock.now(), cost);
        *state = next;
        let Outcome::Decided(got) = limiter.check(key, cost) else {
            panic!("room for two keys");
        };
        assert_eq!(got, expected, "{key} at {:?}", clock.now());
    }
}
