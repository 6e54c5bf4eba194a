//! The metrics of running the service: configuration reloads applied and
//! refused (a broken file written under a running service), and the
//! store's latency per operation (SQLite, over the HTTP API).

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{TestService, LISTEN_ANY};
use prometheus_parse::{Scrape, Value as Sample};
use serde_json::json;

async fn scrape(service: &TestService) -> Scrape {
    let text = service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("a text body");
    Scrape::parse(text.lines().map(|line| Ok(line.to_owned()))).expect("valid Prometheus text")
}

/// The samples of `metric` with exactly `labels`.
fn samples<'a>(
    scrape: &'a Scrape,
    metric: &str,
    labels: &[(&str, &str)],
) -> Vec<&'a prometheus_parse::Sample> {
    scrape
        .samples
        .iter()
        .filter(|sample| {
            sample.metric == metric
                && sample.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(name, value)| sample.labels.get(name) == Some(value))
        })
        .collect()
}

/// The value of the one sample of `metric` with exactly `labels`.
fn value(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found = samples(scrape, metric, labels);
    assert_eq!(
        found.len(),
        1,
        "one {metric}{labels:?} in {:#?}",
        scrape.samples
    );
    match &found[0].value {
        Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
        other => panic!("{metric} is not a number: {other:?}"),
    }
}

/// The observations of the histogram `metric` with `labels` (its `+Inf`
/// bucket).
fn observations(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> f64 {
    let found = samples(scrape, metric, labels);
    assert_eq!(
        found.len(),
        1,
        "one {metric}{labels:?} in {:#?}",
        scrape.samples
    );
    match &found[0].value {
        Sample::Histogram(buckets) => {
            let last = buckets.last().expect("buckets");
            assert!(last.less_than.is_infinite());
            last.count
        }
        other => panic!("{metric} is not a histogram: {other:?}"),
    }
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

const RELOADS: &str = "ratekeeper_config_reloads_total";
const LAST_OK: &str = "ratekeeper_config_last_reload_successful";
const LAST_SUCCESS: &str = "ratekeeper_config_last_reload_success_timestamp_seconds";

/// Scrapes until `ratekeeper_config_reloads_total{result}` is `expected`
/// (the file is polled every 50 ms; a loaded machine may take a while).
async fn until_reloads(service: &TestService, result: &str, expected: f64) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = scrape(service).await;
        let counted = value(&scrape, RELOADS, &[("result", result)]);
        if counted == expected {
            return scrape;
        }
        assert!(counted < expected, "{result}: {counted} > {expected}");
        assert!(Instant::now() < deadline, "{result} stayed at {counted}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn reloads_applied_and_refused_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    let limits = |rate: &str| {
        format!("{LISTEN_ANY}[[limits]]\nname = \"one\"\nrate = \"{rate}\"\nkey = [\"global\"]\n")
    };
    let first = limits("5/minute");
    std::fs::write(&path, &first).unwrap();
    let before_start = unix_now();
    let service =
        TestService::start_with(&first, Some(path.clone()), Some(Duration::from_millis(50))).await;

    let start = scrape(&service).await;
    assert_eq!(value(&start, RELOADS, &[("result", "applied")]), 0.0);
    assert_eq!(value(&start, RELOADS, &[("result", "refused")]), 0.0);
    assert_eq!(value(&start, LAST_OK, &[]), 1.0);
    let loaded = value(&start, LAST_SUCCESS, &[]);
    assert!(
        (before_start - 1.0..=unix_now()).contains(&loaded),
        "the start is the first load: {loaded}"
    );

    let before_reload = unix_now();
    std::fs::write(&path, limits("4/minute")).unwrap();
    let applied = until_reloads(&service, "applied", 1.0).await;
    assert_eq!(value(&applied, LAST_OK, &[]), 1.0);
    let reloaded = value(&applied, LAST_SUCCESS, &[]);
    assert!(
        (before_reload - 0.01..=unix_now()).contains(&reloaded),
        "{before_reload} {reloaded}"
    );

    std::fs::write(&path, "[[limits]]\nname = \"one\"\nrate = \"fast\"\n").unwrap();
    let refused = until_reloads(&service, "refused", 1.0).await;
    assert_eq!(value(&refused, RELOADS, &[("result", "applied")]), 1.0);
    assert_eq!(value(&refused, LAST_OK, &[]), 0.0);
    assert_eq!(
        value(&refused, LAST_SUCCESS, &[]),
        reloaded,
        "the configuration in force is still the one reloaded"
    );
    // That the poller counts a broken or missing file once, however often
    // it reads it, is serve::reload's unit test (no waiting on polls).

    std::fs::write(&path, limits("3/minute")).unwrap();
    let fixed = until_reloads(&service, "applied", 2.0).await;
    assert_eq!(value(&fixed, LAST_OK, &[]), 1.0);

    // A file gone is refused too.
    std::fs::remove_file(&path).unwrap();
    let gone = until_reloads(&service, "refused", 2.0).await;
    assert_eq!(value(&gone, LAST_OK, &[]), 0.0);
    service.stop().await;
}

const DURATION: &str = "ratekeeper_store_operation_duration_seconds";

/// Two limits on `store` (a `[store]` table): `per-user`, and `watch` in
/// shadow mode; traffic of every operation, then its latency histograms.
async fn latency_per_operation(kind: &str, store: &str) {
    let toml = format!(
        "{LISTEN_ANY}{store}\n\
         [[limits]]\nname = \"per-user\"\nrate = \"5/minute\"\nkey = [\"header:x-user\"]\n\n\
         [[limits]]\nname = \"watch\"\nrate = \"100/minute\"\nkey = [\"global\"]\nshadow = true\n"
    );
    let service = TestService::start(&toml).await;
    let both = json!({"limits": ["per-user", "watch"], "key": {"header:x-user": "alice"}});
    let one = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
    // Each: the enforced limit in one check_all, the shadow limit by check.
    for _ in 0..2 {
        let (status, _, answer) = service.post("/v1/check", both.clone()).await;
        assert_eq!((status, answer["allowed"].as_bool()), (200, Some(true)));
    }
    for _ in 0..3 {
        assert_eq!(service.post("/v1/peek", one.clone()).await.0, 200);
    }
    assert_eq!(service.post("/v1/refund", one).await.0, 200);

    let scrape = scrape(&service).await;
    let labels = |operation| [("store", kind), ("operation", operation)];
    for (operation, calls) in [
        ("check_all", 2.0),
        ("check", 2.0),
        ("peek", 3.0),
        ("refund", 1.0),
    ] {
        assert_eq!(
            observations(&scrape, DURATION, &labels(operation)),
            calls,
            "{kind} {operation}"
        );
        let sum = value(&scrape, &format!("{DURATION}_sum"), &labels(operation));
        assert!(sum > 0.0 && sum < 30.0, "{kind} {operation} took {sum} s");
    }
    service.stop().await;
}

#[tokio::test]
async fn the_sqlite_store_latency_is_measured_per_operation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let store = format!(
        "[store]\nkind = \"sqlite\"\npath = {:?}\n",
        path.display().to_string()
    );
    latency_per_operation("sqlite", &store).await;
}

#[tokio::test]
async fn the_redis_store_latency_is_measured_per_operation() {
    let Some(redis) = ratekeeper_test_support::redis::RedisServer::start() else {
        return;
    };
    let timeout = ratekeeper_test_support::redis::UNHURRIED.as_millis();
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = {timeout}\n",
        redis.url()
    );
    latency_per_operation("redis", &store).await;
}

#[tokio::test]
async fn the_in_memory_store_is_not_timed() {
    let toml = format!(
        "{LISTEN_ANY}[[limits]]\nname = \"one\"\nrate = \"5/minute\"\nkey = [\"global\"]\n"
    );
    let service = TestService::start(&toml).await;
    let (status, _, _) = service.post("/v1/check", json!({"limits": ["one"]})).await;
    assert_eq!(status, 200);
    let scrape = scrape(&service).await;
    assert!(scrape
        .samples
        .iter()
        .all(|s| !s.metric.starts_with(DURATION)));
    // The decision itself is: its histogram counted the one decision.
    let decisions = scrape
        .samples
        .iter()
        .find(|s| s.metric == "ratekeeper_decision_duration_seconds")
        .expect("the decision histogram");
    match &decisions.value {
        Sample::Histogram(buckets) => assert_eq!(buckets.last().unwrap().count, 1.0),
        other => panic!("{other:?}"),
    }
    service.stop().await;
}
