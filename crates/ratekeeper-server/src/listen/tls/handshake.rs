//! Why one connection's TLS handshake failed.

use std::time::Duration;

use thiserror::Error;

/// Why one connection's TLS handshake failed: that connection is closed,
/// and the listener goes on.
#[derive(Debug, Error)]
pub(crate) enum HandshakeError {
    /// The client did not finish the handshake in time.
    #[error("the TLS handshake did not finish within {0:?}")]
    Timeout(Duration),
    /// The handshake failed: not TLS, no protocol in common, a client
    /// certificate missing or not signed by the CA.
    #[error("the TLS handshake failed: {0}")]
    Failed(#[source] std::io::Error),
}
