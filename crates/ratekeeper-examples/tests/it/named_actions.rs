//! Seed 003's promises: five actions with the document's defaults and
//! environment variables, the exact door (exact in count and shape) and the
//! sharded hot-key door (exact in count, 2x across a boundary), and blocked
//! counters reaped by the cleanup together with their buckets.

#[path = "../../examples/named_actions.rs"]
#[allow(dead_code)]
mod example;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

use example::{Action, ActionLimit, Cleaned, Config, RateLimits, Verdict};
use ratekeeper::{clock::ManualClock, RetryAfter, Timestamp};

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

fn limits(pairs: &[(&str, &str)]) -> (RateLimits<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(600));
    let config = Config::from_lookup(vars(pairs)).unwrap();
    (
        RateLimits::with_clock(config, clock.clone()).unwrap(),
        clock,
    )
}

fn per(limit: u64, ms: u64) -> ActionLimit {
    ActionLimit {
        limit,
        window: Duration::from_millis(ms),
    }
}

#[test]
fn the_documents_defaults() {
    let config = Config::from_lookup(|_| None).unwrap();
    assert!(config.enabled);
    assert_eq!(config.limit(Action::Auth), per(10, 60_000));
    assert_eq!(config.limit(Action::DashboardAuth), per(10, 60_000));
    assert_eq!(config.limit(Action::DashboardApi), per(300, 60_000));
    assert_eq!(config.limit(Action::Publish), per(0, 1_000));
    assert_eq!(config.limit(Action::Subscribe), per(0, 60_000));
    assert_eq!(config.cleanup_interval, Duration::from_millis(300_000));

    let (limits, _) = limits(&[]);
    // publish and subscribe are off by default; the others are on.
    assert_eq!(limits.check(Action::Publish, "alice"), Verdict::Unlimited);
    assert_eq!(limits.check(Action::Subscribe, "alice"), Verdict::Unlimited);
    for action in [Action::Auth, Action::DashboardAuth, Action::DashboardApi] {
        assert_eq!(limits.check(action, "k"), Verdict::Allowed, "{action:?}");
    }
}

#[test]
fn environment_variables_override_the_defaults() {
    let config = Config::from_lookup(vars(&[
        ("AUTH_RATE_LIMIT", "3"),
        ("AUTH_RATE_WINDOW_MS", "1000"),
        ("PUBLISH_RATE_LIMIT", "500"),
        ("SUBSCRIBE_RATE_LIMIT", "7"),
        ("SUBSCRIBE_RATE_WINDOW_MS", "2000"),
        ("DASHBOARD_API_RATE_LIMIT", "0"),
        ("RATE_LIMIT_CLEANUP_INTERVAL_MS", "1500"),
    ]))
    .unwrap();
    assert_eq!(config.limit(Action::Auth), per(3, 1_000));
    // dashboard_auth follows auth unless told otherwise.
    assert_eq!(config.limit(Action::DashboardAuth), per(3, 1_000));
    assert_eq!(config.limit(Action::Publish), per(500, 1_000));
    assert_eq!(config.limit(Action::Subscribe), per(7, 2_000));
    assert_eq!(config.limit(Action::DashboardApi), per(0, 60_000));
    assert_eq!(config.cleanup_interval, Duration::from_millis(1_500));

    let own = Config::from_lookup(vars(&[
        ("AUTH_RATE_LIMIT", "3"),
        ("DASHBOARD_AUTH_RATE_LIMIT", "8"),
    ]))
    .unwrap();
    assert_eq!(own.limit(Action::DashboardAuth), per(8, 60_000));

    // A limit of 0 switches dashboard_api off.
    let limits = RateLimits::with_clock(config, ManualClock::default()).unwrap();
    assert_eq!(limits.check(Action::DashboardApi, "s"), Verdict::Unlimited);
    assert_eq!(limits.check(Action::Publish, "alice"), Verdict::Allowed);

    // Disabled: nothing is limited.
    let (off, _) = limits_off();
    for action in Action::ALL {
        assert_eq!(off.check(action, "k"), Verdict::Unlimited, "{action:?}");
    }
}

fn limits_off() -> (RateLimits<ManualClock>, ManualClock) {
    limits(&[("RATE_LIMIT_ENABLED", "false"), ("PUBLISH_RATE_LIMIT", "5")])
}

#[test]
fn bad_values_are_errors_naming_the_variable() {
    for (name, value) in [
        ("AUTH_RATE_LIMIT", "ten"),
        ("AUTH_RATE_LIMIT", "-1"),
        ("PUBLISH_RATE_WINDOW_MS", "0"),
        ("RATE_LIMIT_ENABLED", "maybe"),
        ("RATE_LIMIT_CLEANUP_INTERVAL_MS", "99999999999999999999999"),
    ] {
        let error = Config::from_lookup(vars(&[(name, value)])).unwrap_err();
        assert_eq!(error.name, name);
        assert!(error.to_string().contains(name), "{error}");
    }
    // Numbers past the policies' bounds are refused when the limits are built.
    let config =
        Config::from_lookup(vars(&[("PUBLISH_RATE_LIMIT", "18446744073709551615")])).unwrap();
    assert!(RateLimits::with_clock(config, ManualClock::default()).is_err());
    let config = Config::from_lookup(vars(&[("AUTH_RATE_LIMIT", "18446744073709551615")])).unwrap();
    assert!(RateLimits::with_clock(config, ManualClock::default()).is_err());
}

#[test]
fn the_exact_door_is_exact_in_count_and_shape() {
    let (limits, clock) = limits(&[]);
    for i in 0..10 {
        assert_eq!(
            limits.check(Action::Auth, "203.0.113.9"),
            Verdict::Allowed,
            "{i}"
        );
    }
    // A token bucket of 10 per minute: the next token comes in 6 s.
    assert_eq!(
        limits.check(Action::Auth, "203.0.113.9"),
        Verdict::Denied {
            retry_after: RetryAfter::After(Duration::from_secs(6))
        }
    );
    // Another address is not affected; dashboard_auth is its own action.
    assert_eq!(limits.check(Action::Auth, "198.51.100.1"), Verdict::Allowed);
    assert_eq!(
        limits.check(Action::DashboardAuth, "203.0.113.9"),
        Verdict::Allowed
    );
    // No burst at a boundary: 6 s later there is one token, not ten.
    clock.advance(Duration::from_secs(6));
    assert_eq!(limits.check(Action::Auth, "203.0.113.9"), Verdict::Allowed);
    assert!(!limits.check(Action::Auth, "203.0.113.9").is_allowed());

    // 200 concurrent attempts on one address: exactly 10 pass.
    for round in 0..5 {
        let key = format!("192.0.2.{round}");
        let allowed = race(200, || limits.check(Action::Auth, &key).is_allowed());
        assert_eq!(allowed, 10, "round {round}");
    }
}

/// How many of `callers` threads, released together, `attempt` allowed.
fn race(callers: usize, attempt: impl Fn() -> bool + Sync) -> u64 {
    let allowed = AtomicU64::new(0);
    let barrier = Barrier::new(callers);
    std::thread::scope(|s| {
        for _ in 0..callers {
            s.spawn(|| {
                barrier.wait();
                if attempt() {
                    allowed.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    allowed.into_inner()
}

#[test]
fn the_sharded_door_is_exact_in_count() {
    let (limits, clock) = limits(&[("PUBLISH_RATE_LIMIT", "1000")]);
    let door = limits.door(Action::Publish, "alice").unwrap();
    for round in 0..5 {
        // 8 threads, 300 produces each, against a limit of 1000 per second.
        let admitted = AtomicU64::new(0);
        let barrier = Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    barrier.wait();
                    for _ in 0..300 {
                        if door.admit() {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 1_000, "round {round}");
        assert_eq!(
            limits.blocked(Action::Publish, "alice"),
            Some(1_400 * (round + 1))
        );
        clock.advance(Duration::from_secs(1));
    }
    // Through the look-up path, the count is shared with held doors.
    let bob = limits.door(Action::Publish, "bob").unwrap();
    assert!(bob.admit());
    let allowed = (0..1_200)
        .filter(|_| limits.check(Action::Publish, "bob").is_allowed())
        .count();
    assert_eq!(allowed, 999);
    assert!(matches!(
        limits.check(Action::Publish, "bob"),
        Verdict::Denied {
            retry_after: RetryAfter::After(_)
        }
    ));
}

#[test]
fn the_sharded_door_passes_twice_its_limit_across_a_boundary() {
    let clock = ManualClock::new(Timestamp::from_millis(999));
    let config = Config::from_lookup(vars(&[("PUBLISH_RATE_LIMIT", "5")])).unwrap();
    let limits = RateLimits::with_clock(config, clock.clone()).unwrap();
    let door = limits.door(Action::Publish, "alice").unwrap();
    let before = (0..5).filter(|_| door.admit()).count();
    clock.set(Timestamp::from_millis(1_001));
    let after = (0..5).filter(|_| door.admit()).count();
    assert_eq!(
        before + after,
        10,
        "the fixed window's trade, as documented"
    );
    assert!(!door.admit());
}

#[test]
fn blocked_counters_are_reaped_by_the_cleanup_with_their_bucket() {
    let (limits, clock) = limits(&[("DASHBOARD_API_RATE_LIMIT", "3")]);
    let session = example::session_key("secret-token-1");
    let verdicts: Vec<bool> = (0..5)
        .map(|_| limits.check(Action::DashboardApi, &session).is_allowed())
        .collect();
    assert_eq!(verdicts, [true, true, true, false, false]);
    assert_eq!(limits.blocked(Action::DashboardApi, &session), Some(2));
    assert_eq!(limits.tracked(Action::DashboardApi), 1);

    // Half a window on: the bucket is not full yet, so both stay.
    clock.advance(Duration::from_secs(30));
    assert_eq!(limits.cleanup(), Cleaned::default());
    assert_eq!(limits.blocked(Action::DashboardApi, &session), Some(2));
    assert_eq!(limits.tracked(Action::DashboardApi), 1);

    // A window after the denials: the bucket is full again and is evicted,
    // and its blocked counter goes with it.
    clock.advance(Duration::from_secs(31));
    let cleaned = limits.cleanup();
    assert_eq!(cleaned.buckets, 1);
    assert_eq!(cleaned.blocked, 1);
    assert_eq!(limits.tracked(Action::DashboardApi), 0);
    assert_eq!(limits.blocked(Action::DashboardApi, &session), None);
}

#[test]
fn idle_sharded_doors_are_dropped_by_the_cleanup() {
    let (limits, clock) = limits(&[("SUBSCRIBE_RATE_LIMIT", "2")]);
    for _ in 0..3 {
        let _ = limits.check(Action::Subscribe, "carol");
    }
    assert_eq!(limits.tracked(Action::Subscribe), 1);
    assert_eq!(limits.blocked(Action::Subscribe, "carol"), Some(1));
    assert_eq!(limits.cleanup().doors, 0, "its window is still in use");
    clock.advance(Duration::from_secs(61));
    let cleaned = limits.cleanup();
    assert_eq!((cleaned.doors, cleaned.blocked), (1, 1));
    assert_eq!(limits.tracked(Action::Subscribe), 0);
}

#[test]
fn sessions_are_kept_as_digests() {
    let key = example::session_key("secret-token-1");
    assert_eq!(key.len(), 32);
    assert!(key.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(!key.contains("secret"));
    assert_eq!(key, example::session_key("secret-token-1"));
    assert_ne!(key, example::session_key("secret-token-2"));
}
