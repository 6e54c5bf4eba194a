//! The rate-limit middleware (documented on the crate's front page).

mod body;
mod future;
mod headers;
mod key;
mod layer;
mod response;
mod service;

pub use body::RefusalBody;
pub use future::ResponseFuture;
pub use key::{Key, PeerAddr, DEFAULT_IPV6_PREFIX, UNKNOWN_KEY};
pub use layer::{ConfigWarning, LayerError, RateLimitLayer, RateLimitLayerBuilder};
pub use response::{Refusal, ResponseFormat};
pub use service::RateLimit;
