//! `ratekeeper serve`, run as a real process: the built-in defaults, the
//! environment's overrides, SIGHUP reloads, SIGTERM stops it cleanly.

use crate::common;

use std::time::{Duration, Instant};

use common::ServeProcess;
use serde_json::{json, Value};

async fn check(process: &ServeProcess, body: Value) -> Value {
    reqwest::Client::new()
        .post(format!("http://{}/v1/check", process.http))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

async fn limit_names(process: &ServeProcess) -> Vec<String> {
    let answer: Value = reqwest::get(format!("http://{}/v1/limits", process.http))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn with_no_file_it_serves_the_built_in_defaults_and_stops_on_sigterm() {
    let mut process = ServeProcess::start(&[], &[]);
    assert_eq!(
        process.banner[0],
        "ratekeeper 0.1.0 (memory store, 1 limit)"
    );
    assert!(process
        .banner
        .iter()
        .any(|l| l.starts_with("grpc  127.0.0.1:")));
    let answer = check(&process, json!({"key": {"client_ip": "192.0.2.1"}})).await;
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["limits"][0]["name"], "per-client");
    assert_eq!(answer["limits"][0]["limit"], 100);
    assert_eq!(answer["limits"][0]["remaining"], 99);
    let ready = reqwest::get(format!("http://{}/readyz", process.admin.unwrap()))
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);

    process.signal("TERM");
    let status = process.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn sighup_without_a_file_is_logged_not_fatal() {
    let mut process = ServeProcess::start(&[], &[]);
    process.signal("HUP");
    // Still serving: SIGHUP's default action would have ended it.
    let answer = check(&process, json!({"key": {"client_ip": "192.0.2.7"}})).await;
    assert_eq!(answer["allowed"], true);
    assert!(process.child.try_wait().unwrap().is_none());
}

#[tokio::test]
async fn the_environment_overrides_the_defaults() {
    let process = ServeProcess::start(&[], &[("RATEKEEPER_LIMITS__PER_CLIENT__RATE", "1/hour")]);
    let body = json!({"key": {"client_ip": "192.0.2.1"}});
    assert_eq!(check(&process, body.clone()).await["allowed"], true);
    let answer = check(&process, body).await;
    assert_eq!(answer["allowed"], false);
    assert_eq!(answer["retry_after"], 3600);
}

#[tokio::test]
async fn sighup_reloads_the_file_and_keeps_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    let limit = "[[limits]]\nname = \"one\"\nrate = \"2/hour\"\nkey = [\"global\"]\n";
    std::fs::write(&path, limit).unwrap();
    // No polling: only the signal reloads.
    let process = ServeProcess::start(&["--config", path.to_str().unwrap(), "--watch", "0"], &[]);
    assert_eq!(
        check(&process, json!({"limits": ["one"]})).await["allowed"],
        true
    );

    let two =
        format!("{limit}\n[[limits]]\nname = \"two\"\nrate = \"5/hour\"\nkey = [\"global\"]\n");
    std::fs::write(&path, two).unwrap();
    assert_eq!(
        limit_names(&process).await,
        ["one"],
        "no reload without the signal"
    );
    process.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while limit_names(&process).await != ["one", "two"] {
        assert!(Instant::now() < deadline, "SIGHUP did not reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // "one" kept its count across the reload: one unit of two is left.
    assert_eq!(
        check(&process, json!({"limits": ["one"]})).await["allowed"],
        true
    );
    assert_eq!(
        check(&process, json!({"limits": ["one"]})).await["allowed"],
        false
    );
}

#[test]
fn an_invalid_file_stops_it_at_start_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        // A unit that does not exist ("0/minute" is a valid ban now).
        "[[limits]]\nname = \"x\"\nrate = \"1/fortnight\"\nkey = [\"global\"]\n",
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args(["serve", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("error: {}:3:8: limits[0].rate: ", path.display())),
        "{stderr}"
    );
}

#[test]
fn a_redis_store_nobody_answers_stops_it_naming_the_host_not_the_password() {
    // A port that was free a moment ago: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("redis.toml");
    std::fs::write(
        &path,
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://default:S3cretRedisPass@127.0.0.1:{port}\"\n\n\
             [[limits]]\nname = \"x\"\nrate = \"1/second\"\nkey = [\"global\"]\n"
        ),
    )
    .unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    let output = command
        .args(["serve", "--config", path.to_str().unwrap()])
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(
        stderr.contains(&format!(
            "cannot open the Redis store at redis://default:***@127.0.0.1:{port}"
        )),
        "{stderr}"
    );
    for printed in [&stdout, &stderr] {
        assert!(!printed.contains("S3cretRedisPass"), "{printed}");
    }
}

#[tokio::test]
async fn the_grpc_port_answers_envoys_should_rate_limit() {
    use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
    use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        "[[limits]]\nname = \"edge\"\nrate = \"1/hour\"\nkey = [\"descriptor:remote_address\"]\n[limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"remote_address\" }]\n",
    )
    .unwrap();
    let process = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let channel =
        tonic::transport::Channel::from_shared(format!("http://{}", process.grpc.unwrap()))
            .unwrap()
            .connect()
            .await
            .unwrap();
    let mut client = RateLimitServiceClient::new(channel);
    let request = || RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".to_owned(),
                value: "198.51.100.4".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let first = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(first.overall_code, Code::Ok as i32);
    let second = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(second.overall_code, Code::OverLimit as i32);
}
