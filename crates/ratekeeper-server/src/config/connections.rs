//! `[listen.connections]` and `[listen.http2]`: how every front door treats
//! its connections, so that slow, idle or too many clients cannot take the
//! service down for everyone else.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::validate::Checker;
use ratekeeper::duration::parse as parse_duration;

/// How the front doors treat their connections.
///
/// Every timeout and cap has a default a platform team can run with; see
/// the field docs and [`ConnectionConfig::default`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionConfig {
    /// Open connections each of the HTTP, gRPC and proxy doors keeps at
    /// most. At the cap, connections with no request in flight are closed
    /// to make room, and new ones wait in the kernel's queue.
    pub max_connections: usize,
    /// Open connections the admin port keeps at most: a share of its own,
    /// so health checks answer while the other doors are full.
    pub max_admin_connections: usize,
    /// How long a request's head may take to arrive, from its first byte
    /// (and a new connection's first request, from the connection).
    pub header_timeout: Duration,
    /// How long a TLS handshake may take, from the connection's accept.
    pub handshake_timeout: Duration,
    /// How long a connection whose requests in flight all wait for their
    /// bodies may go without receiving a byte of them (nginx's
    /// `client_body_timeout`).
    pub body_timeout: Duration,
    /// How long a connection with answers to send may go without its peer
    /// reading any (nginx's `send_timeout`): HTTP/2 answers held by a flow
    /// control window the peer never opens, or bytes the socket cannot
    /// take.
    pub send_timeout: Duration,
    /// How long a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// How long one request of the decision doors (HTTP, gRPC, admin) may
    /// take, its body included; past it the request is reset. The proxy's
    /// requests, which stream to the upstream, have none.
    pub request_timeout: Duration,
    /// The most bytes a request's head may hold (HTTP/1.1 request line and
    /// headers; HTTP/2 header list).
    pub max_header_bytes: usize,
    /// The most bytes of requests still arriving each decision door holds
    /// at once: for each request whose body has not come whole in one go,
    /// its head and its body so far (a body is read whole before its
    /// decision, up to `[requests] max_body_bytes`). Past it the request
    /// that would go over fails, and connections whose bodies have stalled
    /// give way. The proxy's bodies stream through and are not counted.
    pub max_request_bytes_total: usize,
    /// After SIGTERM: how long requests in flight may take to finish before
    /// the connections left are closed.
    pub shutdown_grace: Duration,
    /// How many connections the kernel may queue for each door before the
    /// service accepts them (`listen(2)`'s backlog), at most the system's
    /// `net.core.somaxconn`.
    pub backlog: u32,
    /// The gRPC door's HTTP/2 settings.
    pub http2: Http2Config,
}

impl ConnectionConfig {
    /// The default [`ConnectionConfig::max_connections`].
    pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 3_072;
    /// The default [`ConnectionConfig::max_admin_connections`].
    pub(crate) const DEFAULT_MAX_ADMIN_CONNECTIONS: usize = 256;
    /// The largest connection cap accepted.
    pub(crate) const LIMIT_MAX_CONNECTIONS: usize = 1 << 20;
    /// The largest `max_header_bytes` accepted.
    pub(crate) const LIMIT_MAX_HEADER_BYTES: usize = 1 << 20;
    /// The smallest `max_header_bytes` accepted: HTTP/1.1's read buffer
    /// cannot be smaller.
    pub(crate) const MIN_HEADER_BYTES: usize = 8 * 1024;
    /// The default [`ConnectionConfig::max_request_bytes_total`]: 16 MiB.
    pub(crate) const DEFAULT_MAX_REQUEST_BYTES_TOTAL: usize = 16 << 20;
    /// The largest `max_request_bytes_total` accepted: 64 GiB.
    pub(crate) const LIMIT_MAX_REQUEST_BYTES_TOTAL: usize = 64 << 30;
    /// The default [`ConnectionConfig::backlog`]: 4,096, as Linux's
    /// `net.core.somaxconn` (since 5.4). A flood of connections that the
    /// caps keep out waits in this queue rather than having its SYNs
    /// dropped, and so do the newcomers among it: with 1,024, 6,000
    /// half-finished TLS handshakes left new clients behind 1 s and 3 s SYN
    /// retransmits (scripts/hostile.sh, BENCHMARKS.md).
    pub(crate) const DEFAULT_BACKLOG: u32 = 4_096;
    /// The largest `backlog` accepted (the kernel caps it at
    /// `net.core.somaxconn` anyway).
    pub(crate) const LIMIT_BACKLOG: u32 = 65_535;
}

impl Default for ConnectionConfig {
    /// 3,072 connections per door and 256 on the admin port; a TLS
    /// handshake within 3 s, a request's head within 10 s and no 10 s
    /// without a byte of its body, answers read within 10 s, connections
    /// idle for at most 60 s, decisions within 30 s, heads up to 32 KiB,
    /// 16 MiB of requests arriving per door, 5 s for requests in flight at
    /// shutdown, and 1,024 connections queued.
    fn default() -> Self {
        ConnectionConfig {
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
            max_admin_connections: Self::DEFAULT_MAX_ADMIN_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(3),
            body_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            max_header_bytes: 32 * 1024,
            max_request_bytes_total: Self::DEFAULT_MAX_REQUEST_BYTES_TOTAL,
            shutdown_grace: Duration::from_secs(5),
            backlog: Self::DEFAULT_BACKLOG,
            http2: Http2Config::default(),
        }
    }
}

/// The gRPC door's HTTP/2 settings.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Http2Config {
    /// Streams (calls) one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// Streams one door keeps at most over all its HTTP/2 connections,
    /// counting for each connection the most it has had open at once (h2
    /// keeps room for those until the connection closes). Past it new
    /// streams are refused with `REFUSED_STREAM`, and stalled or idle
    /// connections are closed to make room.
    pub max_streams_total: usize,
    /// How often a connection is pinged to check its peer is there; `None`:
    /// never.
    pub keepalive_interval: Option<Duration>,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// How long a connection may live before it is asked to close (gently:
    /// calls in flight finish), so that clients re-resolve the service's
    /// name and spread over new replicas; `None`: for ever.
    pub max_connection_age: Option<Duration>,
}

impl Http2Config {
    /// The largest `max_concurrent_streams` accepted.
    pub(crate) const LIMIT_MAX_CONCURRENT_STREAMS: u32 = 1 << 16;
    /// The default [`Http2Config::max_streams_total`].
    pub(crate) const DEFAULT_MAX_STREAMS_TOTAL: usize = 16_384;
    /// The largest `max_streams_total` accepted.
    pub(crate) const LIMIT_MAX_STREAMS_TOTAL: usize = 1 << 24;
}

impl Default for Http2Config {
    /// 1,024 streams per connection and 16,384 per door, a ping every
    /// 30 s answered within 10 s, and no age limit.
    fn default() -> Self {
        Http2Config {
            max_concurrent_streams: 1024,
            max_streams_total: Self::DEFAULT_MAX_STREAMS_TOTAL,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(10),
            max_connection_age: None,
        }
    }
}

/// `[listen.connections]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileConnections {
    max_connections: Option<Spanned<u64>>,
    max_admin_connections: Option<Spanned<u64>>,
    header_timeout: Option<Spanned<String>>,
    handshake_timeout: Option<Spanned<String>>,
    body_timeout: Option<Spanned<String>>,
    send_timeout: Option<Spanned<String>>,
    idle_timeout: Option<Spanned<String>>,
    request_timeout: Option<Spanned<String>>,
    max_header_bytes: Option<Spanned<u64>>,
    max_request_bytes_total: Option<Spanned<u64>>,
    shutdown_grace: Option<Spanned<String>>,
    backlog: Option<Spanned<u64>>,
}

/// `[listen.http2]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileHttp2 {
    max_concurrent_streams: Option<Spanned<u64>>,
    max_streams_total: Option<Spanned<u64>>,
    keepalive_interval: Option<Spanned<String>>,
    keepalive_timeout: Option<Spanned<String>>,
    max_connection_age: Option<Spanned<String>>,
}

/// The longest timeout accepted: a day.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl Checker<'_> {
    /// `[listen.connections]` and `[listen.http2]`, checked.
    pub(super) fn connections(
        &self,
        connections: Option<Spanned<FileConnections>>,
        http2: Option<Spanned<FileHttp2>>,
    ) -> Result<ConnectionConfig, ConfigError> {
        let mut config = ConnectionConfig::default();
        if let Some(file) = connections.map(Spanned::into_inner) {
            let field = |name: &str| format!("listen.connections.{name}");
            let count = |value: &Option<Spanned<u64>>, name: &str, min: usize, max: usize| {
                self.count(value, field(name), name, min, max)
            };
            let max = ConnectionConfig::LIMIT_MAX_CONNECTIONS;
            config.max_connections = count(&file.max_connections, "max_connections", 1, max)?
                .unwrap_or(config.max_connections);
            config.max_admin_connections =
                count(&file.max_admin_connections, "max_admin_connections", 1, max)?
                    .unwrap_or(config.max_admin_connections);
            config.max_header_bytes = count(
                &file.max_header_bytes,
                "max_header_bytes",
                ConnectionConfig::MIN_HEADER_BYTES,
                ConnectionConfig::LIMIT_MAX_HEADER_BYTES,
            )?
            .unwrap_or(config.max_header_bytes);
            config.max_request_bytes_total = count(
                &file.max_request_bytes_total,
                "max_request_bytes_total",
                64 * 1024,
                ConnectionConfig::LIMIT_MAX_REQUEST_BYTES_TOTAL,
            )?
            .unwrap_or(config.max_request_bytes_total);
            let backlog = ConnectionConfig::LIMIT_BACKLOG as usize;
            if let Some(n) = count(&file.backlog, "backlog", 1, backlog)? {
                // At most 65,535, so the cast is exact.
                config.backlog = n as u32;
            }
            // "off" is refused for these, so a written value is always a duration.
            let timeout = |value: &Option<Spanned<String>>, name: &str, default: Duration| {
                Ok::<_, ConfigError>(
                    self.duration(value, field(name), false)?
                        .flatten()
                        .unwrap_or(default),
                )
            };
            config.header_timeout = timeout(
                &file.header_timeout,
                "header_timeout",
                config.header_timeout,
            )?;
            config.handshake_timeout = timeout(
                &file.handshake_timeout,
                "handshake_timeout",
                config.handshake_timeout,
            )?;
            config.body_timeout = timeout(&file.body_timeout, "body_timeout", config.body_timeout)?;
            config.send_timeout = timeout(&file.send_timeout, "send_timeout", config.send_timeout)?;
            config.idle_timeout = timeout(&file.idle_timeout, "idle_timeout", config.idle_timeout)?;
            config.request_timeout = timeout(
                &file.request_timeout,
                "request_timeout",
                config.request_timeout,
            )?;
            config.shutdown_grace = timeout(
                &file.shutdown_grace,
                "shutdown_grace",
                config.shutdown_grace,
            )?;
        }
        if let Some(file) = http2.map(Spanned::into_inner) {
            let field = |name: &str| format!("listen.http2.{name}");
            let h2 = &mut config.http2;
            let streams = Http2Config::LIMIT_MAX_CONCURRENT_STREAMS as usize;
            if let Some(n) = self.count(
                &file.max_concurrent_streams,
                field("max_concurrent_streams"),
                "max_concurrent_streams",
                1,
                streams,
            )? {
                // At most 2^16, so the cast is exact.
                h2.max_concurrent_streams = n as u32;
            }
            if let Some(n) = self.count(
                &file.max_streams_total,
                field("max_streams_total"),
                "max_streams_total",
                1,
                Http2Config::LIMIT_MAX_STREAMS_TOTAL,
            )? {
                h2.max_streams_total = n;
            }
            if let Some(every) =
                self.duration(&file.keepalive_interval, field("keepalive_interval"), true)?
            {
                h2.keepalive_interval = every;
            }
            if let Some(Some(within)) =
                self.duration(&file.keepalive_timeout, field("keepalive_timeout"), false)?
            {
                h2.keepalive_timeout = within;
            }
            if let Some(age) =
                self.duration(&file.max_connection_age, field("max_connection_age"), true)?
            {
                h2.max_connection_age = age;
            }
        }
        Ok(config)
    }

    /// A whole number from `min` to `max`, if written.
    fn count(
        &self,
        value: &Option<Spanned<u64>>,
        field: String,
        name: &str,
        min: usize,
        max: usize,
    ) -> Result<Option<usize>, ConfigError> {
        let Some(value) = value else {
            return Ok(None);
        };
        match usize::try_from(*value.get_ref()) {
            Ok(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => self.fail(
                value.span(),
                field,
                format!("{name} is {}, outside {min} to {max}", value.get_ref()),
            ),
        }
    }

    /// A duration such as `"10s"` or `"250ms"` from 1 ms to a day, if
    /// written; `"off"` is `Some(None)` where `off_allowed`.
    fn duration(
        &self,
        value: &Option<Spanned<String>>,
        field: String,
        off_allowed: bool,
    ) -> Result<Option<Option<Duration>>, ConfigError> {
        let Some(value) = value else {
            return Ok(None);
        };
        let text = value.get_ref().trim();
        if text == "off" {
            if off_allowed {
                return Ok(Some(None));
            }
            return self.fail(
                value.span(),
                field,
                "this cannot be \"off\"; give a duration such as \"10s\"",
            );
        }
        let off = if off_allowed { ", or \"off\"" } else { "" };
        match parse_duration(text) {
            Ok(d) if d >= Duration::from_millis(1) && d <= MAX_TIMEOUT => Ok(Some(Some(d))),
            Ok(d) => self.fail(
                value.span(),
                field,
                format!("{d:?} is outside 1ms to 24h{off}"),
            ),
            Err(error) => self.fail(
                value.span(),
                field,
                format!("invalid duration {text:?} ({error}); expected a number and a unit such as \"10s\", \"250ms\", \"5m\"{off}"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn parse(sections: &str) -> Result<ConnectionConfig, String> {
        let limit = "[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"global\"]\n";
        Config::from_toml_str(&format!("{limit}{sections}"), "test.toml")
            .map(|config| config.listen.connections)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn the_stall_timeouts_backlog_and_door_totals_are_read() {
        let config = parse(
            "[listen.connections]\nhandshake_timeout = \"2s\"\nbody_timeout = \"4s\"\n\
             send_timeout = \"5s\"\nbacklog = 4096\nmax_request_bytes_total = 1048576\n\
             [listen.http2]\nmax_streams_total = 100",
        )
        .unwrap();
        assert_eq!(config.handshake_timeout, Duration::from_secs(2));
        assert_eq!(config.body_timeout, Duration::from_secs(4));
        assert_eq!(config.send_timeout, Duration::from_secs(5));
        assert_eq!(config.backlog, 4096);
        assert_eq!(config.max_request_bytes_total, 1 << 20);
        assert_eq!(config.http2.max_streams_total, 100);
        assert_eq!(parse("").unwrap(), ConnectionConfig::default());
    }

    #[test]
    fn values_out_of_bounds_name_their_field() {
        for (section, field) in [
            (
                "[listen.connections]\nsend_timeout = \"off\"",
                "send_timeout",
            ),
            (
                "[listen.connections]\nbody_timeout = \"0s\"",
                "body_timeout",
            ),
            (
                "[listen.connections]\nhandshake_timeout = \"2d\"",
                "handshake_timeout",
            ),
            ("[listen.connections]\nbacklog = 0", "backlog"),
            ("[listen.connections]\nbacklog = 70000", "backlog"),
            (
                "[listen.connections]\nmax_request_bytes_total = 100",
                "max_request_bytes_total",
            ),
            ("[listen.http2]\nmax_streams_total = 0", "max_streams_total"),
        ] {
            let error = parse(section).unwrap_err();
            assert!(error.contains(field), "{section}: {error}");
        }
    }
}
