//! The SQLite store's tests.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod carry;
mod check_all;
mod conformance;
mod errors;
mod in_flight;
mod leasing;
mod long_keys;
mod maintenance;
mod opening;
mod policies;
mod processes;
mod reservations;
