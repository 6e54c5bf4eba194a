//! `[enforcement] shadow_mode`: every limit, from every source and on
//! every door, decides, counts and reports but never refuses; turned off
//! by a reload, the counts it kept are enforced at once.

use crate::common;

use std::time::Duration;

use common::{ServeProcess, TestService};
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::RateLimitRequest;
use serde_json::{json, Value};

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// Every source of limits, each allowing one request a minute: a native
/// limit for the JSON API and nginx, one for the gRPC door, a file of
/// envoyproxy/ratelimit's (and one of its zero limits), and a Limitador
/// file (with its `max_value: 0`).
struct Sources {
    dir: tempfile::TempDir,
}

impl Sources {
    fn new() -> Sources {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("envoy")).unwrap();
        std::fs::write(
            dir.path().join("envoy/edge.yaml"),
            "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n  - key: banned\n    rate_limit:\n      unit: minute\n      requests_per_unit: 0\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("limitador.yaml"),
            "- namespace: shop\n  max_value: 1\n  seconds: 60\n  conditions: []\n  variables: [\"descriptors[0]['user']\"]\n- namespace: closed\n  max_value: 0\n  seconds: 60\n  conditions: []\n  variables: []\n",
        )
        .unwrap();
        Sources { dir }
    }

    fn toml(&self, shadow_mode: bool) -> String {
        format!(
            r#"[listen]
http = "127.0.0.1:0"
grpc = "127.0.0.1:0"
admin = "127.0.0.1:0"

[enforcement]
shadow_mode = {shadow_mode}

[envoy]
config_dir = {envoy:?}

[limitador]
config_file = {limitador:?}

[[limits]]
name = "per-user"
rate = "1/minute"
policy = "fixed_window"
key = ["header:x-user"]

[[limits]]
name = "per-tenant"
rate = "1/minute"
policy = "fixed_window"
key = ["descriptor:tenant"]
[limits.match]
domain = "api"
descriptors = [{{ key = "tenant" }}]
"#,
            envoy = self.dir.path().join("envoy").display().to_string(),
            limitador = self.dir.path().join("limitador.yaml").display().to_string(),
        )
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("ratekeeper.toml")
    }
}

/// What each door answers to a client that is over its limit.
#[derive(Debug, PartialEq)]
struct Answers {
    /// `/v1/check`: allowed, and the limit's own verdict.
    json: (Value, Value),
    /// `/v1/auth`: the status nginx acts on.
    auth: u16,
    /// gRPC, native limit: overall code, and the descriptor's.
    grpc_native: (i32, i32),
    /// gRPC, envoyproxy/ratelimit's file limit: overall code and the
    /// descriptor's.
    grpc_file: (i32, i32),
    /// gRPC, a zero limit of the files: the overall code.
    grpc_zero: i32,
    /// gRPC, Limitador's limit: the overall code.
    grpc_limitador: i32,
    /// Limitador's `/check_and_report` and `/check`.
    limitador_http: (u16, u16),
    /// Limitador's `max_value: 0` by `/check_and_report`.
    limitador_zero: u16,
}

/// Asks every door for `user` once (twice for the limits whose first
/// request the second must see counted), and returns the second answers.
async fn ask_every_door(service: &TestService, user: &str) -> Answers {
    let grpc = grpc_door(service).await;
    let json_body = json!({"limits": ["per-user"], "key": {"header:x-user": user}});
    let auth = || {
        service
            .client
            .get(service.http("/v1/auth"))
            .header("x-original-uri", "/")
            // Its own key: /v1/check counts under the same limit.
            .header("x-user", format!("{user}-nginx"))
            .send()
    };
    let limitador = |delta: u64, namespace: &str| {
        service
            .client
            .post(service.http(if namespace.is_empty() {
                "/check"
            } else {
                "/check_and_report"
            }))
            .json(&json!({
                "namespace": if namespace.is_empty() { "shop" } else { namespace },
                // Its own counter: the gRPC door counts under the same.
                "values": {"user": format!("{user}-http")},
                "delta": delta,
            }))
            .send()
    };

    // The first request of each: within every limit.
    assert_eq!(
        service.post("/v1/check", json_body.clone()).await.2["allowed"],
        true
    );
    assert_eq!(auth().await.unwrap().status().as_u16(), 204);
    assert_eq!(grpc("api", &[("tenant", user)]).await, (OK, OK));
    assert_eq!(grpc("edge", &[("user", user)]).await, (OK, OK));
    assert_eq!(grpc("shop", &[("user", user)]).await.0, OK);
    assert_eq!(limitador(1, "shop").await.unwrap().status().as_u16(), 200);

    // The second: over every limit.
    let (_, _, json) = service.post("/v1/check", json_body).await;
    let answers = Answers {
        json: (
            json["allowed"].clone(),
            json["limits"][0]["allowed"].clone(),
        ),
        auth: auth().await.unwrap().status().as_u16(),
        grpc_native: grpc("api", &[("tenant", user)]).await,
        grpc_file: grpc("edge", &[("user", user)]).await,
        grpc_zero: grpc("edge", &[("banned", user)]).await.0,
        grpc_limitador: grpc("shop", &[("user", user)]).await.0,
        limitador_http: (
            limitador(1, "shop").await.unwrap().status().as_u16(),
            limitador(1, "").await.unwrap().status().as_u16(),
        ),
        limitador_zero: limitador(1, "closed").await.unwrap().status().as_u16(),
    };
    answers
}

/// The gRPC door of `service`, as a function of a domain and one
/// descriptor's entries to the overall code and the descriptor's.
async fn grpc_door(
    service: &TestService,
) -> impl Fn(&str, &[(&str, &str)]) -> std::pin::Pin<Box<dyn std::future::Future<Output = (i32, i32)>>>
{
    let addr = service.service.addrs().grpc.expect("grpc is on");
    let rls = common::rls_client(addr).await;
    move |domain, entries| {
        let request = RateLimitRequest {
            domain: domain.to_owned(),
            descriptors: vec![common::descriptor(entries)],
            hits_addend: 0,
        };
        let mut rls = rls.clone();
        Box::pin(async move {
            let answer = rls.should_rate_limit(request).await.unwrap().into_inner();
            (answer.overall_code, answer.statuses[0].code)
        })
    }
}

/// What enforcement answers to a client over every limit.
fn enforced() -> Answers {
    Answers {
        json: (json!(false), json!(false)),
        auth: 429,
        grpc_native: (OVER, OVER),
        grpc_file: (OVER, OVER),
        grpc_zero: OVER,
        grpc_limitador: OVER,
        limitador_http: (429, 429),
        limitador_zero: 429,
    }
}

#[tokio::test]
async fn shadow_mode_refuses_nothing_on_any_door_and_a_reload_enforces_what_it_counted() {
    let sources = Sources::new();
    std::fs::write(sources.path(), sources.toml(true)).unwrap();
    let service = TestService::start_with(&sources.toml(true), Some(sources.path()), None).await;

    // Each limit still decides: the JSON answer's limit and each gRPC
    // descriptor say "over", but nothing is refused.
    let shadowed = ask_every_door(&service, "alice").await;
    assert_eq!(
        shadowed,
        Answers {
            json: (json!(true), json!(false)),
            auth: 204,
            grpc_native: (OK, OVER),
            grpc_file: (OK, OVER),
            grpc_zero: OK,
            grpc_limitador: OK,
            limitador_http: (200, 200),
            limitador_zero: 200,
        }
    );
    // Counted and reported as denials, as enforcement would have.
    let stats = service.get_json(service.admin("/v1/stats")).await;
    assert_eq!(stats["shadow_mode"], true);
    let per_user = stats["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|limit| limit["name"] == "per-user")
        .expect("per-user's stats");
    assert!(per_user["denied"].as_u64().unwrap() >= 2, "{per_user}");

    // Off, by a reload: the counts made in shadow mode are enforced now.
    std::fs::write(sources.path(), sources.toml(false)).unwrap();
    service.service.reload().await.expect("the reload applies");
    let stats = service.get_json(service.admin("/v1/stats")).await;
    assert_eq!(stats["shadow_mode"], false);
    assert_eq!(
        ask_every_door_again(&service, "alice").await,
        enforced_again()
    );

    // And a newcomer is enforced from the start.
    assert_eq!(ask_every_door(&service, "bob").await, enforced());

    // A minute later the windows are whole again.
    service.clock.advance(Duration::from_secs(60));
    let (_, _, json) = service
        .post(
            "/v1/check",
            json!({"limits": ["per-user"], "key": {"header:x-user": "bob"}}),
        )
        .await;
    assert_eq!(json["allowed"], true);
    service.stop().await;
}

/// After the reload, the first request of each is already over: the shadow
/// requests were counted.
async fn ask_every_door_again(service: &TestService, user: &str) -> (Value, u16, i32, i32) {
    let grpc = grpc_door(service).await;
    let (_, _, json) = service
        .post(
            "/v1/check",
            json!({"limits": ["per-user"], "key": {"header:x-user": user}}),
        )
        .await;
    let auth = service
        .client
        .get(service.http("/v1/auth"))
        .header("x-original-uri", "/")
        .header("x-user", format!("{user}-nginx"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    let native = grpc("api", &[("tenant", user)]).await.0;
    let file = grpc("edge", &[("user", user)]).await.0;
    (json["allowed"].clone(), auth, native, file)
}

fn enforced_again() -> (Value, u16, i32, i32) {
    (json!(false), 429, OVER, OVER)
}

#[tokio::test]
async fn the_flag_and_the_environment_turn_it_on_and_say_so() {
    let sources = Sources::new();
    std::fs::write(sources.path(), sources.toml(false)).unwrap();
    let config = sources.path().display().to_string();
    let by_flag = ServeProcess::start(&["--config", &config, "--shadow-mode"], &[]);
    let by_env = ServeProcess::start(
        &["--config", &config],
        &[("RATEKEEPER_ENFORCEMENT__SHADOW_MODE", "true")],
    );
    let neither = ServeProcess::start(&["--config", &config], &[]);
    let says = |process: &ServeProcess| {
        process
            .banner
            .iter()
            .any(|line| line.starts_with("shadow mode:"))
    };
    assert!(says(&by_flag), "{:?}", by_flag.banner);
    assert!(says(&by_env), "{:?}", by_env.banner);
    assert!(!says(&neither), "{:?}", neither.banner);

    // And it does what it says: twice over a limit of one, still 204.
    let client = reqwest::Client::new();
    let statuses = |process: &ServeProcess| {
        let client = client.clone();
        let url = format!("http://{}/v1/auth", process.http);
        async move {
            let mut statuses = Vec::new();
            for _ in 0..2 {
                let response = client
                    .get(&url)
                    .header("x-original-uri", "/")
                    .header("x-user", "carol")
                    .send()
                    .await
                    .unwrap();
                statuses.push(response.status().as_u16());
            }
            statuses
        }
    };
    assert_eq!(statuses(&by_flag).await, [204, 204]);
    assert_eq!(statuses(&by_env).await, [204, 204]);
    assert_eq!(statuses(&neither).await, [204, 429]);

    // `check` explains it.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["check", "--config", &config])
        .env("RATEKEEPER_ENFORCEMENT__SHADOW_MODE", "true")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("shadow mode: every limit"), "{text}");
}
