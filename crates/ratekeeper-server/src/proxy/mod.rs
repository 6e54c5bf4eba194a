//! The reverse proxy: ratekeeper in front of any HTTP app
//! (`ratekeeper proxy --upstream http://127.0.0.1:3000 --config FILE`).
//!
//! `ratekeeper proxy` runs the service (`serve::Service`) with the proxy
//! as one of its doors (`serve::ServiceBuilder::proxy`): `[listen] admin` serves
//! `/healthz`, `/readyz`, `/metrics`, `/v1/stats` and the dashboard behind
//! the same access tokens as under `serve`, the file reloads on SIGHUP and
//! when it changes, and the proxy's connections have
//! `[listen.connections]`' caps, timeouts (all but `request_timeout`,
//! since requests stream to the upstream) and graceful shutdown. `[listen] http`
//! and `grpc` are not served under `proxy`: run `serve` for the decision
//! doors. Every path is forwarded, `/healthz` included: the proxy's port
//! is the app's, and health checks of ratekeeper itself go to the admin
//! port. [`serve_proxy`] runs the proxy alone, without an admin port.
//!
//! Every request is decided against the limits whose `match` fits its
//! method and path, each keyed from the request itself (`peer` is the
//! socket peer; `client_ip` the limit's rule, which believes
//! `X-Forwarded-For`, `Forwarded` or its header only from the limit's
//! `trusted_proxies`, none by default, so that the peer is the client;
//! `route`, `header:NAME`; a part that cannot be found is the shared key
//! `unknown`, never unlimited). A forwarding header from a peer that is
//! not trusted is logged once per limit and counted in `/metrics`. Then:
//!
//! - **allowed**: the request goes to the upstream and its response comes
//!   back with the draft's `RateLimit-Policy` and `RateLimit` fields added;
//! - **refused**: `429 Too Many Requests` with the fields, `Retry-After`
//!   and `Cache-Control: no-store`; the upstream never sees the request;
//! - **the store failed closed**: `503 Service Unavailable`.
//!
//! A request no limit applies to is forwarded without any field. When a
//! limit's in-memory table had no room for the key, the 429 (with
//! `on_saturated = "deny"`, the default) or the upstream's response (with
//! `"allow"`) also carries `X-RateKeeper-Saturated` naming such limits.
//!
//! # What is passed through
//!
//! The method, the path and query (after the upstream URL's own path, if
//! it has one: `--upstream http://app:3000/base` sends `/x?y` to
//! `/base/x?y`), every header but the hop-by-hop ones (`Connection` and the
//! headers it names, `Keep-Alive`, `Proxy-Connection`,
//! `Proxy-Authenticate`, `Proxy-Authorization`, `TE`, `Trailer`,
//! `Transfer-Encoding`, `Upgrade`), the `Host` the client sent (an HTTP/2
//! client's `:authority`), and both bodies, streamed as they come (nothing
//! is buffered, so uploads and downloads of any size pass in constant
//! memory). The response's status, headers (again without the hop-by-hop
//! ones) and body come back as the upstream sent them, in the HTTP version
//! the client speaks: an HTTP/1.0 upstream does not close an HTTP/1.1
//! client's keep-alive connection. An upstream that cannot be reached, or
//! that fails before its response starts, is answered with
//! `502 Bad Gateway`; one that does not start its response within
//! [`ProxyOptions::response_timeout`] (60 s unless told otherwise) with
//! `504 Gateway Timeout`. At most [`ProxyOptions::max_upstream_requests`]
//! (1,024) requests are at the upstream at once, each until its response
//! body is sent; past it a request is answered `503 Service Unavailable`
//! with `Retry-After: 1` and counted in
//! `ratekeeper_proxy_upstream_overflow_total`: an HTTP/2 client carries
//! many requests on one connection, so the connection caps alone do not
//! bound what clients hold open at the upstream.
//!
//! # Forwarding headers
//!
//! The upstream gets `X-Forwarded-For` ending with the client's address,
//! `X-Forwarded-Proto` (`http`, or `https` on a door that serves TLS) and
//! `X-Forwarded-Host` (the client's `Host`). Those a client sent, and its
//! `Forwarded` and `X-Real-IP`, are nothing but its word: from a peer that
//! is not in [`ProxyOptions::trusted_proxies`] (none by default;
//! `--trusted-proxy NET`) they are dropped and replaced by what the proxy
//! saw, so an upstream that reads them, even the leftmost address, reads
//! the proxy's. From a trusted proxy they are kept: the peer is appended to
//! `X-Forwarded-For`, and `X-Forwarded-Proto` and `-Host` are added only
//! where missing. (The limits' own `client_ip` keys believe the headers
//! only from their `trusted_proxies`, whatever this setting says.)
//!
//! # HTTP versions, upgrades and TLS
//!
//! Clients may speak HTTP/1.1 or HTTP/2: with prior knowledge (`h2c`) on
//! plaintext, chosen by ALPN (`h2`, then `http/1.1`) on a door that serves
//! TLS (`[listen.tls.proxy]`). The upstream is spoken to in HTTP/1.1, or
//! in HTTP/2 with [`ProxyOptions::upstream_http2`] (`h2c` to an `http://`
//! upstream); an `https://` upstream gets whichever of the two its ALPN
//! picks. Its certificate must be valid for the URL's host (also sent as
//! SNI) and signed by a CA of the system's, or of
//! [`ProxyOptions::upstream_ca`] (`--upstream-ca FILE`). TLS is rustls on
//! the ring provider.
//!
//! An HTTP/1.1 request that asks for an upgrade (`Connection: upgrade`,
//! `Upgrade: websocket`) is decided like any other: refused, it gets the
//! 429 and never reaches the upstream; allowed, it goes to the upstream
//! over HTTP/1.1 with its `Upgrade`, and once the upstream answers
//! `101 Switching Protocols` the bytes are copied both ways until either
//! side closes, no byte has passed either way for the door's
//! `idle_timeout` (60 s by default, as nginx's `proxy_read_timeout`:
//! WebSocket applications ping within it), or the shutdown grace is over.
//! A tunnel holds its client connection's slot of `max_connections` while
//! it lasts.
//!
//! Not supported: HTTP/2 extended CONNECT (RFC 8441, WebSocket over an
//! HTTP/2 connection), upgrades to an upstream that speaks only HTTP/2,
//! and client certificates toward the upstream.
//!
//! # The middleware
//!
//! The proxy is the tower layer,
//! [`RateLimitLayer`](ratekeeper_tower::RateLimitLayer), over the
//! configuration's limits: each limit that applies to HTTP requests is a
//! [`Rule`](ratekeeper_tower::Rule) (its key, its `match` methods and path
//! prefix, its shadow flag; [`LimitConfig::rule`](crate::config::LimitConfig::rule)),
//! and the layer decides through the service's [`Engine`], so the counts,
//! statistics and metrics are those of the other front doors. A reload
//! that replaces the limits rebuilds the layer for the next request.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use ratekeeper::clock::MonotonicClock;
//! use ratekeeper_server::{engine::Engine, proxy, Config};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The app: any HTTP server.
//! let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello" }));
//! let app_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let upstream = format!("http://{}", app_listener.local_addr()?).parse()?;
//! tokio::spawn(async move { axum::serve(app_listener, app).await });
//!
//! // ratekeeper in front of it: 2 requests a minute per client.
//! let config = Config::from_toml_str(
//!     "[[limits]]\nname = \"per-client\"\nrate = \"2/minute\"\nkey = [\"client_ip\"]\n",
//!     "example.toml",
//! )?;
//! let engine = Engine::builder(&config).clock(Arc::new(MonotonicClock::new())).start().await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! let url = format!("http://{}/", listener.local_addr()?);
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let proxy = tokio::spawn(proxy::serve_proxy(engine, listener, upstream, async {
//!     let _ = stopped.await;
//! }));
//!
//! let client = reqwest::Client::new();
//! let first = client.get(&url).send().await?;
//! assert_eq!(first.status(), 200);
//! assert_eq!(first.headers()["ratelimit-policy"], "\"per-client\";q=2;w=60");
//! assert_eq!(first.text().await?, "hello");
//! client.get(&url).send().await?;
//! let third = client.get(&url).send().await?;
//! assert_eq!(third.status(), 429);
//! assert!(third.headers().contains_key("retry-after"));
//!
//! let _ = stop.send(());
//! proxy.await??;
//! # Ok(())
//! # }
//! ```

mod forward;
mod headers;
mod in_flight;
mod limit;
mod upgrade;
mod upstream;

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Uri;
use axum::Router;
use ipnet::IpNet;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::config::ConnectionConfig;
use crate::engine::Engine;
use crate::listen::{Door, Protocol};
use forward::forward;
use limit::LimitLayer;
pub(crate) use upgrade::TunnelLimits;
pub(crate) use upstream::Upstream;

/// Why the proxy could not start or stopped with an error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The upstream URL cannot be proxied to.
    #[error("invalid upstream {uri:?}: {reason}")]
    InvalidUpstream {
        /// The URL as given, with any password hidden
        /// ([`redact_url`](crate::config::redact_url)).
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The CA file for an `https://` upstream
    /// ([`ProxyOptions::upstream_ca`]) cannot be used.
    #[error("cannot use the upstream CA file {}: {reason}", path.display())]
    UpstreamCa {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// No TLS client configuration could be made for an `https://`
    /// upstream.
    #[error("cannot set up TLS to the upstream: {reason}")]
    UpstreamTls {
        /// Why.
        reason: String,
    },
}

/// The proxy as an axum [`Router`]: every request, any method and path,
/// decided through `engine` and then forwarded to `upstream`
/// (`http[s]://host[:port][/path]`).
///
/// Serve it with
/// `into_make_service_with_connect_info::<std::net::SocketAddr>()`, so that
/// `X-Forwarded-For` and the `peer` and `client_ip` keys know the client
/// (without it they are `unknown`, one count for all); [`serve_proxy`]
/// does. Upgrades (WebSocket) need a server that keeps them
/// (hyper's `with_upgrades`), as [`serve_proxy`] does.
pub fn router(engine: Engine, upstream: &Uri) -> Result<Router, ProxyError> {
    router_with(engine, upstream, &ProxyOptions::default())
}

/// How the proxy reaches its upstream and treats its clients.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyOptions {
    /// How long the upstream may take to start its response (status and
    /// headers) before the client gets `504 Gateway Timeout`; a body, once
    /// started, streams for as long as it takes. 60 s by default, as
    /// nginx's `proxy_read_timeout`.
    pub response_timeout: Duration,
    /// How [`serve_proxy_with`]'s listener treats connections (caps,
    /// timeouts, shutdown grace); its requests have no `request_timeout`,
    /// since they stream to the upstream; its `idle_timeout` also ends
    /// idle upgraded tunnels. The service (`serve::Service`) uses its
    /// `[listen.connections]` instead.
    pub connections: ConnectionConfig,
    /// Speak HTTP/2 to the upstream: with prior knowledge (`h2c`) to an
    /// `http://` one, and only HTTP/2 to an `https://` one. Off by
    /// default: HTTP/1.1 to `http://` upstreams, and to `https://` ones
    /// whichever of HTTP/2 and HTTP/1.1 their ALPN picks. Upgrades
    /// (WebSocket) always go over HTTP/1.1.
    pub upstream_http2: bool,
    /// The PEM file of the CA certificates an `https://` upstream's
    /// certificate must be signed by; `None` (the default): the system's.
    pub upstream_ca: Option<PathBuf>,
    /// The peers whose forwarding headers (`X-Forwarded-For`, `-Proto`,
    /// `-Host`, `Forwarded`, `X-Real-IP`) are passed on to the upstream;
    /// from any other peer they are replaced by what the proxy saw. None
    /// by default. (Which headers a limit believes for its `client_ip`
    /// key is the limit's own `trusted_proxies`.)
    pub trusted_proxies: Vec<IpNet>,
    /// The most requests at the upstream at once, over every client (a
    /// request holds its place until its response body has been sent);
    /// past it a request gets `503 Service Unavailable` with
    /// `Retry-After: 1` and the upstream never sees it. 1,024 by default,
    /// as Envoy's circuit breakers; at least 1. It bounds what HTTP/2
    /// clients, each with many streams on one connection, can hold open
    /// at the upstream.
    pub max_upstream_requests: usize,
}

/// [`ProxyOptions::max_upstream_requests`]'s default.
pub(crate) const DEFAULT_MAX_UPSTREAM_REQUESTS: usize = 1024;

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            response_timeout: Duration::from_secs(60),
            connections: ConnectionConfig::default(),
            upstream_http2: false,
            upstream_ca: None,
            trusted_proxies: Vec::new(),
            max_upstream_requests: DEFAULT_MAX_UPSTREAM_REQUESTS,
        }
    }
}

/// The proxy as one more door of the service (`serve::ServiceBuilder::proxy`):
/// where it listens and what it forwards to.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProxyDoor {
    /// Where the proxy listens (port 0 picks a free port).
    pub addr: SocketAddr,
    /// The upstream, `http[s]://host[:port][/path]`.
    pub upstream: Uri,
    /// How it reaches the upstream.
    pub options: ProxyOptions,
}

impl ProxyDoor {
    /// A proxy on `addr` before `upstream`, with the default options.
    pub fn new(addr: SocketAddr, upstream: Uri) -> ProxyDoor {
        ProxyDoor {
            addr,
            upstream,
            options: ProxyOptions::default(),
        }
    }
}

/// What the forwarding handler needs: the upstream, and how clients
/// reach the proxy.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    upstream: Upstream,
    /// `https` when the proxy's door serves TLS, else `http`.
    client_proto: &'static str,
    trusted_proxies: Arc<[IpNet]>,
    /// How long upgraded connections live.
    tunnels: TunnelLimits,
    /// The requests at the upstream now, up to the cap.
    in_flight: in_flight::InFlight,
    /// Where refusals at the cap are counted.
    engine: Engine,
}

impl Route {
    fn trusts(&self, peer: IpAddr) -> bool {
        let peer = ratekeeper_tower::client::canonical(peer);
        self.trusted_proxies.iter().any(|net| net.contains(&peer))
    }
}

/// [`router`], with `options`.
pub(crate) fn router_with(
    engine: Engine,
    upstream: &Uri,
    options: &ProxyOptions,
) -> Result<Router, ProxyError> {
    let upstream = Upstream::new(upstream, options)?;
    // Never told to stop: a router served by the caller ends its tunnels
    // when they close or idle.
    Ok(router_to(
        engine,
        upstream,
        options,
        false,
        tunnels(options, None),
    ))
}

/// How long tunnels live on a door with `options.connections`, stopping
/// (after the grace) when `stop` turns true.
pub(crate) fn tunnels(options: &ProxyOptions, stop: Option<watch::Receiver<bool>>) -> TunnelLimits {
    TunnelLimits {
        idle: options.connections.idle_timeout,
        grace: options.connections.shutdown_grace,
        stop,
    }
}

/// The proxy's router before `upstream`, for a door that serves TLS when
/// `tls` (its clients' `X-Forwarded-Proto` is then `https`).
pub(crate) fn router_to(
    engine: Engine,
    upstream: Upstream,
    options: &ProxyOptions,
    tls: bool,
    tunnels: TunnelLimits,
) -> Router {
    let route = Route {
        upstream,
        client_proto: if tls { "https" } else { "http" },
        trusted_proxies: options.trusted_proxies.clone().into(),
        tunnels,
        in_flight: in_flight::InFlight::new(options.max_upstream_requests),
        engine: engine.clone(),
    };
    Router::new()
        .fallback(forward)
        .with_state(route)
        .layer(LimitLayer::new(engine))
}

/// Serves the proxy of [`router`] on `listener` until `shutdown`
/// completes, then lets the requests in flight finish and returns.
pub async fn serve_proxy(
    engine: Engine,
    listener: TcpListener,
    upstream: Uri,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ProxyError> {
    serve_proxy_with(
        engine,
        listener,
        upstream,
        &ProxyOptions::default(),
        shutdown,
    )
    .await
}

/// [`serve_proxy`], with `options`. Clients may speak HTTP/1.1 (with
/// upgrades) or HTTP/2 with prior knowledge (`h2c`).
pub async fn serve_proxy_with(
    engine: Engine,
    listener: TcpListener,
    upstream: Uri,
    options: &ProxyOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ProxyError> {
    let upstream = Upstream::new(&upstream, options)?;
    let (stop, stopped) = watch::channel(false);
    let app = router_to(
        engine.clone(),
        upstream,
        options,
        false,
        tunnels(options, Some(stopped)),
    );
    let shutdown = async move {
        shutdown.await;
        let _ = stop.send(true);
    };
    let door = Door::new(
        "proxy",
        Protocol::Auto,
        &options.connections,
        &crate::listen::ConnectionStats::default(),
    );
    crate::listen::serve(listener, door, app, shutdown).await;
    Ok(())
}
