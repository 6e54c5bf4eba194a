//! The service's configuration: a TOML file of the store, the listening
//! addresses and named limits, overridden by environment variables, and
//! checked before use.
//!
//! ```toml
//! [store]
//! kind = "memory"            # or "sqlite" (path), "redis" (url) or "redis-cluster" (urls)
//! max_keys = 100000          # keys kept in memory (the memory store, or the fallback)
//! on_failure = "closed"      # redis and sqlite: "closed" refuses, "open" allows on failure
//! fallback = false           # redis: decide in memory while Redis is down
//! # [store.tls]              # redis stores with rediss:// urls only
//! # ca = "/etc/ratekeeper/redis-ca.pem"   # verifies the server; default: the system's roots
//! # cert = "/etc/ratekeeper/client.pem"   # client certificate and key, when the server asks
//! # key = "/etc/ratekeeper/client.key"
//!
//! [listen]                   # each defaults to the address shown; "off" disables one
//! http = "127.0.0.1:8080"
//! grpc = "127.0.0.1:8081"
//! admin = "127.0.0.1:9090"
//!
//! [listen.tls.grpc]          # optional, per door (http, grpc, admin): serve TLS
//! cert = "server.pem"        # PEM certificate chain, the door's own first
//! key = "server.key"         # its private key: PKCS#8, PKCS#1 or SEC1 PEM
//! client_ca = "clients.pem"  # optional: require client certificates it signed (mTLS)
//!
//! [listen.connections]       # every door; durations as "10s", "250ms", "5m"
//! max_connections = 4096    # open connections per door (http, grpc, proxy)
//! max_admin_connections = 256 # the admin port's own share
//! header_timeout = "10s"     # a request's head, from its first byte (or from the connection)
//! idle_timeout = "60s"       # a connection with no request in flight is closed after this
//! request_timeout = "30s"    # one decision, body included (not the proxy's requests)
//! max_header_bytes = 32768   # a request's line and headers
//! shutdown_grace = "5s"      # after SIGTERM, for requests in flight
//!
//! [listen.http2]             # the gRPC door
//! max_concurrent_streams = 1024
//! keepalive_interval = "30s" # ping the client ("off": never)
//! keepalive_timeout = "10s"  # close if the ping goes unanswered
//! max_connection_age = "off" # e.g. "30m": close gently so clients re-resolve DNS
//!
//! [requests]                 # caps on one request, gRPC and JSON alike
//! max_descriptors = 256      # descriptors (and JSON "limits" names) per request
//! max_entries = 64           # entries per descriptor (and JSON "key" parts)
//! max_value_bytes = 16384    # bytes of a key, value, domain, method or path
//! max_override_rates = 32    # distinct Envoy override rates counted (a table each)
//! max_body_bytes = 65536     # one JSON body or gRPC message
//!
//! [runtime]
//! worker_threads = "auto"    # one per CPU the process may use (affinity, cgroup quota), or a number
//!
//! [[limits]]
//! name = "per-ip"
//! rate = "100/minute"        # the core's rate strings: "10/s burst 20", "5 per 30s"
//! policy = "gcra"            # token_bucket (default), gcra, fixed_window, sliding_log, sliding_window
//! key = ["client_ip"]        # peer, client_ip, route, global, header:NAME, descriptor:KEY
//! trusted_proxies = ["10.0.0.0/8"]   # for client_ip; default: none, the peer is the client; "private"
//! client_ip_from = "x-forwarded-for" # or "forwarded" (RFC 7239), "header:NAME" ("header:cf-connecting-ip")
//! # trusted_hops = 2         # instead of trusted_proxies: X-Forwarded-For behind exactly 2 proxies
//! ipv4_prefix = 32           # client_ip and peer are keyed by their network: IPv4 by address,
//! ipv6_prefix = 64           # IPv6 by /64 (56, 128...)
//! shadow = false             # decide and report, but never refuse
//! on_saturated = "deny"      # a new key while the store is full: "deny" (default) or "allow"
//! allow_overrides = true     # Envoy descriptor `limit` overrides may replace it (default true)
//! allow_refunds = true       # callers may give units back: /v1/refund, is_negative_hits (default true)
//! [limits.match]
//! domain = "edge"            # Envoy's domain
//! descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }]
//! methods = ["POST"]
//! path_prefix = "/api"
//!
//! [access.decisions]         # callers of /v1/* and gRPC must show a token (default: anyone)
//! token_file = "/run/secrets/ratekeeper/decisions"   # one or more tokens, one per line
//! [access.admin]             # the admin port but /healthz, /readyz (default: anyone)
//! token_env = "RATEKEEPER_ADMIN_TOKEN"                # or one token in an environment variable
//! ```
//!
//! # Store
//!
//! `memory` (the default) keeps up to `max_keys` keys in this process.
//! `sqlite` needs `path`; `redis` needs `url` (`redis://`, `rediss://` or
//! `redis+unix://`), `redis-cluster` needs `urls`; both take `prefix`
//! (default `ratekeeper:`, without `{` or `}`) and `timeout_ms` (default
//! 100). `redis` also takes `batch_in_flight` (default 4) and
//! `batch_max_calls` (default 64, at most 1,000; 1 turns batching off): up
//! to `batch_in_flight` scripts run at once, and decisions asked for while
//! they do go together, up to `batch_max_calls` in one script
//! ([`ratekeeper_redis::Batching`]). Fields that do not apply to the kind
//! are refused.
//!
//! `rediss://` URLs connect over TLS (rustls), verifying the server with
//! the system's roots. A `[store.tls]` table ([`StoreTls`]) changes that:
//! `ca` names a PEM bundle of the certificates that verify the server, and
//! `cert` and `key` (together) a PEM client certificate chain and its
//! private key, presented when the server asks for one (`redis-server`
//! does unless `tls-auth-clients no`). It is refused for the other stores
//! and unless every URL is `rediss://`. The files (relative paths from the
//! working directory) are read and parsed when the configuration is
//! checked, so `ratekeeper check` names a missing or unusable one with its
//! place; a server whose certificate the CA does not vouch for fails the
//! start with the handshake's reason. The environment names them too
//! (`RATEKEEPER_STORE__TLS__CA=/path`).
//!
//! # TLS on the doors
//!
//! A door with a `[listen.tls.http]`, `[listen.tls.grpc]` or
//! `[listen.tls.admin]` table serves TLS only, with rustls (TLS 1.2 and
//! 1.3, the ring provider), offering `h2` in ALPN on gRPC and `http/1.1`
//! on HTTP and admin. `cert` and `key` are PEM files; with
//! `client_ca`, a client must present a certificate signed by that CA or
//! the handshake fails (mTLS). Relative paths are from the working
//! directory, as `store.path`. Checking the configuration loads the files,
//! so a file that is missing, holds no certificate or key, or a key that
//! does not match the certificate, is an error at the field that names it
//! ([`TlsError`]). A table for a door that is `"off"` is not read and
//! only warned about ([`ConfigWarning::TlsForClosedDoor`]), so that an
//! environment can turn a door off without editing the file. The service
//! reads the files again on SIGHUP and when they change, keeping the
//! running certificate when the new files do not load. A handshake must
//! finish within `header_timeout`; one that fails closes only its
//! connection (counted in `/metrics` with `reason="handshake"`).
//!
//! # Requests
//!
//! `[requests]` caps what one decision request may hold, so that its work
//! stays small whatever a client sends. A gRPC request over a cap is
//! answered `INVALID_ARGUMENT`, a JSON one 413, with a message naming the
//! cap and its field (`the request has 257 descriptors, more than
//! requests.max_descriptors (256)`). Each is from 1 to a bound
//! ([`RequestCaps`]); the defaults are far above what Envoy sends.
//!
//! # Limits
//!
//! Each limit has a unique `name` (the core's [`Limit`] rules: printable
//! ASCII without spaces, quotes, backslashes, braces or colons), a `rate`
//! ([`Rate`] strings; a burst only for `token_bucket` and `gcra`), a `policy`
//! and a `key`: the parts the limited key is made of, in order, such as
//! `["client_ip", "route"]`. `global` stands alone: one count for everyone.
//! A limit without a `[limits.match]` table applies to every request.
//!
//! # The client's address
//!
//! `peer` is the socket peer. `client_ip` is the client as the limit's
//! trusted proxies name it, and no proxy is trusted unless told: by
//! default the socket peer is the client and every forwarding header is
//! ignored, since any client can write one. Say who your proxies are:
//!
//! - `trusted_proxies`: `"private"` (loopback, RFC 1918, RFC 4193,
//!   link-local and carrier-grade NAT networks) or a list of CIDRs,
//!   addresses and `"private"`. A request from one of them is read by
//!   `client_ip_from`: `"x-forwarded-for"` (the default; the rightmost
//!   address that is not a trusted proxy), `"forwarded"` (RFC 7239's
//!   `for=`, the same way) or `"header:NAME"` (one header the proxy always
//!   overwrites, such as `header:cf-connecting-ip`). A request from any
//!   other peer is that peer's, and a trusted proxy that sends no such
//!   header is the client itself.
//! - `trusted_hops = N` (1 to 16), instead: the `X-Forwarded-For` entry `N`
//!   places from the right, from any peer; right only when every request
//!   passes exactly `N` proxies of yours.
//!
//! At `/v1/auth` the socket peer is nginx: list its address
//! (`trusted_proxies = ["127.0.0.1"]` when it runs on the same host) so
//! that its `X-Real-IP` names the original request's peer.
//!
//! A request whose forwarding header a limit ignored because the peer is
//! not trusted is logged once per limit, with the fix, and counted in
//! `/metrics` (`ratekeeper_untrusted_forwarding_headers_total`).
//!
//! Addresses are keyed by their network, `ipv4_prefix` bits (1 to 32,
//! default 32: the address) and `ipv6_prefix` bits (1 to 128, default 64:
//! what one subscriber usually holds, so rotating addresses within it
//! gains nothing); an IPv4-mapped IPv6 address is its IPv4 address. Both go
//! with `client_ip` and `peer` ([`Prefixes`]). The key text is the bare
//! address at the full length and the network otherwise
//! (`2001:db8:1:2::/64`). `trusted_proxies`, `client_ip_from` and
//! `trusted_hops` only go with `client_ip`.
//!
//! `on_saturated` says what a request with a new key gets while the
//! in-memory table is full (see [`OnSaturated`]): `"deny"` (the default)
//! refuses it, so that filling the table with made-up keys never switches
//! a limit off; `"allow"` lets it through uncounted.
//!
//! In `match`, a descriptor without `value` matches any value (and the value
//! becomes part of the key), a value ending in `*` matches by prefix, and any
//! other value exactly, as in Envoy's own rate limit service.
//!
//! # Who may ask
//!
//! By default anyone who reaches a port may ask. Each limit may refuse
//! what a caller could otherwise do to it: `allow_overrides = false`
//! ignores an Envoy descriptor's `limit` override on a descriptor the limit
//! matches (the limit decides, the first is logged, and each is counted in
//! `ratekeeper_overrides_refused_total{limit}`); `allow_refunds = false`
//! refuses to give its units back (`/v1/refund` answers 403 naming it,
//! gRPC's `is_negative_hits` `PERMISSION_DENIED`). Both default to `true`,
//! as Envoy's own service honours both.
//!
//! `[access.decisions]` (the HTTP decision API, `/v1/auth` and the gRPC
//! door) and `[access.admin]` (the admin port but `/healthz`, `/readyz`
//! and the dashboard's page) each take `token_file` (a file of tokens, one
//! per line, blank lines and `#` comments skipped: two lines during a
//! rotation) or `token_env` (an environment variable holding one token).
//! Each token is at least 16 visible ASCII characters (see
//! [`crate::access`]). A token written in the configuration (`token = `)
//! is refused, and so are a missing, empty or unreadable file and an unset
//! or empty variable, naming the file or variable but never a token.
//! Tokens are read again on every reload, and a change of a token file
//! reloads the configuration, so rotating needs no restart. A relative
//! `token_file` is relative to the working directory.
//!
//! # Environment
//!
//! `RATEKEEPER_STORE__KIND=redis`, `RATEKEEPER_STORE__URL=redis://...`,
//! `RATEKEEPER_LISTEN__HTTP=0.0.0.0:8080`,
//! `RATEKEEPER_LISTEN__TLS__GRPC__CERT=/etc/tls/server.pem`,
//! `RATEKEEPER_ACCESS__DECISIONS__TOKEN_FILE=/run/secrets/rk` and, per limit,
//! `RATEKEEPER_LIMITS__PER_IP__RATE=50/minute` override the file; see
//! [`Config::from_toml_str_with_env`] for the scheme. Errors in an
//! overridden value name the variable.
//!
//! # Errors
//!
//! [`ConfigError`]'s messages read `FILE:LINE:COLUMN: FIELD: MESSAGE`, such
//! as `ratekeeper.toml:12:8: limits[1].rate: unknown time unit "fortnight" ...`.

mod access;
mod address;
mod connections;
mod env;
mod error;
mod file;
mod redact;
mod request_caps;
mod runtime;
mod store_tls;
mod tls;
mod validate;
mod warnings;

use std::fmt::{self, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{HeaderName, Method};
use ratekeeper::{store::FailureMode, Limit, Rate};
use ratekeeper_tower::client::ClientIp;

pub use access::AccessConfig;
pub use address::{Prefixes, DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX};
pub use connections::{ConnectionConfig, Http2Config};
pub use error::{ConfigError, Location};
pub use redact::redact_url;
pub(crate) use redact::redact_urls;
pub use request_caps::{CapError, RequestCaps};
pub use runtime::{available_cpus, RuntimeConfig, WorkerThreads};
pub use store_tls::StoreTls;
pub use tls::{DoorTls, TlsError, TlsFileKind, TlsFiles};
pub use warnings::ConfigWarning;

/// The configuration `ratekeeper serve` runs with when given none: an
/// in-memory store, loopback ports and one example limit.
pub const DEFAULT_TOML: &str = r#"# ratekeeper's built-in defaults
[store]
kind = "memory"
max_keys = 100000

[listen]
http = "127.0.0.1:8080"
grpc = "127.0.0.1:8081"
admin = "127.0.0.1:9090"

[listen.connections]
max_connections = 4096
max_admin_connections = 256
header_timeout = "10s"
idle_timeout = "60s"
request_timeout = "30s"
max_header_bytes = 32768
shutdown_grace = "5s"

[listen.http2]
max_concurrent_streams = 1024
keepalive_interval = "30s"
keepalive_timeout = "10s"
max_connection_age = "off"

[requests]
max_descriptors = 256
max_entries = 64
max_value_bytes = 16384
max_override_rates = 32
max_body_bytes = 65536

[runtime]
# One thread per CPU this process may use (its affinity mask and cgroup CPU
# quota); a number sets it.
worker_threads = "auto"

[[limits]]
name = "per-client"
rate = "100/minute"
policy = "gcra"
key = ["client_ip"]
# No proxy is trusted: the socket peer is the client and X-Forwarded-For is
# ignored. Behind a load balancer on your network: trusted_proxies = "private"
# (or its own CIDR).
trusted_proxies = []
# Keyed by network: IPv4 by address, IPv6 by /64.
ipv4_prefix = 32
ipv6_prefix = 64
on_saturated = "deny"
# Envoy's descriptor overrides and refunds (/v1/refund, is_negative_hits)
# are honoured, as Envoy's own service does: anyone who can ask can raise
# or restore a quota. false ignores overrides, refuses refunds.
allow_overrides = true
allow_refunds = true

# Who may ask: anyone who reaches a port, by default. Tokens come from a file
# (one per line) or an environment variable, never from this file:
# [access.decisions]        # /v1/* on the HTTP port, and gRPC
# token_file = "/run/secrets/ratekeeper/decisions"
# [access.admin]            # the admin port but /healthz and /readyz
# token_env = "RATEKEEPER_ADMIN_TOKEN"
"#;

/// This process's environment variables, for [`Config::load_with_env`]:
/// the `RATEKEEPER_` overrides, and the variables `token_env` may name.
/// Unlike [`std::env::vars`] it never panics: variables that are not valid
/// Unicode are skipped.
pub fn process_vars() -> impl Iterator<Item = (String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
}

/// The source name of [`DEFAULT_TOML`] in messages.
const DEFAULT_SOURCE: &str = "<built-in defaults>";

/// A checked configuration of the service.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// Where the counts are kept.
    pub store: StoreConfig,
    /// The addresses to listen on.
    pub listen: ListenConfig,
    /// How much one decision request may hold.
    pub requests: RequestCaps,
    /// The limits, in the file's order, with unique names.
    pub limits: Vec<LimitConfig>,
    /// The tokens callers must show (`[access]`), read from their files or
    /// variables.
    pub access: AccessConfig,
    /// The threads that serve the doors (`[runtime]`).
    pub runtime: RuntimeConfig,
}

/// The store and what to do when it fails.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreConfig {
    /// Which store.
    pub backend: Backend,
    /// How many keys the in-memory table (the store, or the fallback) keeps,
    /// in `1..=`[`ratekeeper::memory::MAX_KEYS`].
    pub max_keys: usize,
    /// Whether requests pass while a remote store fails.
    pub on_failure: FailureMode,
    /// Whether to decide in memory while a remote store fails.
    pub fallback: bool,
    /// The Redis stores' TLS files (`[store.tls]`), only with `rediss://`
    /// URLs; `None` otherwise, and for a `rediss://` URL verified by the
    /// system's roots without a client certificate.
    pub tls: Option<StoreTls>,
}

/// Which store keeps the counts.
///
/// Its `Debug` hides the passwords in Redis URLs (see [`redact_url`]), so a
/// configuration can be logged.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// This process's memory.
    Memory,
    /// A SQLite database file.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// One Redis server.
    Redis {
        /// Its URL.
        url: String,
        /// The prefix of every key.
        prefix: String,
        /// The timeout of each call.
        timeout: Duration,
        /// How concurrent decisions share scripts.
        batching: ratekeeper_redis::Batching,
    },
    /// A Redis Cluster.
    RedisCluster {
        /// The URLs of some of its nodes.
        urls: Vec<String>,
        /// The prefix of every key.
        prefix: String,
        /// The timeout of each call.
        timeout: Duration,
    },
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory => f.write_str("Memory"),
            Backend::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => f
                .debug_struct("Redis")
                .field("url", &redact_url(url))
                .field("prefix", prefix)
                .field("timeout", timeout)
                .field("batching", batching)
                .finish(),
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => {
                let urls: Vec<String> = urls.iter().map(|url| redact_url(url)).collect();
                f.debug_struct("RedisCluster")
                    .field("urls", &urls)
                    .field("prefix", prefix)
                    .field("timeout", timeout)
                    .finish()
            }
        }
    }
}

impl Backend {
    /// The kind's name in the file: `memory`, `sqlite`, `redis` or
    /// `redis-cluster`.
    pub fn kind(&self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite { .. } => "sqlite",
            Backend::Redis { .. } => "redis",
            Backend::RedisCluster { .. } => "redis-cluster",
        }
    }
}

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

/// One named limit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitConfig {
    /// The name and policy.
    pub limit: Limit,
    /// The rate the policy was built from.
    pub rate: Rate,
    /// The parts of the key, in order; never empty.
    pub key: Vec<KeyPart>,
    /// Decide and report, but let every request through.
    pub shadow: bool,
    /// What a new key gets while the store's table is full.
    pub on_saturated: OnSaturated,
    /// Whether an Envoy descriptor's `limit` override may replace this
    /// limit (`allow_overrides`, default `true`, as Envoy's service does).
    pub allow_overrides: bool,
    /// Whether callers may give units back (`/v1/refund`, Envoy's
    /// `is_negative_hits`; `allow_refunds`, default `true`).
    pub allow_refunds: bool,
    /// Which requests the limit applies to.
    pub matcher: Match,
}

/// What a limit answers a request whose key is new while the in-memory
/// table (the store, or the fallback) already holds `max_keys` keys: the
/// key cannot be counted, so the limit cannot decide it.
///
/// Every door tells such an answer apart: the JSON API's `saturated: true`,
/// and an `X-RateKeeper-Saturated` header naming the limits (HTTP, the
/// nginx endpoint, the proxy, and gRPC's `response_headers_to_add`); and
/// `/metrics` counts them in `ratekeeper_saturated_total{limit}`. Either
/// way it lasts only until known keys are fresh again: a full table sweeps
/// for a new key on demand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnSaturated {
    /// Refuse the request (the default), as over the limit, with a
    /// `Retry-After` of when room can return. An attacker who fills the
    /// table with made-up keys then cannot switch the limit off for new
    /// keys, and it shuts newcomers out only until the flood's keys are
    /// idle.
    #[default]
    Deny,
    /// Let the request through uncounted: a newcomer is never refused for
    /// saturation, but while the table is full every new key is
    /// unlimited, which someone minting keys can arrange.
    Allow,
}

/// One part of a limit's key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPart {
    /// The socket peer's address (`peer`), keyed by its network
    /// (`ipv4_prefix`, `ipv6_prefix`).
    Peer(Prefixes),
    /// The client's address (`client_ip`): how it is found (from which
    /// header, behind which proxies), and the network it is keyed by.
    ClientIp(ClientIp, Prefixes),
    /// The request's route or path (`route`).
    Route,
    /// One key for every request (`global`).
    Global,
    /// A request header's value (`header:NAME`).
    Header(HeaderName),
    /// An Envoy descriptor entry's value (`descriptor:KEY`).
    Descriptor(String),
}

impl std::fmt::Display for KeyPart {
    /// The part as written in the file (`client_ip`, `header:x-api-key`);
    /// `ratekeeper check` explains the trust of `client_ip` on a line of
    /// its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPart::Peer(_) => f.write_str("peer"),
            KeyPart::ClientIp(..) => f.write_str("client_ip"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Global => f.write_str("global"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
            KeyPart::Descriptor(key) => write!(f, "descriptor:{key}"),
        }
    }
}

/// Which requests a limit applies to; every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Match {
    /// Envoy's domain.
    pub domain: Option<String>,
    /// Envoy descriptor entries, in order.
    pub descriptors: Vec<DescriptorMatch>,
    /// HTTP methods (upper case); empty means any.
    pub methods: Vec<Method>,
    /// The start of the request's path.
    pub path_prefix: Option<String>,
}

impl Match {
    /// Whether nothing is required: the limit applies to every request.
    pub fn is_any(&self) -> bool {
        *self == Match::default()
    }
}

/// One descriptor entry a limit requires.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescriptorMatch {
    /// The entry's key.
    pub key: String,
    /// What its value must be.
    pub value: ValueMatch,
}

/// What a descriptor entry's value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueMatch {
    /// Anything (no `value` given): each value counts separately.
    Any,
    /// Exactly this.
    Exact(String),
    /// Starting with this (a `value` ending in `*`).
    Prefix(String),
}

impl ValueMatch {
    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            ValueMatch::Any => true,
            ValueMatch::Exact(exact) => value == exact,
            ValueMatch::Prefix(prefix) => value.starts_with(prefix.as_str()),
        }
    }
}

impl Default for Config {
    /// [`DEFAULT_TOML`]: what `ratekeeper serve` runs with when given no file.
    fn default() -> Self {
        // DEFAULT_TOML is valid (a test checks it); the fallback without
        // limits only keeps this function free of panics.
        Config::from_toml_str(DEFAULT_TOML, DEFAULT_SOURCE).unwrap_or_else(|_| Config {
            store: StoreConfig {
                backend: Backend::Memory,
                max_keys: ratekeeper::memory::DEFAULT_MAX_KEYS,
                on_failure: FailureMode::Closed,
                fallback: false,
                tls: None,
            },
            listen: ListenConfig::default(),
            requests: RequestCaps::default(),
            limits: Vec::new(),
            access: AccessConfig::default(),
            runtime: RuntimeConfig::default(),
        })
    }
}

impl Config {
    /// Parses and checks `text`, naming it `source` in errors (usually the
    /// file's path), without environment overrides.
    ///
    /// ```
    /// use ratekeeper_server::Config;
    ///
    /// let config = Config::from_toml_str(
    ///     "[[limits]]\nname = \"api\"\nrate = \"10/s burst 20\"\nkey = [\"header:x-api-key\"]\n",
    ///     "ratekeeper.toml",
    /// )?;
    /// assert_eq!(config.limits[0].limit.name(), "api");
    ///
    /// let error = Config::from_toml_str(
    ///     "[[limits]]\nname = \"api\"\nrate = \"10/fortnight\"\nkey = [\"global\"]\n",
    ///     "ratekeeper.toml",
    /// )
    /// .unwrap_err();
    /// assert!(error.to_string().starts_with(
    ///     "ratekeeper.toml:3:8: limits[0].rate: unknown time unit \"fortnight\""
    /// ));
    /// # Ok::<(), ratekeeper_server::ConfigError>(())
    /// ```
    pub fn from_toml_str(text: &str, source: &str) -> Result<Config, ConfigError> {
        Config::from_toml_str_with_env(text, source, std::iter::empty::<(String, String)>())
    }

    /// Parses `text`, applies the overrides among `vars` (name and value
    /// pairs, such as [`process_vars`]), and checks the result.
    ///
    /// A variable `RATEKEEPER_<SECTION>__<FIELD>` sets `<field>` of
    /// `[<section>]` (`RATEKEEPER_STORE__KIND=redis`,
    /// `RATEKEEPER_STORE__URL=redis://cache:6379`,
    /// `RATEKEEPER_LISTEN__HTTP=0.0.0.0:8080`), and
    /// `RATEKEEPER_LIMITS__<NAME>__<FIELD>` sets a field of the limit called
    /// `<NAME>`, written in upper case with `_` for every character other
    /// than a letter or digit (`RATEKEEPER_LIMITS__PER_IP__RATE=50/minute`
    /// for the limit `per-ip`); deeper fields follow the same way
    /// (`RATEKEEPER_LIMITS__PER_IP__MATCH__DOMAIN=edge`). Field names are
    /// case-insensitive. Text fields take the value as it is; lists (`key`,
    /// `urls`, `trusted_proxies` (so `private` is `["private"]`), `methods`) take a TOML array or
    /// comma-separated words; other fields take a TOML value (`100000`,
    /// `true`). Variables with no `__` after `RATEKEEPER_`, such as
    /// `RATEKEEPER_CONFIG`, and variables without the prefix are ignored; an
    /// override of a limit that does not exist is an error. Errors in
    /// overridden values name the variable (`env RATEKEEPER_STORE__URL: ...`).
    pub fn from_toml_str_with_env<I, K, V>(
        text: &str,
        source: &str,
        vars: I,
    ) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        validate::load(text, source, vars)
    }

    /// Reads and checks the file at `path`, without environment overrides.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        Config::load_with_env(path, std::iter::empty::<(String, String)>())
    }

    /// Reads the file at `path`, applies the overrides among `vars` (see
    /// [`Config::from_toml_str_with_env`]) and checks the result. The
    /// service passes [`process_vars`].
    pub fn load_with_env<I, K, V>(path: impl AsRef<Path>, vars: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::from_toml_str_with_env(&text, &path.display().to_string(), vars)
    }

    /// A description for `ratekeeper check`: the store, the addresses, the
    /// request caps when not the defaults, which doors need a token (when
    /// any does; how many tokens from where, never a token), then one line
    /// per limit with its name, policy, rate, key and match, and the
    /// permissions it refuses.
    ///
    /// ```
    /// use ratekeeper_server::Config;
    ///
    /// let text = Config::default().explain();
    /// assert!(text.contains("limit per-client: gcra 100/minute, key client_ip"));
    /// ```
    pub fn explain(&self) -> String {
        let mut out = String::new();
        let store = &self.store;
        let backend = match &store.backend {
            Backend::Memory => "memory".to_owned(),
            Backend::Sqlite { path } => format!("sqlite {}", path.display()),
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => {
                let batching = if batching.is_on() {
                    format!(
                        "{} scripts in flight, up to {} decisions each",
                        batching.in_flight(),
                        batching.max_calls()
                    )
                } else {
                    "no batching".to_owned()
                };
                format!(
                    "redis {} (prefix {prefix:?}, timeout {}ms, {batching})",
                    redact_url(url),
                    timeout.as_millis()
                )
            }
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => format!(
                "redis-cluster {} (prefix {prefix:?}, timeout {}ms)",
                redact_urls(urls),
                timeout.as_millis()
            ),
        };
        let _ = write!(out, "store: {backend}, max_keys {}", store.max_keys);
        if !matches!(store.backend, Backend::Memory) {
            let mode = match store.on_failure {
                FailureMode::Open => "open",
                _ => "closed",
            };
            let fallback = if store.fallback { "on" } else { "off" };
            let _ = write!(out, ", on failure {mode}, fallback {fallback}");
        }
        if let Some(tls) = &store.tls {
            let _ = write!(out, ", {tls}");
        }
        out.push('\n');
        let addr = |a: &Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
        let _ = writeln!(
            out,
            "listen: http {}, grpc {}, admin {}",
            addr(&self.listen.http),
            addr(&self.listen.grpc),
            addr(&self.listen.admin)
        );
        if let Some(line) = tls::explain(&self.listen) {
            let _ = writeln!(out, "{line}");
        }
        let conns = &self.listen.connections;
        if *conns != ConnectionConfig::default() {
            let h2 = &conns.http2;
            let every =
                |d: Option<Duration>| d.map_or_else(|| "off".to_owned(), |d| format!("{d:?}"));
            let _ = writeln!(
                out,
                "connections: at most {} per door and {} on admin; head within {:?}, idle {:?}, \
                 requests {:?}, heads up to {} bytes, {:?} to finish at shutdown; http2: {} streams, \
                 ping every {} within {:?}, max age {}",
                conns.max_connections,
                conns.max_admin_connections,
                conns.header_timeout,
                conns.idle_timeout,
                conns.request_timeout,
                conns.max_header_bytes,
                conns.shutdown_grace,
                h2.max_concurrent_streams,
                every(h2.keepalive_interval),
                h2.keepalive_timeout,
                every(h2.max_connection_age),
            );
        }
        let caps = &self.requests;
        if *caps != RequestCaps::default() {
            let _ = writeln!(
                out,
                "requests: at most {} descriptors of {} entries, values up to {} bytes, \
                 {} override rates, bodies up to {} bytes",
                caps.max_descriptors,
                caps.max_entries,
                caps.max_value_bytes,
                caps.max_override_rates,
                caps.max_body_bytes
            );
        }
        if let WorkerThreads::Fixed(n) = self.runtime.worker_threads {
            let _ = writeln!(
                out,
                "runtime: {n} worker thread{} ({} CPUs available)",
                if n == 1 { "" } else { "s" },
                available_cpus()
            );
        }
        if let Some(line) = explain_access(&self.access) {
            let _ = writeln!(out, "{line}");
        }
        for limit in &self.limits {
            let key: Vec<String> = limit.key.iter().map(ToString::to_string).collect();
            let _ = write!(
                out,
                "limit {}: {} {}, key {}",
                limit.limit.name(),
                limit.limit.policy().kind(),
                limit.rate,
                key.join(" + ")
            );
            let _ = write!(out, ", match {}", explain_match(&limit.matcher));
            if limit.shadow {
                out.push_str(" (shadow)");
            }
            if limit.on_saturated == OnSaturated::Allow {
                out.push_str(" (allows new keys while the store is full)");
            }
            if !limit.allow_overrides {
                out.push_str(" (Envoy overrides ignored)");
            }
            if !limit.allow_refunds {
                out.push_str(" (refunds refused)");
            }
            out.push('\n');
            for line in limit.key.iter().filter_map(explain_address) {
                let _ = writeln!(out, "  {line}");
            }
        }
        out
    }
}

/// Who may ask, when any door needs a token: which doors, and how many
/// tokens from where (never the tokens).
fn explain_access(access: &AccessConfig) -> Option<String> {
    if access.decisions.is_none() && access.admin.is_none() {
        return None;
    }
    let door = |doors: &str, need: &str, set: &Option<crate::access::TokenSet>| match set {
        None => format!("{doors} open to anyone who reaches them"),
        Some(set) => {
            let tokens = if set.len() == 1 { "token" } else { "tokens" };
            format!(
                "{doors} {need} a bearer token ({} {tokens} from {})",
                set.len(),
                set.source()
            )
        }
    };
    Some(format!(
        "access: {}; {}",
        door("http and grpc", "need", &access.decisions),
        door("admin (but /healthz, /readyz)", "needs", &access.admin)
    ))
}

/// Where an address part of a key comes from and what it is keyed by, in
/// words: the trust `ratekeeper check` shows for `client_ip` and `peer`.
fn explain_address(part: &KeyPart) -> Option<String> {
    let (source, prefixes) = match part {
        KeyPart::Peer(prefixes) => ("the socket peer".to_owned(), prefixes),
        KeyPart::ClientIp(rule, prefixes) => (explain_client_ip(rule), prefixes),
        _ => return None,
    };
    Some(format!("{part}: {source}; {prefixes}"))
}

/// How `rule` finds the client.
fn explain_client_ip(rule: &ClientIp) -> String {
    let untrusted = |header: &str| {
        format!("the socket peer (no trusted proxies: {header} is ignored, set trusted_proxies to believe it)")
    };
    let nets = |trusted: &[ipnet::IpNet]| {
        if trusted == ratekeeper_tower::client::private_networks().as_slice() {
            "private networks".to_owned()
        } else {
            let nets: Vec<String> = trusted.iter().map(ToString::to_string).collect();
            nets.join(", ")
        }
    };
    match rule {
        ClientIp::XForwardedFor { trusted } if trusted.is_empty() => untrusted("X-Forwarded-For"),
        ClientIp::XForwardedFor { trusted } => format!(
            "from X-Forwarded-For behind {} (the rightmost address not among them); any other peer is the client",
            nets(trusted)
        ),
        ClientIp::Forwarded { trusted } if trusted.is_empty() => untrusted("Forwarded"),
        ClientIp::Forwarded { trusted } => format!(
            "from Forwarded (RFC 7239) behind {} (the rightmost for= not among them); any other peer is the client",
            nets(trusted)
        ),
        ClientIp::Hops(hops) => format!(
            "from X-Forwarded-For, entry {hops} from the right, from any peer (every request must pass {hops} proxies of yours)"
        ),
        ClientIp::Header { name, trusted } if trusted.is_empty() => untrusted(name.as_str()),
        ClientIp::Header { name, trusted } => format!(
            "from {name} when the peer is in {}; any other peer is the client",
            nets(trusted)
        ),
        _ => "the socket peer".to_owned(),
    }
}

/// `match` in words.
fn explain_match(matcher: &Match) -> String {
    if matcher.is_any() {
        return "every request".to_owned();
    }
    let mut parts = Vec::new();
    if let Some(domain) = &matcher.domain {
        parts.push(format!("domain {domain}"));
    }
    if !matcher.descriptors.is_empty() {
        let entries: Vec<String> = matcher
            .descriptors
            .iter()
            .map(|d| match &d.value {
                ValueMatch::Any => d.key.clone(),
                ValueMatch::Exact(value) => format!("{}={value}", d.key),
                ValueMatch::Prefix(prefix) => format!("{}={prefix}*", d.key),
            })
            .collect();
        parts.push(format!("descriptors [{}]", entries.join(", ")));
    }
    if !matcher.methods.is_empty() {
        let methods: Vec<&str> = matcher.methods.iter().map(Method::as_str).collect();
        parts.push(format!("methods {}", methods.join(" ")));
    }
    if let Some(prefix) = &matcher.path_prefix {
        parts.push(format!("path {prefix}*"));
    }
    parts.join(", ")
}
