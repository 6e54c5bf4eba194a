//! Decisions per second and latency percentiles of the running service,
//! over HTTP (`POST /v1/check`) and gRPC (Envoy's `ShouldRateLimit`), with
//! 1, 16 and 64 requests in flight, on the in-memory store and on Redis.
//!
//! ```text
//! cargo bench -p ratekeeper-server --bench service
//! RK_BENCH_SECS=5 cargo bench -p ratekeeper-server --bench service
//! ```
//!
//! The service is the release `ratekeeper` binary in its own process; the
//! load generator is this program (tokio, reqwest with keep-alive for HTTP,
//! one tonic channel multiplexing every call for gRPC), on the same
//! machine. Not criterion: criterion times one routine at a time, and this
//! needs throughput and tail latency under concurrency. Each cell runs for
//! `RK_BENCH_SECS` (3 by default) after a 0.5 s warm-up. Redis runs need
//! `redis-server` (started here on a free port); without it they are
//! skipped with a message.

use ratekeeper_test_support::redis as harness;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};

const KEYS: usize = 10_000;

fn config(store: &str) -> String {
    // A generous per-client limit: most decisions are allowed and written,
    // the expensive path.
    format!(
        "{store}\n[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"off\"\n\n\
[[limits]]\nname = \"per-client\"\nrate = \"1000000/minute\"\npolicy = \"gcra\"\nkey = [\"client_ip\"]\n\n\
[[limits]]\nname = \"edge\"\nrate = \"1000000/minute\"\npolicy = \"gcra\"\nkey = [\"descriptor:remote_address\"]\n\
[limits.match]\ndomain = \"bench\"\ndescriptors = [{{ key = \"remote_address\" }}]\n"
    )
}

struct Server {
    child: Child,
    http: SocketAddr,
    grpc: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start(store: &str) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bench.toml");
        std::fs::write(&path, config(store)).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
            .args(["serve", "--watch", "0", "--config", path.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .expect("the ratekeeper binary runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (mut http, mut grpc) = (None, None);
        while http.is_none() || grpc.is_none() {
            let line = lines
                .next()
                .expect("the service prints its addresses")
                .unwrap();
            let addr = |rest: &str| rest.split_whitespace().next().unwrap().parse().ok();
            if let Some(rest) = line.strip_prefix("http  http://") {
                http = addr(rest);
            }
            if let Some(rest) = line.strip_prefix("grpc  ") {
                grpc = addr(rest);
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            http: http.unwrap(),
            grpc: grpc.unwrap(),
            _dir: dir,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one cell measured.
struct Cell {
    per_second: f64,
    p50: Duration,
    p99: Duration,
    errors: u64,
}

/// Runs `in_flight` workers calling `call(worker, i)` for `secs` after a
/// warm-up; each call returns whether it succeeded.
async fn drive<F, Fut>(in_flight: usize, secs: f64, call: F) -> Cell
where
    F: Fn(usize, usize) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let recording = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for worker in 0..in_flight {
        let (call, recording, stop) = (call.clone(), recording.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(1 << 16);
            let mut errors = 0u64;
            let mut i = worker;
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                let ok = call(worker, i).await;
                if recording.load(Ordering::Relaxed) {
                    latencies.push(start.elapsed());
                    errors += u64::from(!ok);
                }
                i += in_flight;
            }
            (latencies, errors)
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    recording.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    recording.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (latencies, e) = worker.await.unwrap();
        all.extend(latencies);
        errors += e;
    }
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Cell {
        per_second: all.len() as f64 / elapsed.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
        errors,
    }
}

fn ip(i: usize) -> String {
    let k = i % KEYS;
    format!("10.{}.{}.{}", k >> 16, (k >> 8) & 255, k & 255)
}

async fn http_cell(server: &Server, in_flight: usize, secs: f64) -> Cell {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(in_flight)
        .build()
        .unwrap();
    let url = Arc::new(format!("http://{}/v1/check", server.http));
    drive(in_flight, secs, move |_, i| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let body = format!(
                r#"{{"limits":["per-client"],"key":{{"client_ip":"{}"}}}}"#,
                ip(i)
            );
            match client
                .post(url.as_str())
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
            {
                Ok(response) => response.status().is_success() && response.bytes().await.is_ok(),
                Err(_) => false,
            }
        }
    })
    .await
}

async fn grpc_cell(server: &Server, in_flight: usize, secs: f64) -> Cell {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let client = RateLimitServiceClient::new(channel);
    drive(in_flight, secs, move |_, i| {
        let mut client = client.clone();
        async move {
            let request = RateLimitRequest {
                domain: "bench".to_owned(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: "remote_address".to_owned(),
                        value: ip(i),
                    }],
                    ..RateLimitDescriptor::default()
                }],
                hits_addend: 0,
            };
            client.should_rate_limit(request).await.is_ok()
        }
    })
    .await
}

fn micros(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument picks rows.
    let filter: Option<String> = std::env::args().skip(1).find(|a| !a.starts_with("--"));
    let secs: f64 = std::env::var("RK_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let redis = harness::RedisServer::start();
    let mut stores = vec![(
        "memory",
        "[store]\nkind = \"memory\"\nmax_keys = 100000".to_owned(),
    )];
    match &redis {
        Some(redis) => stores.push((
            "redis",
            format!(
                "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 1000",
                redis.url()
            ),
        )),
        None => eprintln!("redis-server is missing: the Redis rows are skipped"),
    }
    println!("| door | store | in flight | decisions/s | p50 | p99 | errors |");
    println!("|---|---|---|---|---|---|---|");
    for (store_name, store) in &stores {
        let server = Server::start(store);
        for door in ["http", "grpc"] {
            for in_flight in [1, 16, 64] {
                let name = format!("{door}/{store_name}/{in_flight}");
                if filter.as_deref().is_some_and(|f| !name.contains(f)) {
                    continue;
                }
                let cell = runtime.block_on(async {
                    match door {
                        "http" => http_cell(&server, in_flight, secs).await,
                        _ => grpc_cell(&server, in_flight, secs).await,
                    }
                });
                println!(
                    "| {door} | {store_name} | {in_flight} | {:.0} | {} | {} | {} |",
                    cell.per_second,
                    micros(cell.p50),
                    micros(cell.p99),
                    cell.errors
                );
            }
        }
    }
}
