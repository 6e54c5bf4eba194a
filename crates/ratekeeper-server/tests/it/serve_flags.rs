//! `ratekeeper serve` and `proxy` as real processes: the listen flags and
//! their precedence, a taken address named by its setting and flag, a file
//! without limits, relative paths read from the file's folder.

use crate::common;

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::ServeProcess;
use serde_json::{json, Value};

/// A `ratekeeper ARGS` command in `cwd` with only the `RATEKEEPER_*`
/// variables of `env`, its stdout and stderr piped.
fn command(cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.args(args).current_dir(cwd);
    for (key, _) in std::env::vars()
        .filter(|(key, _)| key.starts_with("RATEKEEPER_") || key.starts_with("OTEL_"))
    {
        command.env_remove(key);
    }
    command
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// A loopback address some socket of this test holds, listening.
fn taken() -> (TcpListener, String) {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap().to_string();
    (socket, addr)
}

/// What a process that must stop at its start wrote on stderr, and its
/// exit code; one still running after a minute has failed the test.
fn stops(mut command: Command) -> (Option<i32>, String) {
    let child = command.spawn().expect("the binary runs");
    let (done, waited) = std::sync::mpsc::channel();
    let id = child.id();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    let Ok(output) = waited.recv_timeout(Duration::from_secs(60)) else {
        let _ = Command::new("kill").arg(id.to_string()).status();
        panic!("still running after a minute");
    };
    let output = output.unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn allowed(http: SocketAddr, token: Option<&str>) -> Value {
    let mut request = reqwest::Client::new()
        .post(format!("http://{http}/v1/check"))
        .json(&json!({"key": {"client_ip": "192.0.2.1"}}));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn listen_flags_win_over_the_environment_which_wins_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (_http, http) = taken();
    let (_admin, admin) = taken();
    std::fs::write(
        dir.path().join("rk.toml"),
        format!(
            "[listen]\nadmin = \"{admin}\"\n\n\
             [[limits]]\nname = \"all\"\nrate = \"10/s\"\nkey = [\"global\"]\n"
        ),
    )
    .unwrap();
    // The environment's http address is taken, the file's admin address
    // too: the flag overrides the one, the environment the other.
    let mut command = command(
        dir.path(),
        &[
            "serve",
            "--config",
            "rk.toml",
            "--http",
            "127.0.0.1:0",
            "--grpc",
            "off",
        ],
        &[
            ("RATEKEEPER_LISTEN__HTTP", &http),
            ("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0"),
            ("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0"),
        ],
    );
    command.stderr(Stdio::inherit());
    let process = ServeProcess::from_command(command);
    assert_ne!(process.http.to_string(), http);
    assert_eq!(process.grpc, None, "{:?}", process.banner);
    assert!(!process.banner.iter().any(|l| l.starts_with("grpc ")));
    assert_ne!(process.admin.unwrap().to_string(), admin);
    assert_eq!(allowed(process.http, None).await["allowed"], true);
}

#[test]
fn a_taken_address_names_its_setting_and_flag_on_every_door() {
    let dir = tempfile::tempdir().unwrap();
    let (_socket, addr) = taken();
    let free = "127.0.0.1:0";
    for door in ["http", "grpc", "admin"] {
        let flag = format!("--{door}");
        let mut args = vec!["serve"];
        for other in ["--http", "--grpc", "--admin"] {
            args.extend([other, if other == flag { &addr } else { free }]);
        }
        let (code, stderr) = stops(command(dir.path(), &args, &[]));
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: cannot listen on {addr} for [listen] {door} (--{door}): address already in use"
            )),
            "{stderr}"
        );
    }
    let proxy = |listen: &str, admin: &str| {
        let args = [
            "proxy",
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            listen,
            "--admin",
            admin,
        ];
        stops(command(dir.path(), &args, &[]))
    };
    let (code, stderr) = proxy(&addr, free);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: cannot listen on {addr} for the proxy (--listen): address already in use"
        )),
        "{stderr}"
    );
    let (code, stderr) = proxy(free, &addr);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: cannot listen on {addr} for [listen] admin (--admin): address already in use"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_file_with_only_listen_starts_with_a_warning_and_allows_everything() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rk.toml"),
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    let process =
        ServeProcess::from_command(command(dir.path(), &["serve", "--config", "rk.toml"], &[]));
    assert!(
        process.banner[0].contains("0 limits"),
        "{:?}",
        process.banner
    );
    process.wait_stderr("no limit applies anywhere");
    assert_eq!(allowed(process.http, None).await["allowed"], true);
}

#[tokio::test]
async fn relative_paths_in_the_file_are_read_from_its_folder() {
    let config_dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let at = config_dir.path();
    let token = "a-token-of-at-least-16-characters";
    std::fs::write(at.join("tokens"), format!("{token}\n")).unwrap();
    std::fs::write(
        at.join("rk.toml"),
        "[store]\nkind = \"sqlite\"\npath = \"counts.db\"\n\n\
         [access.decisions]\ntoken_file = \"tokens\"\n\n\
         [[limits]]\nname = \"one\"\nrate = \"1/hour\"\nkey = [\"client_ip\"]\n",
    )
    .unwrap();
    let config = at.join("rk.toml");
    let process = ServeProcess::from_command(command(
        elsewhere.path(),
        &["serve", "--config", config.to_str().unwrap()],
        &[
            ("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0"),
            ("RATEKEEPER_LISTEN__GRPC", "off"),
            ("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0"),
        ],
    ));
    // The token from the file beside the configuration is accepted.
    assert_eq!(allowed(process.http, Some(token)).await["allowed"], true);
    assert_eq!(allowed(process.http, Some(token)).await["allowed"], false);
    assert!(at.join("counts.db").is_file());
    assert!(!elsewhere.path().join("counts.db").exists());
}
