//! Failures an operator can see, over real `ratekeeper serve` processes
//! and a real redis-server this test starts, kills and starts again:
//! starting while Redis is down (fail open, fallback, fail closed with and
//! without a wait), readiness and the gRPC health service under each
//! policy during an outage, answers the failure policy made marked on
//! every door and counted per limit, and errors that name their cause and
//! the store.

use std::time::{Duration, Instant};

use ratekeeper_server::envoy::proto::RateLimitRequest;
use ratekeeper_test_support::redis::{RedisServer, UNHURRIED};
use serde_json::{json, Value};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::common::{self, ServeProcess};

/// How long anything that happens in the background may take on a loaded
/// machine before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

const RLS: &str = "envoy.service.ratelimit.v3.RateLimitService";

/// A Redis store at `url` with `policy` (TOML lines of `[store]`), and
/// one limit of 1 per hour for everyone, on the HTTP and Envoy doors.
fn config(url: &str, policy: &str) -> String {
    format!(
        "[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = {}\n{policy}\n\n\
         [[limits]]\nname = \"hourly\"\nrate = \"1/hour\"\npolicy = \"gcra\"\nkey = [\"global\"]\n\
         [limits.match]\ndomain = \"edge\"\ndescriptors = [{{ key = \"who\" }}]\n",
        UNHURRIED.as_millis()
    )
}

/// `ratekeeper serve` on `toml` (written to a file kept as long as the
/// process).
fn serve(toml: &str) -> (ServeProcess, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, toml).expect("the configuration is written");
    let process = ServeProcess::start(&["--config", path.to_str().expect("a UTF-8 path")], &[]);
    (process, dir)
}

/// A Redis server that was there and is not any more: its port is free
/// until [`RedisServer::restart`] starts it again.
fn redis_down() -> Option<RedisServer> {
    let mut redis = RedisServer::start()?;
    redis.kill();
    Some(redis)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(DEADLINE)
        .build()
        .expect("a client")
}

/// What one answer of a door looked like.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    json: Value,
}

async fn check(process: &ServeProcess) -> Answer {
    let response = client()
        .post(format!("http://{}/v1/check", process.http))
        .json(&json!({ "limits": ["hourly"] }))
        .send()
        .await
        .expect("the HTTP door answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let json = response.json().await.unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        json,
    }
}

/// `GET path` on the admin port: the status and the body.
async fn admin(process: &ServeProcess, path: &str) -> (u16, String) {
    let response = client()
        .get(format!(
            "http://{}{path}",
            process.admin.expect("the admin port is on")
        ))
        .send()
        .await
        .expect("the admin port answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

/// Calls `probe` until it gives `Some`, for at most [`DEADLINE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not after {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn store_header(headers: &reqwest::header::HeaderMap) -> Option<&str> {
    headers
        .get("x-ratekeeper-store")
        .map(|value| value.to_str().expect("ASCII"))
}

/// A failover answer: allowed or not, marked `how` in the header and the
/// JSON, for the request and its limit.
fn assert_marked(answer: &Answer, allowed: bool, how: &str) {
    assert_eq!(answer.status, 200, "{}", answer.json);
    assert_eq!(answer.json["allowed"], allowed, "{}", answer.json);
    assert_eq!(store_header(&answer.headers), Some(how), "{}", answer.json);
    assert_eq!(answer.json["answered_by"], how, "{}", answer.json);
    assert_eq!(
        answer.json["limits"][0]["answered_by"], how,
        "{}",
        answer.json
    );
    assert_eq!(answer.json["headers"]["x-ratekeeper-store"], how);
}

/// Starts with Redis down under `policy`: the failure policy answers
/// (`first`, then `second`, marked `how`), the service is ready, the
/// store is not; once Redis is up, the store decides (the limit's one
/// request, then a refusal), unmarked.
async fn starts_while_down_then_connects(policy: &str, how: &str, first: bool, second: bool) {
    let Some(mut redis) = redis_down() else {
        return;
    };
    let (process, _dir) = serve(&config(&redis.url(), policy));
    assert_marked(&check(&process).await, first, how);
    assert_marked(&check(&process).await, second, how);
    let (status, body) = admin(&process, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("answered by the failure policy"), "{body}");
    let (status, body) = admin(&process, "/readyz?store").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("not connected yet"), "{body}");
    assert!(body.contains(&redis.url()), "{body}");

    redis.restart();
    let answer = eventually("the store decides once Redis is up", || async {
        let answer = check(&process).await;
        (store_header(&answer.headers).is_none()).then_some(answer)
    })
    .await;
    assert_eq!(answer.status, 200, "{}", answer.json);
    assert_eq!(answer.json["answered_by"], "store", "{}", answer.json);
    assert_eq!(answer.json["allowed"], true, "{}", answer.json);
    let refused = check(&process).await;
    assert_eq!(refused.json["allowed"], false, "{}", refused.json);
    assert_eq!(store_header(&refused.headers), None);
    let (status, body) = admin(&process, "/readyz?store").await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn fail_open_starts_while_redis_is_down_and_connects_when_it_comes_up() {
    starts_while_down_then_connects("on_failure = \"open\"", "fail-open", true, true).await;
}

#[tokio::test]
async fn fallback_starts_while_redis_is_down_and_connects_when_it_comes_up() {
    // The fallback limits in memory: its one request, then a refusal.
    starts_while_down_then_connects("fallback = true", "fallback", true, false).await;
}

#[tokio::test]
async fn fail_closed_with_a_start_wait_starts_once_redis_comes_up() {
    let Some(mut redis) = redis_down() else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    let toml = config(&redis.url(), "start_wait_ms = 60000");
    std::fs::write(&path, toml).expect("the configuration is written");
    let log = dir.path().join("stderr.log");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    command
        .args(["serve", "--config", path.to_str().expect("a UTF-8 path")])
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(&log).expect("a log file"));
    // Reading the banner blocks until the service starts.
    let started = std::thread::spawn(move || ServeProcess::from_command(command));

    let waiting = eventually("the start waits for Redis", || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("waiting for the Redis store").then_some(text)
    })
    .await;
    assert!(waiting.contains(&redis.url()), "{waiting}");
    assert!(waiting.contains("Connection refused"), "{waiting}");
    assert!(!started.is_finished(), "started before Redis was up");

    redis.restart();
    let process = tokio::task::spawn_blocking(move || started.join())
        .await
        .expect("the waiting thread")
        .expect("the service starts once Redis is up");
    let answer = check(&process).await;
    assert_eq!(answer.status, 200, "{}", answer.json);
    assert_eq!(answer.json["answered_by"], "store", "{}", answer.json);
    let (status, body) = admin(&process, "/readyz").await;
    assert_eq!(status, 200, "{body}");
}

#[test]
fn fail_closed_without_a_wait_fails_fast_naming_the_url_and_the_cause_once() {
    let Some(redis) = redis_down() else {
        return;
    };
    let url = format!("redis://default:S3cretPass@127.0.0.1:{}", redis.port());
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, config(&url, "")).expect("the configuration is written");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    let started = Instant::now();
    let output = command
        .args(["serve", "--config", path.to_str().expect("a UTF-8 path")])
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    assert!(started.elapsed() < DEADLINE);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let error = stderr
        .lines()
        .find(|line| line.starts_with("error: "))
        .unwrap_or_else(|| panic!("no error line in {stderr}"));
    assert!(
        error.contains(&format!(
            "cannot open the Redis store at redis://default:***@127.0.0.1:{}",
            redis.port()
        )),
        "{error}"
    );
    assert_eq!(error.matches("Connection refused").count(), 1, "{error}");
    assert!(!stderr.contains("S3cretPass"), "{stderr}");
    assert!(String::from_utf8_lossy(&output.stdout).is_empty());
}

async fn health(process: &ServeProcess) -> HealthClient<tonic::transport::Channel> {
    let addr = process.grpc.expect("the gRPC door is on");
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_timeout(DEADLINE)
        .connect()
        .await
        .expect("the gRPC door answers");
    HealthClient::new(channel)
}

async fn status_of(client: &mut HealthClient<tonic::transport::Channel>, name: &str) -> i32 {
    client
        .check(HealthCheckRequest {
            service: name.to_owned(),
        })
        .await
        .expect("the health service answers")
        .into_inner()
        .status
}

/// Under `policy`, with Redis up then killed then back: `/readyz`, the
/// gRPC health service's `Check` (for `""` and the RLS) and `Watch` say
/// `serving_while_down` during the outage, `/readyz?store` is 503, and
/// everything is serving again once Redis is back.
async fn readiness_follows_the_policy(policy: &str, serving_while_down: bool) {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (process, _dir) = serve(&config(&redis.url(), policy));
    let mut client = health(&process).await;
    let serving = ServingStatus::Serving as i32;
    let not_serving = ServingStatus::NotServing as i32;
    for name in ["", RLS] {
        assert_eq!(status_of(&mut client, name).await, serving, "{name:?}");
    }
    let mut watch = client
        .watch(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("Watch answers")
        .into_inner();
    let first = watch.message().await.expect("a status").expect("a message");
    assert_eq!(first.status, serving);
    assert_eq!(admin(&process, "/readyz").await.0, 200);

    redis.kill();
    // The store's own health says so, whatever the policy.
    let body = eventually("/readyz?store sees the outage", || async {
        let (status, body) = admin(&process, "/readyz?store").await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(body.contains(&redis.url()), "{body}");
    let (status, body) = admin(&process, "/readyz").await;
    let expected = if serving_while_down {
        serving
    } else {
        not_serving
    };
    assert_eq!(status == 200, serving_while_down, "{body}");
    let stats: Value = client_json(&process, "/v1/stats").await;
    assert_eq!(stats["store"]["state"]["up"], false, "{stats}");
    assert_eq!(stats["store"]["serving"], serving_while_down, "{stats}");
    assert!(stats["store"]["state"]["last_error"]
        .as_str()
        .is_some_and(|error| error.contains(&redis.url())));
    let metrics = admin(&process, "/metrics").await.1;
    assert!(
        metrics.contains("ratekeeper_store_up{store=\"redis\"} 0"),
        "{metrics}"
    );
    let ready = format!("ratekeeper_ready {}", u8::from(serving_while_down));
    assert!(metrics.lines().any(|line| line == ready), "{metrics}");
    // The health service hears of the state a moment after the probes.
    for name in ["", RLS] {
        eventually("the health service follows the outage", || {
            let mut client = client.clone();
            async move { (status_of(&mut client, name).await == expected).then_some(()) }
        })
        .await;
    }
    if !serving_while_down {
        let change = tokio::time::timeout(DEADLINE, watch.message())
            .await
            .expect("Watch tells of the outage")
            .expect("a status")
            .expect("a message");
        assert_eq!(change.status, not_serving);
    }

    redis.restart();
    eventually("/readyz?store sees Redis back", || async {
        (admin(&process, "/readyz?store").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(admin(&process, "/readyz").await.0, 200);
    for name in ["", RLS] {
        eventually("the health service follows the recovery", || {
            let mut client = client.clone();
            async move { (status_of(&mut client, name).await == serving).then_some(()) }
        })
        .await;
    }
    if !serving_while_down {
        let change = tokio::time::timeout(DEADLINE, watch.message())
            .await
            .expect("Watch tells of the recovery")
            .expect("a status")
            .expect("a message");
        assert_eq!(change.status, serving);
    }
}

async fn client_json(process: &ServeProcess, path: &str) -> Value {
    let (status, body) = admin(process, path).await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("JSON")
}

#[tokio::test]
async fn fail_open_stays_ready_and_serving_during_an_outage() {
    readiness_follows_the_policy("on_failure = \"open\"", true).await;
}

#[tokio::test]
async fn fallback_stays_ready_and_serving_during_an_outage() {
    readiness_follows_the_policy("fallback = true", true).await;
}

#[tokio::test]
async fn fail_closed_is_not_ready_nor_serving_during_an_outage() {
    readiness_follows_the_policy("on_failure = \"closed\"", false).await;
}

/// The Envoy door's answer for the descriptor `who=x`: its code, the
/// `x-ratekeeper-store` metadata, and the same in
/// `response_headers_to_add`.
async fn envoy_answer(process: &ServeProcess) -> (i32, Option<String>, Option<String>) {
    let mut client = common::rls_client(process.grpc.expect("the gRPC door is on")).await;
    let response = client
        .should_rate_limit(RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![common::descriptor(&[("who", "x")])],
            hits_addend: 0,
        })
        .await
        .expect("an answer");
    let metadata = response
        .metadata()
        .get("x-ratekeeper-store")
        .map(|value| value.to_str().expect("ASCII").to_owned());
    let answer = response.into_inner();
    let header = answer
        .response_headers_to_add
        .iter()
        .find(|header| header.key == "x-ratekeeper-store")
        .map(|header| header.value.clone());
    (answer.overall_code, metadata, header)
}

/// nginx's `auth_request` endpoint: its status (204 when allowed) and
/// `X-RateKeeper-Store`.
async fn auth_answer(process: &ServeProcess) -> (u16, Option<String>) {
    let response = client()
        .get(format!("http://{}/v1/auth", process.http))
        .header("x-original-uri", "/page")
        .header("x-original-method", "GET")
        .send()
        .await
        .expect("the auth endpoint answers");
    let status = response.status().as_u16();
    (status, store_header(response.headers()).map(str::to_owned))
}

/// The sample `series` (name and labels) in a `/metrics` text.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(series)?.strip_prefix(' ')?;
        value.parse().ok()
    })
}

/// With Redis down under `policy`: the JSON API, nginx's endpoint and
/// the Envoy door mark every answer `how`, and `/metrics` counts each
/// per limit: `pages` (nginx's `/page`) and `hourly` (`/v1/check` and
/// the Envoy door) count their own.
async fn failover_answers_are_marked(policy: &str, how: &str, how_label: &str) {
    let Some(redis) = redis_down() else {
        return;
    };
    let toml = format!(
        "{}\n[[limits]]\nname = \"pages\"\nrate = \"100/hour\"\nkey = [\"global\"]\n\
         [limits.match]\npath_prefix = \"/page\"\n",
        config(&redis.url(), policy)
    );
    let (process, _dir) = serve(&toml);

    let json = check(&process).await;
    assert_marked(&json, true, how);
    let (status, header) = auth_answer(&process).await;
    assert_eq!((status, header.as_deref()), (204, Some(how)));
    // Twice: the fallback limits the Envoy door's key in memory too.
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    let second = if how == "fallback" {
        Code::OverLimit
    } else {
        Code::Ok
    };
    for expected in [Code::Ok, second] {
        let (code, metadata, header) = envoy_answer(&process).await;
        assert_eq!(code, expected as i32, "{how}");
        assert_eq!(metadata.as_deref(), Some(how));
        assert_eq!(header.as_deref(), Some(how));
    }

    let metrics = admin(&process, "/metrics").await.1;
    let series = |limit: &str| {
        format!("ratekeeper_failover_answers_total{{limit=\"{limit}\",how=\"{how_label}\"}}")
    };
    assert_eq!(sample(&metrics, &series("hourly")), Some(3), "{metrics}");
    assert_eq!(sample(&metrics, &series("pages")), Some(1), "{metrics}");
    let other = if how_label == "fail_open" {
        "fallback"
    } else {
        "fail_open"
    };
    let other = format!("ratekeeper_failover_answers_total{{limit=\"hourly\",how=\"{other}\"}}");
    assert_eq!(sample(&metrics, &other), Some(0), "{metrics}");
}

#[tokio::test]
async fn fail_open_answers_are_marked_on_every_door_and_counted() {
    failover_answers_are_marked("on_failure = \"open\"", "fail-open", "fail_open").await;
}

#[tokio::test]
async fn fallback_answers_are_marked_on_every_door_and_counted() {
    failover_answers_are_marked("fallback = true", "fallback", "fallback").await;
}

#[tokio::test]
async fn the_proxy_marks_failover_answers_with_a_header() {
    use ratekeeper::clock::ManualClock;
    use ratekeeper::Timestamp;
    use ratekeeper_server::engine::Engine;
    use std::sync::Arc;

    let Some(redis) = redis_down() else {
        return;
    };
    let upstream = common::serve_app(
        axum::Router::new().route("/page", axum::routing::get(|| async { "upstream" })),
    )
    .await;
    for (policy, how, second) in [
        ("on_failure = \"open\"", "fail-open", 200),
        ("fallback = true", "fallback", 429),
    ] {
        let toml = format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\n{policy}\n\n\
             [[limits]]\nname = \"pages\"\nrate = \"1/hour\"\nkey = [\"global\"]\n",
            redis.url()
        );
        let config = ratekeeper_server::Config::from_toml_str(&toml, "proxy.toml").unwrap();
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let engine = Engine::builder(&config)
            .clock(clock)
            .start()
            .await
            .expect("starts while down");
        let router = ratekeeper_server::proxy::router(
            engine.clone(),
            &format!("http://{upstream}").parse().unwrap(),
        )
        .expect("a proxy");
        let proxy = common::serve_app(router).await;
        for status in [200, second] {
            let response = client()
                .get(format!("http://{proxy}/page"))
                .send()
                .await
                .expect("the proxy answers");
            assert_eq!(response.status().as_u16(), status, "{policy}");
            assert_eq!(store_header(response.headers()), Some(how), "{policy}");
        }
        let (open, fallback) = engine.decision_metrics().failover_answers("pages");
        assert_eq!(open + fallback, 2, "{policy}");
    }
}

#[tokio::test]
async fn errors_name_the_cause_and_the_store() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let (process, _dir) = serve(&config(&redis.url(), "on_failure = \"closed\""));
    assert_eq!(check(&process).await.status, 200);
    redis.kill();
    let refused = check(&process).await;
    assert_eq!(refused.status, 503, "{}", refused.json);
    let detail = refused.json["detail"].as_str().expect("a detail");
    assert!(
        detail.contains(&format!("(store: {})", redis.url())),
        "{detail}"
    );
    // The cause: what the connection said (broken pipe, refused, reset...),
    // or the timeout, never "unavailable" alone.
    let cause = detail
        .split_once("is unavailable: ")
        .map(|(_, cause)| cause)
        .or_else(|| detail.split_once("did not answer within ").map(|(_, t)| t))
        .unwrap_or_else(|| panic!("no cause in {detail}"));
    assert!(!cause.starts_with("(store:"), "{detail}");
    let mut client = common::rls_client(process.grpc.expect("the gRPC door is on")).await;
    let status = client
        .should_rate_limit(RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![common::descriptor(&[("who", "x")])],
            hits_addend: 0,
        })
        .await
        .expect_err("the store is down");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert!(
        status.message().contains(&redis.url()),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn a_redis_cluster_nobody_answers_is_started_under_fail_open_and_refused_under_fail_closed() {
    // Two ports nothing listens on.
    let ports = [
        ratekeeper_test_support::redis::free_port(),
        ratekeeper_test_support::redis::free_port(),
    ];
    let urls = ports.map(|port| format!("redis://default:S3cretPass@127.0.0.1:{port}"));
    let hidden = ports.map(|port| format!("redis://default:***@127.0.0.1:{port}"));
    let toml = |policy: &str| {
        format!(
            "[store]\nkind = \"redis-cluster\"\nurls = [\"{}\", \"{}\"]\n{policy}\n\n\
             [[limits]]\nname = \"hourly\"\nrate = \"1/hour\"\nkey = [\"global\"]\n",
            urls[0], urls[1]
        )
    };

    let (process, _dir) = serve(&toml("on_failure = \"open\""));
    assert!(
        process.banner[0].contains("redis store not connected yet"),
        "{:?}",
        process.banner
    );
    let answer = check(&process).await;
    assert_eq!(answer.status, 200, "{}", answer.json);
    assert_eq!(store_header(&answer.headers), Some("fail-open"));
    let (status, body) = admin(&process, "/readyz?store").await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains(&format!("{} {}", hidden[0], hidden[1])),
        "{body}"
    );
    assert!(!body.contains("S3cretPass"), "{body}");
    drop(process);

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, toml("")).expect("the configuration is written");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    let output = command
        .args(["serve", "--config", path.to_str().expect("a UTF-8 path")])
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .output()
        .expect("the binary runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot open the Redis store at {} {}",
            hidden[0], hidden[1]
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("S3cretPass"), "{stderr}");
}

#[tokio::test]
async fn limitadors_http_door_marks_failover_answers() {
    let Some(redis) = redis_down() else {
        return;
    };
    let limits = crate::limitador::compat("examples-limits.yaml");
    let toml = format!(
        "{}\n[limitador]\nconfig_file = {:?}\n",
        config(&redis.url(), "on_failure = \"open\""),
        limits.display().to_string()
    );
    let (process, _dir) = serve(&toml);
    let body = json!({
        "namespace": "test_namespace",
        "values": {"req.method": "POST", "user_id": "alice"},
        "delta": 1,
    });
    for path in ["/check", "/report", "/check_and_report"] {
        let response = client()
            .post(format!("http://{}{path}", process.http))
            .json(&body)
            .send()
            .await
            .expect("the Limitador door answers");
        assert_eq!(response.status(), 200, "{path}");
        assert_eq!(
            store_header(response.headers()),
            Some("fail-open"),
            "{path}"
        );
    }
}
