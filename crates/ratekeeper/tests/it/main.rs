//! The core's integration tests: policies, clocks, the in-memory limiter and store, stats, actions.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod actions;
mod carry;
mod clock;
#[path = "../common/mod.rs"]
mod common;
mod concurrency;
mod conformance;
mod fixed_window;
mod gcra;
mod in_flight;
mod memory;
mod memory_contention;
mod memory_flood;
mod memory_plans;
mod memory_successor;
mod multi;
mod policy;
mod properties;
mod rate;
mod report;
mod reservations;
mod seeds;
mod sharded;
mod sliding_log;
mod sliding_window;
mod stats;
mod store;
mod token_bucket;
mod waiting;
