//! tower middleware for [`ratekeeper`]: rate limits for axum, hyper and
//! tonic services.
//!
//! [`RateLimitLayer`] limits requests through any [`ratekeeper::Store`];
//! [`client`] finds a request's client address behind proxies, and
//! [`headers`] writes the rate-limit response headers.

pub mod client;
pub mod headers;
mod limit;

pub use limit::{
    ConfigWarning, Key, LayerError, PeerAddr, RateLimit, RateLimitLayer, RateLimitLayerBuilder,
    Refusal, RefusalBody, ResponseFormat, ResponseFuture, DEFAULT_IPV6_PREFIX, UNKNOWN_KEY,
};

/// Compiles the example in this crate's README.md as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
