//! Running the service: the engine, one listener per front door, reloads
//! and a graceful shutdown.
//!
//! [`Service::builder`] starts a service: it binds every address of
//! `[listen]` (port 0 picks a free port; the bound addresses are reported
//! by [`Service::addrs`]), serves until [`Service::shutdown`] or, in
//! [`Service::run`], SIGTERM or Ctrl-C, then stops accepting, lets
//! requests in flight finish within `listen.connections.shutdown_grace`,
//! closes what is left, and returns. Every door's connections have the
//! caps and timeouts of `[listen.connections]`. With a configuration
//! file, SIGHUP or a change of the file reloads the limits (see
//! [`Service::reload`]).
//!
//! With [`ServiceBuilder::proxy`] (what `ratekeeper proxy` runs), the reverse
//! proxy is one more door, on the same engine, connection settings, TLS
//! (`[listen.tls.proxy]`), metrics, reloads and shutdown as the others.

mod builder;
mod reload;
pub mod runtime;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinSet;

use crate::config::{ConfigError, DoorTlsError};
use crate::engine::{Engine, StartError};
use crate::listen::tls::{TlsDoors, TlsListener};
use crate::listen::{ConnectionStats, Door, Protocol};
pub use builder::ServiceBuilder;
use reload::{Reloaded, Reloader};

/// Why the service could not start or stopped with an error.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The store could not be opened.
    #[error(transparent)]
    Start(#[from] StartError),
    /// An address is taken by another socket (another process, or a
    /// second door on the same address).
    #[error(
        "cannot listen on {addr} for {}: address already in use",
        setting(door)
    )]
    AddrInUse {
        /// The front door: `http`, `grpc`, `admin` or `proxy`.
        door: &'static str,
        /// The address.
        addr: SocketAddr,
    },
    /// An address could not be bound.
    #[error("cannot listen on {addr} for {}", setting(door))]
    Bind {
        /// The front door: `http`, `grpc`, `admin` or `proxy`.
        door: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A door's TLS files could not be loaded.
    #[error("cannot serve TLS on the {door} door")]
    Tls {
        /// The front door: `http`, `grpc`, `admin` or `proxy`.
        door: &'static str,
        /// Why.
        #[source]
        source: DoorTlsError,
    },
    /// The proxy's upstream cannot be proxied to.
    #[error(transparent)]
    Proxy(#[from] crate::proxy::ProxyError),
    /// A front door failed while serving.
    #[error("the {door} server failed")]
    Serve {
        /// The front door.
        door: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Where the front doors listen, once bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Addrs {
    /// The HTTP decision API and nginx `auth_request` endpoint.
    pub http: Option<SocketAddr>,
    /// Envoy's rate limit service.
    pub grpc: Option<SocketAddr>,
    /// Health checks.
    pub admin: Option<SocketAddr>,
    /// The reverse proxy ([`ServiceBuilder::proxy`]).
    pub proxy: Option<SocketAddr>,
}

/// The running service.
#[derive(Debug)]
pub struct Service {
    engine: Engine,
    addrs: Addrs,
    stop: watch::Sender<bool>,
    tasks: JoinSet<Result<(), ServeError>>,
    reloader: Option<Arc<Mutex<Reloader>>>,
    tls: TlsDoors,
    termination: Option<Termination>,
}

impl Service {
    /// Opens the store, binds every front door and starts serving: what
    /// [`ServiceBuilder::start`] does.
    async fn start(options: ServiceBuilder) -> Result<Service, ServeError> {
        let config = &options.config;
        for warning in config.warnings_when_serving(options.proxy.is_some()) {
            tracing::warn!("{warning}");
        }
        // Before the store: files that do not load should not wait for a
        // connection to Redis to be reported.
        let tls = TlsDoors::load(&config.listen, options.proxy.is_some())
            .map_err(|(door, source)| ServeError::Tls { door, source })?;
        // The upstream, also before the store: a URL that cannot be
        // proxied to is the operator's mistake, reported at once.
        let proxy = options
            .proxy
            .as_ref()
            .map(|door| {
                let upstream = crate::proxy::Upstream::new(&door.upstream, &door.options)?;
                Ok::<_, crate::proxy::ProxyError>((door.addr, upstream, &door.options))
            })
            .transpose()?;
        let engine = Engine::builder(config)
            .clock(Arc::clone(&options.clock))
            .wall_clock(Arc::clone(&options.wall_clock))
            .start()
            .await?;
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut addrs = Addrs::default();

        let connections = &config.listen.connections;
        // The doors' connection counters, which `/metrics` reads.
        let stats = ConnectionStats::default();
        let mut caps: Vec<(&'static str, usize)> = [
            ("http", config.listen.http, connections.max_connections),
            ("grpc", config.listen.grpc, connections.max_connections),
            (
                "admin",
                config.listen.admin,
                connections.max_admin_connections,
            ),
        ]
        .into_iter()
        .filter_map(|(door, addr, cap)| addr.map(|_| (door, cap)))
        .collect();
        if proxy.is_some() {
            caps.push(("proxy", connections.max_connections));
        }
        crate::listen::fit_open_files(&mut caps);
        let door = |name: &'static str, protocol, tls: &Option<Arc<TlsListener>>| {
            let mut door = Door::new(name, protocol, connections, &stats);
            if let Some((_, cap)) = caps.iter().find(|(door, _)| *door == name) {
                door.max_connections = *cap;
            }
            door.tls = tls.clone();
            door
        };

        if let Some(addr) = config.listen.http {
            let listener = bind("http", addr, connections.backlog)?;
            addrs.http = Some(local_addr("http", &listener)?);
            // Statistics stay on the admin port: their top denied keys may
            // be clients' addresses or API keys.
            let app = crate::http::router(engine.clone());
            let door = door("http", Protocol::Http1, &tls.http);
            tasks.spawn(serve_door(listener, door, app, stopped.clone()));
        }
        if let Some(addr) = config.listen.grpc {
            let listener = bind("grpc", addr, connections.backlog)?;
            addrs.grpc = Some(local_addr("grpc", &listener)?);
            let service = crate::envoy::EnvoyService::new(engine.clone()).into_server();
            let door = door("grpc", Protocol::Http2, &tls.grpc);
            tasks.spawn(serve_door(listener, door, service, stopped.clone()));
        }
        if let Some(addr) = config.listen.admin {
            let listener = bind("admin", addr, connections.backlog)?;
            addrs.admin = Some(local_addr("admin", &listener)?);
            let app = crate::admin::router(engine.clone(), stats.clone());
            let door = door("admin", Protocol::Http1, &tls.admin);
            tasks.spawn(serve_door(listener, door, app, stopped.clone()));
        }

        if let Some((addr, upstream, proxy_options)) = proxy {
            let listener = bind("proxy", addr, connections.backlog)?;
            addrs.proxy = Some(local_addr("proxy", &listener)?);
            // The door's settings are the service's, not the options'.
            let mut settings = proxy_options.clone();
            settings.connections = connections.clone();
            let tunnels = crate::proxy::tunnels(&settings, Some(stopped.clone()));
            let app = crate::proxy::router_to(
                engine.clone(),
                upstream,
                &settings,
                tls.proxy.is_some(),
                tunnels,
            );
            let door = door("proxy", Protocol::Auto, &tls.proxy);
            tasks.spawn(serve_door(listener, door, app, stopped.clone()));
        }

        tasks.spawn(reap_stats(engine.clone(), stopped.clone()));
        // (On every remote store: a reload may start leasing.)
        if engine.store().can_fail() {
            tasks.spawn(keep_leases(engine.clone(), stopped.clone()));
        }
        {
            // The store's state for watchers (the gRPC health service).
            let (engine, stopped) = (engine.clone(), stopped.clone());
            tasks.spawn(async move {
                engine.monitor_store(stopped).await;
                Ok(())
            });
        }

        // Without a file, the defaults still reload when they read files
        // of their own (envoyproxy/ratelimit's, Limitador's).
        let reloads = options.config_path.is_some()
            || engine.envoy_door().config_dir.is_some()
            || engine.limits().limitador().path().is_some();
        let reloader = reloads.then(|| {
            let source = reload::Source {
                path: options.config_path,
                overrides: options.overrides,
                serves_proxy: options.proxy.is_some(),
            };
            Arc::new(Mutex::new(Reloader::new(source, engine.clone())))
        });
        {
            let (reloader, interval) = (reloader.clone(), options.watch_interval);
            let hangup = reload::hangup_signal();
            let stopped = stopped.clone();
            let tls = tls.clone();
            tasks.spawn(async move {
                reload::watch(reloader, tls, interval, hangup, stopped).await;
                Ok(())
            });
        }
        Ok(Service {
            engine,
            addrs,
            stop,
            tasks,
            reloader,
            tls,
            termination: Some(Termination::catch()),
        })
    }

    /// The engine the front doors decide through.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The bound addresses.
    pub fn addrs(&self) -> Addrs {
        self.addrs
    }

    /// Re-reads the TLS doors' certificate, key and client CA files now:
    /// `Ok(true)` if a door's changed and new connections get the new
    /// ones. Files that do not load are refused with the first error and
    /// the running certificates stay (the doors whose files do load still
    /// change).
    pub fn reload_tls(&self) -> Result<bool, DoorTlsError> {
        self.tls.reload()
    }

    /// Re-reads the TLS files (logged, see [`Service::reload_tls`]) and
    /// the configuration file now. An invalid file is refused with its
    /// error and the running limits stay; without a file there is nothing
    /// more to do. The `[listen]` section only changes on a restart.
    pub async fn reload(&self) -> Result<(), ConfigError> {
        self.tls.reload_logged();
        if let Some(reloader) = &self.reloader {
            let outcome = reloader.lock().await.reload(true)?;
            if let Reloaded::Applied { limits } = outcome {
                tracing::info!(limits, "configuration reloaded");
            }
        }
        Ok(())
    }

    /// Asks every front door to stop: no new connections, requests in
    /// flight finish. [`Service::wait`] returns when they have.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until every front door has stopped (after
    /// [`Service::shutdown`], or a failure).
    pub async fn wait(mut self) -> Result<(), ServeError> {
        let mut first_error = None;
        while let Some(joined) = self.tasks.join_next().await {
            match joined {
                Ok(Ok(())) => {}
                Ok(Err(error)) => {
                    // One door failing stops the others: a half-running
                    // service would look healthy to its checks.
                    let _ = self.stop.send(true);
                    first_error.get_or_insert(error);
                }
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(_) => {}
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Serves until SIGTERM or Ctrl-C (caught since [`ServiceBuilder::start`]),
    /// then shuts down gracefully.
    pub async fn run(mut self) -> Result<(), ServeError> {
        let mut stopped = self.stop.subscribe();
        let mut termination = self.termination.take().unwrap_or_else(Termination::catch);
        tokio::select! {
            () = termination.wait() => {
                tracing::info!("stopping: finishing the requests in flight");
                self.shutdown();
            }
            _ = stopped.wait_for(|stop| *stop) => {}
        }
        self.wait().await
    }
}

/// Where `door`'s address is set, to name in an error: the setting and
/// the command line's flag that change it.
fn setting(door: &str) -> String {
    match door {
        "proxy" => "the proxy (--listen)".to_owned(),
        _ => format!("[listen] {door} (--{door})"),
    }
}

/// A listener for `door` on `addr`, whose kernel queue holds `backlog`
/// connections not yet accepted (at most `net.core.somaxconn`, which the
/// kernel applies silently: a smaller one is logged).
fn bind(door: &'static str, addr: SocketAddr, backlog: u32) -> Result<TcpListener, ServeError> {
    let error = |source: std::io::Error| match source.kind() {
        std::io::ErrorKind::AddrInUse => ServeError::AddrInUse { door, addr },
        _ => ServeError::Bind { door, addr, source },
    };
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    }
    .map_err(error)?;
    // As std's listeners: a restarted service rebinds its port at once,
    // past the old connections' TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuseaddr(true).map_err(error)?;
    socket.bind(addr).map_err(error)?;
    if let Some(max) = somaxconn().filter(|max| *max < backlog) {
        tracing::info!(
            door,
            backlog,
            somaxconn = max,
            "the kernel queues at most net.core.somaxconn connections per listener"
        );
    }
    socket.listen(backlog).map_err(error)
}

/// The system's cap on a listener's backlog, where it can be read.
fn somaxconn() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn local_addr(door: &'static str, listener: &TcpListener) -> Result<SocketAddr, ServeError> {
    listener
        .local_addr()
        .map_err(|source| ServeError::Serve { door, source })
}

/// Resolves when `stopped` turns true (or its sender is gone).
async fn stop_signal(mut stopped: watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// Serves one door until `stopped`.
async fn serve_door<S, B>(
    listener: TcpListener,
    door: Door,
    service: S,
    stopped: watch::Receiver<bool>,
) -> Result<(), ServeError>
where
    S: tower::Service<http::Request<crate::listen::RequestBody>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    crate::listen::serve(listener, door, service, stop_signal(stopped)).await;
    Ok(())
}

/// Drops the per-key denial counts of keys not denied lately, every few
/// seconds, until `stopped`.
async fn reap_stats(engine: Engine, mut stopped: watch::Receiver<bool>) -> Result<(), ServeError> {
    let mut ticker = tokio::time::interval(Duration::from_secs(5));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                engine.stats().reap(engine.wall_now());
            }
            _ = stopped.wait_for(|stop| *stop) => return Ok(()),
        }
    }
}

/// Gives back the leased units of keys gone quiet, every second, and
/// every unit still leased once the service stops (what the policies allow
/// back: see `ratekeeper::store::lease`), so that other nodes can spend
/// them.
async fn keep_leases(engine: Engine, mut stopped: watch::Receiver<bool>) -> Result<(), ServeError> {
    let mut ticker = tokio::time::interval(Duration::from_secs(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // The sweep runs outside the select: `wait_for`'s future is not
        // `Send` while it is kept across an await.
        let stop = tokio::select! {
            _ = ticker.tick() => false,
            _ = stopped.wait_for(|stop| *stop) => true,
        };
        if stop {
            break;
        }
        engine.store().sweep_leases().await;
    }
    let returned = engine.store().give_back_leases().await;
    if returned > 0 {
        tracing::info!(units = returned, "leased units given back to the store");
    }
    Ok(())
}

/// SIGTERM and Ctrl-C, caught from the moment [`ServiceBuilder::start`] returns:
/// a signal sent as soon as the service says where it listens is never
/// missed (nor takes the process down with the default action).
#[derive(Debug)]
struct Termination {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Termination {
    fn catch() -> Termination {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signals = signal(SignalKind::terminate())
                .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
                .ok();
            Termination { signals }
        }
        #[cfg(not(unix))]
        Termination {}
    }

    async fn wait(&mut self) {
        #[cfg(unix)]
        if let Some((term, interrupt)) = &mut self.signals {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}
