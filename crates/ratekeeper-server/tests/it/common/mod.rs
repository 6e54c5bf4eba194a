//! Shared by the service's tests: a service started in-process on free
//! loopback ports with a manual clock, and a JSON client.

#![allow(dead_code, unreachable_pub)]

pub mod upstream;
pub mod yaml;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::serve::Service;
use ratekeeper_server::Config;
use serde_json::Value;

/// `[listen]` on free loopback ports, to put before a test's limits.
pub const LISTEN_ANY: &str =
    "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n";

/// A service on `toml` (its `[listen]` should be [`LISTEN_ANY`]) whose
/// in-memory store runs on a manual clock.
pub struct TestService {
    pub service: Service,
    pub clock: Arc<ManualClock>,
    /// The statistics' wall clock, when the test set one
    /// ([`TestService::start_with_wall_clock`]); the system's otherwise.
    pub wall_clock: Option<Arc<ManualClock>>,
    pub client: reqwest::Client,
}

impl TestService {
    pub async fn start(toml: &str) -> TestService {
        Self::start_with(toml, None, None).await
    }

    /// With a configuration file at `path` (whose contents should be
    /// `toml`), checked for changes every `watch`.
    pub async fn start_with(
        toml: &str,
        path: Option<std::path::PathBuf>,
        watch: Option<Duration>,
    ) -> TestService {
        Self::start_full(toml, path, watch, None).await
    }

    /// With the statistics' calendar windows on a manual wall clock
    /// starting at `wall` (Unix time).
    pub async fn start_with_wall_clock(toml: &str, wall: Timestamp) -> TestService {
        Self::start_full(toml, None, None, Some(Arc::new(ManualClock::new(wall)))).await
    }

    async fn start_full(
        toml: &str,
        path: Option<std::path::PathBuf>,
        watch: Option<Duration>,
        wall_clock: Option<Arc<ManualClock>>,
    ) -> TestService {
        let config = Config::from_toml_str(toml, "test.toml").expect("a valid test config");
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let mut builder = Service::builder(config)
            .clock(clock.clone())
            .watch_interval(watch);
        if let Some(path) = path {
            builder = builder.config_file(path);
        }
        if let Some(wall_clock) = &wall_clock {
            builder = builder.wall_clock(wall_clock.clone());
        }
        let service = builder.start().await.expect("the service starts");
        TestService {
            service,
            clock,
            wall_clock,
            client: reqwest::Client::new(),
        }
    }

    pub fn http(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.service.addrs().http.expect("http is on")
        )
    }

    pub fn admin(&self, path: &str) -> String {
        format!(
            "http://{}{path}",
            self.service.addrs().admin.expect("admin is on")
        )
    }

    /// GETs `url` (from [`http`](Self::http) or [`admin`](Self::admin)); its
    /// JSON answer.
    pub async fn get_json(&self, url: String) -> Value {
        self.client
            .get(url)
            .send()
            .await
            .expect("the request is answered")
            .json()
            .await
            .expect("a JSON answer")
    }

    /// POSTs `body` to `path`; the status, headers and JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, Value) {
        let response = self
            .client
            .post(self.http(path))
            .json(&body)
            .send()
            .await
            .expect("the request is answered");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let json = response.json().await.unwrap_or(Value::Null);
        (status, headers, json)
    }

    pub async fn stop(self) {
        self.service.shutdown();
        self.service.wait().await.expect("a clean shutdown");
    }
}

/// A `ratekeeper serve` process on free loopback ports, its environment
/// cleared of `RATEKEEPER_*` and `OTEL_*` but for what the test sets; killed when
/// dropped.
pub struct ServeProcess {
    pub child: std::process::Child,
    pub http: std::net::SocketAddr,
    pub admin: Option<std::net::SocketAddr>,
    pub grpc: Option<std::net::SocketAddr>,
    /// The lines it printed before the addresses were known.
    pub banner: Vec<String>,
    /// What it wrote to stderr so far, and a signal for each new piece.
    stderr: Arc<(std::sync::Mutex<String>, std::sync::Condvar)>,
}

impl ServeProcess {
    /// `ratekeeper serve ARGS` with `env`; the listen addresses default to
    /// port 0 unless `env` sets them.
    pub fn start(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        Self::start_under(&[], args, env)
    }

    /// [`ServeProcess::start`] run by `wrapper`, a command line the
    /// binary's path and arguments follow (such as `["taskset", "-c",
    /// "0"]`); empty, the binary itself.
    pub fn start_under(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        Self::from_command(Self::command(wrapper, args, env))
    }

    /// [`ServeProcess::start`], its stderr (the logs) kept for
    /// [`ServeProcess::wait_stderr`].
    pub fn start_logged(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
        let mut command = Self::command(&[], args, env);
        command.stderr(std::process::Stdio::piped());
        Self::from_command(command)
    }

    /// The command [`ServeProcess::start_under`] runs.
    fn command(wrapper: &[&str], args: &[&str], env: &[(&str, &str)]) -> std::process::Command {
        let binary = env!("CARGO_BIN_EXE_ratekeeper");
        let mut command = match wrapper {
            [] => std::process::Command::new(binary),
            [program, rest @ ..] => {
                let mut command = std::process::Command::new(program);
                command.args(rest).arg(binary);
                command
            }
        };
        command.arg("serve").args(args);
        // Nor a developer's OTEL_* (trace export) settings.
        for (key, _) in std::env::vars()
            .filter(|(key, _)| key.starts_with("RATEKEEPER_") || key.starts_with("OTEL_"))
        {
            command.env_remove(key);
        }
        command
            .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
            .env("RATEKEEPER_LISTEN__GRPC", "127.0.0.1:0")
            .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::piped());
        command
    }

    /// Runs `command`, which must start `ratekeeper serve` with its stdout
    /// piped (and may pipe its stderr, kept for [`ServeProcess::stderr`]),
    /// and reads the addresses it prints.
    pub fn from_command(mut command: std::process::Command) -> ServeProcess {
        use std::io::{BufRead, BufReader, Read};
        let mut child = command.spawn().expect("the binary runs");
        let stderr = Arc::new((
            std::sync::Mutex::new(String::new()),
            std::sync::Condvar::new(),
        ));
        if let Some(mut pipe) = child.stderr.take() {
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let (text, grew) = &*stderr;
                    text.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                    grew.notify_all();
                }
            });
        }
        let stdout = child.stdout.take().expect("piped");
        let mut lines = BufReader::new(stdout).lines();
        let (mut http, mut admin, mut grpc, mut banner) = (None, None, None, Vec::new());
        while let Some(Ok(line)) = lines.next() {
            let addr = |rest: &str| rest.split_whitespace().next().and_then(|a| a.parse().ok());
            // A TLS door says https:// (and TLS after its address).
            let read = line.replacen("https://", "http://", 1);
            if let Some(rest) = read.strip_prefix("http  http://") {
                http = addr(rest);
            }
            if let Some(rest) = read.strip_prefix("grpc  ") {
                grpc = addr(rest);
            }
            if let Some(rest) = read.strip_prefix("admin http://") {
                admin = addr(rest);
            }
            let done = line.starts_with("admin ");
            banner.push(line);
            if done {
                break;
            }
        }
        // Keep reading, so the process never writes into a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let http = http.unwrap_or_else(|| panic!("no http address in {banner:?}"));
        ServeProcess {
            child,
            http,
            admin,
            grpc,
            banner,
            stderr,
        }
    }

    /// What the process wrote to its stderr so far, if it was piped.
    pub fn stderr(&self) -> String {
        self.stderr.0.lock().unwrap().clone()
    }

    /// Waits until its stderr holds `text` (the thread reading the pipe
    /// signals each piece it adds), for at most a minute.
    pub fn wait_stderr(&self, text: &str) {
        let (written, grew) = &*self.stderr;
        let (written, timeout) = grew
            .wait_timeout_while(
                written.lock().unwrap(),
                Duration::from_secs(60),
                |written| !written.contains(text),
            )
            .unwrap();
        assert!(!timeout.timed_out(), "no {text:?} in {written}");
    }

    /// Sends `signal` (`TERM`, `HUP`...) with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// Waits for the process to exit, for at most `within`.
    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "still running after {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `app` on a free loopback port, with the peer address known.
pub async fn serve_app(app: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
        )
        .await
    });
    addr
}

/// The reverse proxy on `toml`'s limits, before `upstream`, on a free
/// loopback port, its engine's store on a manual clock: its address, its
/// engine, and the sender that stops it (dropped: it stops too).
pub async fn start_proxy(
    toml: &str,
    upstream: std::net::SocketAddr,
) -> (
    std::net::SocketAddr,
    ratekeeper_server::engine::Engine,
    tokio::sync::oneshot::Sender<()>,
) {
    let config = Config::from_toml_str(toml, "proxy-test.toml").expect("a valid config");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = ratekeeper_server::engine::Engine::builder(&config)
        .clock(clock)
        .start()
        .await
        .expect("the engine starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let upstream = format!("http://{upstream}").parse().expect("a URI");
    let serving = engine.clone();
    tokio::spawn(async move {
        let options = ratekeeper_server::proxy::ProxyOptions::default();
        ratekeeper_server::proxy::serve_proxy_with(serving, listener, upstream, &options, async {
            let _ = stopped.await;
        })
        .await
    });
    (addr, engine, stop)
}

/// A client of Envoy's rate limit service at `addr` (plain gRPC), with
/// generous timeouts for a loaded machine.
pub async fn rls_client(
    addr: std::net::SocketAddr,
) -> ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient<
    tonic::transport::Channel,
> {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("a valid URI")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
        .expect("the gRPC door answers");
    ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient::new(channel)
}

/// `engine`'s Envoy service on a free loopback port, and a client of it;
/// the service stops when the sender is dropped.
pub async fn serve_rls(
    engine: ratekeeper_server::engine::Engine,
) -> (
    ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >,
    tokio::sync::oneshot::Sender<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let addr = listener.local_addr().expect("a bound address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        ratekeeper_server::envoy::EnvoyService::new(engine)
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await;
    });
    (rls_client(addr).await, stop)
}

/// An Envoy descriptor of `(key, value)` entries.
pub fn descriptor(pairs: &[(&str, &str)]) -> ratekeeper_server::envoy::proto::RateLimitDescriptor {
    use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
    ratekeeper_server::envoy::proto::RateLimitDescriptor {
        entries: pairs
            .iter()
            .map(|&(key, value)| Entry {
                key: key.to_owned(),
                value: value.to_owned(),
            })
            .collect(),
        ..Default::default()
    }
}

/// The value of the `/metrics` sample named exactly `series` (name and
/// labels, as printed), if the text has it.
pub fn sample(metrics: &str, series: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// `service`'s `/metrics`, as text.
pub async fn metrics(service: &TestService) -> String {
    service
        .client
        .get(service.admin("/metrics"))
        .send()
        .await
        .expect("the admin port answers")
        .text()
        .await
        .expect("metrics as text")
}

/// Polls `service`'s `/metrics` until the sample `series` satisfies `ok`,
/// for at most 30 s (a bound for a hang, not a timing); the text then.
pub async fn wait_for_metric(
    service: &TestService,
    series: &str,
    ok: impl Fn(u64) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = metrics(service).await;
        if sample(&metrics, series).is_some_and(&ok) {
            return metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{series} never came: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs the `ratekeeper` binary with `args` to its end, with only the
/// `RATEKEEPER_*` variables of `env` (none leak in from the machine), and
/// `stdin` on its standard input.
pub fn run_ratekeeper(args: &[&str], env: &[(&str, &str)], stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.args(args);
    for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
        command.env_remove(key);
    }
    command
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("the binary runs");
    let mut pipe = child.stdin.take().expect("piped");
    pipe.write_all(stdin.as_bytes()).expect("stdin takes it");
    drop(pipe);
    child.wait_with_output().expect("it exits")
}

/// An engine on `toml`, its in-memory store on a manual clock at 1,000 s,
/// and the clock.
pub async fn engine_at(toml: &str) -> (ratekeeper_server::engine::Engine, Arc<ManualClock>) {
    let config = Config::from_toml_str(toml, "test.toml").expect("a valid config");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = ratekeeper_server::engine::Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .expect("the engine starts");
    (engine, clock)
}
