//! The Redis store's tests, each on redis-server processes of its own.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod batching;
mod clock_skew;
mod cluster;
mod concurrency;
mod conformance;
mod faults;
mod in_flight;
mod leasing;
mod multi;
mod policies;
mod reservations;
mod sentinel;
mod tls;
mod unhurried;
