//! The service on Redis: a store that fails closed answers 503 and is not
//! ready, one that fails open lets requests through and stays ready (its
//! store alone is not), both recover without a restart; two service processes sharing one Redis enforce one limit
//! together; and the metrics show how the store's calls went.

use ratekeeper_test_support::redis as harness;

use crate::common;

use std::time::{Duration, Instant};

use common::{ServeProcess, TestService, LISTEN_ANY};
use harness::RedisServer;
use serde_json::json;

/// The store's timeout: no test here is about it, and a loaded machine must
/// not turn a slow answer into a 503.
fn timeout_line() -> String {
    format!("timeout_ms = {}\n", harness::UNHURRIED.as_millis())
}

fn redis_config(url: &str, on_failure: &str, rate: &str) -> String {
    let timeout = timeout_line();
    format!(
        "{LISTEN_ANY}\n[store]\nkind = \"redis\"\nurl = \"{url}\"\n{timeout}on_failure = \"{on_failure}\"\n\n[[limits]]\nname = \"shared\"\nrate = \"{rate}\"\npolicy = \"gcra\"\nkey = [\"global\"]\n"
    )
}

/// Polls `check` until it answers `status`, for at most `within`.
async fn wait_for_status(service: &TestService, status: u16, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let (got, _, _) = service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await;
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still {got}, not {status}, after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn store_readyz(service: &TestService) -> u16 {
    service
        .client
        .get(service.admin("/readyz?store"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn readyz(service: &TestService) -> u16 {
    service
        .client
        .get(service.admin("/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn a_store_failing_closed_answers_503_then_recovers() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let service = TestService::start(&redis_config(&redis.url(), "closed", "1000/minute")).await;
    let (status, _, answer) = service
        .post("/v1/check", json!({"limits": ["shared"]}))
        .await;
    assert_eq!((status, &answer["allowed"]), (200, &json!(true)));
    assert_eq!(readyz(&service).await, 200);

    redis.kill();
    let (status, headers, answer) = service
        .post("/v1/check", json!({"limits": ["shared"]}))
        .await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(headers["content-type"], "application/problem+json");
    assert!(answer["detail"]
        .as_str()
        .unwrap()
        .starts_with("the rate-limit store failed"));
    assert_eq!(readyz(&service).await, 503);

    redis.restart();
    wait_for_status(&service, 200, Duration::from_secs(5)).await;
    assert_eq!(readyz(&service).await, 200);
    service.stop().await;
}

#[tokio::test]
async fn a_store_failing_open_lets_requests_through_and_stays_ready() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let service = TestService::start(&redis_config(&redis.url(), "open", "1/hour")).await;
    assert_eq!(
        service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await
            .2["allowed"],
        true
    );
    assert_eq!(
        service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await
            .2["allowed"],
        false
    );

    redis.kill();
    for _ in 0..3 {
        let (status, _, answer) = service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await;
        assert_eq!(
            (status, &answer["allowed"]),
            (200, &json!(true)),
            "{answer}"
        );
    }
    // Ready: it answers decisions as configured; the store itself is not.
    assert_eq!(readyz(&service).await, 200);
    assert_eq!(store_readyz(&service).await, 503);
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    while store_readyz(&service).await != 200 {
        assert!(
            Instant::now() < deadline,
            "the store is not up after the restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    service.stop().await;
}

async fn metrics(service: &TestService) -> String {
    let response = service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The value of the sample `series` (name and labels) in `text`.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        Some(value.parse().unwrap())
    })
}

#[tokio::test]
async fn metrics_and_stats_show_how_redis_calls_went() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let service = TestService::start(&redis_config(&redis.url(), "closed", "1000/minute")).await;
    let at_once = r#"ratekeeper_redis_calls_total{path="at_once"}"#;
    let queued = r#"ratekeeper_redis_calls_total{path="queued"}"#;
    let before = metrics(&service).await;
    for _ in 0..20 {
        let (status, _, _) = service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await;
        assert_eq!(status, 200);
    }
    let after = metrics(&service).await;
    // one at a time, nothing waits: the 20 checks and the second scrape's
    // readiness probe
    assert_eq!(
        sample(&after, at_once).unwrap() - sample(&before, at_once).unwrap(),
        21,
        "{after}"
    );
    assert_eq!(sample(&after, queued), Some(0), "{after}");
    for series in [
        "ratekeeper_redis_batches_total",
        "ratekeeper_redis_batched_calls_total",
        "ratekeeper_redis_abandoned_calls_total",
    ] {
        assert_eq!(sample(&after, series), Some(0), "{series}: {after}");
    }
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let batching = &stats["store"]["batching"];
    assert!(batching["sent_at_once"].as_u64().unwrap() >= 21, "{stats}");
    assert_eq!(batching["queued"], 0, "{stats}");
    service.stop().await;

    // batching off: no such metrics, no such stats
    let timeout = timeout_line();
    let config = redis_config(&redis.url(), "closed", "1000/minute")
        .replace(&timeout, &format!("{timeout}batch_max_calls = 1\n"));
    assert!(config.contains("batch_max_calls = 1"));
    let service = TestService::start(&config).await;
    let (status, _, _) = service
        .post("/v1/check", json!({"limits": ["shared"]}))
        .await;
    assert_eq!(status, 200);
    let text = metrics(&service).await;
    assert!(text.contains("ratekeeper_store_up"), "{text}");
    assert!(!text.contains("ratekeeper_redis_"), "{text}");
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_service_processes_on_one_redis_admit_the_limit_together() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    // 50 an hour: one unit comes back every 72 s, far longer than the test.
    std::fs::write(&path, redis_config(&redis.url(), "closed", "50/hour")).unwrap();
    let services = [
        ServeProcess::start(&["--config", path.to_str().unwrap()], &[]),
        ServeProcess::start(&["--config", path.to_str().unwrap()], &[]),
    ];

    let client = reqwest::Client::new();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let url = format!("http://{}/v1/check", services[i % 2].http);
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..10 {
                let answer: serde_json::Value = client
                    .post(&url)
                    .json(&json!({"limits": ["shared"]}))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                allowed += u32::from(answer["allowed"] == true);
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap();
    }
    assert_eq!(allowed, 50, "160 requests through two processes");
}

/// The tower layer in front of an application and the service, on one
/// Redis, count one client under one key: the same limit (name and policy)
/// keyed by the client and the route, taken in turns by a request through
/// the layer and a decision of the service's JSON API, admits its quota
/// once between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_and_the_service_share_a_count_on_one_redis() {
    use axum::body::Body;
    use ratekeeper::{policy::Gcra, Limit, Rate};
    use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer};
    use tower::ServiceExt;

    let Some(redis) = RedisServer::start() else {
        return;
    };
    let timeout = timeout_line();
    let toml = format!(
        "{LISTEN_ANY}\n[store]\nkind = \"redis\"\nurl = \"{}\"\n{timeout}\n[[limits]]\nname = \"per-client\"\nrate = \"3/hour\"\npolicy = \"gcra\"\nkey = [\"client_ip\", \"route\"]\n",
        redis.url()
    );
    let service = TestService::start(&toml).await;
    let store = ratekeeper_redis::RedisStore::builder()
        .timeout(harness::UNHURRIED)
        .connect(&redis.url())
        .await
        .unwrap();
    let rate: Rate = "3/hour".parse().unwrap();
    let limit = Limit::new("per-client", Gcra::from_rate(&rate).unwrap()).unwrap();
    let layer = RateLimitLayer::builder(store)
        .limit(limit, Key::compose([Key::peer(), Key::route()]))
        .build()
        .unwrap();
    let app = axum::Router::new()
        .route("/login", axum::routing::post(|| async { "welcome" }))
        .layer(layer);
    let through_layer = || async {
        let mut request = axum::http::Request::post("/login")
            .body(Body::empty())
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr("203.0.113.7:40000".parse().unwrap()));
        app.clone()
            .oneshot(request)
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    let through_service = || async {
        let (status, _, body) = service
            .post(
                "/v1/check",
                json!({"limits": ["per-client"], "key": {"client_ip": "203.0.113.7", "route": "POST /login"}}),
            )
            .await;
        (status, body["allowed"].as_bool())
    };

    assert_eq!(through_layer().await, 200);
    assert_eq!(through_service().await, (200, Some(true)));
    assert_eq!(through_layer().await, 200);
    // The quota of 3 is spent between them.
    assert_eq!(through_service().await, (200, Some(false)));
    assert_eq!(through_layer().await, 429);
    // Another client has its own count, on both sides.
    let (status, _, _) = service
        .post(
            "/v1/check",
            json!({"limits": ["per-client"], "key": {"client_ip": "198.51.100.20", "route": "POST /login"}}),
        )
        .await;
    assert_eq!(status, 200);
    service.stop().await;
}

async fn text(service: &TestService, path: &str) -> String {
    let response = service.client.get(service.admin(path)).send().await;
    response.unwrap().text().await.unwrap()
}

/// `/readyz` tells when the store went down as a date (RFC 3339, UTC) and
/// for how long, not as Unix seconds.
#[tokio::test]
async fn readyz_tells_when_the_store_went_down_as_a_date_and_a_duration() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    // 2026-01-01T00:00:00Z on the statistics' wall clock.
    let service = TestService::start_with_wall_clock(
        &redis_config(&redis.url(), "open", "1000/minute"),
        ratekeeper::Timestamp::from_secs(1_767_225_600),
    )
    .await;
    redis.kill();
    let store = text(&service, "/readyz?store").await;
    assert!(
        store.starts_with("store down since 2026-01-01T00:00:00Z, for 0 s: "),
        "{store}"
    );
    service
        .wall_clock
        .as_ref()
        .expect("a manual wall clock")
        .advance(Duration::from_secs(42));
    let ready = text(&service, "/readyz").await;
    assert!(
        ready.starts_with(
            "ready (redis store down since 2026-01-01T00:00:00Z, for 42 s, answered by"
        ),
        "{ready}"
    );
    service.stop().await;
}

/// A service on the primary `set`'s Sentinels name, with `store` lines
/// more, and one global fixed-window limit `shared` of `rate` (a window
/// of 30 days: no test run crosses one).
fn sentinel_config(
    set: &ratekeeper_test_support::redis_sentinel::SentinelSet,
    store: &str,
    rate: &str,
) -> String {
    use ratekeeper_test_support::redis_sentinel::MASTER_NAME;
    let sentinels: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|u| format!("{u:?}"))
        .collect();
    let timeout = timeout_line();
    format!(
        "{LISTEN_ANY}\n[store]\nkind = \"redis\"\nsentinels = [{}]\nmaster_name = \"{MASTER_NAME}\"\n\
         {store}{timeout}\n[[limits]]\nname = \"shared\"\nrate = \"{rate}\"\npolicy = \"fixed_window\"\n\
         key = [\"global\"]\n",
        sentinels.join(", ")
    )
}

/// `[store] kind = "redis"` with `sentinels`: the service finds the
/// primary through the Sentinels, follows a failover without a restart,
/// and counts exactly across it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_follows_a_sentinel_failover() {
    use ratekeeper_test_support::redis_sentinel::SentinelSet;
    let Some(set) = tokio::task::spawn_blocking(SentinelSet::start)
        .await
        .unwrap()
    else {
        return;
    };
    let toml = sentinel_config(&set, "", "10 per 30d");
    let service = TestService::start(&toml).await;
    let check = || service.post("/v1/check", json!({"limits": ["shared"]}));
    for _ in 0..4 {
        let (status, _, answer) = check().await;
        assert_eq!(
            (status, &answer["allowed"]),
            (200, &json!(true)),
            "{answer}"
        );
    }
    let set = tokio::task::spawn_blocking(move || {
        set.wait_for_replica_sync();
        set.fail_over();
        set
    })
    .await
    .unwrap();
    // Calls caught in the switch fail closed (503); then the new primary
    // answers, with the 4 already used.
    let (mut allowed, mut failed) = (0, 0);
    loop {
        let (status, _, answer) = check().await;
        match (status, answer["allowed"] == true) {
            (200, true) => allowed += 1,
            (200, false) => break,
            _ => {
                failed += 1;
                assert!(failed < 100, "never answered again: {status} {answer}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    assert_eq!(allowed, 6, "exact across the failover ({failed} failed)");
    let explained = service.get_json(service.http("/v1/limits")).await;
    assert_eq!(explained["limits"][0]["name"], "shared");
    drop(set);
    service.stop().await;
}

#[test]
fn sentinels_that_cannot_be_used_are_refused() {
    use ratekeeper_server::Config;
    let store = |lines: &str| format!("[store]\nkind = \"redis\"\n{lines}\n");
    let cases = [
        (
            store("sentinels = [\"redis://10.0.0.1:26379\"]"),
            "sentinels need master_name",
        ),
        (
            store("sentinels = []\nmaster_name = \"m\""),
            "the list of sentinels must not be empty",
        ),
        (
            store("url = \"redis://h:6379\"\nsentinels = [\"redis://h:26379\"]\nmaster_name = \"m\""),
            "not both",
        ),
        (
            store("url = \"redis://h:6379\"\nmaster_name = \"m\""),
            "master_name goes with sentinels",
        ),
        (
            store("sentinels = [\"rediss://h:26379\"]\nmaster_name = \"m\""),
            "TLS through Redis Sentinel is not supported yet",
        ),
        (
            "[store]\nkind = \"redis-cluster\"\nurls = [\"redis://h:1\"]\nsentinels = [\"redis://h:2\"]\n"
                .to_owned(),
            "sentinels applies only to the redis store",
        ),
    ];
    for (toml, expected) in cases {
        let error = Config::from_toml_str(&toml, "store.toml").unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    let config = Config::from_toml_str(
        &store("sentinels = [\"redis://:secret@10.0.0.1:26379\"]\nmaster_name = \"mymaster\""),
        "store.toml",
    )
    .unwrap();
    let text = config.explain();
    assert!(
        text.contains("redis primary \"mymaster\" through sentinels"),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");

    // The primary's password: with sentinels only, never shown.
    let with_password = store(
        "sentinels = [\"redis://10.0.0.1:26379\"]\nmaster_name = \"m\"\n\
         master_username = \"rk\"\nmaster_password = \"hunter2\"",
    );
    let config = Config::from_toml_str(&with_password, "store.toml").unwrap();
    for shown in [format!("{config:?}"), config.explain()] {
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    let refusals = [
        (
            store("url = \"redis://h:6379\"\nmaster_password = \"p\""),
            "master_password applies only to the redis store with sentinels",
        ),
        (
            store("sentinels = [\"redis://h:1\"]\nmaster_name = \"m\"\nmaster_username = \"u\""),
            "master_username goes with master_password",
        ),
    ];
    for (toml, expected) in refusals {
        let error = Config::from_toml_str(&toml, "store.toml").unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
}

/// A primary with `requirepass`, reached with `master_password`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_reaches_a_primary_with_a_password_through_sentinels() {
    use ratekeeper_test_support::redis_sentinel::SentinelSet;
    let start = || SentinelSet::start_with_password("s3cret");
    let Some(set) = tokio::task::spawn_blocking(start).await.unwrap() else {
        return;
    };
    let toml = sentinel_config(&set, "master_password = \"s3cret\"\n", "2 per 30d");
    let service = TestService::start(&toml).await;
    let mut allowed = Vec::new();
    for _ in 0..3 {
        let (status, _, answer) = service
            .post("/v1/check", json!({"limits": ["shared"]}))
            .await;
        assert_eq!(status, 200, "{answer}");
        allowed.push(answer["allowed"] == true);
    }
    assert_eq!(allowed, [true, true, false]);
    drop(set);
    service.stop().await;
}
