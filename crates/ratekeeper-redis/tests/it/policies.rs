//! Every policy's decisions through Redis equal the pure core's for the same
//! sequence of requests, peeks, refunds and reports at the same (whole-µs)
//! times.

use crate::unhurried;
use ratekeeper_test_support::redis as harness;

use std::time::Duration;

use harness::{RedisServer, Rng};
use ratekeeper::{
    policy::Algorithm, store::StoreError, FixedWindow, Gcra, Limit, Outcome, Policy, SlidingLog,
    SlidingWindow, Store, Timestamp, TokenBucket,
};
use ratekeeper_redis::{check_policy, RedisStore};

fn policies() -> Vec<Policy> {
    let s = Duration::from_secs;
    let ms = Duration::from_millis;
    vec![
        // 3 per second: a token is 10^9 internal units, a nanosecond adds 3.
        TokenBucket::new(3, s(1), 5).unwrap().into(),
        TokenBucket::new(10, s(1), 10).unwrap().into(),
        TokenBucket::new(7, ms(1_300), 4).unwrap().into(),
        // An emission interval of 333,333,334 ns: not whole microseconds.
        Gcra::new(3, s(1), 4).unwrap().into(),
        Gcra::per_second(10).unwrap().into(),
        FixedWindow::new(5, s(1)).unwrap().into(),
        FixedWindow::new(3, ms(700)).unwrap().into(),
        SlidingLog::new(4, s(1)).unwrap().into(),
        SlidingLog::new(9, ms(1_500)).unwrap().into(),
        SlidingWindow::new(7, s(1)).unwrap().into(),
        SlidingWindow::new(3, ms(700)).unwrap().into(),
        SlidingWindow::new(1_000, s(60)).unwrap().into(),
        // Last: each policy's sequence comes from its place in the list.
        FixedWindow::from_first_hit(5, s(1)).unwrap().into(),
        FixedWindow::from_first_hit(3, ms(700)).unwrap().into(),
    ]
}

/// A realistic Unix time in µs, so the script sees numbers of today's size.
const T0_US: u64 = 1_760_000_000_123_457;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_matches_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("policy-{index}"), policy.clone()).unwrap();
        let quota = policy.quota();
        let window_us = policy.window().as_micros() as u64;
        let mut rng = Rng::new(0x5eed + index as u64);
        let mut state = policy.fresh();
        let mut now = T0_US;
        let (mut allowed, mut denied) = (0, 0);
        for step in 0..400 {
            // Mostly short steps, sometimes none, sometimes a long gap.
            now += match rng.below(10) {
                0 => 0,
                1 => window_us + rng.below(2 * window_us),
                _ => rng.below(window_us / 4 + 1),
            };
            let at = Timestamp::from_micros(now);
            let pinned = store.pinned(at);
            let context = format!("{policy:?} step {step} at {now} us");
            match rng.below(20) {
                0 => {
                    let expected = policy.peek(&state, at);
                    assert_eq!(
                        pinned.peek(&limit, b"k").await.unwrap(),
                        expected,
                        "{context}"
                    );
                }
                1 => {
                    let units = 1 + rng.below(quota);
                    state = policy.refund(&state, at, units);
                    pinned.refund(&limit, b"k", units).await.unwrap();
                }
                2 | 3 if rng.below(2) == 0 => {
                    // A report: counted whatever the limit says.
                    let units = 1 + rng.below(quota + 2);
                    let (expected, next) = policy.report(&state, at, units);
                    state = next;
                    let outcome = pinned.report(&limit, b"k", units).await.unwrap();
                    assert_eq!(
                        outcome,
                        Outcome::Decided(expected),
                        "{context} report {units}"
                    );
                }
                r => {
                    let cost = match r {
                        2 => 0,
                        3 => quota + 1 + rng.below(3),
                        4 => 1 + rng.below(quota),
                        _ => 1,
                    };
                    let (expected, next) = policy.decide(&state, at, cost);
                    state = next;
                    let (outcome, used) = pinned.check_with_time(&limit, b"k", cost).await.unwrap();
                    assert_eq!(used, at, "the script used the pinned time");
                    assert_eq!(outcome, Outcome::Decided(expected), "{context} cost {cost}");
                    if expected.is_allowed() {
                        allowed += 1;
                    } else {
                        denied += 1;
                    }
                }
            }
        }
        assert!(
            allowed > 20 && denied > 20,
            "{policy:?}: {allowed} allowed, {denied} denied"
        );
    }
}

/// On Redis's own clock: the script reports the time it used, and the core
/// at those times decides the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_clock_decisions_match_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    for (index, policy) in policies().into_iter().enumerate() {
        let limit = Limit::new(format!("live-{index}"), policy.clone()).unwrap();
        let mut state = policy.fresh();
        let mut last = Timestamp::ZERO;
        for _ in 0..(policy.quota() + 3).min(40) {
            let (outcome, at) = store.check_with_time(&limit, b"k", 1).await.unwrap();
            assert!(at >= last, "Redis's clock went back");
            last = at;
            let (expected, next) = policy.decide(&state, at, 1);
            state = next;
            assert_eq!(outcome, Outcome::Decided(expected), "{policy:?} at {at:?}");
        }
    }
}

/// Keys expire when their state is fresh again, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_with_their_state() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let mut con = server.connection();
    let cases: Vec<Policy> = vec![
        TokenBucket::per_second(10).unwrap().into(),
        Gcra::per_second(10).unwrap().into(),
        FixedWindow::new(10, Duration::from_secs(3_600))
            .unwrap()
            .into(),
        SlidingLog::new(10, Duration::from_secs(30)).unwrap().into(),
        SlidingWindow::new(10, Duration::from_secs(30))
            .unwrap()
            .into(),
    ];
    for (index, policy) in cases.into_iter().enumerate() {
        let limit = Limit::new(format!("ttl-{index}"), policy.clone()).unwrap();
        let (_, first) = store.check_with_time(&limit, b"k", 1).await.unwrap();
        let (_, at) = store.check_with_time(&limit, b"k", 1).await.unwrap();
        let key = store.key(&limit, b"k");
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        let state = policy.decide(&policy.fresh(), first, 1).1;
        let state = policy.decide(&state, at, 1).1;
        // The key outlives its state by at most 3 ms, and never dies first:
        // the script rounds its microseconds up to Redis's milliseconds,
        // Redis adds them to its own clock floored to a millisecond, and
        // `want` is floored here (a CI run saw 3). A GCRA key may outlive
        // its state by a quarter of the state's lifetime more (the second
        // check here sets a new expiry: the first one's is too early).
        let want = policy.expires_at(&state).duration_since(at).as_millis() as i64;
        let slack = if matches!(policy, Policy::Gcra(_)) {
            want / 4 + 1
        } else {
            0
        };
        assert!(
            pttl > 0 && (want - 5..=want + slack + 3).contains(&pttl),
            "{policy:?}: PTTL {pttl} ms, state fresh again in {want} ms"
        );
    }
    // A refund back to full removes the key.
    let limit = Limit::new("ttl-refund", Gcra::per_second(10).unwrap()).unwrap();
    assert!(store.check(&limit, b"k", 3).await.unwrap().is_allowed());
    store.refund(&limit, b"k", 5).await.unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg(store.key(&limit, b"k"))
        .query(&mut con)
        .unwrap();
    assert!(!exists, "a state refunded to fresh is deleted");
}

/// A GCRA value as (the time it names in µs, the theoretical arrival
/// time's distance from it in ns), as the script and earlier versions read
/// it; the script's values then record the emission interval they were
/// made under.
fn gcra_value(value: &[u8]) -> (f64, f64) {
    assert!(
        matches!((value.len(), value[0]), (17 | 25, 2)),
        "a GCRA state: {value:?}"
    );
    let at = f64::from_le_bytes(value[1..9].try_into().unwrap());
    let ahead = f64::from_le_bytes(value[9..17].try_into().unwrap());
    (at, ahead)
}

/// The theoretical arrival time a GCRA value names, in ns (exact: `at` is
/// a multiple of 1/4 µs, `ahead` an integer).
fn gcra_tat_ns(value: &[u8]) -> i128 {
    let (at, ahead) = gcra_value(value);
    assert_eq!((at * 4.0).fract(), 0.0);
    (at * 4.0) as i128 * 250 + ahead as i128
}

/// A GCRA key keeps its TTL while its state is fresh again before it: the
/// value records an instant the key outlives (by the 1-2 ms the script
/// rounds up, and the time the script ran: 5 ms allowed here), which never
/// comes before the state is fresh, and at most a quarter of the state's
/// lifetime (as of when it was set) after. The value still reads as before
/// (the same theoretical arrival time), so earlier versions sharing the key
/// decide alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_keeps_its_ttl_while_the_state_fits() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let mut con = server.connection();
    let policy: Policy = Gcra::new(10, Duration::from_secs(1), 50).unwrap().into();
    let limit = Limit::new("gcra-keepttl", policy.clone()).unwrap();
    let key = store.key(&limit, b"k");
    let mut state = policy.fresh();
    let mut expiries = Vec::new();
    for step in 0..30 {
        let (outcome, at) = store.check_with_time(&limit, b"k", 1).await.unwrap();
        let (expected, next) = policy.decide(&state, at, 1);
        state = next;
        assert_eq!(outcome, Outcome::Decided(expected), "step {step}");
        let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
        let expiry_ms: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
        let tat = policy.expires_at(&state).as_nanos() as i128;
        assert_eq!(gcra_tat_ns(&value), tat, "step {step}: the state as stored");
        let recorded_us = gcra_value(&value).0 as i128;
        let expiry_us = expiry_ms as i128 * 1_000;
        let lifetime_us = (tat - at.as_nanos() as i128) / 1_000;
        assert!(
            tat <= recorded_us * 1_000
                && (recorded_us..=recorded_us + 5_000).contains(&expiry_us)
                && expiry_us * 1_000 - tat <= (lifetime_us / 4 + 5_000) * 1_000,
            "step {step}: state fresh again at {tat} ns, {lifetime_us} us from now; \
             recorded expiry {recorded_us} us, key expiry {expiry_us} us"
        );
        if expiries.last() != Some(&expiry_ms) {
            expiries.push(expiry_ms);
        }
    }
    assert!(
        (2..20).contains(&expiries.len()),
        "30 checks set {} expiries",
        expiries.len()
    );
}

/// A GCRA value written by an earlier version (`at` = the time of the write,
/// the TTL from then until the state is fresh again) is read as the state it
/// names, and the next write gives the key an expiry the value records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcra_reads_values_of_earlier_versions() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let mut con = server.connection();
    let policy: Policy = Gcra::new(10, Duration::from_secs(1), 20).unwrap().into();
    let limit = Limit::new("gcra-old", policy.clone()).unwrap();
    let key = store.key(&limit, b"k");
    // What an earlier version wrote after a check of 5 at Redis's time.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    let written = Timestamp::from_micros(secs * 1_000_000 + micros);
    let state = policy.decide(&policy.fresh(), written, 5).1;
    let ahead_ns = policy.expires_at(&state).duration_since(written).as_nanos();
    let mut old = vec![2u8];
    old.extend_from_slice(&(written.as_micros() as f64).to_le_bytes());
    old.extend_from_slice(&(ahead_ns as f64).to_le_bytes());
    let ttl_ms = ahead_ns.div_ceil(1_000_000) as u64 + 1;
    let _: () = redis::cmd("PSETEX")
        .arg(&key)
        .arg(ttl_ms)
        .arg(&old)
        .query(&mut con)
        .unwrap();

    let (outcome, at) = store.check_with_time(&limit, b"k", 1).await.unwrap();
    let (expected, state) = policy.decide(&state, at, 1);
    assert_eq!(outcome, Outcome::Decided(expected));
    let value: Vec<u8> = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
    let expiry_ms: i64 = redis::cmd("PEXPIRETIME").arg(&key).query(&mut con).unwrap();
    let tat = policy.expires_at(&state).as_nanos() as i128;
    assert_eq!(gcra_tat_ns(&value), tat);
    let recorded_us = gcra_value(&value).0 as i128;
    assert!(
        recorded_us > at.as_micros() as i128
            && tat <= recorded_us * 1_000
            && recorded_us <= expiry_ms as i128 * 1_000,
        "state fresh again at {tat} ns, recorded expiry {recorded_us} us, key {expiry_ms} ms"
    );
    // A value naming its write time, as earlier versions wrote, even one the
    // new state is fresh before, never keeps the key's TTL: the new expiry
    // is set from the state.
    assert!(
        expiry_ms as i128 * 1_000_000 >= tat,
        "the key expires at {expiry_ms} ms, before its state at {tat} ns"
    );
}

/// Three checks of a fixed window of 2 at one pinned instant, with `between`
/// run on the server after the first: allowed, allowed, denied.
async fn two_then_denied(server: &RedisServer, store: &RedisStore, name: &str, between: &[&str]) {
    let limit = Limit::new(
        name,
        FixedWindow::new(2, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let pinned = store.pinned(Timestamp::from_micros(T0_US));
    assert!(pinned.check(&limit, b"k", 1).await.unwrap().is_allowed());
    if !between.is_empty() {
        let _: redis::Value = redis::cmd(between[0])
            .arg(&between[1..])
            .query(&mut server.connection())
            .unwrap();
    }
    assert!(pinned.check(&limit, b"k", 1).await.unwrap().is_allowed());
    assert!(!pinned.check(&limit, b"k", 1).await.unwrap().is_allowed());
}

/// On Redis 7 decisions run as the store's function (FCALL), and after
/// FUNCTION FLUSH (Function not found) or SCRIPT FLUSH the next call loads
/// what it needs, in the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_the_function_and_reloads_it_after_a_flush() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    two_then_denied(&server, &store, "plain", &[]).await;
    // The first FCALL found no function (a new server), loaded the library
    // and called again.
    let (fcalls, _) = server.command_stats("fcall");
    let (loads, _) = server.command_stats("function|load");
    let (evalshas, _) = server.command_stats("evalsha");
    assert_eq!(
        (fcalls, loads, evalshas),
        (4, 1, 0),
        "decisions run as the function"
    );
    let libraries: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg(ratekeeper_redis::internals::function_name())
        .query(&mut server.connection())
        .unwrap();
    assert!(
        format!("{libraries:?}").contains(ratekeeper_redis::internals::function_name()),
        "{libraries:?}"
    );
    two_then_denied(&server, &store, "function-flush", &["FUNCTION", "FLUSH"]).await;
    two_then_denied(&server, &store, "script-flush", &["SCRIPT", "FLUSH"]).await;
}

/// Without functions (FCALL unknown, as before Redis 7, or not permitted to
/// the user) the store runs the script with EVALSHA, reloaded after SCRIPT
/// FLUSH (NOSCRIPT) in the same call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn falls_back_to_the_script_without_functions() {
    let Some(server) = RedisServer::start_with_args(&["--rename-command", "FCALL", ""]) else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    two_then_denied(&server, &store, "old", &["SCRIPT", "FLUSH"]).await;
    let (evalshas, _) = server.command_stats("evalsha");
    assert!(evalshas >= 3, "{evalshas} EVALSHA");

    let Some(server) = RedisServer::start() else {
        return;
    };
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-fcall", "-function"][..])
        .query(&mut server.connection())
        .unwrap();
    let store = unhurried::connect(&server.url()).await;
    two_then_denied(&server, &store, "noperm", &["SCRIPT", "FLUSH"]).await;
    let (evalshas, _) = server.command_stats("evalsha");
    assert!(evalshas >= 3, "{evalshas} EVALSHA");
}

/// Policies whose numbers cannot stay exact in doubles are refused, with a
/// reason from `check_policy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inexact_policies_are_refused() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let odd: Policy = FixedWindow::new(10, Duration::from_nanos(1_500))
        .unwrap()
        .into();
    let reason = check_policy(&odd).unwrap_err();
    assert!(reason.to_string().contains("microseconds"), "{reason}");
    let limit = Limit::new("odd", odd).unwrap();
    let error = store.check(&limit, b"k", 1).await.unwrap_err();
    assert!(matches!(error, StoreError::Unsupported(_)), "{error:?}");
    let huge: Policy = SlidingWindow::new(1 << 30, Duration::from_secs(86_400))
        .unwrap()
        .into();
    let limit = Limit::new("huge", huge).unwrap();
    let error = store.peek(&limit, b"k").await.unwrap_err();
    assert!(matches!(error, StoreError::Unsupported(_)), "{error:?}");
}

/// A limit whose numbers change under the same name (a new configuration,
/// a rolling deploy) carries each key's state to the new numbers, as the
/// core's `Policy::carry` does at the first request after the change:
/// every kind, changed back and forth, with the decisions equal to the
/// core's throughout. The TOML's `500/day` to `600/day` alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_carries_its_state_across_new_numbers() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let ms = Duration::from_millis;
    let first_hit = |n, w| Policy::from(FixedWindow::from_first_hit(n, w).unwrap());
    let changes: Vec<[Policy; 2]> = vec![
        [
            TokenBucket::new(1_000, ms(1_000), 50).unwrap().into(),
            TokenBucket::new(300, ms(1_000), 40).unwrap().into(),
        ],
        [
            Gcra::new(50, ms(1_000), 50).unwrap().into(),
            Gcra::new(40, ms(2_000), 30).unwrap().into(),
        ],
        [
            FixedWindow::new(60, ms(1_000)).unwrap().into(),
            FixedWindow::new(40, ms(300)).unwrap().into(),
        ],
        [first_hit(60, ms(1_000)), first_hit(40, ms(3_000))],
        [
            first_hit(60, ms(1_000)),
            FixedWindow::new(40, ms(1_000)).unwrap().into(),
        ],
        [
            SlidingLog::new(50, ms(1_000)).unwrap().into(),
            SlidingLog::new(40, ms(400)).unwrap().into(),
        ],
        [
            SlidingWindow::new(50, ms(1_000)).unwrap().into(),
            SlidingWindow::new(40, ms(700)).unwrap().into(),
        ],
    ];
    for (index, [before, after]) in changes.into_iter().enumerate() {
        let mut state = before.fresh();
        let mut rng = Rng::new(11 + index as u64);
        let mut now = T0_US;
        let mut previous: Option<&Policy> = None;
        for (phase, policy) in [(0, &before), (1, &after), (2, &before)] {
            let limit = Limit::new(format!("carry-{index}"), policy.clone()).unwrap();
            for step in 0..40 {
                now += rng.below(30_000);
                let at = Timestamp::from_micros(now);
                if let Some(old) = previous.take() {
                    state = policy.carry(old, &state, at).expect("one kind");
                }
                let cost = 1 + rng.below(3);
                let (expected, next) = policy.decide(&state, at, cost);
                state = next;
                let outcome = store.pinned(at).check(&limit, b"k", cost).await.unwrap();
                assert_eq!(
                    outcome,
                    Outcome::Decided(expected),
                    "{policy:?}: phase {phase} step {step}"
                );
            }
            previous = Some(policy);
        }
    }
}

/// A test that is not about timing survives a server stalled for half a
/// second, as a loaded machine stalls processes: the tests' store waits it
/// out rather than failing with a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_does_not_fail_a_test_about_something_else() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = unhurried::connect(&server.url()).await;
    let limit = Limit::new("stall", Gcra::per_second(10).unwrap()).unwrap();
    assert!(store.check(&limit, b"k", 1).await.unwrap().is_allowed());
    server.pause();
    let (outcome, ()) = tokio::join!(store.check(&limit, b"k", 1), async {
        // The stall's length, not a wait for something to happen: the
        // check must succeed however long the server stays stopped (below
        // the 10 s timeout), and failed with `Timeout(100ms)` under the
        // tests' old 100 ms timeout.
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.resume();
    });
    assert!(outcome.unwrap().is_allowed());
}
