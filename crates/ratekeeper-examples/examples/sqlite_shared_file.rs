//! Limits shared by several processes through one SQLite file, with pure
//! policies, an in-memory table and handler guards (reproduces seed 001, a
//! package with a table, a SQLite store and handler guards).
//!
//! Its README shows two transcripts; this example prints both, line for
//! line, from ratekeeper:
//!
//! 1. a token bucket of 2 per second (burst 2) deciding requests at 0, 10,
//!    20 and 600 ms, as pure state transitions;
//! 2. a guard named `per-ip` (2 per minute, keyed by the client found in
//!    `X-Forwarded-For` behind private-network proxies, in an in-memory
//!    table of 4,096 keys) wrapping a handler, called three times: the
//!    status, the draft `RateLimit` field and `Retry-After`. Here the guard
//!    is ratekeeper-tower's layer.
//!
//! Then it shows the SQLite store shared by processes: it starts two copies
//! of itself on one database file, each trying to take 40 units of a limit
//! of 50 for one key, and prints how many each admitted (50 in all).
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example sqlite_shared_file
//! ```

use futures_executor::block_on;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use ratekeeper::{
    clock::ManualClock, policy::Algorithm, Decision, FixedWindow, Limit, MemoryStore, RetryAfter,
    Store, Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;
use ratekeeper_tower::client::{private_networks, ClientIp};
use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer};
use tower::{service_fn, Layer, Service, ServiceExt};

/// Anything that can go wrong here.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;

/// How the README shows a decision.
fn show(decision: &Decision) -> String {
    match decision.retry_after() {
        _ if decision.is_allowed() => format!("allowed, {} left", decision.remaining()),
        RetryAfter::After(wait) => format!("denied, retry in {} ms", wait.as_millis()),
        RetryAfter::Never => "denied, never possible".to_owned(),
    }
}

/// The first transcript: 2 per second, requests at 0, 10, 20 and 600 ms.
pub(crate) fn policy_transcript() -> Result<Vec<String>, Error> {
    let policy = TokenBucket::per_second(2)?;
    let mut state = policy.fresh();
    let mut lines = Vec::new();
    for t in [0, 10, 20, 600] {
        let (decision, next) = policy.decide(&state, Timestamp::from_millis(t), 1);
        state = next;
        lines.push(format!("t={t}ms: {}", show(&decision)));
    }
    Ok(lines)
}

/// The second transcript: a guarded handler called three times by a client
/// behind a proxy, at the time `clock` reads.
pub(crate) async fn guard_transcript(clock: ManualClock) -> Result<Vec<String>, Error> {
    let per_ip = Limit::new("per-ip", TokenBucket::per_minute(2)?)?;
    let client = Key::client_ip(ClientIp::XForwardedFor {
        trusted: private_networks(),
    });
    let guard = RateLimitLayer::builder(
        MemoryStore::builder()
            .max_keys(4_096)
            .clock(clock)
            .background_sweep(false)
            .build()
            .expect("a valid store"),
    )
    .limit(per_ip, client)
    .build()?;
    let api = service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
    });
    let mut service = guard.layer(api);
    let mut lines = Vec::new();
    for _ in 0..3 {
        let mut request = Request::new(());
        request.headers_mut().insert(
            "x-forwarded-for",
            HeaderValue::from_static("198.51.100.4, 10.0.0.3"),
        );
        // The proxy in front of us, on the loopback.
        let proxy: SocketAddr = ([127, 0, 0, 1], 40_000).into();
        request.extensions_mut().insert(PeerAddr(proxy));
        let response = service.ready().await?.call(request).await?;
        let field = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        let line = format!(
            "{} {} {}",
            response.status().as_u16(),
            field("ratelimit"),
            field("retry-after")
        );
        lines.push(line.trim_end().to_owned());
    }
    Ok(lines)
}

/// The limit the processes share: 50 per hour for one key, a fixed window.
pub(crate) fn shared_limit() -> Result<Limit, Error> {
    Ok(Limit::new(
        "per-user",
        FixedWindow::new(50, Duration::from_secs(3_600))?,
    )?)
}

/// One process's part: opens the SQLite store at `path`, on a clock that
/// reads `at` (every process reads the same time, so the test does not
/// depend on when the processes run), and takes up to `attempts` units for
/// one key, one at a time. Returns how many were admitted.
pub(crate) fn take_from_sqlite(path: &Path, at: Timestamp, attempts: u64) -> Result<u64, Error> {
    let store = SqliteStore::builder(path)
        .busy_timeout(Duration::from_secs(10))
        .clock(ManualClock::new(at))
        .open()?;
    let limit = shared_limit()?;
    let mut admitted = 0;
    for _ in 0..attempts {
        if block_on(store.check(&limit, b"alice", 1))?.is_allowed() {
            admitted += 1;
        }
    }
    Ok(admitted)
}

/// Starts `processes` copies of the program `exe` (with `args` before the
/// worker's own), each running [`take_from_sqlite`] on `path`, and returns
/// what each admitted. A worker prints `admitted N` on its standard output.
pub(crate) fn run_processes(
    exe: &Path,
    args: &[&str],
    processes: usize,
    path: &Path,
    at: Timestamp,
    attempts: u64,
) -> Result<Vec<u64>, Error> {
    let children = (0..processes)
        .map(|_| {
            Command::new(exe)
                .args(args)
                .env(WORKER_ENV, worker_spec(path, at, attempts))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut admitted = Vec::new();
    for child in children {
        let output = child.wait_with_output()?;
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        let stdout = String::from_utf8_lossy(&output.stdout);
        // The count may follow other output on its line (a test harness's).
        let count: String = stdout
            .split_once("admitted ")
            .map(|(_, rest)| rest.chars().take_while(char::is_ascii_digit).collect())
            .ok_or_else(|| format!("a worker printed no count: {stdout:?}"))?;
        admitted.push(count.parse()?);
    }
    Ok(admitted)
}

/// The environment variable that makes a process a worker:
/// `PATH|UNIX_NANOS|ATTEMPTS`.
pub(crate) const WORKER_ENV: &str = "SEED001_SQLITE_WORKER";

fn worker_spec(path: &Path, at: Timestamp, attempts: u64) -> String {
    format!("{}|{}|{attempts}", path.display(), at.as_nanos())
}

/// If this process was started as a worker, does the work and prints the
/// count: `Some(result)`; otherwise `None`.
pub(crate) fn run_worker_if_asked() -> Option<Result<(), Error>> {
    let spec = std::env::var(WORKER_ENV).ok()?;
    Some((|| {
        let mut parts = spec.rsplitn(3, '|');
        let attempts: u64 = parts.next().ok_or("no attempts")?.parse()?;
        let nanos: u64 = parts.next().ok_or("no time")?.parse()?;
        let path = parts.next().ok_or("no path")?;
        let admitted = take_from_sqlite(Path::new(path), Timestamp::from_nanos(nanos), attempts)?;
        println!("admitted {admitted}");
        Ok(())
    })())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    if let Some(result) = run_worker_if_asked() {
        return result;
    }
    println!("$ decisions of a bucket of 2 per second");
    for line in policy_transcript()? {
        println!("{line}");
    }
    println!("$ a guarded handler, 2 per minute per client");
    for line in guard_transcript(ManualClock::new(Timestamp::from_secs(1_000))).await? {
        println!("{line}");
    }

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("limits.db");
    let exe = std::env::current_exe()?;
    let at = Timestamp::from_secs(1_800_000_000);
    let counts = run_processes(&exe, &[], 2, &path, at, 40)?;
    println!(
        "$ two processes on one SQLite file, a limit of 50, 40 attempts each\nadmitted {:?}: {} in all",
        counts,
        counts.iter().sum::<u64>()
    );
    Ok(())
}
