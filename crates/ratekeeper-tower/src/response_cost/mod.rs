//! Rate limits by what a response cost, charged once it is known: an
//! LLM's tokens (a response header, or a trailer at the end of a stream),
//! or only the failures (failed logins) or only the successes.
//!
//! Before the request, [`ResponseCostLayer`] holds an estimate on each
//! limit as a reservation ([`ResponseCostLayerBuilder::estimate`]; one
//! unit by default), all or none, so that a burst of concurrent requests
//! cannot all pass before any was charged, and a key without the estimate
//! left is refused. After it, the response's cost settles the reservation:
//! the difference is given back, or the excess charged past the limit
//! ([`Store::report`](ratekeeper::Store::report)), which may overdraw it:
//! the key is then refused until its policy has paid the overdraft off. A
//! cost read from the response head is charged before the response is
//! returned; one read from a trailer, when the body ends (its end waits
//! for the charge). A response whose cost cannot be read, or a stream
//! dropped before its end, is charged the estimate.
//!
//! Refusals are the [`RateLimitLayer`](crate::RateLimitLayer)'s: 429 with
//! `Retry-After`, or 503 when the store fails before the request. A store
//! that fails after the response is logged; the estimate stays.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use http::{HeaderName, Request, Response, StatusCode};
//! use http_body_util::Full;
//! use ratekeeper::{clock::ManualClock, Limit, MemoryStore, Store, Timestamp, TokenBucket};
//! use ratekeeper_tower::{Cost, Key, ResponseCostLayer};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // An "LLM" whose answers say what they cost.
//! let model = service_fn(|_: Request<()>| async {
//!     let mut response = Response::new(Full::new(Bytes::from("an answer")));
//!     response.headers_mut().insert("x-llm-tokens", "1843".parse().unwrap());
//!     Ok::<_, Infallible>(response)
//! });
//! // (A clock that stands still, so that nothing refills meanwhile.)
//! let store = MemoryStore::builder().clock(ManualClock::new(Timestamp::ZERO)).build()?;
//! let tokens = Limit::new("llm-tokens", TokenBucket::per_minute(10_000)?)?;
//! let layer = ResponseCostLayer::builder(store.clone())
//!     .limit(tokens.clone(), Key::header(HeaderName::from_static("x-api-key")))
//!     .cost(Cost::header(HeaderName::from_static("x-llm-tokens")))
//!     .estimate(1_000, Duration::from_secs(60))
//!     .build()?;
//! let mut service = layer.layer(model);
//!
//! let request = Request::builder().header("x-api-key", "k-1").body(())?;
//! let response = service.ready().await?.call(request).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! // The estimate was held, and the answer's 1,843 tokens charged instead.
//! assert_eq!(store.peek(&tokens, b"k-1").await?.remaining(), 10_000 - 1_843);
//! # Ok(())
//! # }
//! ```

mod body;
mod cost;
mod layer;
mod service;

pub use body::CostedBody;
pub use cost::Cost;
pub use layer::{ResponseCostLayer, ResponseCostLayerBuilder};
pub use service::{ResponseCost, ResponseCostFuture};
