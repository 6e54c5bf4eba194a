//! The rate-limit middleware (documented on the crate's front page).

mod body;
mod builder;
mod future;
mod headers;
pub(crate) mod key;
mod layer;
pub(crate) mod plan;
pub(crate) mod response;
mod rule;
pub(crate) mod scope;
mod service;
mod wait;
pub(crate) mod warnings;

pub use body::RefusalBody;
pub use builder::{LayerError, RateLimitLayerBuilder};
pub use future::ResponseFuture;
pub use key::{Key, PeerAddr, DEFAULT_IPV6_PREFIX, UNKNOWN_KEY};
pub use layer::RateLimitLayer;
pub use plan::{KeyPlan, PlanSource};
pub use response::{Refusal, ResponseFormat};
pub use rule::Rule;
pub use service::RateLimit;
pub use wait::WaitQueue;
pub use warnings::LayerWarning;
