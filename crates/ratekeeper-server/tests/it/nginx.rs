//! nginx `auth_request` with a real nginx: ratekeeper's HTTP router and a
//! tiny upstream in this process, nginx in front of both, configured by
//! the shipped `examples/nginx/nginx.conf` with the ports changed (and,
//! in the quick start's test, with the example's own stand-in app).
//!
//! Without an `nginx` binary these tests are skips, shown and counted by
//! `ratekeeper_test_support::skip`, except under `CI=true`, where they
//! fail (`.ci/run` installs nginx).

use crate::common;

use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::{http, Config};
use reqwest::header::HeaderMap;

/// The shipped example, which these tests run.
const EXAMPLE: &str = include_str!("../../../../examples/nginx/nginx.conf");

/// The `nginx` binary, or `None` when it is not installed: then the test
/// is a [`skip`](ratekeeper_test_support::skip), a failure under `CI=true`.
/// (The skip names the test from its thread; `_test` stays so that the
/// tests being written against this signature need no change.)
fn nginx_binary(_test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"].map(PathBuf::from))
        .map(|dir| dir.join("nginx"))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        ratekeeper_test_support::skip::program_missing("nginx", "apt-get install -y nginx");
    }
    found
}

/// A free loopback port (bound, then released for nginx to take).
fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Replaces `from` with `to` in `text`, insisting that it is there: a
/// changed example fails here instead of testing something else.
fn substitute(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the nginx example no longer contains {from:?}"
    );
    text.replace(from, to)
}

/// The example with ratekeeper, the app (`None`: the example's own
/// stand-in) and nginx on the given addresses, the stand-in on
/// `stand_in`, and every file nginx writes inside `dir`.
fn nginx_conf(
    dir: &Path,
    ratekeeper: SocketAddr,
    app: Option<SocketAddr>,
    port: u16,
    stand_in: u16,
) -> String {
    let dir = dir.display();
    let conf = substitute(
        EXAMPLE,
        "server 127.0.0.1:8080;",
        &format!("server {ratekeeper};"),
    );
    let app = app.unwrap_or(SocketAddr::from(([127, 0, 0, 1], stand_in)));
    let conf = substitute(&conf, "server 127.0.0.1:3000;", &format!("server {app};"));
    let conf = substitute(
        &conf,
        "listen 127.0.0.1:3000;",
        &format!("listen 127.0.0.1:{stand_in};"),
    );
    let conf = substitute(&conf, "listen 8000;", &format!("listen 127.0.0.1:{port};"));
    let conf = substitute(
        &conf,
        "http {\n",
        &format!(
            "http {{\n    access_log {dir}/access.log;\n    client_body_temp_path {dir}/client_body;\n    \
             proxy_temp_path {dir}/proxy;\n    fastcgi_temp_path {dir}/fastcgi;\n    \
             uwsgi_temp_path {dir}/uwsgi;\n    scgi_temp_path {dir}/scgi;\n"
        ),
    );
    format!("pid {dir}/nginx.pid;\nerror_log {dir}/error.log info;\n{conf}")
}

/// A running nginx, killed when dropped.
struct Nginx {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx before `ratekeeper` and `app`, and waits until it
    /// accepts connections (at most 10 s).
    fn start(binary: &Path, ratekeeper: SocketAddr, app: SocketAddr) -> Nginx {
        Nginx::start_full(binary, ratekeeper, Some(app), |conf| conf)
    }

    /// [`Nginx::start`] with the example's configuration changed by `edit`.
    fn start_edited(
        binary: &Path,
        ratekeeper: SocketAddr,
        app: SocketAddr,
        edit: impl Fn(String) -> String,
    ) -> Nginx {
        Nginx::start_full(binary, ratekeeper, Some(app), edit)
    }

    /// nginx on the example as shipped, its own stand-in app included,
    /// only the ports changed.
    fn start_as_shipped(binary: &Path, ratekeeper: SocketAddr) -> Nginx {
        Nginx::start_full(binary, ratekeeper, None, |conf| conf)
    }

    /// nginx before `ratekeeper` and `app` (`None`: the example's own
    /// stand-in), its configuration changed by `edit`.
    fn start_full(
        binary: &Path,
        ratekeeper: SocketAddr,
        app: Option<SocketAddr>,
        edit: impl Fn(String) -> String,
    ) -> Nginx {
        // A port taken between `free_port` and nginx's bind is retried.
        let mut last_log = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            // nginx may run its worker as another user when started as root.
            set_mode_755(dir.path());
            let port = free_port();
            let conf_path = dir.path().join("nginx.conf");
            std::fs::write(
                &conf_path,
                edit(nginx_conf(dir.path(), ratekeeper, app, port, free_port())),
            )
            .expect("nginx.conf written");
            let error_log = dir.path().join("error.log");
            let child = Command::new(binary)
                .arg("-c")
                .arg(&conf_path)
                .arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(&error_log)
                .arg("-g")
                .arg("daemon off; master_process off;")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("nginx starts");
            let mut nginx = Nginx { child, port, dir };
            match nginx.wait_listening(Duration::from_secs(10)) {
                Ok(()) => return nginx,
                Err(log) => {
                    let taken = log.contains("Address already in use");
                    last_log = log;
                    drop(nginx);
                    if !taken {
                        break;
                    }
                }
            }
        }
        panic!("nginx did not start:\n{last_log}");
    }

    /// Polls a connection until nginx accepts one; its error log if it
    /// exits or the deadline passes.
    fn wait_listening(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("nginx exited ({status}):\n{}", self.log()));
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "nginx did not listen within {within:?}:\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(unix)]
fn set_mode_755(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .expect("the temporary directory's mode");
}

#[cfg(not(unix))]
fn set_mode_755(_: &Path) {}

/// ratekeeper's HTTP router on a free loopback port, deciding by `toml`'s
/// limits on a clock that stands still.
async fn start_ratekeeper(toml: &str) -> SocketAddr {
    let config = Config::from_toml_str(toml, "nginx-test.toml").expect("a valid config");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock)
        .start()
        .await
        .expect("the engine starts");
    common::serve_app(http::router(engine)).await
}

/// The app behind nginx: answers 200 with what it saw, and counts the
/// requests that reached it.
async fn start_app() -> (SocketAddr, Arc<AtomicUsize>) {
    async fn echo(State(hits): State<Arc<AtomicUsize>>, request: Request) -> impl IntoResponse {
        hits.fetch_add(1, Ordering::SeqCst);
        let header = |name: &str| {
            request
                .headers()
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or("-")
                .to_owned()
        };
        format!(
            "app saw {} {} from {}",
            request.method(),
            request.uri(),
            header("x-real-ip")
        )
    }
    let hits = Arc::new(AtomicUsize::new(0));
    let app = axum::Router::new()
        .fallback(echo)
        .with_state(Arc::clone(&hits));
    (common::serve_app(app).await, hits)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("a client")
}

fn field<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
        .to_str()
        .expect("a text field")
}

/// The example's companion configuration: 3 a minute per client, nginx
/// (on loopback) trusted to name the client.
const PER_CLIENT: &str = include_str!("../../../../examples/nginx/ratekeeper.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_requests_reach_the_app_and_the_next_gets_a_real_429() {
    let Some(binary) = nginx_binary("allowed_requests_reach_the_app_and_the_next_gets_a_real_429")
    else {
        return;
    };
    let ratekeeper = start_ratekeeper(PER_CLIENT).await;
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, ratekeeper, app);
    let client = client();

    for remaining in [2, 1, 0] {
        let response = client
            .get(nginx.url("/hello?x=1"))
            .send()
            .await
            .expect("nginx answers");
        assert_eq!(response.status(), 200, "log:\n{}", nginx.log());
        let headers = response.headers().clone();
        assert_eq!(
            field(&headers, "ratelimit-policy"),
            "\"per-client\";q=3;w=60"
        );
        let ratelimit = field(&headers, "ratelimit");
        assert!(
            ratelimit.starts_with(&format!("\"per-client\";r={remaining};t=")),
            "{ratelimit}"
        );
        assert!(headers.get("retry-after").is_none());
        let body = response.text().await.expect("the app's body");
        assert_eq!(body, "app saw GET /hello?x=1 from 127.0.0.1");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    let refused = client
        .get(nginx.url("/hello?x=1"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(refused.status(), 429, "log:\n{}", nginx.log());
    let headers = refused.headers().clone();
    let retry_after: u64 = field(&headers, "retry-after")
        .parse()
        .expect("whole seconds");
    // 3 a minute: the next unit comes 20 s after the first, on a clock
    // that stands still.
    assert_eq!(retry_after, 20);
    assert_eq!(field(&headers, "cache-control"), "no-store");
    assert_eq!(
        field(&headers, "ratelimit-policy"),
        "\"per-client\";q=3;w=60"
    );
    assert!(field(&headers, "ratelimit").starts_with("\"per-client\";r=0;t="));
    assert_eq!(refused.text().await.expect("a body"), "Too Many Requests\n");
    // The refused request never reached the app.
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_as_shipped_serves_its_own_app_until_the_limit() {
    let Some(binary) =
        nginx_binary("the_quick_start_as_shipped_serves_its_own_app_until_the_limit")
    else {
        return;
    };
    let ratekeeper = start_ratekeeper(PER_CLIENT).await;
    let nginx = Nginx::start_as_shipped(&binary, ratekeeper);
    let client = client();
    for _ in 0..3 {
        let response = client
            .get(nginx.url("/"))
            .send()
            .await
            .expect("nginx answers");
        assert_eq!(response.status(), 200, "log:\n{}", nginx.log());
        assert_eq!(
            response.text().await.expect("a body"),
            "hello from the app behind nginx\n"
        );
    }
    let refused = client
        .get(nginx.url("/"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(refused.status(), 429, "log:\n{}", nginx.log());
    assert_eq!(refused.text().await.expect("a body"), "Too Many Requests\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_named_by_the_proxy_in_front_are_counted_separately() {
    let Some(binary) = nginx_binary("clients_named_by_the_proxy_in_front_are_counted_separately")
    else {
        return;
    };
    let ratekeeper = start_ratekeeper(PER_CLIENT).await;
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, ratekeeper, app);
    let client = client();
    let get = |forwarded_for: &'static str, real_ip: Option<&'static str>| {
        let mut request = client
            .get(nginx.url("/"))
            .header("x-forwarded-for", forwarded_for);
        if let Some(real_ip) = real_ip {
            request = request.header("x-real-ip", real_ip);
        }
        request.send()
    };

    // The example trusts 127.0.0.1 to name the client in X-Forwarded-For:
    // nginx's realip makes it $remote_addr, sent to ratekeeper as X-Real-IP.
    for _ in 0..3 {
        let response = get("198.51.100.1", None).await.expect("nginx answers");
        assert_eq!(response.status(), 200, "log:\n{}", nginx.log());
        assert_eq!(
            response.text().await.expect("a body"),
            "app saw GET / from 198.51.100.1"
        );
    }
    let refused = get("198.51.100.1", None).await.expect("nginx answers");
    assert_eq!(refused.status(), 429);

    // A client's own X-Real-IP changes nothing: nginx overwrites it.
    let spoofed = get("198.51.100.1", Some("192.0.2.99"))
        .await
        .expect("nginx answers");
    assert_eq!(spoofed.status(), 429);

    // Another client has its own quota, whole.
    for remaining in [2, 1, 0] {
        let response = get("203.0.113.5, 198.51.100.2", Some("192.0.2.99"))
            .await
            .expect("nginx answers");
        assert_eq!(response.status(), 200);
        let ratelimit = field(response.headers(), "ratelimit").to_owned();
        assert!(
            ratelimit.starts_with(&format!("\"per-client\";r={remaining};")),
            "{ratelimit}"
        );
        assert_eq!(
            response.text().await.expect("a body"),
            "app saw GET / from 198.51.100.2"
        );
    }
    assert_eq!(
        get("198.51.100.2", None)
            .await
            .expect("nginx answers")
            .status(),
        429
    );
    assert_eq!(hits.load(Ordering::SeqCst), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nginx_that_is_not_trusted_names_no_client() {
    let Some(binary) = nginx_binary("an_nginx_that_is_not_trusted_names_no_client") else {
        return;
    };
    // The companion configuration without its trusted_proxies line: nginx's
    // X-Real-IP and X-Forwarded-For are ignored, every request is nginx's.
    let untrusting = substitute(PER_CLIENT, "trusted_proxies = [\"127.0.0.1\"]", "");
    let ratekeeper = start_ratekeeper(&untrusting).await;
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, ratekeeper, app);
    let client = client();
    for n in 1..=3 {
        let response = client
            .get(nginx.url("/"))
            .header("x-forwarded-for", format!("198.51.100.{n}"))
            .send()
            .await
            .expect("nginx answers");
        assert_eq!(response.status(), 200, "log:\n{}", nginx.log());
    }
    // A fourth client by nginx's account, the same one by ratekeeper's.
    let refused = client
        .get(nginx.url("/"))
        .header("x-forwarded-for", "198.51.100.4")
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(refused.status(), 429);
    assert_eq!(hits.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_see_the_original_method_and_path() {
    let Some(binary) = nginx_binary("limits_see_the_original_method_and_path") else {
        return;
    };
    let toml =
        "[[limits]]\nname = \"login\"\nrate = \"1/minute\"\nkey = [\"client_ip\", \"route\"]\n\
                trusted_proxies = [\"127.0.0.1\"]\n\
                [limits.match]\nmethods = [\"POST\"]\npath_prefix = \"/login\"\n";
    let ratekeeper = start_ratekeeper(toml).await;
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, ratekeeper, app);
    let client = client();

    // GET is not limited: no fields, never refused.
    for _ in 0..3 {
        let response = client
            .get(nginx.url("/login"))
            .send()
            .await
            .expect("nginx answers");
        assert_eq!(response.status(), 200);
        assert!(response.headers().get("ratelimit").is_none());
    }
    let post = |path: &str| client.post(nginx.url(path)).body("user=a").send();
    let first = post("/login?next=/a").await.expect("nginx answers");
    assert_eq!(first.status(), 200, "log:\n{}", nginx.log());
    assert_eq!(
        field(first.headers(), "ratelimit-policy"),
        "\"login\";q=1;w=60"
    );
    assert_eq!(
        first.text().await.expect("a body"),
        "app saw POST /login?next=/a from 127.0.0.1"
    );
    // Another query is the same route: refused.
    assert_eq!(
        post("/login?next=/b")
            .await
            .expect("nginx answers")
            .status(),
        429
    );
    // Another path under the prefix is another route.
    assert_eq!(
        post("/login/sso").await.expect("nginx answers").status(),
        200
    );
    assert_eq!(hits.load(Ordering::SeqCst), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratekeeper_unreachable_is_a_503_not_a_pass() {
    let Some(binary) = nginx_binary("ratekeeper_unreachable_is_a_503_not_a_pass") else {
        return;
    };
    // A port nothing listens on.
    let nowhere = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, nowhere, app);
    let response = client()
        .get(nginx.url("/"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(response.status(), 503, "log:\n{}", nginx.log());
    assert_eq!(field(response.headers(), "retry-after"), "1");
    assert_eq!(field(response.headers(), "cache-control"), "no-store");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_closed_is_a_503_for_the_client() {
    let Some(binary) = nginx_binary("a_store_failing_closed_is_a_503_for_the_client") else {
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("counts.db");
    let toml = format!(
        "[store]\nkind = \"sqlite\"\npath = {path:?}\non_failure = \"closed\"\n{PER_CLIENT}",
        path = path.display().to_string()
    );
    let ratekeeper = start_ratekeeper(&toml).await;
    let (app, hits) = start_app().await;
    let nginx = Nginx::start(&binary, ratekeeper, app);
    let client = client();
    let first = client
        .get(nginx.url("/"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(first.status(), 200, "log:\n{}", nginx.log());

    // The store's table goes away under it: ratekeeper answers 503, which
    // auth_request takes as an error and the example turns into a 503.
    rusqlite::Connection::open(&path)
        .expect("the store's file")
        .execute_batch("DROP TABLE ratekeeper")
        .expect("the table dropped");
    let refused = client
        .get(nginx.url("/"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(refused.status(), 503, "log:\n{}", nginx.log());
    assert_eq!(field(refused.headers(), "retry-after"), "1");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_shows_the_decisions_token_and_without_it_clients_get_401() {
    let Some(binary) =
        nginx_binary("nginx_shows_the_decisions_token_and_without_it_clients_get_401")
    else {
        return;
    };
    const TOKEN: &str = "nginx-token-0123456789abcdef";
    let dir = tempfile::tempdir().expect("a directory");
    let tokens = dir.path().join("decisions");
    std::fs::write(&tokens, format!("{TOKEN}\n")).expect("the token file");
    let toml = format!(
        "{PER_CLIENT}\n[access.decisions]\ntoken_file = {:?}\n",
        tokens.display()
    );
    let ratekeeper = start_ratekeeper(&toml).await;
    let (app, hits) = start_app().await;
    let client = client();

    // The example's line, uncommented, with the token.
    let with_token = Nginx::start_edited(&binary, ratekeeper, app, |conf| {
        substitute(
            &conf,
            "# proxy_set_header X-RateKeeper-Token \"YOUR-DECISIONS-TOKEN\";",
            &format!("proxy_set_header X-RateKeeper-Token \"{TOKEN}\";"),
        )
    });
    let response = client
        .get(with_token.url("/hello"))
        // The client's own credentials travel in the subrequest too.
        .header("authorization", "Bearer the-clients-own")
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(response.status(), 200, "log:\n{}", with_token.log());
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // The example as shipped shows no token: ratekeeper refuses it, and
    // nginx refuses the client with the 401, never reaching the app.
    let without = Nginx::start(&binary, ratekeeper, app);
    let refused = client
        .get(without.url("/hello"))
        .send()
        .await
        .expect("nginx answers");
    assert_eq!(refused.status(), 401, "log:\n{}", without.log());
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
