//! The `ratekeeper` rate-limit service.
//!
//! The `ratekeeper` binary runs it (`ratekeeper serve [--config FILE]`) and
//! checks configurations (`ratekeeper check --config FILE`); this library is
//! the same service, to embed or test:
//!
//! - [`config`]: the TOML file of the store, the addresses and named
//!   limits, environment overrides, and errors that name file, line and
//!   field;
//! - [`engine`]: the limits in force and the store, which every front door
//!   decides through, all or nothing over several limits;
//! - the front doors: [`http`] (the JSON decision API and nginx
//!   `auth_request`), Envoy's rate limit service over gRPC, the reverse
//!   proxy, and [`admin`] (health, readiness, Prometheus metrics, stats as
//!   JSON and the live dashboard);
//! - [`access`]: who may ask, the bearer tokens of the doors;
//! - [`serve`]: listeners, reloads on SIGHUP or a changed file, and a
//!   graceful shutdown;
//! - [`telemetry`]: logs as text or JSON lines, and OpenTelemetry traces
//!   of the decisions exported over OTLP;
//! - [`simulate`]: policies run offline over a trace or a pattern, with
//!   the decisions as CSV and an SVG chart (`ratekeeper simulate`).

pub mod access;
pub mod admin;
pub mod cli;
pub mod config;
pub mod engine;
pub mod envoy;
mod error_chain;
pub mod http;
pub mod listen;
pub(crate) mod plural;
pub mod proxy;
pub mod serve;
pub mod simulate;
pub mod telemetry;

pub use config::{Config, ConfigError};
