//! Caps on requests in flight per key: how many of a client's requests
//! may run at once (exports, reports, uploads: slow requests that pile up).
//!
//! Before the request, [`InFlightLayer`] takes one slot of each cap for
//! the request's key ([`Store::acquire`](ratekeeper::Store::acquire)), all
//! or none: a key whose slots are all taken gets 429 with `Retry-After`
//! (503 when the store fails closed). The slots are given back when the
//! response body ends, when it is dropped before its end (a client that
//! went away), or when the inner service fails or the request is
//! abandoned. A slot that could not be given back then (a store that must
//! be waited for while nothing polls it) is given back before the next
//! request the layer takes, and a slot nobody gives back at all frees
//! itself at its cap's lease. No async runtime is needed.
//!
//! # Example
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use http::{HeaderName, Request, Response, StatusCode};
//! use http_body_util::{BodyExt, Full};
//! use ratekeeper::{store::in_flight::InFlight, MemoryStore};
//! use ratekeeper_tower::{in_flight::InFlightLayer, Key};
//! use tower::{service_fn, Layer, Service, ServiceExt};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let export = service_fn(|_: Request<()>| async {
//!     Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("a large export"))))
//! });
//! // One export per team at once, each for at most ten minutes.
//! let exports = InFlight::new("exports", 1, Duration::from_secs(600))?;
//! let layer = InFlightLayer::builder(MemoryStore::new())
//!     .cap(exports, Key::header(HeaderName::from_static("x-team")))
//!     .build()?;
//! let mut service = layer.layer(export);
//! let request = || Request::builder().header("x-team", "a").body(());
//!
//! let running = service.ready().await?.call(request()?).await?;
//! // While its body is being sent, the team's next export is refused.
//! let second = service.ready().await?.call(request()?).await?;
//! assert_eq!(second.status(), StatusCode::TOO_MANY_REQUESTS);
//! // Once the body has ended, the slot is free again.
//! running.into_body().collect().await?;
//! let third = service.ready().await?.call(request()?).await?;
//! assert_eq!(third.status(), StatusCode::OK);
//! # Ok(())
//! # }
//! ```

mod body;
mod layer;
mod rule;
mod service;

pub use body::InFlightBody;
pub use layer::{InFlightLayer, InFlightLayerBuilder};
pub use rule::CapRule;
pub use service::{InFlightFuture, InFlightService};
