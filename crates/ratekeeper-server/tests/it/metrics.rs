//! `/metrics` and `/v1/stats` on the admin port, after traffic through the
//! HTTP decision API: the Prometheus text parsed by a Prometheus text
//! parser (`prometheus-parse`) and the JSON checked number by number.

use crate::common;

use std::time::Duration;

use common::{TestService, LISTEN_ANY};
use prometheus_parse::{Scrape, Value as Sample};
use ratekeeper::Timestamp;
use serde_json::{json, Value};

/// Monday 2026-01-05 10:30:15 UTC.
const WALL: u64 = 1_767_609_015;
const MINUTE: u64 = WALL - 15;
const HOUR: u64 = WALL - 30 * 60 - 15;
const DAY: u64 = WALL - (10 * 3600 + 30 * 60 + 15);

const LIMITS: &str = r#"
[[limits]]
name = "per-user"
rate = "5/minute"
policy = "gcra"
key = ["header:x-user"]

[[limits]]
name = "global"
rate = "1000/minute"
policy = "fixed_window"
key = ["global"]
"#;

async fn start() -> TestService {
    TestService::start_with_wall_clock(&format!("{LISTEN_ANY}{LIMITS}"), Timestamp::from_secs(WALL))
        .await
}

/// One decision through the HTTP API for `user` under both limits; whether
/// it was allowed.
async fn check(service: &TestService, user: &str) -> bool {
    let body = json!({"limits": ["per-user", "global"], "key": {"header:x-user": user}});
    let (status, _, answer) = service.post("/v1/check", body).await;
    assert_eq!(status, 200, "{answer}");
    answer["allowed"].as_bool().expect("allowed is a boolean")
}

/// Scrapes `/metrics` and parses it.
async fn scrape(service: &TestService) -> Scrape {
    let response = service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .expect("/metrics answers");
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = response.text().await.expect("a text body");
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).expect("valid Prometheus text")
}

/// The value of the one sample of `metric` with exactly `labels`.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<&prometheus_parse::Sample> = scrape
        .samples
        .iter()
        .filter(|sample| {
            sample.metric == metric
                && sample.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(name, value)| sample.labels.get(name) == Some(value))
        })
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "one sample of {metric}{labels:?} in {:#?}",
        scrape.samples
    );
    match &matching[0].value {
        Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
        other => panic!("{metric} is not a number: {other:?}"),
    }
}

/// The histogram `metric`'s cumulative buckets: (upper bound, count).
fn buckets(scrape: &Scrape, metric: &str) -> Vec<(f64, f64)> {
    let sample = scrape
        .samples
        .iter()
        .find(|sample| sample.metric == metric)
        .unwrap_or_else(|| panic!("no {metric} in {:#?}", scrape.samples));
    match &sample.value {
        Sample::Histogram(buckets) => buckets.iter().map(|b| (b.less_than, b.count)).collect(),
        other => panic!("{metric} is not a histogram: {other:?}"),
    }
}

async fn get_stats(service: &TestService, url: String) -> Value {
    let response = service.client.get(url).send().await.expect("answers");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["cache-control"], "no-store");
    response.json().await.expect("JSON")
}

/// alice: 5 allowed then 3 denied; bob: 2 allowed; mallory: 5 allowed then
/// 1 denied. 16 decisions.
async fn traffic(service: &TestService) {
    let mut allowed = Vec::new();
    for user in ["alice"; 8]
        .into_iter()
        .chain(["bob"; 2])
        .chain(["mallory"; 6])
    {
        allowed.push(check(service, user).await);
    }
    let expected: Vec<bool> = [5, 3, 2, 0, 5, 1]
        .chunks(2)
        .flat_map(|pair| {
            std::iter::repeat_n(true, pair[0]).chain(std::iter::repeat_n(false, pair[1]))
        })
        .collect();
    assert_eq!(allowed, expected);
}

#[tokio::test]
async fn metrics_count_every_decision_of_every_limit() {
    let service = start().await;
    traffic(&service).await;
    let scrape = scrape(&service).await;

    let decisions = |limit, decision| {
        value(
            &scrape,
            "ratekeeper_decisions_total",
            &[("limit", limit), ("decision", decision)],
        )
    };
    assert_eq!(decisions("per-user", "allowed"), 12.0);
    assert_eq!(decisions("per-user", "denied"), 4.0);
    // The global limit let all 16 through, though 4 were refused by
    // per-user (and took nothing from it).
    assert_eq!(decisions("global", "allowed"), 16.0);
    assert_eq!(decisions("global", "denied"), 0.0);

    // Near the limit: allowed with at most 10% of the quota left. For 5 a
    // minute that is the 5th request of alice and of mallory; 1000 a
    // minute never came near.
    let near = |limit| value(&scrape, "ratekeeper_near_limit_total", &[("limit", limit)]);
    assert_eq!(near("per-user"), 2.0);
    assert_eq!(near("global"), 0.0);

    // One latency observation per decision, whatever the number of limits.
    assert_eq!(
        value(&scrape, "ratekeeper_decision_duration_seconds_count", &[]),
        16.0
    );
    let sum = value(&scrape, "ratekeeper_decision_duration_seconds_sum", &[]);
    assert!(sum > 0.0 && sum < 16.0, "sum {sum}");
    let buckets = buckets(&scrape, "ratekeeper_decision_duration_seconds");
    assert_eq!(buckets.len(), 20, "{buckets:?}");
    assert_eq!(buckets[0].0, 0.000_001);
    assert_eq!(buckets.last(), Some(&(f64::INFINITY, 16.0)));
    assert!(
        buckets.windows(2).all(|pair| pair[0].1 <= pair[1].1),
        "cumulative: {buckets:?}"
    );

    assert_eq!(value(&scrape, "ratekeeper_limits_configured", &[]), 2.0);
    assert_eq!(
        value(&scrape, "ratekeeper_store_up", &[("store", "memory")]),
        1.0
    );
    // alice, bob and mallory under per-user, one key under global.
    assert_eq!(value(&scrape, "ratekeeper_keys_tracked", &[]), 4.0);
    assert_eq!(
        value(&scrape, "ratekeeper_limit_keys", &[("limit", "per-user")]),
        3.0
    );
    assert_eq!(
        value(&scrape, "ratekeeper_limit_keys", &[("limit", "global")]),
        1.0
    );
    assert_eq!(value(&scrape, "ratekeeper_max_keys", &[]), 100_000.0);
    assert_eq!(value(&scrape, "ratekeeper_shadow_mode", &[]), 0.0);
    for counter in [
        "ratekeeper_store_failures_total",
        "ratekeeper_store_failed_open_total",
        "ratekeeper_store_failed_closed_total",
        "ratekeeper_store_fallback_total",
    ] {
        assert_eq!(value(&scrape, counter, &[("store", "memory")]), 0.0);
    }
    assert!(scrape.docs["ratekeeper_near_limit_total"].contains("10%"));
    service.stop().await;
}

#[tokio::test]
async fn stats_report_totals_windows_history_and_top_keys() {
    let service = start().await;
    traffic(&service).await;
    let wall = service.wall_clock.clone().expect("a manual wall clock");
    let stats = get_stats(&service, service.admin("/v1/stats")).await;

    assert_eq!(stats["at_unix_secs"], WALL);
    assert_eq!(stats["decisions"], 16);
    assert_eq!(
        stats["store"],
        json!({"kind": "memory", "ready": true, "error": null, "keys_in_memory": 4, "max_keys": 100_000,
               "failures": null, "batching": null, "leasing": null, "serving": true, "address": null,
               "state": {"up": true, "since_unix_secs": WALL, "last_error": null}})
    );
    assert_eq!(stats["shadow_mode"], false);
    assert_eq!(stats["near_limit_percent"], 10);
    let limits = stats["limits"].as_array().expect("an array of limits");
    let names: Vec<&str> = limits.iter().map(|l| l["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["per-user", "global"], "the configuration's order");

    let per_user = &limits[0];
    assert_eq!(per_user["config"]["rate"], "5/minute");
    assert_eq!(per_user["config"]["quota"], 5);
    assert_eq!(per_user["allowed"], 12);
    assert_eq!(per_user["denied"], 4);
    assert_eq!(per_user["near_limit"], 2);
    // Its own keys in the store, of the store's 4.
    let in_memory: Vec<u64> = limits
        .iter()
        .map(|l| l["keys_in_memory"].as_u64().unwrap())
        .collect();
    assert_eq!(in_memory.iter().sum::<u64>(), 4, "{in_memory:?}");
    assert_eq!(
        per_user["top_denied"],
        json!([{"key": "alice", "count": 3, "error": 0}, {"key": "mallory", "count": 1, "error": 0}])
    );
    assert_eq!(per_user["keys_tracked"], 2);
    let window = |start: u64, requests: u64, denied: u64| json!({"start_unix_secs": start, "requests": requests, "denied": denied});
    let windows = &per_user["windows"];
    assert_eq!(windows["minute"]["current"], window(MINUTE, 16, 4));
    assert_eq!(windows["minute"]["previous"], window(MINUTE - 60, 0, 0));
    assert_eq!(windows["hour"]["current"], window(HOUR, 16, 4));
    assert_eq!(windows["day"]["current"], window(DAY, 16, 4));
    // The week started on this Monday at 00:00 UTC.
    assert_eq!(windows["week"]["current"], window(DAY, 16, 4));
    assert_eq!(windows["week"]["previous"], window(DAY - 7 * 86_400, 0, 0));
    let history = per_user["history"].as_array().unwrap();
    assert_eq!(history.len(), 60);
    assert_eq!(history[59], window(MINUTE, 16, 4));
    assert_eq!(history[0], window(MINUTE - 59 * 60, 0, 0));

    let global = &limits[1];
    assert_eq!(
        (global["allowed"].as_u64(), global["denied"].as_u64()),
        (Some(16), Some(0))
    );
    assert_eq!(global["top_denied"], json!([]));

    // A minute later the traffic is the previous minute's, and still this
    // hour's. Only the admin port tells: the top keys may be API keys.
    wall.advance(Duration::from_secs(60));
    service.clock.advance(Duration::from_secs(60));
    assert!(check(&service, "alice").await);
    let not_found = service
        .client
        .get(service.http("/v1/stats"))
        .send()
        .await
        .unwrap();
    assert_eq!(not_found.status().as_u16(), 404);
    let stats = get_stats(&service, service.admin("/v1/stats")).await;
    let windows = &stats["limits"][0]["windows"];
    assert_eq!(windows["minute"]["current"], window(MINUTE + 60, 1, 0));
    assert_eq!(windows["minute"]["previous"], window(MINUTE, 16, 4));
    assert_eq!(windows["hour"]["current"], window(HOUR, 17, 4));
    let history = stats["limits"][0]["history"].as_array().unwrap();
    assert_eq!(history[58], window(MINUTE, 16, 4));
    assert_eq!(history[59], window(MINUTE + 60, 1, 0));
    service.stop().await;
}

#[tokio::test]
async fn concurrent_decisions_are_counted_exactly() {
    const TASKS: usize = 8;
    const EACH: usize = 40;
    let service = std::sync::Arc::new(start().await);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let service = service.clone();
        tasks.spawn(async move {
            let mut allowed = 0u64;
            for _ in 0..EACH {
                allowed += u64::from(check(&service, "shared").await);
            }
            allowed
        });
    }
    let mut allowed = 0;
    while let Some(joined) = tasks.join_next().await {
        allowed += joined.expect("the task finishes");
    }
    assert_eq!(allowed, 5, "the quota, exactly");

    let scrape = scrape(&service).await;
    let total = (TASKS * EACH) as f64;
    let decisions = |decision| {
        value(
            &scrape,
            "ratekeeper_decisions_total",
            &[("limit", "per-user"), ("decision", decision)],
        )
    };
    assert_eq!(decisions("allowed"), 5.0);
    assert_eq!(decisions("denied"), total - 5.0);
    assert_eq!(
        value(&scrape, "ratekeeper_decision_duration_seconds_count", &[]),
        total
    );
    let stats = get_stats(&service, service.admin("/v1/stats")).await;
    assert_eq!(
        stats["limits"][0]["top_denied"],
        json!([{"key": "shared", "count": total as u64 - 5, "error": 0}])
    );
    match std::sync::Arc::try_unwrap(service) {
        Ok(service) => service.stop().await,
        Err(_) => panic!("every task is done"),
    }
}

#[tokio::test]
async fn a_failing_store_shows_as_down_with_its_fail_open_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let toml = format!(
        "{LISTEN_ANY}[store]\nkind = \"sqlite\"\npath = {path:?}\non_failure = \"open\"\n\n\
         [[limits]]\nname = \"per-user\"\nrate = \"5/minute\"\nkey = [\"header:x-user\"]\n",
        path = path.display().to_string()
    );
    let service = TestService::start(&toml).await;
    let body = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
    assert_eq!(
        service.post("/v1/check", body.clone()).await.2["allowed"],
        true
    );
    let scrape_before = scrape(&service).await;
    assert_eq!(
        value(
            &scrape_before,
            "ratekeeper_store_up",
            &[("store", "sqlite")]
        ),
        1.0
    );

    // The store's table goes away under it: every statement fails.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE ratekeeper")
        .unwrap();
    for _ in 0..3 {
        assert_eq!(
            service.post("/v1/check", body.clone()).await.2["allowed"],
            true
        );
    }
    let scrape = scrape(&service).await;
    assert_eq!(
        value(&scrape, "ratekeeper_store_up", &[("store", "sqlite")]),
        0.0
    );
    assert_eq!(
        value(
            &scrape,
            "ratekeeper_store_failed_open_total",
            &[("store", "sqlite")]
        ),
        3.0
    );
    // The first failure puts the store aside for a while; the requests in
    // that while fail open without asking it.
    let failures = value(
        &scrape,
        "ratekeeper_store_failures_total",
        &[("store", "sqlite")],
    );
    assert!((1.0..=4.0).contains(&failures), "failures {failures}");
    assert_eq!(
        value(
            &scrape,
            "ratekeeper_store_failed_closed_total",
            &[("store", "sqlite")]
        ),
        0.0
    );
    assert!(scrape
        .samples
        .iter()
        .all(|sample| sample.metric != "ratekeeper_keys_tracked"));

    let stats = get_stats(&service, service.admin("/v1/stats")).await;
    let store = &stats["store"];
    assert_eq!(store["kind"], "sqlite");
    assert_eq!(store["ready"], false);
    assert!(
        store["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{store}"
    );
    assert_eq!(store["failures"]["failed_open"], 3);
    assert_eq!(store["keys_in_memory"], Value::Null);
    service.stop().await;
}

#[tokio::test]
async fn no_limits_still_scrape() {
    let service = start_without_limits().await;
    let scrape = scrape(&service).await;
    assert_eq!(value(&scrape, "ratekeeper_limits_configured", &[]), 0.0);
    assert_eq!(
        value(&scrape, "ratekeeper_decision_duration_seconds_count", &[]),
        0.0
    );
    assert!(scrape
        .samples
        .iter()
        .all(|sample| sample.metric != "ratekeeper_decisions_total"));
    let stats = get_stats(&service, service.admin("/v1/stats")).await;
    assert_eq!(stats["limits"], json!([]));
    service.stop().await;
}

/// A service with no limits at all (a configuration file needs one; a
/// reload can leave none).
async fn start_without_limits() -> TestService {
    let mut config =
        ratekeeper_server::Config::from_toml_str(&format!("{LISTEN_ANY}{LIMITS}"), "test.toml")
            .expect("a valid config");
    config.limits.clear();
    let clock = std::sync::Arc::new(ratekeeper::clock::ManualClock::new(Timestamp::from_secs(
        1_000,
    )));
    let service = ratekeeper_server::serve::Service::builder(config)
        .clock(clock.clone())
        .start()
        .await
        .expect("the service starts");
    TestService {
        service,
        clock,
        wall_clock: None,
        client: reqwest::Client::new(),
    }
}

#[tokio::test]
async fn forwarding_headers_from_an_untrusted_peer_are_counted_per_limit() {
    // Both limits see the same requests from this host; only "untrusting"
    // ignores their X-Real-IP (no trusted proxies) and counts them.
    let limits = r#"
[[limits]]
name = "untrusting"
rate = "2/minute"
key = ["client_ip"]

[[limits]]
name = "trusting"
rate = "100/minute"
key = ["client_ip"]
trusted_proxies = ["127.0.0.1"]

[[limits]]
name = "by-user"
rate = "100/minute"
key = ["header:x-user"]
"#;
    let service = TestService::start(&format!("{LISTEN_ANY}{limits}")).await;
    let mut statuses = Vec::new();
    for n in 0..3 {
        let response = service
            .client
            .get(service.http("/v1/auth"))
            .header("x-original-uri", "/")
            .header("x-real-ip", format!("198.51.100.{n}"))
            .send()
            .await
            .expect("/v1/auth answers");
        statuses.push(response.status().as_u16());
    }
    // Three clients by X-Real-IP, but one peer: the third is refused.
    assert_eq!(statuses, [204, 204, 429]);
    let scrape = scrape(&service).await;
    let untrusted = |limit| {
        value(
            &scrape,
            "ratekeeper_untrusted_forwarding_headers_total",
            &[("limit", limit)],
        )
    };
    assert_eq!(untrusted("untrusting"), 3.0);
    assert_eq!(untrusted("trusting"), 0.0);
    assert_eq!(untrusted("by-user"), 0.0);
    assert!(
        scrape.docs["ratekeeper_untrusted_forwarding_headers_total"].contains("trusted_proxies")
    );
    service.stop().await;
}
