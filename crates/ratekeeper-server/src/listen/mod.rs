//! Serving connections, for every front door: the accept loop, the caps,
//! the timeouts and the shutdown that `[listen.connections]` and
//! `[listen.http2]` configure ([`ConnectionConfig`]).
//!
//! Each door (HTTP, gRPC, admin, proxy) runs one accept loop that keeps at
//! most its cap of connections open, and counts in one place, its room
//! (`room.rs`), what its connections hold: a slot each, and the HTTP/2
//! streams each keeps room for (up to `max_streams_total` per door). A
//! connection's slot and memory are reclaimable at every stage of its
//! life: while it opens (TLS handshake, protocol detection), while a
//! request's head or body arrives, and while its answers wait for the peer
//! to read them. When the door is full, the least useful connection gives
//! way at once: a stalled one first (the longest stalled), then the
//! longest idle, provided it has been so for a second; a connection working
//! for its client never does. So clients holding connections they do not
//! use cannot lock out the ones that do, and a newcomer waits for no
//! timeout. The admin port has a cap of its own, so health checks answer
//! while the other doors are full. Every connection is closed:
//!
//! - abruptly, when it is stalled past its timeout: a TLS handshake past
//!   `handshake_timeout`, a request's head past `header_timeout` from its
//!   first byte (and, on HTTP/1.1, a new connection that sends no request
//!   within it), bodies it waits for that send nothing for `body_timeout`,
//!   answers its peer reads none of for `send_timeout` (nginx's
//!   `send_timeout`: an HTTP/2 window held at zero, a socket that takes no
//!   bytes); or when it gives way while stalled. A client that slow is owed
//!   no answer, and what it held is given back at once;
//! - gently, when it has had no request in flight for `idle_timeout`, is
//!   older than `max_connection_age` (gRPC), or gives way while idle:
//!   requests in flight finish, HTTP/2 clients get a GOAWAY;
//! - at shutdown: the listener closes at once, requests in flight get
//!   `shutdown_grace` to finish, and what is left is then closed.
//!
//! A request of the decision doors that takes longer than
//! `request_timeout` is reset. A socket the service closes gently first
//! sends its FIN and drops what the client still sends for a moment, so
//! that a response already written is not lost to a reset.
//!
//! What this bounds, at the defaults, is in docs/security.md ("Hostile
//! connections"): per connection, per stream, in all.
//!
//! The proxy's door speaks both HTTP/1.1 (with upgrades, for WebSocket)
//! and HTTP/2, telling them apart by the connection's first bytes (see
//! `detect.rs`); the other doors speak one.
//!
//! An HTTP/2 connection runs its calls inside its own task, so that the
//! responses ready at one moment leave in one write (see `streams.rs`).
//!
//! The caps must fit the process's open-file limit: [`fit_open_files`]
//! raises the soft limit to the hard one and lowers the caps that would not
//! fit, so that running out of descriptors makes new connections wait
//! instead of failing the ones already served.

mod accept;
mod activity;
mod body;
mod connection;
mod detect;
mod errors;
mod files;
mod room;
mod service;
mod socket;
mod stats;
mod streams;
pub(crate) mod tls;
mod when_woken;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use accept::serve;
pub(crate) use files::fit_open_files;
pub use stats::ConnectionStats;
pub(crate) use stats::DoorSnapshot;

use crate::config::{ConnectionConfig, Http2Config};
pub(crate) use body::RequestBody;
use room::Room;
use stats::DoorStats;
use tls::TlsListener;

/// The HTTP version a door speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/1.1: the JSON API, nginx's `auth_request`, admin, the proxy.
    Http1,
    /// HTTP/2 with prior knowledge: gRPC.
    Http2,
    /// Either, as each client speaks: HTTP/2 when its connection opens
    /// with HTTP/2's preface (with prior knowledge, `h2c`, or after ALPN
    /// chose `h2`), HTTP/1.1 otherwise. The proxy.
    Auto,
}

/// One door's settings, from [`ConnectionConfig`].
#[derive(Clone, Debug)]
pub(crate) struct Door {
    pub(crate) name: &'static str,
    pub(crate) protocol: Protocol,
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) send_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) max_header_bytes: usize,
    pub(crate) shutdown_grace: Duration,
    pub(crate) http2: Http2Config,
    pub(crate) stats: Arc<DoorStats>,
    /// The door's connections and their HTTP/2 streams.
    pub(crate) room: Arc<Room>,
    /// The door's TLS, if it serves TLS: each connection's handshake must
    /// finish within `handshake_timeout`.
    pub(crate) tls: Option<Arc<TlsListener>>,
}

impl Door {
    /// The door `name` with the settings of `config`: the admin port's cap
    /// for `admin`, no request timeout for `proxy` (its requests stream to
    /// the upstream, which has timeouts of its own).
    pub(crate) fn new(
        name: &'static str,
        protocol: Protocol,
        config: &ConnectionConfig,
        stats: &ConnectionStats,
    ) -> Door {
        let max_connections = if name == "admin" {
            config.max_admin_connections
        } else {
            config.max_connections
        };
        Door {
            name,
            protocol,
            max_connections,
            header_timeout: config.header_timeout,
            handshake_timeout: config.handshake_timeout,
            body_timeout: config.body_timeout,
            send_timeout: config.send_timeout,
            idle_timeout: config.idle_timeout,
            request_timeout: (name != "proxy").then_some(config.request_timeout),
            max_header_bytes: config.max_header_bytes,
            shutdown_grace: config.shutdown_grace,
            http2: config.http2.clone(),
            // The proxy's bodies stream through to the upstream: it holds
            // no more than the flow-control windows let in.
            room: Arc::new(Room::new(
                config.http2.max_streams_total,
                (name != "proxy").then_some(config.max_request_bytes_total),
                stats.door(name),
            )),
            stats: stats.door(name),
            tls: None,
        }
    }

    /// How often the driver of a busy connection looks whether it has
    /// stalled (its answers unread, its bodies not coming): half the
    /// shorter of the two timeouts, so that a stall is caught within one
    /// and a half of its timeout.
    pub(crate) fn stall_check_every(&self) -> Duration {
        self.send_timeout.min(self.body_timeout) / 2
    }
}
