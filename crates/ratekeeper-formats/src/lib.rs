//! Other rate limiters' configuration files, read as their users write
//! them: envoyproxy/ratelimit's YAML ([`envoy`]) and Kuadrant Limitador's
//! YAML with CEL conditions ([`limitador`]), both on one YAML reader
//! ([`yaml`]) that belongs to neither and names every error's file, line
//! and column.
//!
//! Each format gives its own model, as its service means it: the domains
//! and descriptor tree of envoyproxy/ratelimit with its lookup
//! ([`envoy::EnvoyConfig`], [`envoy::Domain::get_limit`]), and Limitador's
//! limits with the conditions and variables that decide which apply
//! ([`limitador::LimitadorConfig`]). Neither is ratekeeper's native
//! configuration: the service (`ratekeeper-server`, its `config` module)
//! turns these models into native limits where it loads them (`serve`,
//! `check`), and [`envoy::import_dir`] writes an envoyproxy/ratelimit
//! directory as native TOML (`ratekeeper import envoy`). [`Glob`], the `*`
//! pattern of a descriptor's value, and [`envoy::limit_name`], the name a
//! descriptor's limit takes, are kept here so that the service and the
//! import agree on both.
//!
//! # Why a crate of its own
//!
//! - No async runtime: reading a file is text in, a model or an error
//!   with its place out. The crate depends on the core (`ratekeeper`, for
//!   its policy kinds and caps), the YAML event parser, a digest and
//!   `thiserror`; tokio, the doors and the store stay in the service.
//! - Fuzzed alone: these parsers take files an operator did not write
//!   (a directory of another team's ConfigMaps), so they are the first
//!   thing to fuzz. `fuzz/` builds its targets on this crate only, in a
//!   fraction of the service's build, and `cargo test -p
//!   ratekeeper-formats` runs their fixtures and properties.
//! - One reader for three callers: `ratekeeper serve` and `ratekeeper
//!   check` load the files through the service's configuration, and
//!   `ratekeeper import envoy` writes them as native TOML; all three read
//!   them here, so a file loads, fails and is named the same way in each.
//!
//! Every reader caps its input (file size, nesting, nodes with aliases
//! expanded, limits, expressions), so that a hostile file costs time and
//! memory in proportion to its length, never more.

mod glob;

pub mod envoy;
pub mod limitador;
pub mod yaml;

pub use glob::Glob;
