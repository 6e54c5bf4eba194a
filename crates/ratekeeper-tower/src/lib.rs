#![doc = include_str!("../README.md")]
//!
//! # The layer
//!
//!
//! Each request becomes one key per limit ([`Key`]: the client behind
//! proxies, a header, the route, any function), is checked against every
//! limit at once through a [`Store`](ratekeeper::Store), all or nothing,
//! and then either reaches the service, with the rate-limit headers added
//! to its response, or is refused: 429 with `Retry-After` and
//! `Cache-Control: no-store` (text or RFC 9457 problem+json), or 503 when
//! the store failed closed. gRPC requests are refused with `grpc-status` 8
//! (`RESOURCE_EXHAUSTED`) or 14 (`UNAVAILABLE`) instead.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::net::SocketAddr;
//!
//! use bytes::Bytes;
//! use http::{Request, Response, StatusCode};
//! use http_body_util::Full;
//! use ratekeeper::{Gcra, Limit, MemoryStore};
//! use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = RateLimitLayer::builder(MemoryStore::new())
//!     .limit(Limit::new("per-ip", Gcra::per_minute(2)?)?, Key::peer())
//!     .build()?;
//! let hello = service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello")))) });
//! let mut service = layer.layer(hello);
//!
//! let request = || {
//!     let mut request = Request::new(());
//!     request.extensions_mut().insert(PeerAddr("192.0.2.1:5000".parse::<SocketAddr>().unwrap()));
//!     request
//! };
//! let first = service.ready().await?.call(request()).await?;
//! assert_eq!(first.headers()["ratelimit"], r#""per-ip";r=1;t=30"#);
//! let _ = service.ready().await?.call(request()).await?;
//! let third = service.ready().await?.call(request()).await?;
//! assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(third.headers()["retry-after"], "30");
//! # Ok(())
//! # }
//! ```
//!
//! # Where to go next
//!
//! - [`RateLimitLayer::builder`]: limits, keys, skips, headers, refusals,
//!   shadow mode, and the warnings of [`RateLimitLayerBuilder::build`].
//! - [`Rule`]: a limit that applies to some methods or paths, or that only
//!   reports (shadow mode); [`Rule::with_plans`]: a limit whose numbers
//!   are those of each key's plan ([`PlanSource`], [`KeyPlan`]).
//! - [`Key`]: what a request is counted under; [`client`]: finding the
//!   client behind proxies ([`client::ClientIp`]).
//! - [`response_cost`]: limits by what responses cost, charged once known
//!   (an LLM's tokens from a header or a trailer, or only failed
//!   responses), with an estimate held before each request
//!   ([`ResponseCostLayer`]).
//! - Caps on a key's requests in flight, given back when the response
//!   ends ([`InFlightLayer`]).
//! - Waiting instead of refusing: a request a token bucket refuses but
//!   will allow within a rule's [`max_wait`](Rule::max_wait) is held until
//!   then, in a bounded [`WaitQueue`].
//! - [`headers`]: the rate-limit response headers, for other front ends.
//! - The stores: [`ratekeeper::MemoryStore`] here, `ratekeeper-sqlite` and
//!   `ratekeeper-redis` for limits shared by several processes.

pub mod client;
pub mod headers;
pub mod in_flight;
mod limit;
pub mod response_cost;

pub use in_flight::InFlightLayer;
pub use limit::{
    Key, KeyPlan, LayerError, LayerWarning, PeerAddr, PlanSource, RateLimit, RateLimitLayer,
    RateLimitLayerBuilder, Refusal, RefusalBody, ResponseFormat, ResponseFuture, Rule, WaitQueue,
    DEFAULT_IPV6_PREFIX, UNKNOWN_KEY,
};
pub use response_cost::{Cost, ResponseCostLayer};

/// Compiles and runs the examples of the workspace's README.md (the core's
/// and this crate's, which only this crate has the dependencies for).
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct RootReadmeDoctests;

/// Compiles and runs the examples of the workspace's library guide,
/// docs/library.md (the core's and this crate's).
#[doc = include_str!("../../../docs/library.md")]
#[cfg(doctest)]
pub struct LibraryGuideDoctests;

/// Compiles and runs the example of docs/leasing.md.
#[doc = include_str!("../../../docs/leasing.md")]
#[cfg(doctest)]
pub struct LeasingGuideDoctests;
