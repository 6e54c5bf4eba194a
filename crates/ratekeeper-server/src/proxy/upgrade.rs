//! Protocol upgrades (WebSocket) through the proxy: once the upstream has
//! answered `101 Switching Protocols` and the client has been told, the
//! bytes of both connections are copied both ways until either closes.
//!
//! The upgrade request was rate-limited like any other; what follows it is
//! one long exchange that no limit counts again. The tunnel holds the
//! client's connection slot (its socket) for as long as it lasts.

use axum::http::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use axum::http::{Request, Version};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

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

/// Copies between the client and the upstream once both have switched.
pub(crate) async fn tunnel(client: OnUpgrade, upstream: OnUpgrade) {
    let (client, upstream) = match tokio::try_join!(client, upstream) {
        Ok(both) => both,
        Err(error) => {
            tracing::debug!(%error, "proxy: an upgrade did not complete");
            return;
        }
    };
    let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
    if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
        tracing::debug!(%error, "proxy: an upgraded connection ended with an error");
    }
}
