//! The `ratekeeper` rate-limit service.
//!
//! For now this crate holds the service's [configuration](config): the TOML
//! file of named limits and the store, environment overrides, and
//! validation with errors that name the file, line and field; and the
//! `ratekeeper` command with its `check` subcommand (`ratekeeper check
//! --config FILE`). The front doors (HTTP, Envoy's gRPC API, nginx
//! `auth_request`, the reverse proxy) and `ratekeeper serve` come next.

pub mod config;
pub mod engine;

pub use config::{Config, ConfigError};
