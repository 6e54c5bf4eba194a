//! The service's tests: its configuration, its doors, stores, reloads and commands.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod access;
mod bounded_stats;
mod cancellation;
mod check_command;
mod check_flags;
mod common;
mod config;
mod connections;
mod dashboard;
mod dashboard_many;
mod deployment;
mod envoy;
mod envoy_files;
mod envoy_import;
mod envoy_in_flight;
mod envoy_stream_done;
mod explain;
mod grafana;
mod http_after_the_fact;
mod http_api;
mod http_api_descriptors;
mod import_exact;
mod in_flight;
mod layers;
mod leasing;
mod limitador;
mod metrics;
mod nginx;
mod operations;
mod phone_frame;
mod proxy;
mod proxy_after_response;
mod proxy_service;
mod proxy_tls;
mod proxy_upgrade;
mod proxy_versions;
mod quick_starts;
mod redis_store;
mod reference;
mod reload;
mod reload_tightening;
mod runtime;
mod same_moment;
mod saturation;
mod serve_command;
mod serve_flags;
mod shadow_mode;
mod simulate;
mod stalled_connections;
mod store_failures;
mod store_tls;
mod telemetry;
mod tls;
