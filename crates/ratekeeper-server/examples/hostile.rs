//! Hostile connections against a running `ratekeeper serve` (issue 30,
//! "Hostile connections, round two"): three attacks on a connection that
//! is past the accept but not yet useful, and a well-behaved client that
//! measures what a newcomer sees meanwhile. Every mode stops by itself,
//! is bounded in time and connections, and raises its own open-file soft
//! limit to the hard one. Only point it at a server you run yourself.
//!
//! - `zero-window`: N plaintext HTTP/2 connections to the gRPC door that
//!   announce `SETTINGS_INITIAL_WINDOW_SIZE = 0`, never send WINDOW_UPDATE,
//!   answer PINGs, and each send S complete `ShouldRateLimit` requests whose
//!   answers the server can then never send; held `--hold` seconds after
//!   the last one is sent, then closed. With `--read` the same client keeps
//!   normal windows and reads every answer to its trailers (what a
//!   long-lived connection keeps for streams it has finished).
//! - `tls-handshake`: N TCP connections that each send the first 76 bytes
//!   of a 517-byte TLS ClientHello and then nothing, reopened as soon as
//!   the server closes them, for `--seconds`.
//! - `stalled-body`: N plaintext HTTP/2 connections, each with one
//!   `ShouldRateLimit` stream whose gRPC message never finishes arriving
//!   (a new one if the server answers it), reopened when the server closes
//!   them, for `--seconds`.
//! - `probe`: a new connection every `--every` milliseconds (TLS when
//!   `--tls-ca` is given), one `ShouldRateLimit` call on it, each with its
//!   own timeout; prints every call's latency (connect, handshakes and
//!   call) and then count, timeouts, median, p99 and max.
//!
//! The attacks print how many connections the server closed (a GOAWAY, or
//! the socket ending) and, for the floods, after how long. Each mode ends
//! with one `RESULT key=value ...` line for scripts. `scripts/hostile.sh`
//! starts the servers, runs each attack beside a probe and samples the
//! server's RSS; that is the way to run it.
//!
//! The HTTP/2 client is the `h2` crate, driven by hand (hyper's client
//! manages windows and streams for its caller). What h2 does not offer, or
//! does in the way, and how this works round it:
//! - No event for a GOAWAY while streams it spares are still open: h2 keeps
//!   it as the connection's error, which `SendRequest::poll_ready` reports,
//!   so each attacking connection asks every 250 ms.
//! - Dropping a stream's handles resets it (RST_STREAM CANCEL), which frees
//!   the server: every stuck stream's `ResponseFuture` (or, once its head
//!   has come, its `RecvStream`) is kept until the end, and the socket is
//!   closed before they are dropped.
//! - Since h2 0.4.18 a client charges every small DATA frame it buffers
//!   against a budget of half its connection window and, past it, sends
//!   GOAWAY ENHANCE_YOUR_CALM itself: 1,024 answers arriving together
//!   exceed the default, so `--read` raises the budget and the connection
//!   window.
//!
//! ```sh
//! cargo run -p ratekeeper-server --example hostile -- \
//!   zero-window --addr 127.0.0.1:8081 --conns 200 --streams 1024 --hold 45
//! cargo run -p ratekeeper-server --example hostile -- \
//!   probe --addr 127.0.0.1:8081 --every 500 --seconds 45 --timeout 12
//! cargo run -p ratekeeper-server --example hostile -- \
//!   tls-handshake --addr 127.0.0.1:8443 --conns 6000 --seconds 40
//! ```

use std::error::Error;
use std::future::{poll_fn, Future};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use clap::{Parser, Subcommand};
use futures_util::stream::{FuturesUnordered, StreamExt as _};
use h2::client::{ResponseFuture, SendRequest};
use h2::RecvStream;
use prost::Message as _;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};

type BoxError = Box<dyn Error + Send + Sync>;

/// The gRPC method every request calls.
const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// The requests' domain (`scripts/hostile.sh` configures one generous limit
/// on it).
const DOMAIN: &str = "hostile";
/// The requests' descriptor entry key.
const KEY: &str = "user";
/// One attacking connect's limit, after which the attacker tries afresh
/// (a SYN that the server's full accept queue drops is sent again by the
/// kernel after 1 s, 3 s, 7 s...). The probe waits its whole timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an attacking HTTP/2 connection looks for a GOAWAY.
const WATCH_EVERY: Duration = Duration::from_millis(250);
/// The pause after a refused connect, so a server that is down is not
/// spun on.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The command line.
#[derive(Parser, Debug)]
#[command(about = "Hostile connections against ratekeeper's doors (issue 30), and a probe")]
struct Cli {
    /// The attack, or the probe.
    #[command(subcommand)]
    mode: Mode,
    /// Tokio worker threads of this client.
    #[arg(long, global = true, default_value_t = 1)]
    threads: usize,
}

/// What to do.
#[derive(Subcommand, Debug)]
enum Mode {
    /// HTTP/2 connections with a zero stream window, each with many
    /// complete requests whose answers can never be sent.
    ZeroWindow(ZeroWindow),
    /// Connections that each send half a TLS ClientHello, then nothing.
    TlsHandshake(Flood),
    /// HTTP/2 connections each with one request whose body never ends.
    StalledBody(Flood),
    /// A well-behaved client: a new connection and one call every few ms.
    Probe(Probe),
}

/// `zero-window`'s options.
#[derive(clap::Args, Debug)]
struct ZeroWindow {
    /// The plaintext gRPC door, HOST:PORT.
    #[arg(long)]
    addr: String,
    /// Connections (at most 20,000).
    #[arg(long, default_value_t = 200)]
    conns: usize,
    /// Complete requests sent on each connection (at most 65,536; the
    /// server's max_concurrent_streams is 1,024 by default, and a request
    /// past it waits for a stream that never frees).
    #[arg(long, default_value_t = 1024)]
    streams: usize,
    /// Seconds the connections are held once every one has sent its
    /// requests (or the setup timed out); then they are closed.
    #[arg(long, default_value_t = 45)]
    hold: u64,
    /// Normal windows, and read every answer to its trailers, instead of a
    /// zero window.
    #[arg(long)]
    read: bool,
    /// Connections connecting and sending at once.
    #[arg(long, default_value_t = 64)]
    ramp: usize,
    /// Seconds allowed for connecting and sending, all connections together.
    #[arg(long, default_value_t = 120)]
    setup_timeout: u64,
}

/// `tls-handshake`'s and `stalled-body`'s options.
#[derive(clap::Args, Debug)]
struct Flood {
    /// The door, HOST:PORT (the TLS one for `tls-handshake`, the plaintext
    /// gRPC one for `stalled-body`).
    #[arg(long)]
    addr: String,
    /// Connections kept open at once (at most 20,000).
    #[arg(long, default_value_t = 6000)]
    conns: usize,
    /// Seconds the attack lasts.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
}

/// `probe`'s options.
#[derive(clap::Args, Debug)]
struct Probe {
    /// The gRPC door, HOST:PORT.
    #[arg(long)]
    addr: String,
    /// Speak TLS, trusting this PEM CA file; without it, plaintext.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// The server name TLS checks the certificate against.
    #[arg(long, default_value = "localhost")]
    server_name: String,
    /// Milliseconds between two new connections.
    #[arg(long, default_value_t = 500)]
    every: u64,
    /// Seconds during which calls start (SIGTERM or SIGINT ends it sooner,
    /// with its report).
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    /// Seconds one call may take, connect and handshakes included.
    #[arg(long, default_value_t = 12)]
    timeout: u64,
}

impl Mode {
    /// Rejects sizes that would make the run unbounded or absurd.
    fn check(&self) -> Result<(), BoxError> {
        let fits = |value: u64, low: u64, high: u64, name: &str| {
            if (low..=high).contains(&value) {
                Ok(())
            } else {
                Err(BoxError::from(format!(
                    "{name} must be between {low} and {high}"
                )))
            }
        };
        match self {
            Mode::ZeroWindow(args) => {
                fits(args.conns as u64, 1, 20_000, "--conns")?;
                fits(args.streams as u64, 1, 65_536, "--streams")?;
                fits(args.hold, 0, 3_600, "--hold")?;
                fits(args.ramp as u64, 1, 20_000, "--ramp")?;
                fits(args.setup_timeout, 1, 3_600, "--setup-timeout")
            }
            Mode::TlsHandshake(args) | Mode::StalledBody(args) => {
                fits(args.conns as u64, 1, 20_000, "--conns")?;
                fits(args.seconds, 1, 3_600, "--seconds")
            }
            Mode::Probe(args) => {
                fits(args.every, 10, 60_000, "--every")?;
                fits(args.seconds, 1, 3_600, "--seconds")?;
                fits(args.timeout, 1, 120, "--timeout")
            }
        }
    }

    /// The file descriptors this mode may hold at once.
    fn files(&self) -> u64 {
        let sockets = match self {
            Mode::ZeroWindow(args) => args.conns as u64,
            Mode::TlsHandshake(args) | Mode::StalledBody(args) => args.conns as u64,
            // Calls in flight: at most one timeout's worth of starts.
            Mode::Probe(args) => args.timeout * 1_000 / args.every + 1,
        };
        sockets + 64
    }
}

fn main() -> Result<(), BoxError> {
    let cli = Cli::parse();
    cli.mode.check()?;
    if cli.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    raise_open_files(cli.mode.files());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cli.threads)
        .enable_all()
        .build()?
        .block_on(async move {
            match cli.mode {
                Mode::ZeroWindow(args) => zero_window(args).await,
                Mode::TlsHandshake(args) => flood(args, Attack::TlsHandshake).await,
                Mode::StalledBody(args) => flood(args, Attack::StalledBody).await,
                Mode::Probe(args) => probe(args).await,
            }
        })
}

/// Raises the open-file soft limit to the hard one, and says so when that
/// is still below `needed`.
fn raise_open_files(needed: u64) {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < needed => eprintln!(
            "warning: the open-file limit is {limit}, this run may need {needed} (raise the hard limit: ulimit -Hn)"
        ),
        Ok(_) => {}
        Err(error) => eprintln!("warning: cannot raise the open-file limit: {error}"),
    }
}

// ---------------------------------------------------------------------------
// Shared pieces: the request, connecting, how a connection ended.

/// A `ShouldRateLimit` request's message, gRPC length-prefixed (one byte
/// "not compressed", four bytes of length, the protobuf).
fn grpc_frame(value: &str) -> Bytes {
    let message = RateLimitRequest {
        domain: DOMAIN.to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: KEY.to_owned(),
                value: value.to_owned(),
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
    .encode_to_vec();
    let length = u32::try_from(message.len()).expect("a small message");
    let mut frame = BytesMut::with_capacity(5 + message.len());
    frame.extend_from_slice(&[0]);
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(&message);
    frame.freeze()
}

/// The head of a `ShouldRateLimit` call to `authority`.
fn grpc_head(scheme: &str, authority: &str) -> http::Request<()> {
    http::Request::post(format!("{scheme}://{authority}{PATH}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(())
        .expect("a valid request head")
}

/// One TCP connection to `addr`, given up at `deadline`.
async fn connect(addr: &str, deadline: Instant) -> Result<TcpStream, BoxError> {
    let tcp = tokio::time::timeout_at(deadline.into(), TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out")??;
    tcp.set_nodelay(true)?;
    Ok(tcp)
}

/// Sleeps [`RETRY_PAUSE`], or until `deadline` if that is sooner.
async fn pause(deadline: Instant) {
    let until = deadline.min(Instant::now() + RETRY_PAUSE);
    tokio::time::sleep_until(until.into()).await;
}

/// How the server ended a connection, as its client sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    /// A GOAWAY frame (the socket may still be open for the streams it
    /// lets finish).
    GoAway,
    /// The socket ended: FIN, or an orderly end of the HTTP/2 connection.
    Eof,
    /// A reset, or the connection failed with an error.
    Reset,
    /// Not the server: this client's HTTP/2 library gave up the connection
    /// itself (a protocol error it found, or one of its own protections).
    /// Counted apart, never as a close by the server.
    Client,
}

/// How an HTTP/2 connection future's end reads.
fn h2_close(result: &Result<(), h2::Error>) -> Close {
    match result {
        Ok(()) => Close::Eof,
        Err(error) => h2_error_close(error),
    }
}

/// Whose doing an HTTP/2 connection's error is, and how it reads.
fn h2_error_close(error: &h2::Error) -> Close {
    if let Some(io) = error.get_io() {
        return match io.kind() {
            std::io::ErrorKind::UnexpectedEof => Close::Eof,
            _ => Close::Reset,
        };
    }
    match (error.is_remote(), error.is_go_away()) {
        (true, true) => Close::GoAway,
        (true, false) => Close::Reset,
        (false, _) => Close::Client,
    }
}

/// How the connection of `send` has ended, if it has, the socket perhaps
/// still open: a GOAWAY from the server, or this client's own error. h2
/// keeps either as the connection's error, which `poll_ready` reports at
/// once; it has no event for it.
async fn went_away(send: &mut SendRequest<Bytes>) -> Option<Close> {
    poll_fn(|cx| match send.poll_ready(cx) {
        Poll::Ready(Err(error)) => Poll::Ready(Some(h2_error_close(&error))),
        _ => Poll::Ready(None),
    })
    .await
}

/// Connections the server closed, by how, and how long each had lived;
/// and apart, those this client's HTTP/2 library gave up itself.
#[derive(Default)]
struct Closes {
    go_away: u64,
    eof: u64,
    reset: u64,
    lived_ms: Vec<u64>,
    client: u64,
}

impl Closes {
    fn record(&mut self, close: Close, lived: Duration) {
        match close {
            Close::GoAway => self.go_away += 1,
            Close::Eof => self.eof += 1,
            Close::Reset => self.reset += 1,
            Close::Client => {
                self.client += 1;
                return;
            }
        }
        self.lived_ms
            .push(u64::try_from(lived.as_millis()).unwrap_or(u64::MAX));
    }

    fn merge(&mut self, other: Closes) {
        self.go_away += other.go_away;
        self.eof += other.eof;
        self.reset += other.reset;
        self.lived_ms.extend(other.lived_ms);
        self.client += other.client;
    }

    fn total(&self) -> u64 {
        self.go_away + self.eof + self.reset
    }

    /// "N (GOAWAY a, EOF b, reset c), after median X s, max Y s", and the
    /// client's own give-ups if any.
    fn describe(&mut self) -> String {
        self.lived_ms.sort_unstable();
        let mut text = format!(
            "{} (GOAWAY {}, EOF {}, reset {})",
            self.total(),
            self.go_away,
            self.eof,
            self.reset
        );
        if !self.lived_ms.is_empty() {
            text += &format!(
                ", after median {:.2} s, max {:.2} s",
                quantile(&self.lived_ms, 0.5) as f64 / 1e3,
                quantile(&self.lived_ms, 1.0) as f64 / 1e3
            );
        }
        if self.client > 0 {
            text += &format!(
                "; and {} given up by this client's HTTP/2 library itself",
                self.client
            );
        }
        text
    }
}

/// The nearest-rank quantile `q` of sorted `values` (0 when empty).
fn quantile(values: &[u64], q: f64) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let rank = (q * values.len() as f64).ceil() as usize;
    values[rank.clamp(1, values.len()) - 1]
}

// ---------------------------------------------------------------------------
// zero-window (and --read)

/// How one request of `zero-window` ended, as far as this client followed it.
enum StreamEnd {
    /// The answer's head arrived; its body waits on the zero window. The
    /// stream is kept: dropping it would reset it and free the server.
    Head(Box<http::Response<RecvStream>>),
    /// `--read`: the answer was read to its trailers, with this grpc-status.
    Read(bool),
    /// The stream failed: the server reset it, or the connection ended.
    Failed(h2::Error),
}

type StreamFuture = Pin<Box<dyn Future<Output = StreamEnd> + Send>>;

/// The answer to one request, followed as `zero-window` does: its head only,
/// or (`read`) every byte of it, giving back the window as it comes.
fn follow(response: ResponseFuture, read: bool) -> StreamFuture {
    Box::pin(async move {
        let response = match response.await {
            Ok(response) => response,
            Err(error) => return StreamEnd::Failed(error),
        };
        if !read {
            return StreamEnd::Head(Box::new(response));
        }
        let mut status_ok = response.headers().get("grpc-status").map(|s| s == "0");
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(error) => return StreamEnd::Failed(error),
            };
            if let Err(error) = body.flow_control().release_capacity(chunk.len()) {
                return StreamEnd::Failed(error);
            }
        }
        match body.trailers().await {
            Ok(Some(trailers)) => {
                status_ok = status_ok.or(trailers.get("grpc-status").map(|s| s == "0"));
            }
            Ok(None) => {}
            Err(error) => return StreamEnd::Failed(error),
        }
        StreamEnd::Read(status_ok == Some(true))
    })
}

/// What one `zero-window` connection did and saw.
#[derive(Default)]
struct HoldReport {
    connected: bool,
    /// Requests sent complete (headers and body, end of stream).
    sent: u64,
    /// Answers whose head arrived (zero window: their bodies never can).
    heads: u64,
    /// `--read`: answers read to their trailers, and those with grpc-status 0.
    read: u64,
    read_ok: u64,
    /// Streams that failed (reset by the server, or the connection ended),
    /// and the first one's error.
    failed: u64,
    first_failure: Option<String>,
    /// How and when the server closed the connection during the hold.
    closed: Option<(Close, Duration)>,
    /// Why the connection never got to the hold.
    error: Option<String>,
}

/// The connection's state between its setup and its hold.
struct Held {
    send: SendRequest<Bytes>,
    connection: Pin<Box<h2::client::Connection<TcpStream, Bytes>>>,
    streams: FuturesUnordered<StreamFuture>,
    opened: Instant,
}

async fn zero_window(args: ZeroWindow) -> Result<(), BoxError> {
    let args = Arc::new(args);
    println!(
        "zero-window: addr={} conns={} streams={} hold={}s read={} (window {})",
        args.addr,
        args.conns,
        args.streams,
        args.hold,
        args.read,
        if args.read {
            "65,535 per stream, released as read"
        } else {
            "0"
        }
    );
    let started = Instant::now();
    let setup_deadline = started + Duration::from_secs(args.setup_timeout);
    let (ready_tx, mut ready_rx) = mpsc::channel::<()>(args.conns);
    let (stop_tx, stop_rx) = watch::channel(false);
    let ramp = Arc::new(Semaphore::new(args.ramp));
    let tasks: Vec<_> = (0..args.conns)
        .map(|index| {
            let (args, ready, stop, ramp) = (
                args.clone(),
                ready_tx.clone(),
                stop_rx.clone(),
                ramp.clone(),
            );
            tokio::spawn(async move {
                let mut report = HoldReport::default();
                let setup = {
                    let _permit = ramp.acquire_owned().await;
                    tokio::time::timeout_at(
                        setup_deadline.into(),
                        zero_window_setup(&args, index, setup_deadline, &mut report),
                    )
                    .await
                };
                // Told whatever happened, so the hold starts once all are done.
                let _ = ready.try_send(());
                match setup {
                    Ok(Ok(held)) => hold(held, stop, &mut report).await,
                    Ok(Err(error)) => report.error = Some(error.to_string()),
                    Err(_) => report.error = Some("setup timed out".to_owned()),
                }
                report
            })
        })
        .collect();
    drop(ready_tx);
    let mut ready = 0;
    while ready < args.conns {
        match tokio::time::timeout_at(setup_deadline.into(), ready_rx.recv()).await {
            Ok(Some(())) => ready += 1,
            _ => break,
        }
    }
    let setup = started.elapsed();
    println!(
        "  {ready} of {} connections set up in {:.1} s; holding {} s",
        args.conns,
        setup.as_secs_f64(),
        args.hold
    );
    tokio::time::sleep(Duration::from_secs(args.hold)).await;
    let _ = stop_tx.send(true);

    let mut all = HoldReport::default();
    let mut closes = Closes::default();
    let (mut connected, mut errors, mut first_error) = (0u64, 0u64, None);
    for task in tasks {
        let report = task.await?;
        connected += u64::from(report.connected);
        all.sent += report.sent;
        all.heads += report.heads;
        all.read += report.read;
        all.read_ok += report.read_ok;
        all.failed += report.failed;
        if all.first_failure.is_none() {
            all.first_failure = report.first_failure;
        }
        if let Some((close, lived)) = report.closed {
            closes.record(close, lived);
        }
        if let Some(error) = report.error {
            errors += 1;
            first_error.get_or_insert(error);
        }
    }
    println!(
        "  connected {connected}, failed before the hold {errors}{}",
        first_error
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!(
        "  requests sent {}, answer heads {}, answers read {} (grpc-status 0: {}), streams failed {}{}",
        all.sent,
        all.heads,
        all.read,
        all.read_ok,
        all.failed,
        all.first_failure
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!(
        "  connections the server closed during the hold: {}",
        closes.describe()
    );
    println!(
        "RESULT mode=zero-window conns={} streams={} read={} connected={connected} setup_errors={errors} sent={} heads={} read_answers={} failed_streams={} server_closed={} goaway={} setup_s={:.1}",
        args.conns,
        args.streams,
        args.read,
        all.sent,
        all.heads,
        all.read,
        all.failed,
        closes.total(),
        closes.go_away,
        setup.as_secs_f64()
    );
    Ok(())
}

/// Connects, and sends every request of one `zero-window` connection.
async fn zero_window_setup(
    args: &ZeroWindow,
    index: usize,
    deadline: Instant,
    report: &mut HoldReport,
) -> Result<Held, BoxError> {
    let tcp = loop {
        match connect(&args.addr, deadline.min(Instant::now() + CONNECT_TIMEOUT)).await {
            Ok(tcp) => break tcp,
            Err(error) if Instant::now() + RETRY_PAUSE >= deadline => return Err(error),
            Err(_) => pause(deadline).await,
        }
    };
    let opened = Instant::now();
    let mut builder = h2::client::Builder::new();
    if args.read {
        // Every answer arrives at once as one small DATA frame (and its
        // trailers). h2 (since 0.4.18) charges each small DATA frame still
        // buffered against a budget of half the connection window, and past
        // it sends GOAWAY ENHANCE_YOUR_CALM "too_many_data_frames": with the
        // defaults that is about 150 answers, fewer than a connection's
        // streams. A client that reads them all needs room for them all.
        builder
            .initial_connection_window_size(1 << 20)
            .data_frame_budget((args.streams * 512).max(1 << 20));
    } else {
        // SETTINGS_INITIAL_WINDOW_SIZE = 0. The connection's own window
        // stays at the protocol's 65,535 and is never raised: nothing is
        // read, so h2 never sends a WINDOW_UPDATE.
        builder.initial_window_size(0);
    }
    let (send, connection) = builder.handshake::<_, Bytes>(tcp).await?;
    report.connected = true;
    let mut connection = Box::pin(connection);
    let frame = grpc_frame(&format!("zero-window-{index}"));
    let sending = async {
        let mut send = send;
        let streams = FuturesUnordered::new();
        for _ in 0..args.streams {
            // Waits while the server's max_concurrent_streams is reached.
            send = send.ready().await?;
            let (response, mut body) = send.send_request(grpc_head("http", &args.addr), false)?;
            body.send_data(frame.clone(), true)?;
            report.sent += 1;
            streams.push(follow(response, args.read));
        }
        Ok::<_, h2::Error>((send, streams))
    };
    // The connection is driven while sending: it writes the frames and
    // answers the server's SETTINGS and PINGs.
    let (send, streams) = tokio::select! {
        sent = sending => sent?,
        ended = &mut connection => {
            return Err(format!("the server closed the connection while it was sending ({:?})", h2_close(&ended)).into());
        }
    };
    Ok(Held {
        send,
        connection,
        streams,
        opened,
    })
}

/// Holds one `zero-window` connection until `stop`: drives it (PINGs are
/// answered), follows its streams, and records how and when the server
/// closes it. Then closes the socket, before anything can reset a stream.
async fn hold(held: Held, mut stop: watch::Receiver<bool>, report: &mut HoldReport) {
    let Held {
        mut send,
        mut connection,
        mut streams,
        opened,
    } = held;
    let mut kept = Vec::new();
    let mut watch = tokio::time::interval(WATCH_EVERY);
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            ended = &mut connection => {
                // A GOAWAY seen first stays the reason: the socket's end follows it.
                report.closed.get_or_insert((h2_close(&ended), opened.elapsed()));
                // Nothing more can happen on it: count what is left as failed.
                report.failed += streams.len() as u64;
                return;
            }
            Some(end) = streams.next(), if !streams.is_empty() => match end {
                StreamEnd::Head(response) => {
                    report.heads += 1;
                    kept.push(response);
                }
                StreamEnd::Read(ok) => {
                    report.read += 1;
                    report.read_ok += u64::from(ok);
                }
                StreamEnd::Failed(error) => {
                    report.failed += 1;
                    report.first_failure.get_or_insert_with(|| error.to_string());
                }
            },
            _ = watch.tick() => {
                if report.closed.is_none() {
                    if let Some(close) = went_away(&mut send).await {
                        report.closed = Some((close, opened.elapsed()));
                    }
                }
            }
        }
    }
    // The socket first: dropping the streams while it is open would reset
    // each of them, and the attacker just leaves.
    drop(connection);
    drop(streams);
    drop(kept);
}

// ---------------------------------------------------------------------------
// tls-handshake and stalled-body

/// Which flood.
#[derive(Clone, Copy, Debug)]
enum Attack {
    TlsHandshake,
    StalledBody,
}

/// What one flood task saw.
#[derive(Default)]
struct FloodReport {
    opened: u64,
    connect_failures: u64,
    first_error: Option<String>,
    /// `stalled-body`: stalled streams the server answered or reset while
    /// keeping the connection (a new one is opened on it), and after how
    /// many milliseconds each.
    streams_answered: u64,
    answered_ms: Vec<u64>,
    closes: Closes,
    open_at_end: u64,
}

/// The first 76 bytes of a 517-byte TLS ClientHello: a record header
/// announcing 512 bytes of handshake, the ClientHello's header announcing
/// 508, its version, random and session id; then it stops, before the
/// cipher suites.
fn half_client_hello() -> Vec<u8> {
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, // record: handshake, TLS 1.0, 512 bytes
        0x01, 0x00, 0x01, 0xfc, // ClientHello, 508 bytes
        0x03, 0x03, // legacy_version TLS 1.2
    ];
    hello.extend((0..32u8).map(|i| i.wrapping_mul(37) ^ 0x5a)); // random
    hello.push(32); // legacy_session_id
    hello.extend((0..32u8).map(|i| i.wrapping_mul(91) ^ 0xa5));
    hello
}

async fn flood(args: Flood, attack: Attack) -> Result<(), BoxError> {
    let name = match attack {
        Attack::TlsHandshake => "tls-handshake",
        Attack::StalledBody => "stalled-body",
    };
    println!(
        "{name}: addr={} conns={} seconds={}",
        args.addr, args.conns, args.seconds
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let addr: Arc<str> = args.addr.into();
    let tasks: Vec<_> = (0..args.conns)
        .map(|index| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut report = FloodReport::default();
                while Instant::now() < deadline {
                    let limit = deadline.min(Instant::now() + CONNECT_TIMEOUT);
                    let tcp = match connect(&addr, limit).await {
                        Ok(tcp) => tcp,
                        Err(error) => {
                            report.connect_failures += 1;
                            report.first_error.get_or_insert(error.to_string());
                            pause(deadline).await;
                            continue;
                        }
                    };
                    report.opened += 1;
                    let opened = Instant::now();
                    let ended = match attack {
                        Attack::TlsHandshake => {
                            tokio::time::timeout_at(deadline.into(), half_hello(tcp)).await
                        }
                        Attack::StalledBody => {
                            tokio::time::timeout_at(
                                deadline.into(),
                                stalled_body(tcp, &addr, index, &mut report),
                            )
                            .await
                        }
                    };
                    match ended {
                        Ok(Ok(close)) => report.closes.record(close, opened.elapsed()),
                        Ok(Err(error)) => {
                            report.first_error.get_or_insert(error.to_string());
                            pause(deadline).await;
                        }
                        Err(_) => report.open_at_end += 1,
                    }
                }
                report
            })
        })
        .collect();

    let mut all = FloodReport::default();
    for task in tasks {
        let report = task.await?;
        all.opened += report.opened;
        all.connect_failures += report.connect_failures;
        all.streams_answered += report.streams_answered;
        all.answered_ms.extend(report.answered_ms);
        all.open_at_end += report.open_at_end;
        all.closes.merge(report.closes);
        if all.first_error.is_none() {
            all.first_error = report.first_error;
        }
    }
    println!(
        "  opened {} connections in {:.1} s, connects failed {}{}; open at the end {}",
        all.opened,
        started.elapsed().as_secs_f64(),
        all.connect_failures,
        all.first_error
            .as_ref()
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default(),
        all.open_at_end
    );
    if let Attack::StalledBody = attack {
        all.answered_ms.sort_unstable();
        let seconds = |q: f64| quantile(&all.answered_ms, q) as f64 / 1e3;
        println!(
            "  stalled streams the server answered on a connection it kept: {}{}",
            all.streams_answered,
            if all.answered_ms.is_empty() {
                String::new()
            } else {
                format!(
                    ", after median {:.2} s, max {:.2} s",
                    seconds(0.5),
                    seconds(1.0)
                )
            }
        );
    }
    let closed = all.closes.total();
    let (median, max) = {
        let described = all.closes.describe();
        println!("  connections the server closed: {described}");
        (
            quantile(&all.closes.lived_ms, 0.5),
            quantile(&all.closes.lived_ms, 1.0),
        )
    };
    println!(
        "RESULT mode={name} conns={} opened={} connect_failures={} server_closed={closed} goaway={} open_at_end={} streams_answered={} closed_after_median_ms={median} closed_after_max_ms={max}",
        args.conns,
        all.opened,
        all.connect_failures,
        all.closes.go_away,
        all.open_at_end,
        all.streams_answered
    );
    Ok(())
}

/// Sends half a ClientHello and waits for the server to close the socket
/// (reading and dropping whatever it sends first, say an alert).
async fn half_hello(tcp: TcpStream) -> Result<Close, BoxError> {
    let hello = half_client_hello();
    let mut written = 0;
    while written < hello.len() {
        tcp.writable().await?;
        match tcp.try_write(&hello[written..]) {
            Ok(n) => written += n,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Ok(Close::Reset),
        }
    }
    let mut buffer = [0u8; 1024];
    loop {
        tcp.readable().await?;
        match tcp.try_read(&mut buffer) {
            Ok(0) => return Ok(Close::Eof),
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Ok(Close::Reset),
        }
    }
}

/// One `stalled-body` connection: a stream whose request's headers and the
/// first bytes of its gRPC message are sent, never the rest; a new such
/// stream whenever the server answers one; until the server closes the
/// connection (the caller's deadline ends it otherwise).
async fn stalled_body(
    tcp: TcpStream,
    addr: &str,
    index: usize,
    report: &mut FloodReport,
) -> Result<Close, BoxError> {
    let (mut send, connection) = h2::client::handshake(tcp).await?;
    let mut connection = std::pin::pin!(connection);
    // The length prefix of the whole message and 3 of its bytes.
    let part = grpc_frame(&format!("stalled-body-{index}")).slice(..8);
    let mut watch = tokio::time::interval(WATCH_EVERY);
    loop {
        if let Some(close) = went_away(&mut send).await {
            return Ok(close);
        }
        let (response, mut body) = match send.send_request(grpc_head("http", addr), false) {
            Ok(stream) => stream,
            Err(error) => return Ok(h2_error_close(&error)),
        };
        let stalled = Instant::now();
        // Never the end of the stream. (If this fails, the stream is
        // already over: as if answered.)
        if body.send_data(part.clone(), false).is_ok() {
            let mut response = std::pin::pin!(response);
            loop {
                tokio::select! {
                    ended = &mut connection => return Ok(h2_close(&ended)),
                    _ = &mut response => break,
                    _ = watch.tick() => {
                        if let Some(close) = went_away(&mut send).await {
                            return Ok(close);
                        }
                    }
                }
            }
        }
        report.streams_answered += 1;
        let waited = stalled.elapsed().as_millis();
        report
            .answered_ms
            .push(u64::try_from(waited).unwrap_or(u64::MAX));
        drop(body);
        // Not a busy loop if the server answers each stream at once.
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

// ---------------------------------------------------------------------------
// probe

/// How one probe call ended.
enum Outcome {
    Ok,
    TimedOut,
    Failed(String),
}

async fn probe(args: Probe) -> Result<(), BoxError> {
    let tls = args.tls_ca.as_ref().map(connector).transpose()?;
    let timeout = Duration::from_secs(args.timeout);
    println!(
        "probe: addr={} tls={} every={}ms seconds={} timeout={}s",
        args.addr,
        tls.is_some(),
        args.every,
        args.seconds,
        args.timeout
    );
    let args = Arc::new(args);
    let started = Instant::now();
    let end = started + Duration::from_secs(args.seconds);
    let mut ticker = tokio::time::interval(Duration::from_millis(args.every));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut calls = Vec::new();
    let mut stopped = std::pin::pin!(terminated());
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = &mut stopped => {
                println!("  stopped by a signal: no new calls, waiting for those in flight");
                break;
            }
        }
        if Instant::now() >= end {
            break;
        }
        let (args, tls) = (args.clone(), tls.clone());
        let number = calls.len() + 1;
        calls.push(tokio::spawn(async move {
            let at = started.elapsed();
            let sent = Instant::now();
            let outcome = match tokio::time::timeout(timeout, probe_call(&args, tls.as_ref())).await
            {
                Ok(Ok(())) => Outcome::Ok,
                Ok(Err(error)) => Outcome::Failed(error.to_string()),
                Err(_) => Outcome::TimedOut,
            };
            let took = sent.elapsed();
            let ms = took.as_secs_f64() * 1e3;
            match &outcome {
                Outcome::Ok => println!("  call {number} at {:.1} s: {ms:.1} ms", at.as_secs_f64()),
                Outcome::TimedOut => println!(
                    "  call {number} at {:.1} s: TIMED OUT after {ms:.0} ms",
                    at.as_secs_f64()
                ),
                Outcome::Failed(error) => println!(
                    "  call {number} at {:.1} s: FAILED after {ms:.1} ms: {error}",
                    at.as_secs_f64()
                ),
            }
            (outcome, took)
        }));
    }
    let (mut ok, mut timeouts, mut failed) = (0u64, 0u64, 0u64);
    let mut latencies_us = Vec::with_capacity(calls.len());
    for call in calls {
        let (outcome, took) = call.await?;
        match outcome {
            Outcome::Ok => ok += 1,
            Outcome::TimedOut => timeouts += 1,
            Outcome::Failed(_) => failed += 1,
        }
        latencies_us.push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }
    latencies_us.sort_unstable();
    let ms = |q: f64| quantile(&latencies_us, q) as f64 / 1e3;
    let calls = latencies_us.len();
    println!(
        "  {calls} calls: {ok} answered, {timeouts} timed out, {failed} failed; latency (all calls, a timeout at its timeout) median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(0.5),
        ms(0.99),
        ms(1.0)
    );
    println!(
        "RESULT mode=probe calls={calls} ok={ok} timeouts={timeouts} failed={failed} median_ms={:.1} p99_ms={:.1} max_ms={:.1}",
        ms(0.5),
        ms(0.99),
        ms(1.0)
    );
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (never, if neither can be caught): the
/// probe stops starting calls and reports, so a script can end it when the
/// attack it runs beside is over.
async fn terminated() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// One probe call on a new connection: connect, TLS and HTTP/2 handshakes,
/// a `ShouldRateLimit` call read to its trailers, its answer decoded.
async fn probe_call(
    args: &Probe,
    tls: Option<&tokio_rustls::TlsConnector>,
) -> Result<(), BoxError> {
    // No limit of its own: the call's timeout includes the connect, however
    // many times the kernel has to send the SYN again.
    let tcp = TcpStream::connect(&args.addr).await?;
    tcp.set_nodelay(true)?;
    match tls {
        None => call(tcp, "http", &args.addr).await,
        Some(tls) => {
            let name = ServerName::try_from(args.server_name.clone())?;
            let stream = tls.connect(name, tcp).await?;
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err("the server did not agree to h2 in ALPN".into());
            }
            call(stream, "https", &args.addr).await
        }
    }
}

/// One `ShouldRateLimit` call over a new HTTP/2 connection on `io`, as a
/// well-behaved client makes it: normal windows, the answer read whole.
async fn call<IO>(io: IO, scheme: &str, authority: &str) -> Result<(), BoxError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = h2::client::handshake(io).await?;
    let exchange = async {
        let mut send = send.ready().await?;
        let (response, mut body) = send.send_request(grpc_head(scheme, authority), false)?;
        body.send_data(grpc_frame("probe"), true)?;
        let response = response.await?;
        if response.status() != http::StatusCode::OK {
            return Err(format!("HTTP status {}", response.status()).into());
        }
        let head_status = response.headers().get("grpc-status").cloned();
        let mut body = response.into_body();
        let mut message = BytesMut::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            body.flow_control().release_capacity(chunk.len())?;
            message.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await?;
        let status = trailers
            .as_ref()
            .and_then(|t| t.get("grpc-status").cloned())
            .or(head_status);
        if status.as_ref().is_none_or(|s| s != "0") {
            return Err(format!("grpc-status {status:?}").into());
        }
        if message.len() < 5 {
            return Err("no message in the answer".into());
        }
        RateLimitResponse::decode(&message[5..])?;
        Ok::<_, BoxError>(())
    };
    tokio::select! {
        result = exchange => result,
        ended = connection => Err(format!("the connection ended before the answer ({:?})", h2_close(&ended)).into()),
    }
}

/// A TLS client trusting the PEM CA file `ca`, offering h2 only, on the
/// ring provider.
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
