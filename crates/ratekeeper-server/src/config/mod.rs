//! The service's configuration: a TOML file of the store, the listening
//! addresses and named limits, overridden by environment variables, and
//! checked before use.
//!
//! ```toml
//! [store]
//! kind = "memory"            # or "sqlite" (path), "redis" (url, or sentinels and master_name) or "redis-cluster" (urls)
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
//! max_connections = 3072    # open connections per door (http, grpc, proxy)
//! max_admin_connections = 256 # the admin port's own share
//! header_timeout = "10s"     # a request's head, from its first byte (or from the connection)
//! handshake_timeout = "3s"   # a TLS handshake, from the accept
//! body_timeout = "10s"       # the most time without a byte of the bodies a connection waits for
//! send_timeout = "10s"       # the most time answers wait for the peer to read any
//! idle_timeout = "60s"       # a connection with no request in flight is closed after this
//! request_timeout = "30s"    # one decision, body included (not the proxy's requests)
//! max_header_bytes = 32768   # a request's line and headers
//! max_request_bytes_total = 16777216 # requests still arriving (heads, bodies so far), per decision door
//! shutdown_grace = "5s"      # after SIGTERM, for requests in flight
//! backlog = 4096             # connections the kernel queues per door (at most net.core.somaxconn)
//!
//! [listen.http2]             # the gRPC door, and the proxy's HTTP/2 clients
//! max_concurrent_streams = 1024 # per connection
//! max_streams_total = 16384  # per door, each connection counted at its most streams at once
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
//! max_waiting = 1024         # requests the proxy holds for a limit's max_wait
//! max_waiting_per_key = 16   # of them, of one key of one limit
//!
//! [runtime]
//! worker_threads = "auto"    # one per CPU the process may use (affinity, cgroup quota), or a number
//!
//! [envoy]                    # what the gRPC door asks Envoy to add to a response
//! response_headers = "draft" # "draft" (RateLimit-Policy, RateLimit), "envoy_ratelimit"
//!                            # (RateLimit-Limit, -Remaining, -Reset, as envoyproxy/ratelimit), "both", "none"
//! limit_header = "RateLimit-Limit"          # envoyproxy/ratelimit's LIMIT_LIMIT_HEADER
//! remaining_header = "RateLimit-Remaining"  # its LIMIT_REMAINING_HEADER
//! reset_header = "RateLimit-Reset"          # its LIMIT_RESET_HEADER
//! counting = "all_or_nothing" # or "each_descriptor": count every descriptor's limit that allows,
//!                            # even when another refuses the request (envoyproxy/ratelimit's counts)
//! # config_dir = "/etc/ratelimit/config" # envoyproxy/ratelimit's YAML files, beside [[limits]]
//! ignore_dot_files = true    # skip .files and ..dirs (Kubernetes ConfigMap volumes)
//! merge_domains = false      # its MERGE_DOMAIN_CONFIG
//! shadow_mode = false        # its SHADOW_MODE: count and show, but always answer OK
//! quota_mode = false         # its QUOTA_MODE: every limit of the files in quota mode
//!
//! [enforcement]
//! shadow_mode = false        # true: every limit, every door, decides and reports but never refuses
//!
//! [limitador]                # optional: Kuadrant Limitador's limits file, beside these limits
//! config_file = "limits.yaml" # (see ratekeeper_formats::limitador); reloaded when it changes
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
//! allow_reports = true       # callers may charge units after the fact, past the limit: /v1/report (default true)
//! count_refused = false      # Envoy's hits are counted even when refused, as envoyproxy/ratelimit counts them (default false)
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
//! The remote stores take `on_failure` (`"closed"`, the default: refuse
//! with 503 or gRPC `UNAVAILABLE` while the store fails; `"open"`: allow)
//! and `fallback` (decide in memory while it fails). The Redis stores take
//! `start_wait_ms` (default 0, at most an hour): how long the start waits
//! for a Redis that does not answer. Past it, a store whose policy answers
//! without Redis (`"open"`, or `fallback = true`) starts anyway and
//! connects in the background (retrying every 100 ms to 2 s); one that
//! fails closed stops the start with the URL (its password hidden) and the
//! cause.
//!
//! The remote stores take `lease` (default false): a process that sees a
//! key often takes a chunk of its units in one call and decides from it
//! ([`ratekeeper::store::lease`]), `lease_max_chunk` (default 10,000, at
//! most 10^9) units at most, lasting about `lease_chunk_ms` (default 100)
//! at the key's rate, held at most `lease_lifetime_ms` (default 1,000; both
//! at most an hour), and spent while the store fails unless
//! `lease_spend_while_down = false`. Unlike the rest of `[store]`, these
//! reload without a restart.
//!
//! `rediss://` URLs connect over TLS (rustls), verifying the server with
//! the system's roots. A `[store.tls]` table ([`StoreTls`]) changes that:
//! `ca` names a PEM bundle of the certificates that verify the server, and
//! `cert` and `key` (together) a PEM client certificate chain and its
//! private key, presented when the server asks for one (`redis-server`
//! does unless `tls-auth-clients no`). It is refused for the other stores
//! and unless every URL is `rediss://`. The files are read and parsed when the configuration is
//! checked, so `ratekeeper check` names a missing or unusable one with its
//! place; a server whose certificate the CA does not vouch for fails the
//! start with the handshake's reason. The environment names them too
//! (`RATEKEEPER_STORE__TLS__CA=/path`).
//!
//! # TLS on the doors
//!
//! A door with a `[listen.tls.http]`, `[listen.tls.grpc]`,
//! `[listen.tls.admin]` or (under `ratekeeper proxy`) `[listen.tls.proxy]`
//! table serves TLS only, with rustls (TLS 1.2 and 1.3, the ring
//! provider), offering `h2` in ALPN on gRPC, `http/1.1` on HTTP and admin,
//! and both (`h2` first) on the proxy. `cert` and `key` are PEM files; with
//! `client_ca`, a client must present a certificate signed by that CA or
//! the handshake fails (mTLS). Relative paths are from the working
//! directory, as `store.path`. Checking the configuration loads the files,
//! so a file that is missing, holds no certificate or key, or a key that
//! does not match the certificate, is an error at the field that names it
//! ([`DoorTlsError`]). A table for a door that is `"off"` is not read and
//! only warned about ([`ConfigWarning::TlsForClosedDoor`]), so that an
//! environment can turn a door off without editing the file. The service
//! reads the files again on SIGHUP and when they change, keeping the
//! running certificate when the new files do not load. A handshake must
//! finish within `handshake_timeout`; one that fails closes only its
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
//! Each limit has a unique `name` (the core's [`Limit`](ratekeeper::Limit) rules: printable
//! ASCII without spaces, quotes, backslashes, braces or colons), a `rate`
//! ([`Rate`](ratekeeper::Rate) strings; a burst only for `token_bucket` and `gcra`), a `policy`
//! and a `key`: the parts the limited key is made of, in order, such as
//! `["client_ip", "route"]`. `global` stands alone: one count for everyone.
//! A rate of 0 (`rate = "0/minute"`, any unit) is a ban: the limit refuses
//! every request it matches without asking the store, as
//! envoyproxy/ratelimit's `requests_per_unit: 0` (see
//! [`LimitConfig::ban`]).
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
//! Each token is at least 16 visible ASCII characters (the `access`
//! module says how tokens are read, kept and compared). A token written in the configuration (`token = `)
//! is refused, and so are a missing, empty or unreadable file and an unset
//! or empty variable, naming the file or variable but never a token.
//! Tokens are read again on every reload, and a change of a token file
//! reloads the configuration, so rotating needs no restart.
//!
//! # Relative paths
//!
//! A relative path written in the file (`store.path`, `[store.tls]`'s and
//! `[listen.tls.*]`'s files, `envoy.config_dir`, `limitador.config_file`,
//! `token_file`) is read from the file's folder, so that a configuration
//! and the files beside it can move together; one given by the
//! environment or the command line is read from the working directory.
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

pub(crate) mod access;
mod address;
mod connections;
mod enforcement;
mod env;
mod envoy_door;
mod envoy_files;
#[cfg(test)]
mod envoy_import_tests;
mod error;
mod explain;
mod file;
mod in_flight;
mod limit;
mod limitador_file;
mod listen;
mod penalty;
pub(crate) mod plans;
mod reach;
mod redact;
mod request_caps;
mod runtime;
mod store;
mod store_tls;
pub(crate) mod tls;
mod validate;
mod warnings;

use std::path::Path;

use ratekeeper::store::FailureMode;

pub use access::AccessConfig;
pub use address::{Prefixes, DEFAULT_IPV4_PREFIX, DEFAULT_IPV6_PREFIX};
pub use connections::{ConnectionConfig, Http2Config};
pub use envoy_door::{Counting, EnvoyDoorConfig, ResponseHeaders};
pub(crate) use envoy_files::watched as envoy_watched;
pub use envoy_files::EnvoyFiles;
pub use error::{ConfigError, Location};
pub use in_flight::{InFlightConfig, DEFAULT_IN_FLIGHT_LEASE};
pub use limit::{
    AfterResponse, CostSource, DescriptorMatch, KeyPart, LimitConfig, Match, OnSaturated,
    ValueMatch,
};
pub use limitador_file::LimitadorSource;
pub use listen::ListenConfig;
pub use penalty::Penalty;
pub use plans::{PlanConfig, PlanFrom, PlanTable, MAX_PLAN_TABLE_BYTES, MAX_PLAN_TABLE_KEYS};
/// The `*` patterns of descriptor values ([`ValueMatch::Glob`]), shared
/// with envoyproxy/ratelimit's files.
pub use ratekeeper_formats::Glob;
pub use reach::{Reach, Unreachable};
pub use redact::redact_url;
pub(crate) use redact::redact_urls;
pub use request_caps::{CapError, RequestCaps};
pub use runtime::{available_cpus, RuntimeConfig, WorkerThreads};
pub use store::{Backend, StoreConfig};
pub use store_tls::StoreTls;
pub use tls::{DoorTls, DoorTlsError, TlsFileKind, TlsFiles};
pub use warnings::{AfterResponseUnused, ConfigWarning, ServedDoor};

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
max_connections = 3072
max_admin_connections = 256
header_timeout = "10s"
handshake_timeout = "3s"
body_timeout = "10s"
send_timeout = "10s"
idle_timeout = "60s"
request_timeout = "30s"
max_header_bytes = 32768
max_request_bytes_total = 16777216
shutdown_grace = "5s"
backlog = 4096

[listen.http2]
max_concurrent_streams = 1024
max_streams_total = 16384
keepalive_interval = "30s"
keepalive_timeout = "10s"
max_connection_age = "off"

[requests]
max_descriptors = 256
max_entries = 64
max_value_bytes = 16384
max_override_rates = 32
max_body_bytes = 65536
max_waiting = 1024
max_waiting_per_key = 16

[runtime]
# One thread per CPU this process may use (its affinity mask and cgroup CPU
# quota); a number sets it.
worker_threads = "auto"

[envoy]
# The fields the gRPC door asks Envoy to add to a response: "draft"
# (RateLimit-Policy and RateLimit), "envoy_ratelimit" (envoyproxy/ratelimit's
# RateLimit-Limit, -Remaining and -Reset, named below), "both" or "none".
response_headers = "draft"
limit_header = "RateLimit-Limit"
remaining_header = "RateLimit-Remaining"
reset_header = "RateLimit-Reset"
# A request refused by one descriptor's limit takes nothing from the others;
# "each_descriptor" counts each on its own, as envoyproxy/ratelimit does.
counting = "all_or_nothing"
# envoyproxy/ratelimit's YAML files, decided beside [[limits]] at the gRPC
# door (also `serve --envoy-config DIR`); reloaded when a file changes.
# config_dir = "/etc/ratelimit/config"
# Skip files and directories starting with "." (a Kubernetes ConfigMap
# volume's ..data and ..2024_... copies); envoyproxy/ratelimit's default reads them.
ignore_dot_files = true
merge_domains = false
# Count and show every limit, but always answer OK (envoyproxy/ratelimit's SHADOW_MODE).
shadow_mode = false
quota_mode = false

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
# Units charged after the fact (/v1/report: an LLM's tokens, known when
# its answer ends) may overdraw the limit; false refuses such reports.
allow_reports = true
# A limit counts what it lets through. true counts Envoy's hits even when
# refused, as envoyproxy/ratelimit does: what Envoy's apply_on_stream_done
# token limits need (the count sent when the stream ends is charged).
count_refused = false

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
    /// The caps on requests in flight (`policy = "concurrency"`), in the
    /// file's order; their names are unique among the limits' too.
    pub in_flight: Vec<InFlightConfig>,
    /// The tokens callers must show (`[access]`), read from their files or
    /// variables.
    pub access: AccessConfig,
    /// The threads that serve the doors (`[runtime]`).
    pub runtime: RuntimeConfig,
    /// What the Envoy gRPC door adds to its answers (`[envoy]`).
    pub envoy: EnvoyDoorConfig,
    /// A Limitador limits file and its limits (`[limitador]`).
    pub limitador: Option<LimitadorSource>,
    /// `enforcement.shadow_mode`: every limit, from every source and on
    /// every door, decides and reports but never refuses. The loader has
    /// already made each limit a shadow limit and set
    /// [`EnvoyDoorConfig::shadow_mode`]; this says why.
    pub shadow_mode: bool,
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
                start_wait: std::time::Duration::ZERO,
                tls: None,
                lease: None,
            },
            listen: ListenConfig::default(),
            requests: RequestCaps::default(),
            limits: Vec::new(),
            in_flight: Vec::new(),
            access: AccessConfig::default(),
            runtime: RuntimeConfig::default(),
            envoy: EnvoyDoorConfig::default(),
            limitador: None,
            shadow_mode: false,
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
        validate::load(text, source, None, vars)
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
        Config::from_file_text(&text, path, vars)
    }

    /// [`Config::from_toml_str_with_env`] for `text` read from the file at
    /// `path`: named by it in errors, its relative paths read from its
    /// folder. A reload reads the file itself, then this.
    pub(crate) fn from_file_text<I, K, V>(
        text: &str,
        path: &Path,
        vars: I,
    ) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        validate::load(text, &path.display().to_string(), path.parent(), vars)
    }
}
