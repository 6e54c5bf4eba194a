//! A product's rate-limiting requirements as an axum service: several
//! limits at once (reproduces seed 004, a product's requirements).
//!
//! Every request (but the admin's) is under several limits at once, all
//! sliding windows ([`SlidingWindow`], the weighted previous-plus-current
//! count the document describes), checked all or nothing with
//! [`check_all`]: a request refused by one limit takes nothing from the
//! others.
//!
//! | limit | key | numbers |
//! |---|---|---|
//! | `global` | every request | 1000 per minute |
//! | `per-address` | the client's address | 400 per minute |
//! | `per-session` | the `session` cookie, as a digest | 200 per minute |
//! | `parse-url` | the url parser, for everyone | 60 per minute |
//!
//! `GET /parse?url=...` parses a url (a stand-in for fetching and parsing
//! a website) and caches the result for a day with `moka`; a cached answer
//! costs nothing from `parse-url`, since the expensive work is not done
//! again. Requests without a session cookie are not under `per-session`.
//!
//! `GET /admin/stats` reports, per limit and for all requests together,
//! this week's, today's, this hour's and this minute's requests and the
//! declined ones: calendar windows in UTC from the core's [`Stats`]. It is
//! not itself limited.
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example service_requirements
//! cargo run -p ratekeeper-examples --example service_requirements -- --serve 127.0.0.1:3000
//! ```
//!
//! Without `--serve`, it starts on a free port, sends itself a few requests,
//! prints the admin stats and exits.
//!
//! The document's sketch declines only when the weighted count is *above*
//! the limit, which would admit one request past it; ratekeeper admits a
//! request only when it fits within the limit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ratekeeper::{
    clock::{ManualClock, UnixClock},
    memory::{check_all, BuildError},
    policy::PolicyError,
    stats::{LimitStats, Stats},
    Clock, MemoryLimiter, Outcome, SlidingWindow, Timestamp,
};
use ratekeeper_examples::Server;
use ratekeeper_tower::headers::{insert_headers, HeaderStyle, PolicyReport, ResetStyle};
use ratekeeper_tower::{Refusal, ResponseFormat};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The limits' window.
pub(crate) const MINUTE: Duration = Duration::from_secs(60);

/// How long a parsed url is cached.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(24 * 60 * 60);

/// The names and numbers of the four limits.
pub(crate) const LIMITS: [(&str, u64); 4] = [
    ("global", 1_000),
    ("per-address", 400),
    ("per-session", 200),
    ("parse-url", 60),
];

/// The stats entry that counts every limited request.
pub(crate) const ALL_REQUESTS: &str = "requests";

/// Why the service could not be built or run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ServiceError {
    /// A limit's numbers were refused.
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
    /// A limiter could not be built.
    #[error("limiter: {0}")]
    Build(#[from] BuildError),
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

/// One limit: its name, limiter and stats.
struct Guard<C> {
    name: &'static str,
    limiter: MemoryLimiter<C>,
    stats: LimitStats,
}

/// A parsed url.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ParsedUrl {
    /// `http` or `https`.
    pub(crate) scheme: String,
    /// The host.
    pub(crate) host: String,
    /// The port, if given.
    pub(crate) port: Option<u16>,
    /// The path.
    pub(crate) path: String,
    /// The query, if any.
    pub(crate) query: Option<String>,
}

/// The service's state.
pub(crate) struct Service<C> {
    guards: [Guard<C>; 4],
    all: LimitStats,
    stats: Stats,
    cache: moka::sync::Cache<String, Arc<ParsedUrl>>,
    clock: C,
}

impl<C: Clock + Clone + 'static> Service<C> {
    /// The service on `clock`, which must read Unix time (the stats'
    /// windows are calendar windows in UTC). Each limiter tracks at most
    /// `max_keys` keys.
    pub(crate) fn new(clock: C, max_keys: usize) -> Result<Arc<Self>, ServiceError> {
        let stats = Stats::new();
        let guard = |(name, limit): (&'static str, u64)| -> Result<Guard<C>, ServiceError> {
            let limiter = MemoryLimiter::builder(SlidingWindow::new(limit, MINUTE)?)
                .clock(clock.clone())
                .max_keys(max_keys)
                .build()?;
            Ok(Guard {
                name,
                limiter,
                stats: stats.limit(name),
            })
        };
        let [global, address, session, parse] = LIMITS;
        Ok(Arc::new(Service {
            guards: [
                guard(global)?,
                guard(address)?,
                guard(session)?,
                guard(parse)?,
            ],
            all: stats.limit(ALL_REQUESTS),
            stats,
            cache: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(CACHE_TTL)
                .build(),
            clock,
        }))
    }

    /// How long parsed urls are cached.
    pub(crate) fn cache_ttl(&self) -> Option<Duration> {
        self.cache.policy().time_to_live()
    }
}

/// The service's routes: `GET /`, `GET /parse?url=...` and
/// `GET /admin/stats`, behind the limits.
pub(crate) fn router<C: Clock + Clone + 'static>(service: Arc<Service<C>>) -> Router {
    Router::new()
        .route("/", get(|| async { "hello\n" }))
        .route("/parse", get(parse::<C>))
        .route("/admin/stats", get(admin_stats::<C>))
        .layer(axum::middleware::from_fn_with_state(
            service.clone(),
            limit::<C>,
        ))
        .with_state(service)
}

/// A short digest of a secret, so it is never kept or shown as is.
fn digest(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The `session` cookie's value.
fn session(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == "session" && !value.is_empty()).then(|| value.to_owned())
        })
}

/// The query of `/parse`.
#[derive(Debug, Deserialize)]
pub(crate) struct ParseQuery {
    /// The url to parse.
    pub(crate) url: String,
}

/// Checks a request against its limits, all or nothing, records it in the
/// stats, and refuses it or passes it on with the `RateLimit` fields.
async fn limit<C: Clock + Clone + 'static>(
    State(service): State<Arc<Service<C>>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with("/admin/") {
        return next.run(request).await;
    }
    let address = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_owned(), |info| info.0.ip().to_string());
    let [global, per_address, per_session, parse_url] = &service.guards;
    let mut checks: Vec<(&Guard<C>, String)> =
        vec![(global, "all".to_owned()), (per_address, address.clone())];
    if let Some(token) = session(request.headers()) {
        checks.push((per_session, digest(&token)));
    }
    if request.uri().path() == "/parse" {
        let cached = Query::<ParseQuery>::try_from_uri(request.uri())
            .is_ok_and(|query| service.cache.contains_key(&query.url));
        if !cached {
            checks.push((parse_url, "parser".to_owned()));
        }
    }
    let limits: Vec<_> = checks
        .iter()
        .map(|(guard, key)| (&guard.limiter, key.as_bytes(), 1))
        .collect();
    let multi = check_all(&limits);

    let now = service.clock.now();
    service.all.record(now, multi.is_allowed(), &address);
    for ((guard, key), outcome) in checks.iter().zip(multi.outcomes()) {
        if multi.is_allowed() {
            guard.stats.record_allowed(now);
        } else if !outcome.is_allowed() {
            guard.stats.record_denied(now, key);
        }
    }

    let reports: Vec<PolicyReport<'_>> = checks
        .iter()
        .zip(multi.outcomes())
        .filter_map(|((guard, _), outcome)| match outcome {
            Outcome::Decided(decision) => Some(PolicyReport {
                name: guard.name,
                window: MINUTE,
                decision,
                partition_key: None,
            }),
            Outcome::Saturated { .. } => None,
        })
        .collect();
    let mut response = if multi.is_allowed() {
        next.run(request).await
    } else {
        let violated = checks
            .iter()
            .zip(multi.outcomes())
            .filter(|(_, outcome)| !outcome.is_allowed())
            .map(|((guard, _), _)| guard.name.to_owned())
            .collect();
        let refusal = Refusal::Limited {
            violated,
            retry_after: multi.retry_after(),
        };
        refusal
            .response(ResponseFormat::ProblemJson, request.headers())
            .map(Body::new)
    };
    insert_headers(
        response.headers_mut(),
        HeaderStyle::Draft,
        ResetStyle::DeltaSeconds,
        &reports,
    );
    response
}

/// Parses `text` as an absolute http(s) url.
pub(crate) fn parse_url(text: &str) -> Result<ParsedUrl, String> {
    let uri: http::Uri = text.parse().map_err(|e| format!("not a url: {e}"))?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme.to_owned(),
        Some(other) => return Err(format!("unsupported scheme {other:?}")),
        None => return Err("not an absolute url".to_owned()),
    };
    let host = uri.host().filter(|h| !h.is_empty()).ok_or("no host")?;
    Ok(ParsedUrl {
        scheme,
        host: host.to_owned(),
        port: uri.port_u16(),
        path: uri.path().to_owned(),
        query: uri.query().map(str::to_owned),
    })
}

async fn parse<C: Clock + Clone + 'static>(
    State(service): State<Arc<Service<C>>>,
    Query(query): Query<ParseQuery>,
) -> Response {
    let cache_header = |hit: bool| {
        (
            header::HeaderName::from_static("x-cache"),
            HeaderValue::from_static(if hit { "hit" } else { "miss" }),
        )
    };
    if let Some(parsed) = service.cache.get(&query.url) {
        return ([cache_header(true)], Json(parsed.as_ref().clone())).into_response();
    }
    match parse_url(&query.url) {
        Ok(parsed) => {
            let parsed = Arc::new(parsed);
            service.cache.insert(query.url, parsed.clone());
            ([cache_header(false)], Json(parsed.as_ref().clone())).into_response()
        }
        Err(error) => (
            StatusCode::BAD_REQUEST,
            Json(serde_json::json!({ "error": error })),
        )
            .into_response(),
    }
}

/// Requests in one calendar window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Counts {
    /// Requests counted, allowed and declined.
    pub(crate) requests: u64,
    /// Of those, the declined ones.
    pub(crate) declined: u64,
}

/// One limit's part of the admin stats.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LimitReport {
    /// This week (from Monday 00:00 UTC).
    pub(crate) week: Counts,
    /// Today (from 00:00 UTC).
    pub(crate) today: Counts,
    /// This hour.
    pub(crate) hour: Counts,
    /// This minute.
    pub(crate) minute: Counts,
    /// Declined since the start.
    pub(crate) declined_total: u64,
}

/// The admin stats.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AdminStats {
    /// When, in seconds since the Unix epoch.
    pub(crate) at_unix_secs: u64,
    /// Every limit's counts, and `requests` for all limited requests.
    pub(crate) limits: std::collections::BTreeMap<String, LimitReport>,
}

/// The admin stats at `now`.
pub(crate) fn admin_report(stats: &Stats, now: Timestamp) -> AdminStats {
    let limits = stats
        .names()
        .into_iter()
        .filter_map(|name| {
            let limit = stats.get(&name)?;
            let windows = limit.windows(now);
            let counts = |w: ratekeeper::stats::WindowTraffic| Counts {
                requests: w.requests,
                declined: w.denied,
            };
            let report = LimitReport {
                week: counts(windows.week.current),
                today: counts(windows.day.current),
                hour: counts(windows.hour.current),
                minute: counts(windows.minute.current),
                declined_total: limit.denied(),
            };
            Some((name, report))
        })
        .collect();
    AdminStats {
        at_unix_secs: now.as_millis() / 1_000,
        limits,
    }
}

async fn admin_stats<C: Clock + Clone + 'static>(
    State(service): State<Arc<Service<C>>>,
) -> Json<AdminStats> {
    Json(admin_report(&service.stats, service.clock.now()))
}

#[tokio::main]
async fn main() -> Result<(), ServiceError> {
    let mut args = std::env::args().skip(1);
    let serve = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--serve"), Some(addr)) => Some(
            addr.parse::<SocketAddr>()
                .map_err(|_| ServiceError::Usage(format!("--serve {addr:?}: not an address")))?,
        ),
        _ => return Err(ServiceError::Usage("[--serve ADDR]".to_owned())),
    };
    if let Some(addr) = serve {
        let server = Server::start(router(Service::new(UnixClock, 100_000)?), addr).await?;
        println!("listening on http://{} (Ctrl-C stops)", server.addr());
        tokio::signal::ctrl_c().await?;
        return Ok(server.shutdown().await?);
    }

    // A demonstration on a clock this program moves: Monday 2024-01-08
    // 10:58:00 UTC.
    let clock = ManualClock::new(Timestamp::from_secs(1_704_711_480));
    let service = Service::new(clock.clone(), 100_000)?;
    let server = Server::start(
        router(service.clone()),
        "127.0.0.1:0".parse().expect("an address"),
    )
    .await?;
    let client = reqwest::Client::new();
    let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
    for _ in 0..205 {
        let response = client
            .get(server.url("/"))
            .header(header::COOKIE, "session=demo-session")
            .send()
            .await?;
        *statuses.entry(response.status().as_u16()).or_default() += 1;
    }
    println!("205 requests in one session: {statuses:?}");
    println!("parsed urls are cached for {:?}", service.cache_ttl());
    for url in ["https://example.com/a?b=c", "https://example.com/a?b=c"] {
        let response = client
            .get(server.url("/parse"))
            .query(&[("url", url)])
            .send()
            .await?;
        let cache = response
            .headers()
            .get("x-cache")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        println!("parse {url}: {} ({cache})", response.status().as_u16());
    }
    clock.advance(Duration::from_secs(30));
    let stats: serde_json::Value = client
        .get(server.url("/admin/stats"))
        .send()
        .await?
        .json()
        .await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&stats).unwrap_or_else(|e| e.to_string())
    );
    server.shutdown().await?;
    Ok(())
}
