//! The service on Redis over TLS: `[store.tls]` checked when the file is
//! (a file that is missing or not PEM, a table without a `rediss://` URL),
//! `ratekeeper serve` deciding over a TLS-only redis-server that requires
//! client certificates, and a CA that did not sign the server failing at
//! start with the reason.

use ratekeeper_test_support::redis as harness;
use ratekeeper_test_support::redis_tls as tls;

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ServeProcess, TestService, LISTEN_ANY};
use ratekeeper_server::{Config, ConfigError};
use serde_json::json;
use tls::{TestCerts, TlsRedisCluster, TlsRedisServer};

/// A configuration of a redis store at `url` with `tls` as the
/// `[store.tls]` table's body (none when empty) and one limit of 5 an hour.
fn config(url: &str, tls: &str) -> String {
    let timeout = harness::UNHURRIED.as_millis();
    let tls = if tls.is_empty() {
        String::new()
    } else {
        format!("\n[store.tls]\n{tls}")
    };
    format!(
        "[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = {timeout}\n{tls}\n\
         [[limits]]\nname = \"five\"\nrate = \"5/hour\"\npolicy = \"fixed_window\"\nkey = [\"global\"]\n"
    )
}

/// `ca = ..., cert = ..., key = ...` naming `certs`' files, with `ca` the
/// file named so.
fn tls_table(certs: &TestCerts, ca: &str) -> String {
    let path = |name: &str| toml_path(&certs.path(name));
    format!(
        "ca = {}\ncert = {}\nkey = {}\n",
        path(ca),
        path("client.pem"),
        path("client.key")
    )
}

/// `path` as a TOML string.
fn toml_path(path: &Path) -> String {
    format!("{:?}", path.to_str().expect("a UTF-8 path"))
}

fn invalid(text: &str) -> ConfigError {
    Config::from_toml_str(text, "test.toml").expect_err("the configuration is refused")
}

/// A `ratekeeper` process's result: status, stdout, stderr.
fn ratekeeper(args: &[&str]) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    let output = command
        .args(args)
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .output()
        .expect("the binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn serve_decides_exactly_over_tls_with_a_client_certificate() {
    let Some(redis) = TlsRedisServer::start() else {
        return;
    };
    let path = redis.certs().dir().join("ratekeeper.toml");
    let text = config(&redis.url(), &tls_table(redis.certs(), "ca.pem"));
    std::fs::write(&path, &text).unwrap();

    let (ok, stdout, stderr) = ratekeeper(&["check", "--config", path.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let ca = redis.certs().path("ca.pem");
    let client = redis.certs().path("client.pem");
    assert!(
        stdout.contains(&format!("store: redis {} (prefix", redis.url()))
            && stdout.contains(&format!(
                "tls (ca {}, client cert {})",
                ca.display(),
                client.display()
            )),
        "{stdout}"
    );

    let serve = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let client = reqwest::Client::new();
    let mut allowed = 0;
    for _ in 0..8 {
        let response = client
            .post(format!("http://{}/v1/check", serve.http))
            .json(&json!({"limits": ["five"]}))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let answer: serde_json::Value = response.json().await.unwrap();
        match (status, answer["allowed"].as_bool()) {
            (200, Some(true)) => allowed += 1,
            (200, Some(false)) => {}
            other => panic!("unexpected answer {other:?}: {answer}"),
        }
    }
    assert_eq!(allowed, 5);
}

#[tokio::test]
async fn the_service_decides_on_a_tls_cluster() {
    let Some(cluster) = TlsRedisCluster::start() else {
        return;
    };
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("{url:?}"))
        .collect();
    let text = format!(
        "{LISTEN_ANY}\n[store]\nkind = \"redis-cluster\"\nurls = [{}]\ntimeout_ms = {}\n\n[store.tls]\n{}\n\
         [[limits]]\nname = \"five\"\nrate = \"5/hour\"\npolicy = \"fixed_window\"\nkey = [\"header:x-user\"]\n",
        urls.join(", "),
        harness::UNHURRIED.as_millis(),
        tls_table(cluster.certs(), "ca.pem"),
    );
    let service = TestService::start(&text).await;
    for user in ["ann", "bob", "cy"] {
        let mut allowed = 0;
        for _ in 0..8 {
            let (status, _, answer) = service
                .post(
                    "/v1/check",
                    json!({"limits": ["five"], "key": {"header:x-user": user}}),
                )
                .await;
            assert_eq!(status, 200, "{answer}");
            if answer["allowed"] == json!(true) {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 5, "{user}");
    }
    service.stop().await;
}

#[test]
fn a_ca_that_did_not_sign_the_server_fails_at_start_with_the_reason() {
    let Some(redis) = TlsRedisServer::start() else {
        return;
    };
    let path = redis.certs().dir().join("wrong-ca.toml");
    let url = redis.url().replace("rediss://", "rediss://default:S3cret@");
    std::fs::write(
        &path,
        config(&url, &tls_table(redis.certs(), "other-ca.pem")),
    )
    .unwrap();
    let (ok, stdout, stderr) = ratekeeper(&["serve", "--config", path.to_str().unwrap()]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(&format!(
            "cannot open the Redis store at rediss://default:***@127.0.0.1:{}",
            redis.port()
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains("invalid peer certificate: UnknownIssuer"),
        "{stderr}"
    );
    assert!(!stderr.contains("S3cret") && !stdout.contains("S3cret"));
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_client_without_a_certificate_fails_at_start() {
    let Some(redis) = TlsRedisServer::start() else {
        return;
    };
    let path = redis.certs().dir().join("no-client-cert.toml");
    let ca = toml_path(&redis.certs().path("ca.pem"));
    std::fs::write(&path, config(&redis.url(), &format!("ca = {ca}\n"))).unwrap();
    let (ok, stdout, stderr) = ratekeeper(&["serve", "--config", path.to_str().unwrap()]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains(&format!("cannot open the Redis store at {}", redis.url())),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn a_tls_table_needs_rediss_urls() {
    let certs = TestCerts::new();
    let table = tls_table(&certs, "ca.pem");
    let error = invalid(&config("redis://u:pw@127.0.0.1:6379", &table));
    assert_eq!(error.field(), Some("store.url"));
    let text = error.to_string();
    assert!(
        text.starts_with("test.toml:3:7: store.url: redis://u:***@127.0.0.1:6379 is not a rediss:// url, but store.tls (at test.toml:6:1) asks for TLS"),
        "{text}"
    );

    let cluster = format!(
        "[store]\nkind = \"redis-cluster\"\nurls = [\"rediss://10.0.0.1:6379\", \"redis://10.0.0.2:6379\"]\n\n[store.tls]\n{table}\n\
         [[limits]]\nname = \"x\"\nrate = \"1/s\"\nkey = [\"global\"]\n"
    );
    let error = invalid(&cluster);
    assert_eq!(error.field(), Some("store.urls[1]"));
    assert!(error.to_string().starts_with("test.toml:3:35: "), "{error}");

    let memory = format!(
        "[store]\nkind = \"memory\"\n\n[store.tls]\n{table}\n[[limits]]\nname = \"x\"\nrate = \"1/s\"\nkey = [\"global\"]\n"
    );
    let error = invalid(&memory);
    assert_eq!(error.field(), Some("store.tls"));
    assert!(
        error
            .to_string()
            .contains("tls applies only to the redis stores, not to a memory store"),
        "{error}"
    );

    // Every rediss:// URL of a cluster takes the table.
    let cluster = cluster.replace("redis://10.0.0.2", "rediss://10.0.0.2");
    let config = Config::from_toml_str(&cluster, "test.toml").unwrap();
    let tls = config.store.tls.expect("the tls settings");
    assert_eq!(tls.ca, Some(certs.path("ca.pem")));
    assert_eq!(
        tls.client,
        Some((certs.path("client.pem"), certs.path("client.key")))
    );
    assert!(tls.settings.has_client_cert());
}

#[test]
fn tls_files_are_read_and_parsed_when_the_file_is_checked() {
    let certs = TestCerts::new();
    let url = "rediss://127.0.0.1:6380";
    let missing = certs.path("missing.pem");
    let error = invalid(&config(url, &format!("ca = {}\n", toml_path(&missing))));
    assert_eq!(error.field(), Some("store.tls.ca"));
    let text = error.to_string();
    assert!(
        text.starts_with(&format!(
            "test.toml:7:6: store.tls.ca: cannot read {}: No such file or directory",
            missing.display()
        )),
        "{text}"
    );

    let junk = certs.path("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let error = invalid(&config(url, &format!("ca = {}\n", toml_path(&junk))));
    assert!(
        error.to_string().ends_with(&format!(
            "store.tls.ca: {}: the CA bundle holds no PEM certificate",
            junk.display()
        )),
        "{error}"
    );

    // The server's key does not belong to the client's certificate.
    let mismatched = format!(
        "cert = {}\nkey = {}\n",
        toml_path(&certs.path("client.pem")),
        toml_path(&certs.path("server.key"))
    );
    let error = invalid(&config(url, &mismatched));
    assert_eq!(error.field(), Some("store.tls.key"));
    assert!(
        error
            .to_string()
            .contains("the client certificate and key cannot be used"),
        "{error}"
    );

    let alone = format!("cert = {}\n", toml_path(&certs.path("client.pem")));
    let error = invalid(&config(url, &alone));
    assert_eq!(error.field(), Some("store.tls.cert"));
    assert!(error.to_string().contains("add store.tls.key"), "{error}");

    let error = invalid(&config(url, "ca = \"/dev/zero\"\n"));
    assert!(
        error
            .to_string()
            .ends_with("store.tls.ca: /dev/zero is not a regular file"),
        "{error}"
    );
    let error = invalid(&config(url, &format!("ca = {}\n", toml_path(certs.dir()))));
    assert!(
        error.to_string().contains("is not a regular file"),
        "{error}"
    );

    let fifo = certs.path("fifo.pem");
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let error = invalid(&config(url, &format!("ca = {}\n", toml_path(&fifo))));
    assert!(
        error.to_string().contains("is not a regular file"),
        "{error}"
    );

    let huge = certs.path("huge.pem");
    std::fs::write(&huge, vec![b'a'; (4 << 20) + 1]).unwrap();
    let error = invalid(&config(url, &format!("ca = {}\n", toml_path(&huge))));
    assert!(
        error.to_string().contains("is larger than 4 MiB"),
        "{error}"
    );

    let error = invalid(&config(url, "ca = \"\"\n"));
    assert!(
        error.to_string().contains("the path must not be empty"),
        "{error}"
    );

    let error = invalid(&config(url, "cafile = \"x\"\n"));
    assert!(
        error.to_string().contains("unknown field `cafile`"),
        "{error}"
    );

    // An empty table is the system's roots, as rediss:// without one.
    let config_text = config(url, "# system roots\n");
    let tls = Config::from_toml_str(&config_text, "test.toml")
        .unwrap()
        .store
        .tls
        .expect("the table");
    assert_eq!((tls.ca, tls.client), (None, None));
}

#[test]
fn check_names_a_missing_tls_file_and_its_place() {
    let certs = TestCerts::new();
    let missing = certs.path("gone.pem");
    let path = certs.dir().join("ratekeeper.toml");
    std::fs::write(
        &path,
        config(
            "rediss://127.0.0.1:6380",
            &format!("ca = {}\n", toml_path(&missing)),
        ),
    )
    .unwrap();
    let (ok, _, stderr) = ratekeeper(&["check", "--config", path.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        stderr.contains(&format!(
            "{}:7:6: store.tls.ca: cannot read {}",
            path.display(),
            missing.display()
        )),
        "{stderr}"
    );
}

#[test]
fn the_environment_can_name_the_tls_files() {
    let certs = TestCerts::new();
    let text = config("rediss://127.0.0.1:6380", "");
    let vars = [
        ("RATEKEEPER_STORE__TLS__CA", certs.path("ca.pem")),
        ("RATEKEEPER_STORE__TLS__CERT", certs.path("client.pem")),
        ("RATEKEEPER_STORE__TLS__KEY", certs.path("client.key")),
    ]
    .map(|(name, path)| (name, path.to_str().unwrap().to_owned()));
    let config = Config::from_toml_str_with_env(&text, "test.toml", vars).unwrap();
    let tls = config.store.tls.expect("the tls settings");
    assert_eq!(tls.ca, Some(certs.path("ca.pem")));
    assert_eq!(
        tls.client,
        Some((certs.path("client.pem"), certs.path("client.key")))
    );

    let error = Config::from_toml_str_with_env(
        &text,
        "test.toml",
        [("RATEKEEPER_STORE__TLS__CA", "/nonexistent/ca.pem")],
    )
    .unwrap_err();
    assert!(
        error.to_string().starts_with(
            "env RATEKEEPER_STORE__TLS__CA: store.tls.ca: cannot read /nonexistent/ca.pem"
        ),
        "{error}"
    );
}
