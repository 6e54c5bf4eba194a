//! The `ratekeeper` rate-limit service.
//!
//! The `ratekeeper` binary runs it (`ratekeeper serve [--config FILE]`) and
//! checks configurations (`ratekeeper check --config FILE`); this library is
//! the same service, to embed or test:
//!
//! - [`config`]: the TOML file of the store, the addresses and named
//!   limits, environment overrides, and errors that name file, line and
//!   field; envoyproxy/ratelimit's and Limitador's files are read by the
//!   [`ratekeeper_formats`] crate, and `config` makes native limits of
//!   them;
//! - [`engine`]: the limits in force and the store, which every front door
//!   decides through, all or nothing over several limits;
//! - the front doors: [`http`] (the JSON decision API and nginx
//!   `auth_request`), Envoy's rate limit service over gRPC, the reverse
//!   proxy, and [`admin`] (health, readiness, Prometheus metrics, stats as
//!   JSON and the live dashboard);
//! - [`access`]: who may ask, the bearer tokens of the doors;
//! - [`serve`]: the doors on their listeners (`listen`: accept loops,
//!   caps, timeouts and TLS), reloads on SIGHUP or a changed file, and a
//!   graceful shutdown;
//! - `telemetry`: logs as text or JSON lines, and OpenTelemetry traces
//!   of the decisions exported over OTLP;
//! - [`simulate`]: policies run offline over a trace or a pattern, with
//!   the decisions as CSV and an SVG chart (`ratekeeper simulate`).
//!
//! # What is public, and for whom
//!
//! - An embedding program: [`Config`] (and the types of [`config`]), then
//!   [`serve::Service::builder`] to run every door as `ratekeeper serve`
//!   does; or one door on its own ([`http::router`],
//!   [`envoy::EnvoyService`], [`proxy::router`], [`admin::router`]) over
//!   an [`engine::Engine`], which can also be asked directly.
//! - The `ratekeeper` binary: [`cli::run`].
//! - The tests, benchmarks and fuzz targets: the same, plus Envoy's
//!   generated types ([`envoy::proto`]) and [`simulate`].
//!
//! The listeners (`listen`) and the logs and traces (`telemetry`) are
//! the service's own: they are started by [`serve`] and the command.
//!
//! # Layers
//!
//! The modules depend one way: each names (in code, imports and doc
//! links) only modules of the layers below its own, never its own layer's
//! nor one above, so no two of them depend on each other. Bottom first:
//!
//! 1. `error_chain` and `plural`: helpers that name no module;
//! 2. [`config`]: the file, as written and checked, down to what its
//!    checks load: the TLS files of the doors (and the rustls configuration
//!    they make) and the access tokens ([`access::TokenSet`] is kept there);
//! 3. [`access`] (the doors' guard, with the tokens in force) and
//!    `telemetry` (logs and traces, fed plain data: it names no engine
//!    type);
//! 4. [`engine`] (the limits in force and the store; no listener type) and
//!    `listen` (accept loops, connection caps and counters, TLS on a
//!    listener); neither names the other;
//! 5. the doors: [`http`], [`envoy`], [`proxy`] and [`admin`], none naming
//!    another;
//! 6. [`serve`] (which starts the doors, gives them and the admin door one
//!    [`admin::ConnectionStats`], and reloads) and, beside it, [`simulate`];
//! 7. [`cli`], the `ratekeeper` command.
//!
//! The test `tests/it/layers.rs` reads the sources and holds the modules
//! to this order: it fails on a cycle (naming its path) and on a module
//! that names its own layer or one above.

pub mod access;
pub mod admin;
pub mod cli;
pub mod config;
pub mod engine;
pub mod envoy;
mod error_chain;
pub mod http;
pub(crate) mod listen;
pub(crate) mod plural;
pub mod proxy;
pub mod serve;
pub mod simulate;
pub(crate) mod telemetry;

pub use config::{Config, ConfigError};
