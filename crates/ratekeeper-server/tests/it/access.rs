//! Who may ask, over real sockets: bearer tokens on the HTTP, gRPC and
//! admin doors (from a file, from an environment variable, rotated by a
//! reload), and the per-limit permissions `allow_overrides` and
//! `allow_refunds`.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ServeProcess, LISTEN_ANY};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitUnit};
use ratekeeper_server::serve::Service;
use ratekeeper_server::Config;
use reqwest::StatusCode;
use serde_json::{json, Value};
use tonic::transport::Channel;

const OLD: &str = "old-token-0123456789abcdef";
const NEW: &str = "new-token-fedcba9876543210";
const WRONG: &str = "wrong-token-000000000000000";

const LIMITS: &str = r#"
[[limits]]
name = "per-user"
rate = "2/minute"
key = ["header:x-user"]
"#;

/// A service on `config`, with its configuration file at `path` (for
/// reloads), on a manual clock.
async fn start(config: Config, path: Option<PathBuf>, watch: Option<Duration>) -> Service {
    let mut builder = Service::builder(config)
        .clock(Arc::new(ManualClock::new(Timestamp::from_secs(1_000))))
        .watch_interval(watch);
    if let Some(path) = path {
        builder = builder.config_file(path);
    }
    builder.start().await.expect("the service starts")
}

/// `toml` written to `dir/ratekeeper.toml`, loaded, and the service on it.
async fn start_file(dir: &Path, toml: &str, watch: Option<Duration>) -> (Service, PathBuf) {
    let path = dir.join("ratekeeper.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load(&path).expect("a valid test config");
    (start(config, Some(path.clone()), watch).await, path)
}

fn url(addr: Option<std::net::SocketAddr>, path: &str) -> String {
    format!("http://{}{path}", addr.expect("the door is on"))
}

/// POSTs a check of `per-user` for alice with `token` (if any); status and
/// response.
async fn check(service: &Service, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url(service.addrs().http, "/v1/check"))
        .json(&json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("answered")
}

async fn get(url: String, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("answered")
}

/// A refusal is a 401 problem detail with a Bearer challenge that never
/// shows a token; its detail.
async fn assert_unauthorized(response: reqwest::Response) -> String {
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "application/problem+json");
    let challenge = headers["www-authenticate"].to_str().unwrap();
    assert!(challenge.starts_with("Bearer"), "{challenge}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], 401);
    let detail = body["detail"].as_str().unwrap().to_owned();
    for token in [OLD, NEW, WRONG] {
        assert!(!detail.contains(token), "{detail}");
    }
    detail
}

/// The value of the sample `name{labels}` in the admin port's metrics.
async fn metric(service: &Service, token: Option<&str>, sample: &str) -> Option<u64> {
    let text = get(url(service.addrs().admin, "/metrics"), token)
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(sample)?.trim().parse().ok())
}

fn token_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn the_http_door_answers_only_a_token_of_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(
        dir.path(),
        "decisions",
        &format!("# two during a rotation\n{OLD}\n\n{NEW}\n"),
    );
    let toml = format!(
        "{LISTEN_ANY}\n[access.decisions]\ntoken_file = {:?}\n{LIMITS}",
        tokens.display()
    );
    let (service, _) = start_file(dir.path(), &toml, None).await;

    let detail = assert_unauthorized(check(&service, None).await).await;
    assert!(detail.contains("Authorization: Bearer"), "{detail}");
    let wrong = check(&service, Some(WRONG)).await;
    assert!(wrong.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .contains("invalid_token"));
    assert_unauthorized(wrong).await;
    // Basic credentials are no bearer token.
    let basic = reqwest::Client::new()
        .get(url(service.addrs().http, "/v1/limits"))
        .basic_auth("user", Some(OLD))
        .send()
        .await
        .unwrap();
    assert_unauthorized(basic).await;
    assert_unauthorized(get(url(service.addrs().http, "/v1/limits"), None).await).await;

    for token in [OLD, NEW] {
        let response = check(&service, Some(token)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["allowed"], true);
    }
    // The refused requests took nothing: the third allowed check is the
    // one over the limit of 2.
    let third: Value = check(&service, Some(OLD)).await.json().await.unwrap();
    assert_eq!(third["allowed"], false);

    // The admin port has no tokens of its own: open, and counting.
    assert_eq!(
        metric(
            &service,
            None,
            "ratekeeper_unauthenticated_requests_total{door=\"http\"}"
        )
        .await,
        Some(4)
    );
    assert_eq!(
        metric(
            &service,
            None,
            "ratekeeper_unauthenticated_requests_total{door=\"admin\"}"
        )
        .await,
        Some(0)
    );
    service.shutdown();
    service.wait().await.unwrap();
}

#[tokio::test]
async fn nginx_auth_request_may_send_the_token_in_its_own_header() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), "decisions", &format!("{OLD}\n"));
    let toml = format!(
        "{LISTEN_ANY}\n[access.decisions]\ntoken_file = {:?}\n{LIMITS}",
        tokens.display()
    );
    let (service, _) = start_file(dir.path(), &toml, None).await;
    let auth = |token: Option<&str>, authorization: Option<&str>| {
        let mut request = reqwest::Client::new()
            .get(url(service.addrs().http, "/v1/auth"))
            .header("x-original-uri", "/app")
            .header("x-user", "bob");
        if let Some(token) = token {
            request = request.header("x-ratekeeper-token", token);
        }
        // The client's own credentials, which nginx passes on.
        if let Some(authorization) = authorization {
            request = request.header("authorization", authorization);
        }
        request.send()
    };
    let passed = auth(Some(OLD), Some("Bearer the-clients-own-credential"))
        .await
        .unwrap();
    assert_eq!(passed.status(), StatusCode::NO_CONTENT);
    assert_unauthorized(auth(None, Some("Basic dXNlcjpwYXNz")).await.unwrap()).await;
    assert_unauthorized(auth(Some(WRONG), None).await.unwrap()).await;
    // The header is for /v1/auth only.
    let elsewhere = reqwest::Client::new()
        .post(url(service.addrs().http, "/v1/check"))
        .header("x-ratekeeper-token", OLD)
        .json(&json!({"limits": ["per-user"], "key": {"header:x-user": "bob"}}))
        .send()
        .await
        .unwrap();
    assert_unauthorized(elsewhere).await;
    service.shutdown();
    service.wait().await.unwrap();
}

#[tokio::test]
async fn the_admin_port_needs_its_token_but_the_probes_and_the_page_do_not() {
    // The token from a variable, through the configuration's environment.
    let toml = format!("{LISTEN_ANY}\n[access.admin]\ntoken_env = \"RK_TEST_ADMIN\"\n{LIMITS}");
    let config = Config::from_toml_str_with_env(
        &toml,
        "test.toml",
        [("RK_TEST_ADMIN", format!(" {NEW}\n"))],
    )
    .unwrap();
    let service = start(config, None, None).await;
    let admin = |path: &str| url(service.addrs().admin, path);

    for path in ["/healthz", "/readyz", "/"] {
        assert_eq!(
            get(admin(path), None).await.status(),
            StatusCode::OK,
            "{path}"
        );
    }
    for path in ["/metrics", "/v1/stats"] {
        assert_unauthorized(get(admin(path), None).await).await;
        assert_unauthorized(get(admin(path), Some(WRONG)).await).await;
        assert_eq!(get(admin(path), Some(NEW)).await.status(), StatusCode::OK);
    }
    // The decision door has no tokens: open.
    assert_eq!(check(&service, None).await.status(), StatusCode::OK);
    assert_eq!(
        metric(
            &service,
            Some(NEW),
            "ratekeeper_unauthenticated_requests_total{door=\"admin\"}"
        )
        .await,
        Some(4)
    );
    service.shutdown();
    service.wait().await.unwrap();
}

/// A gRPC client of `engine`'s service on a loopback port, and what stops
/// the server.
async fn grpc(
    engine: Engine,
) -> (
    RateLimitServiceClient<Channel>,
    tokio::sync::oneshot::Sender<()>,
) {
    crate::common::serve_rls(engine).await
}

fn descriptor(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }],
        ..RateLimitDescriptor::default()
    }
}

fn rls_request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

fn with_token(request: RateLimitRequest, token: Option<&str>) -> tonic::Request<RateLimitRequest> {
    let mut request = tonic::Request::new(request);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

const ENVOY_LIMITS: &str = r#"
[[limits]]
name = "per-ip"
rate = "1/minute"
key = ["client_ip"]
allow_overrides = false
allow_refunds = false
match = { domain = "edge", descriptors = [{ key = "remote_address" }] }

[[limits]]
name = "per-user"
rate = "1/minute"
key = ["descriptor:user"]
match = { domain = "edge", descriptors = [{ key = "user" }] }
"#;

async fn engine(toml: &str, vars: &[(&str, &str)]) -> Engine {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let config = Config::from_toml_str_with_env(toml, "test.toml", vars).unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    Engine::builder(&config).clock(clock).start().await.unwrap()
}

#[tokio::test]
async fn the_grpc_door_answers_unauthenticated_without_its_token() {
    let toml = format!("[access.decisions]\ntoken_env = \"RK_TEST_GRPC\"\n{ENVOY_LIMITS}");
    let engine = engine(&toml, &[("RK_TEST_GRPC", OLD)]).await;
    let (mut client, _stop) = grpc(engine.clone()).await;
    let ask = || rls_request(vec![descriptor("user", "u1")]);

    for token in [None, Some(WRONG)] {
        let status = client
            .should_rate_limit(with_token(ask(), token))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
        assert!(!status.message().contains(OLD));
    }
    let answer = client
        .should_rate_limit(with_token(ask(), Some(OLD)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    // The refused calls took nothing: the next is the one over 1/minute.
    let answer = client
        .should_rate_limit(with_token(ask(), Some(OLD)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    assert_eq!(
        engine
            .access()
            .refused(ratekeeper_server::access::Door::Grpc),
        2
    );
}

fn overridden(mut descriptor: RateLimitDescriptor) -> RateLimitDescriptor {
    descriptor.limit = Some(RateLimitOverride {
        requests_per_unit: 1_000,
        unit: RateLimitUnit::Second as i32,
    });
    descriptor
}

#[tokio::test]
async fn an_override_is_ignored_where_the_limit_forbids_it_and_honoured_elsewhere() {
    let engine = engine(ENVOY_LIMITS, &[]).await;
    let (mut client, _stop) = grpc(engine.clone()).await;
    async fn ask(
        client: &mut RateLimitServiceClient<Channel>,
        descriptor: RateLimitDescriptor,
    ) -> ratekeeper_server::envoy::proto::RateLimitResponse {
        client
            .should_rate_limit(rls_request(vec![descriptor]))
            .await
            .unwrap()
            .into_inner()
    }
    // per-ip: 1/minute, overrides refused: the override of 1000/second
    // changes nothing.
    let ip = || overridden(descriptor("remote_address", "10.0.0.1"));
    let first = ask(&mut client, ip()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let shown = first.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(shown.name, "per-ip");
    let second = ask(&mut client, ip()).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32, "{second:?}");

    // per-user allows overrides (the default): 1000/second decides.
    let user = || overridden(descriptor("user", "u1"));
    for _ in 0..3 {
        let answer = ask(&mut client, user()).await;
        assert_eq!(answer.overall_code, Code::Ok as i32);
        let shown = answer.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(shown.name, "envoy-override-1000-per-second");
    }
    let metrics = ratekeeper_server::admin::render_metrics(&engine, &Default::default())
        .await
        .unwrap();
    assert!(
        metrics.contains("ratekeeper_overrides_refused_total{limit=\"per-ip\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("ratekeeper_overrides_refused_total{limit=\"per-user\"} 0"));
}

#[tokio::test]
async fn a_negative_hit_on_a_limit_without_refunds_is_permission_denied() {
    let engine = engine(ENVOY_LIMITS, &[]).await;
    let (mut client, _stop) = grpc(engine).await;
    let ip = || descriptor("remote_address", "10.0.0.9");
    let taken = client
        .should_rate_limit(rls_request(vec![ip()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(taken.overall_code, Code::Ok as i32);
    let mut refund = ip();
    refund.is_negative_hits = true;
    // With a descriptor that may be refunded: all or nothing.
    let mut other = descriptor("user", "u9");
    other.is_negative_hits = true;
    let status = client
        .should_rate_limit(rls_request(vec![other, refund]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
    assert!(status.message().contains("per-ip"), "{status:?}");
    let after = client
        .should_rate_limit(rls_request(vec![ip()]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        after.overall_code,
        Code::OverLimit as i32,
        "nothing given back"
    );
}

#[tokio::test]
async fn a_refund_of_a_limit_without_refunds_is_403_and_gives_nothing_back() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{LISTEN_ANY}{LIMITS}allow_refunds = false\n\n[[limits]]\nname = \"open\"\nrate = \"1/minute\"\nkey = [\"header:x-user\"]\n"
    );
    let (service, _) = start_file(dir.path(), &toml, None).await;
    let post = |path: &str, limit: &str| {
        reqwest::Client::new()
            .post(url(service.addrs().http, path))
            .json(&json!({"limits": [limit], "key": {"header:x-user": "mallory"}, "cost": 2}))
            .send()
    };
    let spent: Value = post("/v1/check", "per-user")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(spent["allowed"], true);
    let refused = post("/v1/refund", "per-user").await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        refused.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("\"per-user\""),
        "{body}"
    );
    let after: Value = post("/v1/check", "per-user")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(after["allowed"], false, "the refund gave nothing back");

    // A limit that accepts refunds still does.
    let _ = post("/v1/check", "open").await.unwrap();
    assert_eq!(
        post("/v1/refund", "open").await.unwrap().status(),
        StatusCode::OK
    );
    let limits: Value = get(url(service.addrs().http, "/v1/limits"), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(limits["limits"][0]["allow_refunds"], false);
    assert_eq!(limits["limits"][1]["allow_refunds"], true);
    service.shutdown();
    service.wait().await.unwrap();
}

#[tokio::test]
async fn a_reload_rotates_the_tokens_and_the_old_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), "decisions", &format!("{OLD}\n"));
    let toml = format!(
        "{LISTEN_ANY}\n[access.decisions]\ntoken_file = {:?}\n{LIMITS}",
        tokens.display()
    );
    let (service, _) = start_file(dir.path(), &toml, None).await;
    assert_eq!(check(&service, Some(OLD)).await.status(), StatusCode::OK);
    assert_unauthorized(check(&service, Some(NEW)).await).await;

    // Both during the rotation, then only the new one.
    std::fs::write(&tokens, format!("{OLD}\n{NEW}\n")).unwrap();
    service.reload().await.unwrap();
    assert_eq!(check(&service, Some(NEW)).await.status(), StatusCode::OK);
    assert_eq!(check(&service, Some(OLD)).await.status(), StatusCode::OK);
    std::fs::write(&tokens, format!("{NEW}\n")).unwrap();
    service.reload().await.unwrap();
    assert_unauthorized(check(&service, Some(OLD)).await).await;

    // An emptied file is refused, and the tokens in force stay.
    std::fs::write(&tokens, "# nothing\n").unwrap();
    let error = service.reload().await.unwrap_err().to_string();
    assert!(error.contains("holds no token"), "{error}");
    assert!(!error.contains(NEW), "{error}");
    assert_eq!(check(&service, Some(NEW)).await.status(), StatusCode::OK);
    service.shutdown();
    service.wait().await.unwrap();
}

#[tokio::test]
async fn a_changed_token_file_is_picked_up_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), "admin", &format!("{OLD}\n"));
    let toml = format!(
        "{LISTEN_ANY}\n[access.admin]\ntoken_file = {:?}\n{LIMITS}",
        tokens.display()
    );
    let (service, _) = start_file(dir.path(), &toml, Some(Duration::from_millis(20))).await;
    let stats = || get(url(service.addrs().admin, "/v1/stats"), Some(NEW));
    assert_eq!(stats().await.status(), StatusCode::UNAUTHORIZED);
    // Only the token file changes; the configuration does not.
    std::fs::write(&tokens, format!("{NEW}\n")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats().await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "the new token was never read");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let old = get(url(service.addrs().admin, "/v1/stats"), Some(OLD)).await;
    assert_eq!(old.status(), StatusCode::UNAUTHORIZED);
    service.shutdown();
    service.wait().await.unwrap();
}

fn config_error(toml: &str, vars: &[(&str, &str)]) -> String {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Config::from_toml_str_with_env(toml, "test.toml", vars)
        .unwrap_err()
        .to_string()
}

#[test]
fn tokens_are_never_taken_from_the_configuration_text() {
    let error = config_error(
        &format!("[access.decisions]\ntoken = \"{OLD}\"\n{LIMITS}"),
        &[],
    );
    assert!(
        error.starts_with("test.toml:2:9: access.decisions.token: tokens are never read"),
        "{error}"
    );
    assert!(error.contains("token_file") && error.contains("token_env"));
    assert!(!error.contains(OLD), "{error}");
    // Numbers are not shown either, nor tokens from an override.
    let error = config_error(
        &format!("[access.admin]\ntoken = 12345678901234567\n{LIMITS}"),
        &[],
    );
    assert!(!error.contains("12345678901234567"), "{error}");
    let error = config_error(LIMITS, &[("RATEKEEPER_ACCESS__ADMIN__TOKEN", OLD)]);
    assert!(
        error.starts_with("env RATEKEEPER_ACCESS__ADMIN__TOKEN: access.admin.token: "),
        "{error}"
    );
    assert!(!error.contains(OLD), "{error}");
}

#[test]
fn missing_and_empty_tokens_are_errors_naming_the_file_or_variable() {
    let dir = tempfile::tempdir().unwrap();
    let empty = token_file(dir.path(), "empty", "\n# to come\n\n");
    let short = token_file(dir.path(), "short", "abc\n");
    let missing = dir.path().join("missing");
    let file = |path: &Path| {
        config_error(
            &format!(
                "[access.decisions]\ntoken_file = {:?}\n{LIMITS}",
                path.display()
            ),
            &[],
        )
    };
    let error = file(&empty);
    assert!(
        error.starts_with("test.toml:2:14: access.decisions.token_file: the token file "),
        "{error}"
    );
    assert!(
        error.contains(&format!("{} holds no token", empty.display())),
        "{error}"
    );
    let error = file(&missing);
    assert!(
        error.contains(&format!("{} cannot be read", missing.display())),
        "{error}"
    );
    let error = file(&short);
    assert!(
        error.contains("line 1: the token is 3 characters; use at least 16"),
        "{error}"
    );
    assert!(!error.contains("abc"), "{error}");

    let env = |vars: &[(&str, &str)]| {
        config_error(
            &format!("[access.admin]\ntoken_env = \"RK_TEST_UNSET\"\n{LIMITS}"),
            vars,
        )
    };
    assert_eq!(
        env(&[]),
        "test.toml:2:13: access.admin.token_env: the environment variable RK_TEST_UNSET is not set"
    );
    assert!(env(&[("RK_TEST_UNSET", "  ")])
        .ends_with("RK_TEST_UNSET holds no token (only blank lines and # comments)"));

    let both = config_error(
        &format!("[access.admin]\ntoken_file = \"/x\"\ntoken_env = \"X\"\n{LIMITS}"),
        &[],
    );
    assert!(
        both.contains("access.admin.token_env: give token_file or token_env, not both"),
        "{both}"
    );
    let neither = config_error(&format!("[access.admin]\n{LIMITS}"), &[]);
    assert!(
        neither.contains("access.admin: give token_file"),
        "{neither}"
    );
    let unknown = config_error(
        &format!("[access.public]\ntoken_env = \"X\"\n{LIMITS}"),
        &[],
    );
    assert!(unknown.contains("unknown field `public`"), "{unknown}");
}

fn check_command(path: &Path, env: &[(&str, &str)]) -> std::process::Output {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.args(["check", "--config", path.to_str().unwrap()]);
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    command.output().expect("the binary runs")
}

#[test]
fn check_tells_who_may_ask_and_never_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), "decisions", &format!("{OLD}\n{NEW}\n"));
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        format!(
            "[access.decisions]\ntoken_file = {:?}\n[access.admin]\ntoken_env = \"RK_CHECK_ADMIN\"\n{ENVOY_LIMITS}",
            tokens.display()
        ),
    )
    .unwrap();
    let output = check_command(&path, &[("RK_CHECK_ADMIN", WRONG)]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "access: http and grpc need a bearer token (2 tokens from the token file {}); \
             admin (but /healthz, /readyz) needs a bearer token (1 token from the environment variable RK_CHECK_ADMIN)",
            tokens.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains("limit per-ip: token_bucket 1/minute, key client_ip, match domain edge, descriptors [remote_address] (Envoy overrides ignored) (refunds refused)"),
        "{stdout}"
    );
    for token in [OLD, NEW, WRONG] {
        assert!(!stdout.contains(token), "{stdout}");
    }

    // Without the variable, the check fails naming it.
    let output = check_command(&path, &[]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr
            .contains("access.admin.token_env: the environment variable RK_CHECK_ADMIN is not set"),
        "{stderr}"
    );
}

#[test]
fn the_binary_reads_a_token_from_its_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        format!("[access.decisions]\ntoken_env = \"RK_SERVE_TOKEN\"\n{LIMITS}"),
    )
    .unwrap();
    let process = ServeProcess::start(
        &["--config", path.to_str().unwrap()],
        &[("RK_SERVE_TOKEN", NEW)],
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let check = |token: Option<&'static str>| {
            let mut request = reqwest::Client::new()
                .post(format!("http://{}/v1/check", process.http))
                .json(&json!({"limits": ["per-user"], "key": {"header:x-user": "eve"}}));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            request.send()
        };
        assert_unauthorized(check(None).await.unwrap()).await;
        assert_unauthorized(check(Some(OLD)).await.unwrap()).await;
        assert_eq!(check(Some(NEW)).await.unwrap().status(), StatusCode::OK);
    });
}

#[test]
fn the_guides_security_example_loads_with_its_tokens() {
    let blocks = crate::reference::section_toml("security.md", "Security");
    let block = blocks.first().expect("a TOML block");
    let dir = tempfile::tempdir().unwrap();
    let tokens = token_file(dir.path(), "decisions", &format!("{OLD}\n"));
    let shown = "\"/run/secrets/ratekeeper/decisions\"";
    assert!(block.contains(shown), "{block}");
    let toml = block.replace(shown, &format!("{:?}", tokens.display().to_string()));
    let config = Config::from_toml_str_with_env(
        &toml,
        "docs/security.md",
        [("RATEKEEPER_ADMIN_TOKEN", NEW)],
    )
    .unwrap_or_else(|error| panic!("{error}\n{toml}"));
    assert!(config.warnings().is_empty());
    let admin = config.access.admin.as_ref().expect("admin tokens");
    assert!(admin.accepts(NEW.as_bytes()) && !admin.accepts(OLD.as_bytes()));
    let explained = config.explain();
    assert!(
        explained.contains("(Envoy overrides ignored) (refunds refused)"),
        "{explained}"
    );
}
