//! Connections that end with an error: counted by kind, and logged at most
//! once per [`LOG_EVERY`] per door, so that a flood of broken or abusive
//! connections (an HTTP/2 rapid reset, thousands a second) costs a counter
//! each, not a log line each.
//!
//! h2's own warnings about such connections are filtered out of the
//! default log (see `telemetry/logging.rs`): this is their one line.

use std::error::Error as StdError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How often a door logs a connection's error at most.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// How a connection ended badly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum ConnectionError {
    /// The client broke HTTP's rules, or HTTP/2's limits (too many
    /// resets, a flow-control violation): the service closed it.
    Protocol,
    /// The socket failed or the client went away mid-message.
    Io,
}

impl ConnectionError {
    /// Every kind, in the order of [`DoorSnapshot::errors`](super::DoorSnapshot::errors).
    pub(crate) const ALL: [ConnectionError; 2] = [ConnectionError::Protocol, ConnectionError::Io];

    /// The label value in `/metrics`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ConnectionError::Protocol => "protocol",
            ConnectionError::Io => "io",
        }
    }

    /// The kind of `error`, a connection's end.
    pub(crate) fn of(error: &hyper::Error) -> ConnectionError {
        if error.is_parse() || error.is_parse_too_large() || error.is_parse_version_h2() {
            return ConnectionError::Protocol;
        }
        let mut source: Option<&(dyn StdError + 'static)> = error.source();
        while let Some(cause) = source {
            if let Some(h2) = cause.downcast_ref::<h2::Error>() {
                // An error h2 found in what the peer sent, and answered with
                // a GOAWAY of its own.
                if h2.is_go_away() && h2.is_library() {
                    return ConnectionError::Protocol;
                }
            }
            source = cause.source();
        }
        ConnectionError::Io
    }
}

/// One door's connection errors.
#[derive(Debug, Default)]
pub(crate) struct ErrorLog {
    counts: [AtomicU64; ConnectionError::ALL.len()],
    /// When a line was last logged, and how many errors went unlogged
    /// since.
    last: Mutex<(Option<Instant>, u64)>,
}

impl ErrorLog {
    /// Counts `error` of `door`'s connection and logs it, unless a line
    /// was logged in the last [`LOG_EVERY`]: then the next line says how
    /// many were not.
    pub(crate) fn record(&self, door: &'static str, error: &hyper::Error) {
        let kind = ConnectionError::of(error);
        self.counts[kind as usize].fetch_add(1, Relaxed);
        let now = Instant::now();
        let unlogged = {
            let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
            if last.0.is_some_and(|at| now.duration_since(at) < LOG_EVERY) {
                last.1 += 1;
                return;
            }
            let unlogged = last.1;
            *last = (Some(now), 0);
            unlogged
        };
        match kind {
            ConnectionError::Protocol => tracing::warn!(
                door,
                %error,
                unlogged,
                "closed a connection that broke the protocol (unlogged: like errors since the last such line)"
            ),
            ConnectionError::Io => tracing::debug!(
                door,
                %error,
                unlogged,
                "a connection ended with an error"
            ),
        }
    }

    /// The counts, by kind, in the order of [`ConnectionError::ALL`].
    pub(crate) fn counts(&self) -> [(ConnectionError, u64); ConnectionError::ALL.len()] {
        ConnectionError::ALL.map(|kind| (kind, self.counts[kind as usize].load(Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_are_all_counted_and_logged_once_per_interval() {
        // A real hyper error: an HTTP/1.1 connection fed garbage.
        let (client, server) = tokio::io::duplex(1024);
        let serve = hyper::server::conn::http1::Builder::new().serve_connection(
            hyper_util::rt::TokioIo::new(server),
            hyper::service::service_fn(|_| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
            }),
        );
        let mut client = client;
        tokio::io::AsyncWriteExt::write_all(&mut client, b"NOT HTTP AT ALL\r\n\r\n")
            .await
            .unwrap();
        let error = serve.await.expect_err("garbage is not a request");
        assert_eq!(ConnectionError::of(&error), ConnectionError::Protocol);
        let log = ErrorLog::default();
        for _ in 0..1000 {
            log.record("test", &error);
        }
        assert_eq!(log.counts()[0], (ConnectionError::Protocol, 1000));
        let last = log.last.lock().unwrap();
        assert_eq!(
            last.1, 999,
            "one line logged, the rest counted for the next"
        );
    }
}
