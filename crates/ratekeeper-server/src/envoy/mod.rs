//! Envoy's rate limit service API v3 over gRPC
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), wire
//! compatible with Envoy's `envoy.filters.http.ratelimit` and
//! `envoy.filters.network.ratelimit` filters.
//!
//! # Matching
//!
//! Each descriptor of a request is matched against the configured limits in
//! the model of Envoy's own rate limit service ([`crate::engine::matching`]): a limit
//! applies when its `match.domain` is the request's domain and its
//! `match.descriptors` match the descriptor's entries one by one (same
//! length, same keys, values exact, as patterns whose `*`s are any run of
//! characters, or any when no value is given, and none of the entry's
//! `except` values; each value a wildcard matches is counted separately
//! unless the entry has `share_threshold`). Several limits may apply to one descriptor; a descriptor no
//! limit applies to is answered `OK` with no `current_limit`.
//!
//! A limit's key is built from the descriptor ([`DescriptorSource`](crate::engine::matching::DescriptorSource)):
//! `descriptor:KEY` from the entry with that key, `peer` and `client_ip`
//! from the `remote_address` entry, `global` as always. A part the
//! descriptor cannot give (`route`, `header:NAME`, or a missing entry) is
//! `unknown`, shared by every such request: limited together, never let
//! through unlimited.
//!
//! # envoyproxy/ratelimit's files
//!
//! With `[envoy] config_dir` (see [`ratekeeper_formats::envoy`]), a request in
//! a domain its files define is also matched as envoyproxy/ratelimit
//! matches it (`GetLimit`: per level the exact value, then the wildcards
//! in the file's order, then the bare key; a limit only on the node the
//! descriptor's last entry reaches), beside the native limits above. The
//! matched limit counts per descriptor (every entry's value, a
//! `share_threshold` wildcard's entries sharing one count), in a fixed
//! window aligned to the Unix epoch unless the file's `policy:` says
//! otherwise; `current_limit.name` is the file's `name` (empty without
//! one). Across the request, as envoyproxy/ratelimit does: a limit whose
//! `name` another matched limit `replaces` is dropped; an `unlimited` one
//! answers `OK` with `limit_remaining` `u32::MAX` and counts nothing; one
//! of zero requests per unit is `OVER_LIMIT` on every hit; a
//! `shadow_mode` one is counted and never refuses; `quota_mode` ones
//! (and all of them with `[envoy] quota_mode`) show `OVER_LIMIT` in their
//! status but refuse the request only when every quota of the request is
//! over (they are decided after the others, each on its own, as shadow
//! limits are). With `[envoy] shadow_mode` the statuses say what the
//! limits decided, each limit that allows is charged, and `overall_code`
//! is always `OK`. A descriptor's `limit` override wins over the files in
//! their domain.
//!
//! # Deciding
//!
//! - Every descriptor of a request is decided together, all or nothing: a
//!   request one limit refuses takes nothing from the others.
//! - A descriptor costs its `hits_addend` if set, else the request's
//!   (`0` there means 1). A descriptor `hits_addend` of 0 only reports.
//! - `is_negative_hits` gives the hits back (refunds first, then the rest
//!   of the request), and never refuses; unless a limit the descriptor
//!   matches says `allow_refunds = false`: then the whole request is
//!   refused with `PERMISSION_DENIED` naming the limit, before anything is
//!   taken or given back (an error rather than a silent skip, so that a
//!   refund configured on purpose shows up in Envoy's error stats).
//! - A descriptor's `limit` override is handled as Envoy's own service does
//!   (`GetLimit` in envoyproxy/ratelimit): in a domain some limit names, it
//!   replaces the configured limits for that descriptor by a fixed window
//!   of `requests_per_unit` per unit (months are 30 days and years 365, as
//!   there), counted per domain and full list of entries, never in shadow
//!   mode. A limit with `allow_overrides = false` keeps its descriptors:
//!   an override on a descriptor it matches is ignored and the configured
//!   limits decide (logged once per limit, counted in
//!   `ratekeeper_overrides_refused_total{limit}`). Zero requests per unit refuses every hit. An override with an
//!   unknown unit is refused with `INVALID_ARGUMENT`. Each distinct rate is
//!   a limit (a table of the in-memory store) of its own, kept for the life
//!   of the service: at most `requests.max_override_rates` (32) of them, and
//!   a request asking for one more is refused with `RESOURCE_EXHAUSTED`, so
//!   clients that choose override rates cannot grow the service.
//! - Limits in shadow mode are decided and shown but never make a status
//!   or the request `OVER_LIMIT`, as Envoy's service's `shadow_mode`.
//!
//! # Answering
//!
//! `statuses` has one entry per descriptor, in order: the code, the limit
//! that refused it or else the one with the least remaining
//! (`current_limit`, its name and its rate in Envoy's units, see
//! [`RateUnit`](crate::engine::RateUnit)), `limit_remaining` and `duration_until_reset`.
//! `overall_code` is `OVER_LIMIT` when any status is.
//! `response_headers_to_add` carries the IETF draft's `RateLimit-Policy`
//! and `RateLimit` fields for the limits that applied (shadow ones aside),
//! and `Retry-After` in whole seconds when the request is over a limit
//! that a wait can satisfy.
//!
//! A limit whose in-memory table is full cannot count a new key. With
//! `on_saturated = "deny"` (the default) its descriptor is `OVER_LIMIT`
//! with `limit_remaining` 0 and `duration_until_reset` (and `Retry-After`)
//! the time until room can return; with `"allow"` it is `OK`, uncounted.
//! Either way `response_headers_to_add` carries `X-RateKeeper-Saturated`
//! with the names of such limits (`"per-ip"`), which Envoy adds to the
//! client's response.
//!
//! A failed store is a gRPC `UNAVAILABLE` error (never `UNKNOWN`), so the
//! filter's `failure_mode_deny` decides; see [`PlanError`](crate::engine::PlanError).
//!
//! # Health
//!
//! The gRPC port also serves the standard `grpc.health.v1.Health` service
//! (`Check` and `Watch`), for `""` and
//! `envoy.service.ratelimit.v3.RateLimitService`: `SERVING` while
//! decisions are answered as configured, `NOT_SERVING` while a store that
//! fails closed is down (the admin port's `/readyz`). It asks for no
//! token.
//!
//! # Answers the failure policy made
//!
//! While the store fails, an answer made by the failure policy (allowed by
//! `on_failure = "open"`, or decided by the in-memory `fallback`) carries
//! `x-ratekeeper-store: fail-open` (or `fallback`) twice: in the gRPC
//! response metadata, and in `response_headers_to_add`, so that Envoy
//! passes it on to the client. `ratekeeper_failover_answers_total{limit,how}`
//! counts them.
//!
//! # Who may ask
//!
//! With `[access.decisions]` tokens, [`EnvoyService::into_server`] answers
//! a call without `authorization: Bearer TOKEN` metadata (Envoy's
//! `grpc_service.initial_metadata`) with `UNAUTHENTICATED`, before
//! anything is decided; see [`crate::access`].
//!
//! # Size
//!
//! A request may hold at most `requests.max_descriptors` descriptors (256
//! by default) of `requests.max_entries` entries (64), each key and value
//! and the domain at most `requests.max_value_bytes` bytes (16 KiB); past a
//! cap it is refused with `INVALID_ARGUMENT` and a message naming the cap
//! and its field, before anything is decided. Within the caps, the work of
//! a request is linear in its size.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use ratekeeper::{Timestamp, clock::ManualClock};
//! use ratekeeper_server::engine::Engine;
//! use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
//! use ratekeeper_server::envoy::proto::rate_limit_response::Code;
//! use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
//! use ratekeeper_server::envoy::EnvoyService;
//! use ratekeeper_server::Config;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let config = Config::from_toml_str(
//!     r#"
//! [[limits]]
//! name = "per-ip"
//! rate = "2/minute"
//! key = ["client_ip"]
//! match = { domain = "edge", descriptors = [{ key = "remote_address" }] }
//! "#,
//!     "ratekeeper.toml",
//! )?;
//! let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
//! let service = EnvoyService::new(Engine::builder(&config).clock(clock).start().await?);
//! // service.into_server() goes on a tonic server; here it is asked directly.
//!
//! let request = RateLimitRequest {
//!     domain: "edge".into(),
//!     descriptors: vec![RateLimitDescriptor {
//!         entries: vec![Entry { key: "remote_address".into(), value: "10.0.0.1".into() }],
//!         ..Default::default()
//!     }],
//!     hits_addend: 0,
//! };
//! let codes: Vec<i32> = [
//!     service.decide(&request).await?,
//!     service.decide(&request).await?,
//!     service.decide(&request).await?,
//! ]
//! .iter()
//! .map(|response| response.overall_code)
//! .collect();
//! assert_eq!(codes, [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod error;
mod health;
pub mod proto;
mod response;
mod service;
mod unary;

impl crate::engine::matching::Entry for proto::rate_limit_descriptor::Entry {
    fn key(&self) -> &str {
        &self.key
    }
    fn value(&self) -> &str {
        &self.value
    }
}
pub use service::EnvoyService;
pub use unary::EnvoyServer;
