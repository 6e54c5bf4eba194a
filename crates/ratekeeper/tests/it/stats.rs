//! Per-limit stats: calendar windows in UTC, the minute history, exact
//! counts under concurrency, the top denied keys and per-key reaping.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{
    clock::ManualClock,
    stats::{LimitStats, Period, Stats, StatsConfig, StatsSnapshot, WindowTraffic},
    Clock, FixedWindow, MemoryLimiter, Policy, SlidingWindow, Timestamp,
};

const SECOND: Duration = Duration::from_secs(1);
const MINUTE: Duration = Duration::from_secs(60);

fn at(unix_secs: u64) -> ManualClock {
    ManualClock::new(Timestamp::from_secs(unix_secs))
}

/// Records `allowed` allowed and `denied` denied requests now.
fn traffic(stats: &LimitStats, clock: &ManualClock, allowed: u64, denied: u64) {
    for _ in 0..allowed {
        stats.record(clock.now(), true, "k");
    }
    for _ in 0..denied {
        stats.record(clock.now(), false, "k");
    }
}

fn counts(window: WindowTraffic) -> (u64, u64) {
    (window.requests, window.denied)
}

#[test]
fn a_minute_rolls_over_at_second_zero() {
    // 2024-03-10 12:34:59 UTC, then 12:35:00.
    let clock = at(1_710_074_099);
    let stats = LimitStats::new();
    traffic(&stats, &clock, 3, 1);
    let before = stats.windows(clock.now());
    assert_eq!(counts(before.minute.current), (4, 1));
    assert_eq!(before.minute.current.start_unix_secs, 1_710_074_040);

    clock.advance(SECOND);
    // Read before anything is recorded in the new minute: the old one is
    // already the previous minute.
    let after = stats.windows(clock.now());
    assert_eq!(counts(after.minute.current), (0, 0));
    assert_eq!(after.minute.current.start_unix_secs, 1_710_074_100);
    assert_eq!(counts(after.minute.previous), (4, 1));

    traffic(&stats, &clock, 2, 0);
    let after = stats.windows(clock.now());
    assert_eq!(counts(after.minute.current), (2, 0));
    assert_eq!(counts(after.minute.previous), (4, 1));
    // Hour, day and week hold both minutes.
    for period in [after.hour, after.day, after.week] {
        assert_eq!(counts(period.current), (6, 1));
        assert_eq!(counts(period.previous), (0, 0));
    }
    assert_eq!(after.minute.current.allowed(), 2);
}

#[test]
fn an_hour_rolls_over_at_minute_zero() {
    // 2024-03-10 13:59:59 UTC, then 14:00:00.
    let clock = at(1_710_079_199);
    let stats = LimitStats::new();
    traffic(&stats, &clock, 5, 2);
    clock.advance(SECOND);
    traffic(&stats, &clock, 1, 1);

    let windows = stats.windows(clock.now());
    assert_eq!(windows.hour.current.start_unix_secs, 1_710_079_200);
    assert_eq!(counts(windows.hour.current), (2, 1));
    assert_eq!(windows.hour.previous.start_unix_secs, 1_710_075_600);
    assert_eq!(counts(windows.hour.previous), (7, 2));
    assert_eq!(counts(windows.day.current), (9, 3));
    assert_eq!(counts(windows.week.current), (9, 3));

    // A whole hour later, the hour with traffic is two hours back: gone
    // from both hour windows, still in today.
    clock.advance(Duration::from_secs(2 * 3_600));
    let windows = stats.windows(clock.now());
    assert_eq!(counts(windows.hour.current), (0, 0));
    assert_eq!(counts(windows.hour.previous), (0, 0));
    assert_eq!(counts(windows.day.current), (9, 3));
}

#[test]
fn a_day_rolls_over_at_midnight_utc() {
    // Tuesday 2024-12-31 23:59:59 UTC, then Wednesday 2025-01-01 00:00:00:
    // a new day and year, the same week.
    let clock = at(1_735_689_599);
    let stats = LimitStats::new();
    traffic(&stats, &clock, 10, 4);
    clock.advance(SECOND);
    traffic(&stats, &clock, 1, 0);

    let windows = stats.windows(clock.now());
    assert_eq!(windows.day.current.start_unix_secs, 1_735_689_600);
    assert_eq!(counts(windows.day.current), (1, 0));
    assert_eq!(windows.day.previous.start_unix_secs, 1_735_603_200);
    assert_eq!(counts(windows.day.previous), (14, 4));
    // The week started on Monday 2024-12-30.
    assert_eq!(windows.week.current.start_unix_secs, 1_735_516_800);
    assert_eq!(counts(windows.week.current), (15, 4));
    assert_eq!(counts(windows.week.previous), (0, 0));
}

#[test]
fn a_week_rolls_over_on_monday_at_midnight_utc() {
    // Sunday 2024-01-07 23:59:59 UTC, then Monday 2024-01-08 00:00:00.
    let clock = at(1_704_671_999);
    let stats = LimitStats::new();
    traffic(&stats, &clock, 6, 3);
    clock.advance(SECOND);
    traffic(&stats, &clock, 2, 1);

    let windows = stats.windows(clock.now());
    // Every period rolls at once.
    for (period, start) in [
        (windows.minute, 1_704_672_000),
        (windows.hour, 1_704_672_000),
        (windows.day, 1_704_672_000),
        (windows.week, 1_704_672_000),
    ] {
        assert_eq!(period.current.start_unix_secs, start);
        assert_eq!(counts(period.current), (3, 1));
        assert_eq!(counts(period.previous), (9, 3));
    }
    assert_eq!(windows.week.previous.start_unix_secs, 1_704_067_200); // Monday 01-01
    assert_eq!(windows.day.previous.start_unix_secs, 1_704_585_600); // Sunday
    assert_eq!(
        Period::Week.start(Timestamp::from_secs(1_704_671_999)),
        Timestamp::from_secs(1_704_067_200)
    );
    assert_eq!(
        Period::Week.end(clock.now()),
        Timestamp::from_secs(1_705_276_800)
    );

    // A week with no traffic in between: last week is empty.
    clock.advance(Duration::from_secs(7 * 86_400));
    let windows = stats.windows(clock.now());
    assert_eq!(counts(windows.week.previous), (3, 1));
    clock.advance(Duration::from_secs(7 * 86_400));
    let windows = stats.windows(clock.now());
    assert_eq!(counts(windows.week.current), (0, 0));
    assert_eq!(counts(windows.week.previous), (0, 0));
}

#[test]
fn the_history_ring_holds_the_last_sixty_minutes() {
    // 2024-03-10 00:00:00 UTC.
    let start = 1_710_028_800;
    let clock = at(start);
    let stats = LimitStats::new();
    // Minute i sees i requests, one of them denied; minute 80 sees none.
    for minute in 0..90u64 {
        clock.set(Timestamp::from_secs(start + minute * 60 + 30));
        if minute != 80 {
            traffic(&stats, &clock, minute.saturating_sub(1), 1);
        }
    }
    let history = stats.history(clock.now());
    assert_eq!(history.len(), 60);
    for (i, window) in history.iter().enumerate() {
        let minute = 30 + i as u64;
        assert_eq!(
            window.start_unix_secs,
            start + minute * 60,
            "minute {minute}"
        );
        let expected = if minute == 80 {
            (0, 0)
        } else {
            (minute.max(1), 1)
        };
        assert_eq!(counts(*window), expected, "minute {minute}");
    }
    // Ten minutes on, the ring has moved with the clock.
    clock.advance(10 * MINUTE);
    let history = stats.history(clock.now());
    assert_eq!(history[0].start_unix_secs, start + 40 * 60);
    assert_eq!(counts(history[0]), (40, 1));
    assert!(history[50..].iter().all(|w| counts(*w) == (0, 0)));
}

#[test]
fn counts_are_exact_under_concurrency() {
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 20_000;
    // Each thread's requests are 9 ms apart, over 3 minutes: the threads
    // cross the same minute boundaries at about the same time.
    const STEP_NANOS: u64 = 9_000_000; // 20_000 * 9 ms = 180 s
    let base = 1_710_075_600; // 2024-03-10 13:00:00 UTC
    let stats = LimitStats::new();
    let barrier = Arc::new(Barrier::new(THREADS as usize + 1));

    let writers: Vec<_> = (0..THREADS)
        .map(|t| {
            let stats = stats.clone();
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                for i in 0..PER_THREAD {
                    let now = Timestamp::from_secs(base) + Duration::from_nanos(i * STEP_NANOS + t);
                    // One request in five is denied, spread over 50 keys.
                    let denied = (i + t) % 5 == 0;
                    stats.record(now, !denied, format!("key{}", i % 50));
                }
            })
        })
        .collect();
    // A reader watches while they write: counts never go back or overshoot.
    let reader = {
        let stats = stats.clone();
        let barrier = Arc::clone(&barrier);
        std::thread::spawn(move || {
            barrier.wait();
            let now = Timestamp::from_secs(base + 1_800);
            let mut last = 0;
            for _ in 0..200 {
                let hour = stats.windows(now).hour.current.requests;
                assert!(hour >= last, "the hour went back from {last} to {hour}");
                assert!(hour <= THREADS * PER_THREAD);
                last = hour;
            }
        })
    };
    for handle in writers {
        handle.join().unwrap();
    }
    reader.join().unwrap();

    let total = THREADS * PER_THREAD;
    let denied: u64 = (0..THREADS)
        .map(|t| (0..PER_THREAD).filter(|i| (i + t) % 5 == 0).count() as u64)
        .sum();
    assert_eq!(stats.allowed() + stats.denied(), total);
    assert_eq!(stats.denied(), denied);
    let now = Timestamp::from_secs(base + 200);
    let windows = stats.windows(now);
    assert_eq!(counts(windows.hour.current), (total, denied));
    assert_eq!(counts(windows.week.current), (total, denied));

    // Minute by minute, nothing is lost or doubled, and no request counts
    // in a minute before its own: up to each minute, the minutes hold at
    // most the requests made by then.
    let history = stats.history(now);
    let by_minute: u64 = history.iter().map(|w| w.requests).sum();
    assert_eq!(by_minute, total);
    let mut counted = 0;
    for window in &history {
        counted += window.requests;
        let end_nanos = (window.start_unix_secs + 60).saturating_sub(base) * 1_000_000_000;
        let made = (0..THREADS)
            .map(|t| {
                (0..PER_THREAD)
                    .filter(|i| i * STEP_NANOS + t < end_nanos)
                    .count() as u64
            })
            .sum::<u64>();
        assert!(
            counted <= made,
            "{counted} counted by {window:?}, {made} made"
        );
    }
    // Per key, exact too.
    let per_key: u64 = (0..50)
        .filter_map(|k| stats.denied_for(format!("key{k}")))
        .sum();
    assert_eq!(per_key, denied);
}

/// A deterministic Zipf-like stream: key `i` of `keys` occurs about
/// `scale / (i + 1)` times, in a fixed pseudo-random order.
fn zipf_stream(keys: u64, scale: u64, seed: u64) -> Vec<u64> {
    let mut stream: Vec<u64> = (0..keys)
        .flat_map(|i| std::iter::repeat_n(i, (scale / (i + 1)).max(1) as usize))
        .collect();
    // Fisher-Yates with a 64-bit LCG: the same order every run.
    let mut state = seed;
    for i in (1..stream.len()).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        stream.swap(i, j);
    }
    stream
}

fn true_counts(stream: &[u64]) -> HashMap<Vec<u8>, u64> {
    let mut counts = HashMap::new();
    for key in stream {
        *counts.entry(key.to_string().into_bytes()).or_insert(0) += 1;
    }
    counts
}

/// The charged-keys summary counts allowed and denied requests alike, so a
/// key that is never refused (every request behind one proxy's address)
/// still shows as the heaviest; it is off unless asked for.
#[test]
fn the_keys_charged_most_count_allowed_and_denied_requests() {
    let now = Timestamp::from_secs(1_710_075_600);
    let stream = zipf_stream(2_000, 5_000, 11);
    let truth = true_counts(&stream);
    let mut config = StatsConfig::default();
    config.top_charged = 16;
    let stats = LimitStats::with_config(config);
    for (i, key) in stream.iter().enumerate() {
        // Only one request in seven is denied: the heavy key is found by
        // its requests, not by its denials.
        stats.record(now, i % 7 != 0, key.to_string());
    }
    let top = stats.top_charged();
    assert_eq!(top.len(), 16);
    // Key 0 takes 5,000 of about 41,000 requests, above N/16: it holds a
    // counter, and its lower bound is above every other count.
    assert_eq!(top[0].key, b"0");
    assert!(top[1..].iter().all(|e| e.count < top[0].guaranteed()));
    for entry in &top {
        let true_count = truth[&entry.key];
        assert!(entry.count >= true_count && entry.guaranteed() <= true_count);
    }
    assert_eq!(stats.snapshot(now).top_charged, top);

    let off = LimitStats::new();
    off.record(now, true, "10.0.0.1");
    off.record(now, false, "10.0.0.1");
    assert!(off.top_charged().is_empty());
    assert!(off.snapshot(now).top_charged.is_empty());
}

#[test]
fn the_top_denied_keys_of_a_skewed_stream_are_found_within_their_error() {
    let k = 32;
    let mut config = StatsConfig::default();
    config.top_k = k;
    let stats = LimitStats::with_config(config);
    let stream = zipf_stream(5_000, 10_000, 7);
    let n = stream.len() as u64;
    let now = Timestamp::from_secs(1_710_075_600);
    for key in &stream {
        stats.record(now, false, key.to_string());
    }
    let truth = true_counts(&stream);
    let top = stats.top_denied();
    assert_eq!(top.len(), k);

    for entry in &top {
        let true_count = truth[&entry.key];
        assert!(entry.count >= true_count, "{entry:?} under {true_count}");
        assert!(
            entry.guaranteed() <= true_count,
            "{entry:?} over {true_count}"
        );
        assert!(entry.error <= n / k as u64, "{entry:?}: error above N/k");
    }
    // Every key denied more than N/k times is there.
    for (key, &count) in &truth {
        if count > n / k as u64 {
            assert!(
                top.iter().any(|e| &e.key == key),
                "heavy key {key:?} missed"
            );
        }
    }
    // The heaviest key (10,000 denials) is first: its lower bound is above
    // every other count.
    assert_eq!(top[0].key, b"0");
    assert!(top[1..].iter().all(|e| e.count < top[0].guaranteed()));
    // An order the bounds prove is the true order.
    for a in &top {
        for b in &top {
            if a.guaranteed() > b.count {
                assert!(truth[&a.key] > truth[&b.key], "{a:?} and {b:?}");
            }
        }
    }
}

proptest! {
    #[test]
    fn top_k_counts_bound_the_true_counts(
        stream in prop::collection::vec(0u64..40, 0..600),
        k in 1usize..10,
    ) {
        let mut config = StatsConfig::default();
        config.top_k = k;
        let stats = LimitStats::with_config(config);
        for key in &stream {
            stats.record(Timestamp::ZERO, false, key.to_string());
        }
        let truth = true_counts(&stream);
        let top = stats.top_denied();
        prop_assert_eq!(top.len(), truth.len().min(k));
        let n = stream.len() as u64;
        for entry in &top {
            let true_count = truth.get(&entry.key).copied().unwrap_or(0);
            prop_assert!(entry.count >= true_count);
            prop_assert!(entry.count - entry.error <= true_count);
        }
        for (key, &count) in &truth {
            if count > n / k as u64 {
                prop_assert!(top.iter().any(|e| &e.key == key));
            }
        }
        // The counts add up to the stream's length once the summary is full.
        if truth.len() >= k {
            prop_assert_eq!(top.iter().map(|e| e.count).sum::<u64>(), n);
        }
    }
}

#[test]
fn per_key_denials_are_reaped_with_the_key() {
    let clock = at(1_710_075_600);
    let mut config = StatsConfig::default();
    config.key_retention = 10 * SECOND; // the limit's window
    config.max_keys = 3;
    let stats = LimitStats::with_config(config);

    stats.record(clock.now(), false, "a");
    stats.record(clock.now(), false, "a");
    stats.record(clock.now(), true, "b"); // allowed: no per-key row
    clock.advance(5 * SECOND);
    stats.record(clock.now(), false, "b");
    stats.record(clock.now(), false, "c");
    stats.record(clock.now(), false, "d"); // the table is full
    assert_eq!(stats.keys_tracked(), 3);
    assert_eq!(stats.untracked_denials(), 1);
    assert_eq!(stats.denied_for("a"), Some(2));
    assert_eq!(stats.denied_for("d"), None);

    // "a" was last denied 10 s ago: reaped; "b" and "c" 5 s ago: kept.
    clock.advance(5 * SECOND - Duration::from_nanos(1));
    assert_eq!(stats.reap(clock.now()), 0);
    clock.advance(Duration::from_nanos(1));
    assert_eq!(stats.reap(clock.now()), 1);
    assert_eq!(stats.denied_for("a"), None);
    assert_eq!(stats.denied_for("b"), Some(1));

    // Reset by hand: gone at once, and its room is free again.
    assert!(stats.forget("c"));
    assert!(!stats.forget("c"));
    stats.record(clock.now(), false, "d");
    assert_eq!(stats.denied_for("d"), Some(1));
    assert_eq!(stats.keys_tracked(), 2);

    // The totals, windows and top keys keep every denial.
    assert_eq!(stats.denied(), 6);
    assert_eq!(stats.windows(clock.now()).hour.current.denied, 6);
    assert_eq!(stats.top_denied()[0].key, b"a");

    // The registry reaps every limit.
    let registry = Stats::new();
    registry.insert("login", stats.clone());
    clock.advance(MINUTE);
    assert_eq!(registry.reap(clock.now()), 2);
    assert_eq!(stats.keys_tracked(), 0);
}

#[test]
fn the_registry_shares_handles_and_snapshots_as_json() {
    let clock = at(1_704_671_999);
    let stats = Stats::new();
    let api = stats.limit("api");
    assert_eq!(stats.names(), ["api"]);
    stats.limit("api").record(clock.now(), false, "caf\u{e9}");
    api.record(clock.now(), false, [0xff, b'x']); // not UTF-8
    api.record(clock.now(), true, "");
    assert_eq!(api.denied(), 2);
    assert!(stats.get("other").is_none());

    let snapshot = stats.snapshot(clock.now());
    let json = serde_json::to_value(&snapshot).unwrap();
    let api_json = &json["limits"]["api"];
    assert_eq!(api_json["allowed"], 1);
    assert_eq!(api_json["at_unix_secs"], 1_704_671_999);
    assert_eq!(api_json["windows"]["week"]["current"]["requests"], 3);
    assert_eq!(
        api_json["windows"]["week"]["current"]["start_unix_secs"],
        1_704_067_200
    );
    assert_eq!(api_json["history"].as_array().map(Vec::len), Some(60));
    let keys: Vec<&str> = api_json["top_denied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key"].as_str().unwrap())
        .collect();
    assert!(keys.contains(&"caf\u{e9}") && keys.contains(&"\u{fffd}x"));

    let back: StatsSnapshot = serde_json::from_value(json).unwrap();
    assert_eq!(back.limits["api"].windows, snapshot.limits["api"].windows);
    assert_eq!(back.limits["api"].history, snapshot.limits["api"].history);

    assert!(stats.remove("api").is_some());
    assert!(stats.snapshot(clock.now()).limits.is_empty());
}

#[test]
fn a_limiter_forgets_per_key_counts_with_its_keys() {
    let window = 10 * SECOND;
    // Each policy with how long the limiter keeps an idle key: a window,
    // two for the sliding window counter (its previous window still counts).
    let policies: [(Policy, Duration); 2] = [
        (FixedWindow::new(1, window).unwrap().into(), window), // lock-free table
        (SlidingWindow::new(1, window).unwrap().into(), 2 * window), // locked table
    ];
    for (policy, keep) in policies {
        let clock = at(1_704_672_000); // a multiple of the window
        let mut config = StatsConfig::default();
        config.key_retention = keep;
        let stats = LimitStats::with_config(config);
        let limiter = MemoryLimiter::builder(policy.clone())
            .clock(clock.clone())
            .background_sweep(false)
            .on_forget(stats.clone())
            .build()
            .unwrap();
        for key in ["a", "a", "a", "b", "b", "c", "c"] {
            let now = clock.now();
            let allowed = limiter.check(key, 1).is_allowed();
            stats.record(now, allowed, key);
        }
        assert_eq!(stats.denied_for("a"), Some(2), "{policy:?}");
        assert_eq!((limiter.len(), stats.keys_tracked()), (3, 3));

        // Reset by hand: the limiter and the stats forget "c" together.
        assert!(limiter.reset("c"));
        assert_eq!(stats.denied_for("c"), None);

        // Just before the keys are idle long enough, a sweep keeps them in
        // both; at that time, the same sweep drops them from both.
        clock.advance(keep - Duration::from_nanos(1));
        assert_eq!(limiter.sweep(), 0, "{policy:?}");
        assert_eq!(stats.keys_tracked(), 2);
        clock.advance(Duration::from_nanos(1));
        assert_eq!(limiter.sweep(), 2, "{policy:?}");
        assert_eq!(stats.keys_tracked(), 0, "{policy:?}");
        assert_eq!(stats.denied(), 4); // the totals keep them
    }
}
