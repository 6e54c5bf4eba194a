//! Rate-limit middleware for an axum app (reproduces seed 000, a web
//! framework's middleware).
//!
//! - Every route: a fixed window of 100 requests per 60 s per client
//!   address (the socket peer).
//! - `POST /` also: a token bucket of 10, refilled 1 per second, per
//!   `x-api-key` header.
//! - Each limiter tracks at most `max_keys` keys; a new key past the cap is
//!   *saturated*: nothing is counted and the layer answers 429 with a
//!   `Retry-After` of the next sweep, while known keys keep being limited.
//! - With `--redis URL`, the per-address window is kept in Redis instead,
//!   so every node behind a load balancer shares it: a "custom store" made
//!   of nothing but an atomic increment per window ([`RedisCounter`], a
//!   [`WindowCounter`] of `INCRBY` + `PEXPIREAT`), failing open as the seed's
//!   shared limiter does.
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example axum_middleware
//! cargo run -p ratekeeper-examples --example axum_middleware -- --serve 127.0.0.1:3000
//! cargo run -p ratekeeper-examples --example axum_middleware -- --redis redis://127.0.0.1:6379
//! ```
//!
//! Without `--serve`, it starts the app on a free port, sends a few
//! requests to itself, prints what came back and exits.
//!
//! Two differences from the seed, both on purpose: a `POST /` without an
//! `x-api-key` is limited under one shared `unknown` key rather than let
//! through (ratekeeper never leaves a request unlimited because its key is
//! missing), and a saturated limiter answers like a denial, 429.

use std::net::SocketAddr;
use std::time::Duration;

use axum::http::{HeaderName, StatusCode};
use axum::routing::get;
use axum::Router;
use ratekeeper::{
    clock::{ManualClock, MonotonicClock, UnixClock},
    policy::PolicyError,
    store::{
        CounterStore, FailureMode, FailurePolicy, LimitNameError, Resilient, StoreError,
        WindowCounter,
    },
    Clock, FixedWindow, Limit, MemoryStore, Store, Timestamp, TokenBucket,
};
use ratekeeper_examples::Server;
use ratekeeper_tower::{Key, LayerError, RateLimitLayer};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};

/// The API key header that `POST /` is limited by.
pub(crate) const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The per-address limit: 100 per 60 s, a fixed window.
pub(crate) fn per_address() -> Result<Limit, AppError> {
    let window = FixedWindow::new(100, Duration::from_secs(60))?;
    Ok(Limit::new("per-address", window)?)
}

/// The write limit: a bucket of 10 tokens, 1 more each second.
pub(crate) fn writes() -> Result<Limit, AppError> {
    let bucket = TokenBucket::new(1, Duration::from_secs(1), 10)?;
    Ok(Limit::new("writes", bucket)?)
}

/// Why the app could not be built or run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AppError {
    /// A policy's numbers were refused.
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
    /// A limit's name was refused.
    #[error("limit: {0}")]
    Limit(#[from] LimitNameError),
    /// A layer could not be built.
    #[error("layer: {0}")]
    Layer(#[from] LayerError),
    /// Redis could not be reached.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis did not answer in time.
    #[error("redis did not answer within {0:?}")]
    RedisTimeout(Duration),
    /// The server failed.
    #[error("server: {0}")]
    Io(#[from] std::io::Error),
    /// A request of the self-demonstration failed.
    #[error("request: {0}")]
    Http(#[from] reqwest::Error),
    /// A command-line argument was wrong.
    #[error("usage: {0}")]
    Usage(String),
}

/// The app: `GET /`, `POST /` and `GET /other`, every route limited per
/// client address through `addresses`, `POST /` also per API key through
/// `keys`. Any [`Store`] works for either.
pub(crate) fn app<A, K>(addresses: A, keys: K) -> Result<Router, AppError>
where
    A: Store + 'static,
    K: Store + 'static,
{
    let per_address = RateLimitLayer::builder(addresses)
        .limit(per_address()?, Key::peer())
        .build()?;
    let per_key = RateLimitLayer::builder(keys)
        .limit(writes()?, Key::header(API_KEY))
        .build()?;
    let create =
        axum::routing::post(|| async { (StatusCode::CREATED, "created\n") }).layer(per_key);
    Ok(Router::new()
        .route("/", get(|| async { "hello\n" }).merge(create))
        .route("/other", get(|| async { "other\n" }))
        .layer(per_address))
}

/// The app with both limits in this process's memory, on `clock`, each
/// limiter tracking at most `max_keys` keys, swept in the background or
/// not.
pub(crate) fn in_memory<C: Clock + Clone + 'static>(
    clock: C,
    max_keys: usize,
    sweep: bool,
) -> Result<Router, AppError> {
    app(
        MemoryStore::builder()
            .max_keys(max_keys)
            .clock(clock.clone())
            .background_sweep(sweep)
            .build()
            .expect("a valid store"),
        MemoryStore::builder()
            .max_keys(max_keys)
            .clock(clock)
            .background_sweep(sweep)
            .build()
            .expect("a valid store"),
    )
}

/// The per-address window in a shared counter, failing open (allowed, and
/// logged) when the counter's store is down: an outage of Redis must not
/// become an outage of every route. Time is `clock`'s, which must be Unix
/// time and agree across the nodes.
pub(crate) fn shared<W, C>(counter: W, clock: C, local: MemoryStore<C>) -> Result<Router, AppError>
where
    W: WindowCounter + 'static,
    C: Clock + Clone + 'static,
{
    let shared = Resilient::new(
        CounterStore::with_clock(counter, clock),
        FailurePolicy::new(FailureMode::Open),
    );
    app(shared, local)
}

/// A fixed-window counter in Redis: the seed's increment-shaped store.
///
/// Each `(key, window)` is one Redis string, `seed000:{key}:{window}`,
/// incremented with `INCRBY` and given an absolute expiry with `PEXPIREAT`
/// in one `MULTI`/`EXEC`, so the count is atomic and disappears when its
/// window is over. Every call is bounded by a timeout.
///
/// One difference from the seed's store: a node whose clock is behind
/// counts in the window its clock names (a separate key), not in the newer
/// one other nodes use; keep the nodes' clocks synchronised, as the seed
/// asks too.
#[derive(Clone)]
pub(crate) struct RedisCounter {
    connection: ConnectionManager,
    timeout: Duration,
}

impl RedisCounter {
    /// Connects to `url` (`redis://host:port`), each call bounded by
    /// `timeout`.
    pub(crate) async fn connect(url: &str, timeout: Duration) -> Result<Self, AppError> {
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1);
        let connection =
            tokio::time::timeout(timeout, ConnectionManager::new_with_config(client, config))
                .await
                .map_err(|_| AppError::RedisTimeout(timeout))??;
        Ok(RedisCounter {
            connection,
            timeout,
        })
    }
}

impl WindowCounter for RedisCounter {
    async fn increment(
        &self,
        key: &str,
        window: u64,
        cost: u64,
        expires_at: Timestamp,
    ) -> Result<u64, StoreError> {
        let name = format!("seed000:{key}:{window}");
        let mut connection = self.connection.clone();
        let call = async move {
            if cost == 0 {
                let count: Option<u64> = redis::cmd("GET")
                    .arg(&name)
                    .query_async(&mut connection)
                    .await?;
                return Ok(count.unwrap_or(0));
            }
            let expires_ms = i64::try_from(expires_at.as_millis()).unwrap_or(i64::MAX);
            let (count,): (u64,) = redis::pipe()
                .atomic()
                .incr(&name, cost)
                .pexpire_at(&name, expires_ms)
                .ignore()
                .query_async(&mut connection)
                .await?;
            Ok::<u64, redis::RedisError>(count)
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(count)) => Ok(count),
            Ok(Err(error)) if error.is_timeout() => Err(StoreError::Timeout(self.timeout)),
            Ok(Err(error)) => Err(StoreError::unavailable(error)),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

/// What the command line asked for.
struct Args {
    serve: Option<SocketAddr>,
    redis: Option<String>,
    max_keys: usize,
}

fn parse_args() -> Result<Args, AppError> {
    let mut args = Args {
        serve: None,
        redis: None,
        max_keys: 100_000,
    };
    let mut words = std::env::args().skip(1);
    while let Some(word) = words.next() {
        let mut value = |flag: &str| {
            words
                .next()
                .ok_or_else(|| AppError::Usage(format!("{flag} needs a value")))
        };
        match word.as_str() {
            "--serve" => {
                let addr = value("--serve")?;
                args.serve =
                    Some(addr.parse().map_err(|_| {
                        AppError::Usage(format!("--serve {addr:?}: not an address"))
                    })?);
            }
            "--redis" => args.redis = Some(value("--redis")?),
            "--max-keys" => {
                let n = value("--max-keys")?;
                args.max_keys = n
                    .parse()
                    .map_err(|_| AppError::Usage(format!("--max-keys {n:?}: not a number")))?;
            }
            other => {
                return Err(AppError::Usage(format!(
                    "unknown argument {other:?} (known: --serve ADDR, --redis URL, --max-keys N)"
                )))
            }
        }
    }
    Ok(args)
}

/// Sends `count` requests and prints one line per distinct answer.
async fn show(
    what: &str,
    count: usize,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> Result<(), AppError> {
    let mut statuses = Vec::new();
    for _ in 0..count {
        let response = request().send().await?;
        let retry = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(|v| format!(" (retry after {v} s)"))
            .unwrap_or_default();
        statuses.push(format!("{}{retry}", response.status().as_u16()));
    }
    let mut runs: Vec<(String, usize)> = Vec::new();
    for status in statuses {
        match runs.last_mut() {
            Some((last, n)) if *last == status => *n += 1,
            _ => runs.push((status, 1)),
        }
    }
    let runs: Vec<String> = runs.iter().map(|(s, n)| format!("{n} x {s}")).collect();
    println!("{what}: {}", runs.join(", "));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), AppError> {
    let args = parse_args()?;
    let router = match &args.redis {
        Some(url) => {
            let counter = RedisCounter::connect(url, Duration::from_millis(500)).await?;
            println!("per-address window kept in Redis at {url}");
            shared(
                counter,
                UnixClock,
                MemoryStore::builder()
                    .max_keys(args.max_keys)
                    .clock(UnixClock)
                    .background_sweep(true)
                    .build()
                    .expect("a valid store"),
            )?
        }
        None => in_memory(MonotonicClock::new(), args.max_keys, true)?,
    };
    if let Some(addr) = args.serve {
        let server = Server::start(router, addr).await?;
        println!("listening on http://{} (Ctrl-C stops)", server.addr());
        tokio::signal::ctrl_c().await?;
        return Ok(server.shutdown().await?);
    }

    let server = Server::start(router, "127.0.0.1:0".parse().expect("an address")).await?;
    let client = reqwest::Client::new();
    let url = server.url("/");
    show("POST / with x-api-key: k1, 12 times", 12, || {
        client.post(&url).header(API_KEY, "k1")
    })
    .await?;
    show("POST / with x-api-key: k2, once", 1, || {
        client.post(&url).header(API_KEY, "k2")
    })
    .await?;
    show("GET /, 90 times", 90, || client.get(&url)).await?;
    server.shutdown().await?;

    // A table that holds one key: the second is saturated.
    let clock = ManualClock::new(Timestamp::from_secs(1));
    let tiny = Server::start(
        in_memory(clock, 1, false)?,
        "127.0.0.1:0".parse().expect("an address"),
    )
    .await?;
    let url = tiny.url("/");
    show("max_keys = 1: POST / with a first key", 1, || {
        client.post(&url).header(API_KEY, "first")
    })
    .await?;
    show("max_keys = 1: POST / with a second key", 1, || {
        client.post(&url).header(API_KEY, "second")
    })
    .await?;
    tiny.shutdown().await?;
    Ok(())
}
