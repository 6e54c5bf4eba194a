//! tower middleware for [`ratekeeper`]: rate limits for axum, hyper and
//! tonic services.
//!
//! This crate is being built up; today it holds [`client`], which finds a
//! request's client address behind proxies, and [`headers`], which writes
//! the rate-limit response headers.

pub mod client;
pub mod headers;
