//! The reverse proxy before a real upstream, over loopback: everything
//! passes through, bodies stream both ways, refusals are 429s that never
//! reach the upstream, and an upstream that is down is a 502.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::proxy::{self, ProxyError};
use ratekeeper_server::Config;
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

/// How long any one step may take before the test fails.
const STEP: Duration = Duration::from_secs(10);

/// A body fed chunk by chunk through a channel.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|bytes| Ok(Frame::data(bytes))))
    }
}

/// The byte at `index` of the test pattern.
fn pattern(index: usize) -> u8 {
    ((index * 31 + 7) % 251) as u8
}

/// FNV-1a, to compare large bodies.
fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// What the upstream shares with the test.
#[derive(Clone, Default)]
struct Upstream {
    hits: Arc<AtomicUsize>,
    /// Releases the rest of `/drip`'s body.
    drip: Arc<Notify>,
    /// Told when `/upload-drip` has its first chunk.
    first_chunk: Arc<Mutex<Option<oneshot::Sender<Bytes>>>>,
}

/// Answers with everything it was sent, as JSON.
async fn echo(State(upstream): State<Upstream>, request: Request) -> Response {
    upstream.hits.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = request.into_parts();
    let body = body.collect().await.expect("the request body").to_bytes();
    let headers: Vec<(String, String)> = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect();
    let answer = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    let mut response = (StatusCode::CREATED, axum::Json(answer)).into_response();
    let headers = response.headers_mut();
    headers.append("x-upstream", HeaderValue::from_static("one"));
    headers.append("x-upstream", HeaderValue::from_static("two"));
    headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
    headers.insert("connection", HeaderValue::from_static("x-private"));
    headers.insert("x-private", HeaderValue::from_static("hop"));
    response
}

/// Reads the body as it streams in: its length and hash.
async fn upload(State(upstream): State<Upstream>, request: Request) -> String {
    upstream.hits.fetch_add(1, Ordering::SeqCst);
    let mut body = request.into_body();
    let (mut length, mut hash) = (0usize, FNV_START);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("the request body").into_data() {
            length += data.len();
            hash = fnv(hash, &data);
        }
    }
    format!("{length} {hash:x}")
}

/// `n` bytes of the pattern, streamed in 64 KiB chunks.
async fn download(State(upstream): State<Upstream>, Path(n): Path<usize>) -> Response {
    upstream.hits.fetch_add(1, Ordering::SeqCst);
    let (sender, receiver) = mpsc::channel(2);
    tokio::spawn(async move {
        let mut start = 0;
        while start < n {
            let end = (start + 64 * 1024).min(n);
            let chunk: Vec<u8> = (start..end).map(pattern).collect();
            if sender.send(Bytes::from(chunk)).await.is_err() {
                return;
            }
            start = end;
        }
    });
    Response::new(Body::new(ChannelBody(receiver)))
}

/// Sends `first`, then the rest only once the test says so.
async fn drip(State(upstream): State<Upstream>) -> Response {
    upstream.hits.fetch_add(1, Ordering::SeqCst);
    let (sender, receiver) = mpsc::channel(1);
    tokio::spawn(async move {
        let _ = sender.send(Bytes::from_static(b"first")).await;
        upstream.drip.notified().await;
        let _ = sender.send(Bytes::from_static(b"second")).await;
    });
    Response::new(Body::new(ChannelBody(receiver)))
}

/// Reports the first chunk as soon as it arrives, then reads the rest.
async fn upload_drip(State(upstream): State<Upstream>, request: Request) -> String {
    upstream.hits.fetch_add(1, Ordering::SeqCst);
    let mut body = request.into_body();
    let mut all = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("the request body").into_data() {
            if all.is_empty() {
                if let Some(tell) = upstream.first_chunk.lock().await.take() {
                    let _ = tell.send(data.clone());
                }
            }
            all.extend_from_slice(&data);
        }
    }
    String::from_utf8_lossy(&all).into_owned()
}

async fn start_upstream() -> (SocketAddr, Upstream) {
    let upstream = Upstream::default();
    let app = axum::Router::new()
        .route("/upload", post(upload))
        .route("/upload-drip", post(upload_drip))
        .route("/download/{n}", get(download))
        .route("/drip", get(drip))
        .route("/echo/{*rest}", any(echo))
        .with_state(upstream.clone());
    (common::serve_app(app).await, upstream)
}

/// A proxy before `upstream` deciding by `toml`'s limits on a clock that
/// stands still; its address, and what stops it (with the proxy's result).
struct Proxy {
    addr: SocketAddr,
    engine: Engine,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), ProxyError>>,
}

impl Proxy {
    async fn start(toml: &str, upstream: &str) -> Proxy {
        Proxy::start_with(toml, upstream, &proxy::ProxyOptions::default()).await
    }

    async fn start_with(toml: &str, upstream: &str, options: &proxy::ProxyOptions) -> Proxy {
        let config = Config::from_toml_str(toml, "proxy-test.toml").expect("a valid config");
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
        let engine = Engine::builder(&config)
            .clock(clock)
            .start()
            .await
            .expect("the engine starts");
        let proxy_engine = engine.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let (stop, stopped) = oneshot::channel::<()>();
        let options = options.clone();
        let upstream = upstream.parse().expect("an upstream URI");
        let task = tokio::spawn(async move {
            proxy::serve_proxy_with(engine, listener, upstream, &options, async {
                let _ = stopped.await;
            })
            .await
        });
        Proxy {
            addr,
            engine: proxy_engine,
            stop: Some(stop),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops the proxy and checks it stopped cleanly.
    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(STEP, &mut self.task)
            .await
            .expect("the proxy stops")
            .expect("the proxy task")
            .expect("the proxy served without error");
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(STEP)
        .build()
        .expect("a client")
}

const NO_LIMITS_HERE: &str =
    "[[limits]]\nname = \"elsewhere\"\nrate = \"1/minute\"\nkey = [\"peer\"]\n\
                              [limits.match]\npath_prefix = \"/elsewhere\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_path_query_headers_status_and_body_pass_through() {
    let (upstream_addr, upstream) = start_upstream().await;
    let proxy = Proxy::start(NO_LIMITS_HERE, &format!("http://{upstream_addr}")).await;

    let response = client()
        .patch(proxy.url("/echo/a%20b/c?x=1&y=%2F&x=2"))
        .header("x-custom", "first")
        .header("x-custom-2", "second")
        .header("x-forwarded-for", "203.0.113.7")
        .header("connection", "x-hop")
        .header("x-hop", "only for the next hop")
        .header("proxy-authorization", "Basic c2VjcmV0")
        .header("host", "app.example")
        .body("the request body")
        .send()
        .await
        .expect("the proxy answers");

    assert_eq!(response.status(), 201);
    let headers = response.headers().clone();
    let upstream_values: Vec<&str> = headers
        .get_all("x-upstream")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(upstream_values, ["one", "two"]);
    assert_eq!(headers["content-type"], "application/json");
    for hop in ["keep-alive", "x-private"] {
        assert!(headers.get(hop).is_none(), "{hop} passed back: {headers:?}");
    }
    // No limit applies to this path: no fields.
    assert!(headers.get("ratelimit").is_none());
    assert!(headers.get("ratelimit-policy").is_none());
    // ... and it is counted as such.
    let door = ratekeeper_server::engine::DecisionDoor::Proxy;
    assert_eq!(proxy.engine.unmatched().total(door), 1);
    let sample = proxy.engine.unmatched().sample(door).expect("logged");
    assert_eq!(sample.request, "PATCH /echo/a%20b/c");

    let echo: Value = response.json().await.expect("the echo");
    assert_eq!(echo["method"], "PATCH");
    assert_eq!(echo["path"], "/echo/a%20b/c");
    assert_eq!(echo["query"], "x=1&y=%2F&x=2");
    assert_eq!(echo["body"], "the request body");
    let seen = |name: &str| -> Vec<String> {
        echo["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|pair| pair[0] == name)
            .map(|pair| pair[1].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(seen("x-custom"), ["first"]);
    assert_eq!(seen("x-custom-2"), ["second"]);
    assert_eq!(seen("host"), ["app.example"]);
    // The peer is no trusted proxy: what it said in X-Forwarded-For is
    // replaced by what the proxy saw.
    assert_eq!(seen("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(seen("x-forwarded-proto"), ["http"]);
    assert_eq!(seen("x-forwarded-host"), ["app.example"]);
    assert_eq!(seen("content-length"), ["16"]);
    for hop in ["x-hop", "proxy-authorization"] {
        assert!(seen(hop).is_empty(), "{hop} reached the upstream");
    }
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);

    // Any status passes back as it is.
    let missing = client()
        .get(proxy.url("/not-routed"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(missing.status(), 404);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_mebibytes_go_up_and_come_down_intact() {
    const SIZE: usize = 8 * 1024 * 1024;
    let (upstream_addr, _) = start_upstream().await;
    let proxy = Proxy::start(NO_LIMITS_HERE, &format!("http://{upstream_addr}")).await;
    let client = client();

    let body: Vec<u8> = (0..SIZE).map(pattern).collect();
    let expected = format!("{SIZE} {:x}", fnv(FNV_START, &body));
    let uploaded = client
        .post(proxy.url("/upload"))
        .body(body)
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(uploaded.status(), 200);
    assert_eq!(uploaded.text().await.expect("the answer"), expected);

    let mut downloaded = client
        .get(proxy.url(&format!("/download/{SIZE}")))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(downloaded.status(), 200);
    let mut received = 0usize;
    let mut chunks = 0usize;
    while let Some(chunk) = downloaded.chunk().await.expect("a chunk") {
        for (offset, &byte) in chunk.iter().enumerate() {
            assert_eq!(
                byte,
                pattern(received + offset),
                "byte {}",
                received + offset
            );
        }
        received += chunk.len();
        chunks += 1;
    }
    assert_eq!(received, SIZE);
    assert!(chunks > 1, "the download came in one piece");
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_are_streamed_not_buffered() {
    let (upstream_addr, upstream) = start_upstream().await;
    let proxy = Proxy::start(NO_LIMITS_HERE, &format!("http://{upstream_addr}")).await;

    // Download: the first chunk reaches the client while the upstream
    // still holds back the rest, which a buffering proxy would wait for.
    let mut response = client()
        .get(proxy.url("/drip"))
        .send()
        .await
        .expect("the proxy answers");
    let first = tokio::time::timeout(STEP, response.chunk())
        .await
        .expect("the first chunk arrives before the body ends")
        .expect("a chunk");
    assert_eq!(first.as_deref(), Some(&b"first"[..]));
    upstream.drip.notify_one();
    let rest = tokio::time::timeout(STEP, response.chunk())
        .await
        .expect("the rest arrives")
        .expect("a chunk");
    assert_eq!(rest.as_deref(), Some(&b"second"[..]));

    // Upload: the upstream has the first chunk while the client still
    // holds back the rest.
    let (told, first_chunk) = oneshot::channel();
    *upstream.first_chunk.lock().await = Some(told);
    let (sender, receiver) = mpsc::channel::<Bytes>(1);
    let request = axum::http::Request::post(proxy.url("/upload-drip"))
        .body(ChannelBody(receiver))
        .expect("a request");
    let client = Client::builder(TokioExecutor::new()).build(HttpConnector::new());
    let answer = tokio::spawn(client.request(request));
    sender
        .send(Bytes::from_static(b"first "))
        .await
        .expect("the body is being sent");
    let at_upstream = tokio::time::timeout(STEP, first_chunk)
        .await
        .expect("the upstream has the first chunk before the body ends")
        .expect("the upstream reports it");
    assert_eq!(&at_upstream[..], b"first ");
    sender
        .send(Bytes::from_static(b"second"))
        .await
        .expect("the body is being sent");
    drop(sender);
    let response = tokio::time::timeout(STEP, answer)
        .await
        .expect("the answer comes")
        .expect("the request task")
        .expect("the proxy answers");
    assert_eq!(response.status(), 200);
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    assert_eq!(&body[..], b"first second");
    proxy.stop().await;
}

const PER_CLIENT: &str =
    "[[limits]]\nname = \"per-client\"\nrate = \"3/minute\"\nkey = [\"client_ip\"]\n\
                          [limits.match]\npath_prefix = \"/echo/\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_is_a_429_that_never_reaches_the_upstream() {
    let (upstream_addr, upstream) = start_upstream().await;
    let proxy = Proxy::start(PER_CLIENT, &format!("http://{upstream_addr}")).await;
    let client = client();
    let get = |forwarded_for: Option<&'static str>| {
        let mut request = client.get(proxy.url("/echo/x"));
        if let Some(forwarded_for) = forwarded_for {
            request = request.header("x-forwarded-for", forwarded_for);
        }
        request.send()
    };

    for remaining in [2, 1, 0] {
        let response = get(None).await.expect("the proxy answers");
        assert_eq!(response.status(), 201);
        let headers = response.headers();
        assert_eq!(headers["ratelimit-policy"], "\"per-client\";q=3;w=60");
        let field = headers["ratelimit"].to_str().unwrap();
        assert!(
            field.starts_with(&format!("\"per-client\";r={remaining};t=")),
            "{field}"
        );
        assert!(headers.get("retry-after").is_none());
    }
    let refused = get(None).await.expect("the proxy answers");
    assert_eq!(refused.status(), 429);
    let headers = refused.headers().clone();
    assert_eq!(headers["retry-after"], "20");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["ratelimit-policy"], "\"per-client\";q=3;w=60");
    assert!(headers["ratelimit"]
        .to_str()
        .unwrap()
        .starts_with("\"per-client\";r=0;"));
    assert_eq!(
        refused.text().await.expect("a body"),
        "Too Many Requests: retry in 20 s\n"
    );
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 3);

    // No proxy is trusted: a client naming another in X-Forwarded-For is
    // still itself, and still refused.
    let refused = get(Some("198.51.100.1")).await.expect("the proxy answers");
    assert_eq!(refused.status(), 429);
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 3);

    // Paths the limit does not match pass, without fields.
    let other = client
        .get(proxy.url("/download/10"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(other.status(), 200);
    assert!(other.headers().get("ratelimit").is_none());
    proxy.stop().await;
}

/// The proxy's limits are the tower layer's rules: a limit on some methods
/// counts only those, a shadow limit counts and reports but never refuses,
/// and takes nothing from a request the others refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_limits_and_shadow_limits_in_the_proxy() {
    let toml = "[[limits]]\nname = \"writes\"\nrate = \"1/minute\"\nkey = [\"client_ip\"]\n\
                [limits.match]\nmethods = [\"POST\"]\n\
                [[limits]]\nname = \"trial\"\nrate = \"2/minute\"\nkey = [\"client_ip\"]\n\
                shadow = true\n";
    let (upstream_addr, upstream) = start_upstream().await;
    let proxy = Proxy::start(toml, &format!("http://{upstream_addr}")).await;
    let client = client();
    let send = |method: reqwest::Method| client.request(method, proxy.url("/echo/x")).send();

    let get = send(reqwest::Method::GET).await.expect("the proxy answers");
    assert_eq!(get.status(), 201);
    assert_eq!(get.headers()["ratelimit-policy"], "\"trial\";q=2;w=60");
    let post = send(reqwest::Method::POST)
        .await
        .expect("the proxy answers");
    assert_eq!(post.status(), 201);
    assert_eq!(
        post.headers()["ratelimit-policy"],
        "\"writes\";q=1;w=60, \"trial\";q=2;w=60"
    );
    // The trial is spent: it would refuse, and only reports.
    let over_trial = send(reqwest::Method::GET).await.expect("the proxy answers");
    assert_eq!(over_trial.status(), 201);
    let refused = send(reqwest::Method::POST)
        .await
        .expect("the proxy answers");
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.text().await.expect("a body"),
        "Too Many Requests: retry in 60 s\n"
    );
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 3);
    proxy.stop().await;
}

/// 20 requests from this host, each naming another client in
/// `X-Forwarded-For`, under 5 a minute; how many passed, and the
/// untrusted-header count `/metrics` shows.
async fn twenty_forwarded_clients(trust: &str) -> (usize, String) {
    let (upstream_addr, _upstream) = start_upstream().await;
    let toml = format!(
        "[[limits]]\nname = \"per-client\"\nrate = \"5/minute\"\nkey = [\"client_ip\"]\n{trust}"
    );
    let proxy = Proxy::start(&toml, &format!("http://{upstream_addr}")).await;
    let client = client();
    let mut allowed = 0;
    for n in 0..20 {
        let response = client
            .get(proxy.url("/echo/x"))
            .header("x-forwarded-for", format!("198.51.100.{n}"))
            .send()
            .await
            .expect("the proxy answers");
        if response.status() == 201 {
            allowed += 1;
        }
    }
    let metrics = ratekeeper_server::admin::render_metrics(&proxy.engine, &Default::default())
        .await
        .expect("the metrics");
    let count = metrics
        .lines()
        .find(|line| {
            line.starts_with("ratekeeper_untrusted_forwarding_headers_total{limit=\"per-client\"}")
        })
        .unwrap_or_else(|| panic!("no untrusted count in {metrics}"))
        .rsplit(' ')
        .next()
        .expect("a value")
        .to_owned();
    proxy.stop().await;
    (allowed, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_pick_their_own_key_through_an_untrusted_peer() {
    // The case: 20 distinct X-Forwarded-For values from one peer
    // that is no trusted proxy get 5 in all, not 20 x 5; each is counted.
    assert_eq!(twenty_forwarded_clients("").await, (5, "20".to_owned()));
    assert_eq!(
        twenty_forwarded_clients("trusted_proxies = [\"10.0.0.0/8\"]\n").await,
        (5, "20".to_owned())
    );
    // Trusted, the peer names 20 clients, each with a quota of its own.
    assert_eq!(
        twenty_forwarded_clients("trusted_proxies = [\"127.0.0.1\"]\n").await,
        (20, "0".to_owned())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_is_down_is_a_502() {
    // A port nothing listens on.
    let nowhere = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port");
    let proxy = Proxy::start(NO_LIMITS_HERE, &format!("http://{nowhere}")).await;
    let response = client()
        .post(proxy.url("/anything"))
        .body("lost")
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(response.status(), 502);
    assert_eq!(
        response.text().await.expect("a body"),
        "Bad Gateway: the upstream did not answer\n"
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_does_not_answer_in_time_is_a_504() {
    // An upstream that accepts the request and never starts its response.
    let app = axum::Router::new().route("/hang", get(std::future::pending::<&'static str>));
    let hanging = common::serve_app(app).await;
    let mut options = proxy::ProxyOptions::default();
    options.response_timeout = Duration::from_millis(200);
    let proxy = Proxy::start_with(NO_LIMITS_HERE, &format!("http://{hanging}"), &options).await;
    let started = std::time::Instant::now();
    let response = client()
        .get(proxy.url("/hang"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(response.status(), 504);
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        response.text().await.expect("a body"),
        "Gateway Timeout: the upstream did not answer in time\n"
    );
    proxy.stop().await;
}

/// `max_upstream_requests` at the upstream: the next request is a 503
/// with `Retry-After: 1` that the upstream never sees, counted in the
/// metrics; a place is free again once a response has been sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_past_max_upstream_requests_get_503_and_never_reach_the_upstream() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // An upstream that answers only when the test lets it.
    let arrived = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let held = {
        let (arrived, gate) = (arrived.clone(), gate.clone());
        move || {
            let (arrived, gate) = (arrived.clone(), gate.clone());
            async move {
                arrived.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.expect("the gate").forget();
                "answered"
            }
        }
    };
    let app = axum::Router::new().route("/held", get(held));
    let upstream = common::serve_app(app).await;
    let mut options = proxy::ProxyOptions::default();
    options.max_upstream_requests = 2;
    let proxy = Proxy::start_with(NO_LIMITS_HERE, &format!("http://{upstream}"), &options).await;

    let first: Vec<_> = (0..2)
        .map(|_| tokio::spawn(client().get(proxy.url("/held")).send()))
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while arrived.load(Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the first two never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let refused = client()
        .get(proxy.url("/held"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(
        refused.text().await.expect("a body"),
        "Service Unavailable: too many requests are at the upstream\n"
    );
    assert_eq!(
        arrived.load(Ordering::SeqCst),
        2,
        "the upstream never saw it"
    );
    assert_eq!(proxy.engine.decision_metrics().upstream_overflow(), 1);

    gate.add_permits(3);
    for request in first {
        let response = request.await.expect("the task").expect("an answer");
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.expect("a body"), "answered");
    }
    // The bodies were sent: both places are free again.
    for _ in 0..2 {
        let response = client().get(proxy.url("/held")).send();
        gate.add_permits(1);
        assert_eq!(response.await.expect("an answer").status(), 200);
    }
    assert_eq!(proxy.engine.decision_metrics().upstream_overflow(), 1);
    proxy.stop().await;
}

#[tokio::test]
async fn an_upstream_that_cannot_be_proxied_to_is_refused_at_start() {
    let config = Config::from_toml_str(NO_LIMITS_HERE, "t.toml").expect("a valid config");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
    let engine = Engine::builder(&config)
        .clock(clock)
        .start()
        .await
        .expect("the engine starts");
    let error =
        proxy::router(engine, &"ftp://example.com".parse().unwrap()).expect_err("ftp is not HTTP");
    assert_eq!(
        error.to_string(),
        "invalid upstream \"ftp://example.com/\": the upstream must be an http:// or https:// URL"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_forwarding_headers_reach_the_upstream_extended() {
    let (upstream_addr, _upstream) = start_upstream().await;
    let mut options = proxy::ProxyOptions::default();
    options.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
    let proxy =
        Proxy::start_with(NO_LIMITS_HERE, &format!("http://{upstream_addr}"), &options).await;
    let echo: Value = client()
        .get(proxy.url("/echo/x"))
        .header("x-forwarded-for", "203.0.113.7")
        .header("x-forwarded-proto", "https")
        .header("x-forwarded-host", "shop.example")
        .header("forwarded", "for=203.0.113.7;proto=https")
        .header("host", "internal.example")
        .send()
        .await
        .expect("the proxy answers")
        .json()
        .await
        .expect("the echo");
    let seen = |name: &str| -> Vec<String> {
        echo["headers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|pair| pair[0] == name)
            .map(|pair| pair[1].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(seen("x-forwarded-for"), ["203.0.113.7, 127.0.0.1"]);
    assert_eq!(seen("x-forwarded-proto"), ["https"]);
    assert_eq!(seen("x-forwarded-host"), ["shop.example"]);
    assert_eq!(seen("forwarded"), ["for=203.0.113.7;proto=https"]);
    assert_eq!(seen("host"), ["internal.example"]);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_closed_is_a_503_that_never_reaches_the_upstream() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("counts.db");
    let toml = format!(
        "[store]\nkind = \"sqlite\"\npath = {path:?}\non_failure = \"closed\"\n{PER_CLIENT}",
        path = path.display().to_string()
    );
    let (upstream_addr, upstream) = start_upstream().await;
    let proxy = Proxy::start(&toml, &format!("http://{upstream_addr}")).await;
    let client = client();
    let first = client
        .get(proxy.url("/echo/x"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(first.status(), 201);

    // The store's table goes away under it: every decision fails.
    rusqlite::Connection::open(&path)
        .expect("the store's file")
        .execute_batch("DROP TABLE ratekeeper")
        .expect("the table dropped");
    let refused = client
        .get(proxy.url("/echo/x"))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert_eq!(refused.headers()["cache-control"], "no-store");
    assert!(refused.headers().get("ratelimit").is_none());
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);
    proxy.stop().await;
}

/// `ratekeeper proxy` as a real process, killed when dropped.
struct ProxyProcess {
    child: std::process::Child,
    url: String,
    /// The admin port's URL, from the banner's second line.
    admin: String,
    /// The banner's lines.
    banner: Vec<String>,
}

impl ProxyProcess {
    /// Starts `ratekeeper proxy` with `args` and reads where it listens
    /// from its first line (at most 10 s).
    fn start(args: &[&str]) -> ProxyProcess {
        use std::io::BufRead as _;
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
        for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
            command.env_remove(key);
        }
        let mut child = command
            .arg("proxy")
            .args(args)
            // The admin port on a free port, so that tests run side by side.
            .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("ratekeeper starts");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = std::io::BufReader::new(stdout).lines();
            for _ in 0..2 {
                let line = lines.next().and_then(Result::ok).unwrap_or_default();
                if sender.send(line).is_err() {
                    return;
                }
            }
            // Keep reading, so the process never writes into a closed pipe.
            lines.for_each(drop);
        });
        let mut process = ProxyProcess {
            child,
            url: String::new(),
            admin: String::new(),
            banner: Vec::new(),
        };
        let banner = receiver
            .recv_timeout(STEP)
            .expect("ratekeeper proxy says where it listens");
        let admin = receiver
            .recv_timeout(STEP)
            .expect("ratekeeper proxy says where its admin port listens");
        process.admin = admin
            .strip_prefix("admin ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no admin address in {admin:?}"))
            .to_owned();
        process.banner = vec![banner.clone(), admin];
        // "ratekeeper 0.1.0 proxy http://127.0.0.1:PORT -> http://... (...)"
        process.url = banner
            .split_whitespace()
            .find(|word| word.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("no address in {banner:?}"))
            .to_owned();
        process
    }

    fn signal(&self, name: &str) {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} failed");
    }

    /// Waits at most 10 s for the process to exit.
    fn wait_exit(&mut self) -> std::process::ExitStatus {
        let deadline = std::time::Instant::now() + STEP;
        loop {
            if let Some(status) = self.child.try_wait().expect("the process's status") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ratekeeper proxy did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_command_limits_reloads_on_sighup_and_stops_on_sigterm() {
    let (upstream_addr, upstream) = start_upstream().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    let limit = |rate: &str| {
        format!("[[limits]]\nname = \"everyone\"\nrate = \"{rate}\"\nkey = [\"global\"]\n")
    };
    std::fs::write(&path, limit("2/hour")).expect("the config written");
    let upstream_url = format!("http://{upstream_addr}");
    let mut process = ProxyProcess::start(&[
        "--upstream",
        &upstream_url,
        "--config",
        path.to_str().expect("a UTF-8 path"),
        "--listen",
        "127.0.0.1:0",
        // Only the signal reloads here.
        "--watch",
        "0",
    ]);
    let client = client();
    let get = || client.get(format!("{}/echo/cmd", process.url)).send();
    for _ in 0..2 {
        assert_eq!(get().await.expect("the proxy answers").status(), 201);
    }
    let refused = get().await.expect("the proxy answers");
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused.headers()["ratelimit-policy"],
        "\"everyone\";q=2;w=3600"
    );
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 2);

    std::fs::write(&path, limit("5/hour")).expect("the config rewritten");
    process.signal("HUP");
    let deadline = std::time::Instant::now() + STEP;
    loop {
        let response = get().await.expect("the proxy answers");
        if response.headers()["ratelimit-policy"] == "\"everyone\";q=5;w=3600" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "SIGHUP did not reload"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    process.signal("TERM");
    let status = process.wait_exit();
    assert!(status.success(), "{status:?}");
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_command_reloads_a_changed_file_without_a_signal() {
    let (upstream_addr, _upstream) = start_upstream().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    let limit = |rate: &str| {
        format!("[[limits]]\nname = \"everyone\"\nrate = \"{rate}\"\nkey = [\"global\"]\n")
    };
    std::fs::write(&path, limit("2/hour")).expect("the config written");
    let upstream_url = format!("http://{upstream_addr}");
    let process = ProxyProcess::start(&[
        "--upstream",
        &upstream_url,
        "--config",
        path.to_str().expect("a UTF-8 path"),
        "--listen",
        "127.0.0.1:0",
        "--watch",
        "0.05",
    ]);
    let client = client();
    let policy = || async {
        let response = client
            .get(format!("{}/echo/cmd", process.url))
            .send()
            .await
            .expect("the proxy answers");
        response.headers()["ratelimit-policy"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(policy().await, "\"everyone\";q=2;w=3600");
    std::fs::write(&path, limit("7/hour")).expect("the config rewritten");
    let deadline = std::time::Instant::now() + STEP;
    while policy().await != "\"everyone\";q=7;w=3600" {
        assert!(
            std::time::Instant::now() < deadline,
            "the change was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_command_serves_the_admin_port_but_not_the_decision_doors() {
    let (upstream_addr, upstream) = start_upstream().await;
    let upstream_url = format!("http://{upstream_addr}");
    let process = ProxyProcess::start(&["--upstream", &upstream_url, "--listen", "127.0.0.1:0"]);
    assert_eq!(process.banner.len(), 2, "{:?}", process.banner);
    assert!(
        process.banner[1].starts_with("admin http://127.0.0.1:"),
        "{:?}",
        process.banner
    );
    let client = client();
    let proxied = client
        .get(format!("{}/echo/x", process.url))
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(proxied.status(), 201);
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 1);
    for path in ["/healthz", "/readyz"] {
        let response = client
            .get(format!("{}{path}", process.admin))
            .send()
            .await
            .expect("the admin port answers");
        assert_eq!(response.status(), 200, "{path}");
    }
    let metrics = client
        .get(format!("{}/metrics", process.admin))
        .send()
        .await
        .expect("the admin port answers")
        .text()
        .await
        .expect("the metrics");
    assert!(
        metrics.contains("ratekeeper_connections_accepted_total{door=\"proxy\"} 1"),
        "{metrics}"
    );
    // The decision doors are `serve`'s: no connection metrics of theirs.
    for door in ["http", "grpc"] {
        let line = format!("ratekeeper_connections_accepted_total{{door=\"{door}\"}}");
        assert!(!metrics.contains(&line), "{metrics}");
    }
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_command_in_shadow_mode_counts_but_refuses_nothing() {
    let (upstream_addr, upstream) = start_upstream().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        "[[limits]]\nname = \"everyone\"\nrate = \"1/hour\"\nkey = [\"global\"]\n",
    )
    .expect("the config written");
    let upstream_url = format!("http://{upstream_addr}");
    let process = ProxyProcess::start(&[
        "--upstream",
        &upstream_url,
        "--config",
        path.to_str().expect("a UTF-8 path"),
        "--listen",
        "127.0.0.1:0",
        "--shadow-mode",
    ]);
    let client = client();
    for _ in 0..3 {
        let response = client
            .get(format!("{}/echo/x", process.url))
            .send()
            .await
            .expect("the proxy answers");
        assert_eq!(response.status(), 201);
    }
    assert_eq!(upstream.hits.load(Ordering::SeqCst), 3);
    let metrics = client
        .get(format!("{}/metrics", process.admin))
        .send()
        .await
        .expect("the admin port answers")
        .text()
        .await
        .expect("the metrics");
    assert!(
        metrics.contains("ratekeeper_decisions_total{limit=\"everyone\",decision=\"denied\"} 2"),
        "{metrics}"
    );
}

#[test]
fn the_proxy_command_refuses_an_upstream_it_cannot_proxy_to() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .args([
            "proxy",
            "--upstream",
            "ftp://example.com",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("ratekeeper runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "invalid upstream \"ftp://example.com/\": the upstream must be an http:// or https:// URL"
        ),
        "{stderr}"
    );
}

#[test]
fn the_proxy_command_never_prints_the_upstreams_password() {
    // One the proxy refuses (user information), one that is not a URL.
    for upstream in [
        "http://u:S3cretProxyPass@example.com",
        "http://u:S3cretProxyPass@exa mple",
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
            .args(["proxy", "--upstream", upstream, "--listen", "127.0.0.1:0"])
            .output()
            .expect("ratekeeper runs");
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("http://u:***@exa"), "{stderr}");
        assert!(!stderr.contains("S3cretProxyPass"), "{stderr}");
        assert!(!String::from_utf8_lossy(&output.stdout).contains("S3cretProxyPass"));
    }
}
