//! The five seed systems, rebuilt on ratekeeper's public API.
//!
//! ratekeeper grew from five documents describing rate limiters written in
//! other languages and one product's requirements. Each is rebuilt here as a
//! runnable example, and each example has an integration test of what its
//! document promises:
//!
//! | seed | example | what it shows |
//! |---|---|---|
//! | 000 | `axum_middleware` | axum app: 100 per 60 s per client address, a bucket of 10 per API key on `POST /`, `max_keys`, a window shared through Redis by a custom `WindowCounter` |
//! | 001 | `sqlite_shared_file` | the package README's two transcripts, line for line; one SQLite file shared by two processes |
//! | 002 | `tutorial` | the tutorial's printed outputs: a bucket, per-key limits, 100 callers under a limit of 10, the boundary burst |
//! | 003 | `named_actions` | an application's five actions from environment variables, the exact and the sharded door, blocked counters reaped by the cleanup |
//! | 004 | `service_requirements` | an axum service with four sliding-window limits all or nothing, a cached url parser and the admin stats |
//!
//! Run one with `cargo run -p ratekeeper-examples --example NAME`.
//!
//! This library holds only what the examples share: reading configuration
//! values ([`var_or`]) and serving an axum router on loopback ([`Server`]).

use std::fmt::Display;
use std::io;
use std::net::SocketAddr;
use std::str::FromStr;

use axum::Router;
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A configuration value that could not be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("{name}={value:?}: {reason}")]
pub struct EnvError {
    /// The variable's name.
    pub name: String,
    /// The value it had.
    pub value: String,
    /// What was wrong with it.
    pub reason: String,
}

impl EnvError {
    /// An error for `name`, whose value `value` was wrong for `reason`.
    pub fn new(name: &str, value: &str, reason: impl Display) -> Self {
        EnvError {
            name: name.to_owned(),
            value: value.to_owned(),
            reason: reason.to_string(),
        }
    }
}

/// The value of the variable `name` as `lookup` finds it, parsed as `T`, or
/// `default` when it is unset or blank.
///
/// `lookup` is usually `|name| std::env::var(name).ok()`; tests pass a map
/// instead of changing the process's environment.
///
/// ```
/// use ratekeeper_examples::var_or;
///
/// let lookup = |name: &str| (name == "AUTH_RATE_LIMIT").then(|| "25".to_owned());
/// assert_eq!(var_or(&lookup, "AUTH_RATE_LIMIT", 10u64), Ok(25));
/// assert_eq!(var_or(&lookup, "PUBLISH_RATE_LIMIT", 0u64), Ok(0));
///
/// let bad = |_: &str| Some("ten".to_owned());
/// let error = var_or(&bad, "AUTH_RATE_LIMIT", 10u64).unwrap_err();
/// assert_eq!(error.name, "AUTH_RATE_LIMIT");
/// ```
pub fn var_or<T>(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: T,
) -> Result<T, EnvError>
where
    T: FromStr,
    T::Err: Display,
{
    match lookup(name) {
        Some(value) if !value.trim().is_empty() => value
            .trim()
            .parse()
            .map_err(|error| EnvError::new(name, &value, error)),
        _ => Ok(default),
    }
}

/// An axum router served on a TCP listener, with each connection's peer
/// address available to handlers and middleware (axum's
/// `ConnectInfo<SocketAddr>`), until [`shutdown`](Server::shutdown) or drop.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// Binds `addr` (port 0 picks a free one) and serves `router` there on
    /// the current Tokio runtime.
    pub async fn start(router: Router, addr: SocketAddr) -> io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        let task = tokio::spawn(async move {
            axum::serve(listener, service)
                .with_graceful_shutdown(async {
                    // A dropped sender stops the server as well.
                    let _ = stopped.await;
                })
                .await
        });
        Ok(Server {
            addr,
            stop: Some(stop),
            task,
        })
    }

    /// Where the server listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Stops accepting, lets requests in flight finish and waits for the
    /// server to end.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(join) => Err(io::Error::other(join)),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
