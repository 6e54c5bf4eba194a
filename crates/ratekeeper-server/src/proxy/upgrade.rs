//! Protocol upgrades (WebSocket) through the proxy: once the upstream has
//! answered `101 Switching Protocols` and the client has been told, the
//! bytes of both connections are copied both ways until either closes.
//!
//! The upgrade request was rate-limited like any other; what follows it is
//! one long exchange that no limit counts again. The tunnel holds the
//! client's connection slot (its socket) for as long as it lasts, so it
//! must end: after the door's `idle_timeout` with no byte either way (as
//! nginx's `proxy_read_timeout` ends its WebSocket tunnels; applications
//! ping within it), and at shutdown once the grace period is over.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use axum::http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use axum::http::{Request, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

/// How long a tunnel lives.
#[derive(Clone, Debug)]
pub(crate) struct TunnelLimits {
    /// Closed after this long without a byte either way.
    pub(crate) idle: Duration,
    /// Closed this long after the service starts stopping.
    pub(crate) grace: Duration,
    /// Turns true when the service starts stopping; `None`: never.
    pub(crate) stop: Option<watch::Receiver<bool>>,
}

/// The bytes copied at once, each way.
const BUFFER: usize = 16 * 1024;

use super::headers::connection_has;

/// The protocol an HTTP/1.1 request asks to switch to (its `Upgrade`,
/// with `Connection: upgrade`), if any.
pub(crate) fn requested<B>(request: &Request<B>) -> Option<HeaderValue> {
    if request.version() != Version::HTTP_11 || !connection_has(request.headers(), "upgrade") {
        return None;
    }
    request.headers().get(UPGRADE).cloned()
}

/// Puts the upgrade headers, which hop-by-hop removal took, back.
pub(crate) fn restore(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(UPGRADE, protocol);
    headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
}

/// Copies between the client and the upstream once both have switched,
/// until both sides have closed, the tunnel is idle too long, or the
/// service stops.
pub(crate) async fn tunnel(client: OnUpgrade, upstream: OnUpgrade, limits: TunnelLimits) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(both) => both,
        Err(error) => {
            tracing::debug!(%error, "proxy: an upgrade did not complete");
            return;
        }
    };
    let (client_read, client_write) = tokio::io::split(TokioIo::new(client));
    let (upstream_read, upstream_write) = tokio::io::split(TokioIo::new(upstream));
    let opened = Instant::now();
    let last = AtomicU64::new(0);
    // Each way on its own: one side slow to read must not stop the other
    // way (an echo would wait for itself).
    let copies = async {
        tokio::join!(
            copy(client_read, upstream_write, opened, &last),
            copy(upstream_read, client_write, opened, &last),
        )
    };
    let idle = async {
        loop {
            let since = opened + Duration::from_millis(last.load(Relaxed));
            let deadline = since + limits.idle;
            if Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep_until(deadline).await;
        }
    };
    let stopping = async {
        match limits.stop {
            // A sender gone is a service gone: stop as told.
            Some(mut stop) => drop(stop.wait_for(|stop| *stop).await),
            None => std::future::pending().await,
        }
        tokio::time::sleep(limits.grace).await;
    };
    tokio::select! {
        _ = copies => {}
        () = idle => tracing::debug!(idle = ?limits.idle, "proxy: closing an idle tunnel"),
        () = stopping => tracing::debug!("proxy: closing a tunnel at shutdown"),
    }
}

/// Copies `from` to `to` until `from` ends (then ends `to`'s writing side)
/// or either fails, noting in `last` when bytes last passed (milliseconds
/// after `opened`).
async fn copy<R, W>(mut from: R, mut to: W, opened: Instant, last: &AtomicU64)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0; BUFFER];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
        let millis = u64::try_from(opened.elapsed().as_millis()).unwrap_or(u64::MAX);
        last.fetch_max(millis, Relaxed);
    }
    let _ = to.shutdown().await;
}
