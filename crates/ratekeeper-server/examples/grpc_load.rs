//! A closed-loop load client for the gRPC door, plaintext or TLS: C tasks
//! each keep one `ShouldRateLimit` request in flight over K HTTP/2
//! connections, for a fixed time after a warm-up, then it reports
//! requests/s, latency and, given `--server-pid`, the server's CPU time
//! per request (utime + stime from `/proc/PID/stat` before and after the
//! measured window, as `rlsload` does).
//!
//! It exists because the outside generator (`rlsload`) speaks no TLS: to
//! compare plaintext with TLS the same client must do both. It uses the
//! crate's generated client over a bare hyper HTTP/2 connection (no
//! tonic `Channel`, so the client costs less CPU per request), with
//! tokio-rustls underneath when `--tls-ca` is given.
//!
//! ```sh
//! cargo run --release -p ratekeeper-server --example grpc_load -- \
//!   --addr 127.0.0.1:8081 --tls-ca ca.pem --concurrency 64 --conns 1 \
//!   --seconds 10 --warmup 2 --server-pid "$(pidof ratekeeper)"
//! ```

use std::error::Error;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};

type BoxError = Box<dyn Error + Send + Sync>;

/// The options.
#[derive(Parser, Debug)]
#[command(about = "Closed-loop load on ratekeeper's gRPC door (ShouldRateLimit), plaintext or TLS")]
struct Args {
    /// The gRPC door, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:8081")]
    addr: String,
    /// Speak TLS, trusting this PEM CA file; without it, plaintext.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The server name TLS checks the certificate against.
    #[arg(long, default_value = "localhost")]
    server_name: String,
    /// Requests in flight: tasks, each with one outstanding request.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// HTTP/2 connections the tasks share, round-robin.
    #[arg(long, default_value_t = 1)]
    conns: usize,
    /// Seconds measured.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2)]
    warmup: u64,
    /// The server's process id, to report its CPU time per request.
    #[arg(long)]
    server_pid: Option<u32>,
    /// The request's domain.
    #[arg(long, default_value = "bench")]
    domain: String,
    /// The descriptor entry's key.
    #[arg(long, default_value = "user")]
    key: String,
    /// Distinct descriptor values, cycled through.
    #[arg(long, default_value_t = 10_000)]
    values: u64,
    /// Tokio worker threads of the client.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// A label echoed in the output.
    #[arg(long, default_value = "")]
    label: String,
}

/// One HTTP/2 connection as the tower service the generated client runs on.
#[derive(Clone)]
struct H2(hyper::client::conn::http2::SendRequest<tonic::body::Body>);

impl tower::Service<http::Request<tonic::body::Body>> for H2 {
    type Response = http::Response<hyper::body::Incoming>;
    type Error = hyper::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.0.send_request(request))
    }
}

async fn handshake<IO>(io: IO) -> Result<H2, BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            eprintln!("connection error: {error}");
        }
    });
    Ok(H2(send))
}

async fn connect(args: &Args, tls: Option<&tokio_rustls::TlsConnector>) -> Result<H2, BoxError> {
    let tcp = tokio::time::timeout(
        Duration::from_secs(3),
        tokio::net::TcpStream::connect(&args.addr),
    )
    .await
    .map_err(|_| "connect timed out")??;
    tcp.set_nodelay(true)?;
    let Some(tls) = tls else {
        return handshake(tcp).await;
    };
    let name = ServerName::try_from(args.server_name.clone())?;
    let stream = tls.connect(name, tcp).await?;
    if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
        return Err("the server did not agree to h2 in ALPN".into());
    }
    handshake(stream).await
}

fn connector(ca: &PathBuf) -> Result<tokio_rustls::TlsConnector, BoxError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// utime + stime of process `pid` in seconds, from `/proc/PID/stat`
/// (in clock ticks of 1/100 s, Linux's fixed USER_HZ).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; count after its ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// What one task saw in the measured window.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    errors: u64,
    first_error: Option<String>,
}

fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    if args.concurrency == 0 || args.conns == 0 || args.values == 0 || args.threads == 0 {
        return Err("--concurrency, --conns, --values and --threads must be at least 1".into());
    }
    if args.seconds == 0 || args.seconds + args.warmup > 120 {
        return Err("--seconds must be at least 1 and --seconds + --warmup at most 120".into());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<(), BoxError> {
    let tls = args.tls_ca.as_ref().map(connector).transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let origin: http::Uri = format!("{scheme}://{}", args.addr).parse()?;
    let mut conns = Vec::with_capacity(args.conns);
    for _ in 0..args.conns {
        conns.push(connect(&args, tls.as_ref()).await?);
    }
    let requests: Arc<Vec<RateLimitRequest>> = Arc::new(
        (0..args.values)
            .map(|i| RateLimitRequest {
                domain: args.domain.clone(),
                descriptors: vec![RateLimitDescriptor {
                    entries: vec![Entry {
                        key: args.key.clone(),
                        value: format!("u{i}"),
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect(),
    );
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_secs(args.warmup);
    let end = start + Duration::from_secs(args.seconds);

    let mut tasks = Vec::with_capacity(args.concurrency);
    for i in 0..args.concurrency {
        let mut client =
            RateLimitServiceClient::with_origin(conns[i % conns.len()].clone(), origin.clone());
        let requests = requests.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let n = requests.len() as u64;
            loop {
                let sent = Instant::now();
                if sent >= end {
                    break;
                }
                let index = (next.fetch_add(1, Ordering::Relaxed) % n) as usize;
                let request = requests[index].clone();
                let result =
                    tokio::time::timeout(Duration::from_secs(5), client.should_rate_limit(request))
                        .await;
                let done = Instant::now();
                if done < start || done >= end {
                    continue;
                }
                match result {
                    Ok(Ok(_)) => {
                        let us = done.duration_since(sent).as_micros();
                        tally
                            .latencies_us
                            .push(u32::try_from(us).unwrap_or(u32::MAX));
                    }
                    Ok(Err(status)) => {
                        tally.errors += 1;
                        tally.first_error.get_or_insert_with(|| status.to_string());
                    }
                    Err(_) => {
                        tally.errors += 1;
                        tally
                            .first_error
                            .get_or_insert_with(|| "timed out after 5 s".to_owned());
                    }
                }
            }
            tally
        }));
    }

    let pid = args.server_pid.map(|pid| pid.to_string());
    tokio::time::sleep_until(start.into()).await;
    let (client0, server0) = (cpu_seconds("self"), pid.as_deref().and_then(cpu_seconds));
    tokio::time::sleep_until(end.into()).await;
    let (client1, server1) = (cpu_seconds("self"), pid.as_deref().and_then(cpu_seconds));

    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await?;
        all.latencies_us.extend(tally.latencies_us);
        all.errors += tally.errors;
        if all.first_error.is_none() {
            all.first_error = tally.first_error;
        }
    }
    all.latencies_us.sort_unstable();
    let done = all.latencies_us.len() as f64;
    let rps = done / args.seconds as f64;
    let quantile = |q: f64| {
        let last = all.latencies_us.len().saturating_sub(1);
        all.latencies_us
            .get((last as f64 * q) as usize)
            .copied()
            .unwrap_or(0)
    };
    let per_request = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if done > 0.0 => format!("{:.1}", (b - a) * 1e6 / done),
        _ => "n/a".to_owned(),
    };
    println!(
        "grpc_load label={} addr={} tls={} concurrency={} conns={} seconds={} warmup={}",
        args.label,
        args.addr,
        tls.is_some(),
        args.concurrency,
        args.conns,
        args.seconds,
        args.warmup
    );
    println!(
        "  requests/s: {rps:.0}   latency us: p50={} p99={} max={}   errors={}{}",
        quantile(0.5),
        quantile(0.99),
        all.latencies_us.last().copied().unwrap_or(0),
        all.errors,
        all.first_error
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!(
        "  cpu us/request: server={} client={}",
        per_request(server0, server1),
        per_request(client0, client1)
    );
    if all.errors > 0 || done == 0.0 {
        return Err("some requests failed".into());
    }
    Ok(())
}
