//! The tower layer's tests: keys, headers, and the layer under axum, hyper and tonic.
//!
//! One binary for the crate, its files as modules: one link instead of
//! one per file.

mod axum;
mod client;
mod common;
mod headers;
mod hyper;
mod in_flight;
mod no_peer;
mod peer_key;
mod plans;
mod readme;
mod response_cost;
mod rules;
mod same_moment;
mod tonic;
mod waiting;
