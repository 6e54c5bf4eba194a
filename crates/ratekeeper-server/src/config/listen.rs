//! The `[listen]` section: the doors' addresses.

use std::net::SocketAddr;

use super::{ConnectionConfig, DoorTls};

/// The addresses to listen on; `None` turns a front door off.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListenConfig {
    /// The HTTP JSON API and nginx `auth_request` endpoint.
    pub http: Option<SocketAddr>,
    /// Envoy's rate limit service over gRPC.
    pub grpc: Option<SocketAddr>,
    /// Health, metrics, stats and the dashboard.
    pub admin: Option<SocketAddr>,
    /// Timeouts and caps of every door's connections.
    pub connections: ConnectionConfig,
    /// Which doors serve TLS (`[listen.tls.*]`); none by default.
    pub tls: DoorTls,
}

impl Default for ListenConfig {
    /// `127.0.0.1`, ports 8080 (HTTP), 8081 (gRPC) and 9090 (admin).
    fn default() -> Self {
        let local = |port| Some(SocketAddr::from(([127, 0, 0, 1], port)));
        ListenConfig {
            http: local(8080),
            grpc: local(8081),
            admin: local(9090),
            connections: ConnectionConfig::default(),
            tls: DoorTls::default(),
        }
    }
}
