//! Several limits at once: all or nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::Duration;

use ratekeeper::{
    clock::ManualClock, memory::check_all, policy::PolicyKind, MemoryLimiter, Policy, Rate,
    RetryAfter, Timestamp,
};

fn limiter(clock: &ManualClock, kind: PolicyKind, limit: u64) -> MemoryLimiter<ManualClock> {
    let rate = Rate::new(limit, Duration::from_secs(60)).unwrap();
    MemoryLimiter::builder(Policy::new(kind, &rate).unwrap())
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap()
}

#[test]
fn a_request_denied_by_one_limit_takes_nothing_from_the_others() {
    for kind in PolicyKind::ALL {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let global = limiter(&clock, kind, 1_000);
        let per_ip = limiter(&clock, kind, 400);
        let per_session = limiter(&clock, kind, 2);
        let checks = |ip, session| {
            [
                (&global, ip, 1),
                (&per_ip, ip, 1),
                (&per_session, session, 1),
            ]
        };

        for _ in 0..2 {
            let outcome = check_all(&checks("192.0.2.1", "s1"));
            assert!(outcome.is_allowed(), "{kind}");
            assert_eq!(outcome.outcomes().len(), 3);
        }
        let denied = check_all(&checks("192.0.2.1", "s1"));
        assert!(!denied.is_allowed());
        assert_eq!(denied.denied_by(), Some(2), "{kind}");
        assert!(matches!(denied.retry_after(), RetryAfter::After(wait) if wait > Duration::ZERO));
        // Every limit is reported, and the tightest is the session's.
        assert_eq!(denied.tightest().unwrap().remaining(), 0);
        assert_eq!(denied.outcomes()[0].decision().unwrap().limit(), 1_000);
        // Nothing was taken from the others.
        assert_eq!(global.peek("192.0.2.1").remaining(), 998, "{kind}");
        assert_eq!(per_ip.peek("192.0.2.1").remaining(), 398, "{kind}");

        // Another session from the same address still passes.
        let other = check_all(&checks("192.0.2.1", "s2"));
        assert!(other.is_allowed(), "{kind}");
        assert_eq!(other.tightest().unwrap().remaining(), 1);
    }
}

/// A limit that denies after the limits before it took their units (here
/// the same key listed twice): what they took is given back, and they
/// report what they would have decided.
#[test]
fn a_limit_that_denies_rolls_the_ones_before_it_back() {
    for kind in PolicyKind::ALL {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let global = limiter(&clock, kind, 100);
        let per_user = limiter(&clock, kind, 1);
        let outcome = check_all(&[
            (&global, "all", 1),
            (&per_user, "u", 1),
            (&per_user, "u", 1),
        ]);
        assert_eq!(outcome.denied_by(), Some(2), "{kind}");
        let [first, second, third] = outcome.outcomes() else {
            panic!("{kind}: {outcome:?}");
        };
        // what each would have decided
        assert_eq!(first.decision().unwrap().remaining(), 99, "{kind}");
        assert!(second.is_allowed(), "{kind}");
        assert_eq!(second.decision().unwrap().remaining(), 0, "{kind}");
        // the one that denied, with its own figures
        assert!(!third.is_allowed(), "{kind}");
        assert_eq!(third.decision().unwrap().remaining(), 0, "{kind}");
        // nothing kept
        assert_eq!(global.peek("all").remaining(), 100, "{kind}");
        assert_eq!(per_user.peek("u").remaining(), 1, "{kind}");
        assert!(check_all(&[(&global, "all", 1), (&per_user, "u", 1)]).is_allowed());
    }
}

#[test]
fn a_saturated_limit_denies_the_whole_request() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let global = limiter(&clock, PolicyKind::Gcra, 100);
    let tiny = MemoryLimiter::builder(
        Policy::new(PolicyKind::Gcra, &Rate::per_minute(5).unwrap()).unwrap(),
    )
    .max_keys(1)
    .clock(clock.clone())
    .background_sweep(false)
    .build()
    .unwrap();
    assert!(check_all(&[(&global, "g", 1), (&tiny, "a", 1)]).is_allowed());
    let outcome = check_all(&[(&global, "g", 1), (&tiny, "b", 1)]);
    assert_eq!(outcome.denied_by(), Some(1));
    assert!(outcome.outcomes()[1].is_saturated());
    assert_eq!(global.peek("g").remaining(), 99);
    // Once "a" is whole again (12 s at 5 a minute) the full table makes
    // room for "b" on demand, with no sweep called.
    clock.advance(Duration::from_secs(12));
    assert!(check_all(&[(&global, "g", 1), (&tiny, "b", 1)]).is_allowed());
}

/// Each limit takes its own cost (Envoy's descriptors carry their own
/// hits), and a refusal by the costlier one gives the cheaper one's back.
#[test]
fn each_limit_takes_its_own_cost() {
    for kind in PolicyKind::ALL {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let requests = limiter(&clock, kind, 100);
        let bytes = limiter(&clock, kind, 10);
        let outcome = check_all(&[(&requests, "u", 1), (&bytes, "u", 7)]);
        assert!(outcome.is_allowed(), "{kind}");
        assert_eq!(requests.peek("u").remaining(), 99, "{kind}");
        assert_eq!(bytes.peek("u").remaining(), 3, "{kind}");
        let refused = check_all(&[(&requests, "u", 1), (&bytes, "u", 4)]);
        assert_eq!(refused.denied_by(), Some(1), "{kind}");
        assert_eq!(requests.peek("u").remaining(), 99, "{kind}");
        assert_eq!(bytes.peek("u").remaining(), 3, "{kind}");
        assert!(check_all(&[(&requests, "u", 5), (&bytes, "u", 3)]).is_allowed());
        assert_eq!(requests.peek("u").remaining(), 94, "{kind}");
    }
}

#[test]
fn no_limits_allow() {
    let outcome = check_all::<ManualClock, &str>(&[]);
    assert!(outcome.is_allowed());
    assert!(outcome.tightest().is_none());
}

/// Threads race for a shared global limit and per-key limits: the request
/// count admitted matches every limit's own count exactly, so no denied
/// request left units behind.
#[test]
fn exact_under_contention() {
    for kind in PolicyKind::ALL {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let global = limiter(&clock, kind, 50);
        let per_user = limiter(&clock, kind, 15);
        let admitted = AtomicUsize::new(0);
        let per_user_admitted: Vec<AtomicUsize> = (0..5).map(|_| AtomicUsize::new(0)).collect();
        let start = Barrier::new(8);
        thread::scope(|scope| {
            for thread in 0..8 {
                let (global, per_user, admitted, per_user_admitted, start) =
                    (&global, &per_user, &admitted, &per_user_admitted, &start);
                scope.spawn(move || {
                    start.wait();
                    for call in 0..100 {
                        let user = (thread + call) % 5;
                        let key = format!("user-{user}");
                        if check_all(&[(global, "all", 1), (per_user, key.as_str(), 1)])
                            .is_allowed()
                        {
                            admitted.fetch_add(1, Ordering::Relaxed);
                            per_user_admitted[user].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        // 5 users x 15 = 75 > 50: the global limit binds.
        assert_eq!(admitted.load(Ordering::Relaxed), 50, "{kind}");
        assert_eq!(global.peek("all").remaining(), 0, "{kind}");
        for (user, count) in per_user_admitted.iter().enumerate() {
            let used = 15 - per_user.peek(format!("user-{user}")).remaining();
            assert_eq!(
                used as usize,
                count.load(Ordering::Relaxed),
                "{kind}: user-{user} kept units of denied requests"
            );
        }
    }
}
