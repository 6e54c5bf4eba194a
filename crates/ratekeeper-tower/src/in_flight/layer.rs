//! The layer and its builder.

use std::sync::{Arc, Mutex};

use ratekeeper::store::in_flight::{InFlight, Slot};
use tower::Layer;

use super::rule::CapRule;
use super::service::InFlightService;
use crate::limit::key::WithoutPeer;
use crate::{Key, LayerError, ResponseFormat};

/// Caps a key's requests in flight: see the [module](super).
pub struct InFlightLayer<S> {
    pub(super) shared: Arc<Shared<S>>,
}

impl<S> Clone for InFlightLayer<S> {
    fn clone(&self) -> Self {
        InFlightLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> std::fmt::Debug for InFlightLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlightLayer")
            .field("caps", &self.shared.caps)
            .finish_non_exhaustive()
    }
}

/// What the layer's services share.
pub(super) struct Shared<S> {
    pub(super) store: S,
    pub(super) caps: Vec<CapRule>,
    pub(super) format: ResponseFormat,
    pub(super) without_peer: WithoutPeer,
    /// Slots whose release could not finish when their response ended
    /// (the store had to be waited for, and nothing polled it): given back
    /// before the next request. At most the slots the store holds.
    pub(super) unreleased: Mutex<Vec<(usize, Slot)>>,
}

impl<S> InFlightLayer<S> {
    /// A builder on `store`.
    pub fn builder(store: S) -> InFlightLayerBuilder<S> {
        InFlightLayerBuilder {
            store,
            caps: Vec::new(),
            format: ResponseFormat::default(),
        }
    }
}

impl<Inner, S> Layer<Inner> for InFlightLayer<S> {
    type Service = InFlightService<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        InFlightService::new(inner, Arc::clone(&self.shared))
    }
}

/// Builds an [`InFlightLayer`]; made by [`InFlightLayer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct InFlightLayerBuilder<S> {
    store: S,
    caps: Vec<CapRule>,
    format: ResponseFormat,
}

impl<S> InFlightLayerBuilder<S> {
    /// Caps the requests in flight of each `key` at `cap`'s maximum, on
    /// every request.
    pub fn cap(self, cap: InFlight, key: Key) -> Self {
        self.rule(CapRule::new(cap, key))
    }

    /// Adds `rule`: a cap, its key, and the requests it applies to.
    pub fn rule(mut self, rule: CapRule) -> Self {
        self.caps.push(rule);
        self
    }

    /// How refusals are written (text, the default, or problem+json).
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.format = format;
        self
    }

    /// The layer; an error without a cap, or with two caps of one name.
    pub fn build(self) -> Result<InFlightLayer<S>, LayerError> {
        if self.caps.is_empty() {
            return Err(LayerError::NoLimits);
        }
        for (index, rule) in self.caps.iter().enumerate() {
            let name = rule.cap().name();
            if self.caps[..index]
                .iter()
                .any(|other| other.cap().name() == name)
            {
                return Err(LayerError::DuplicateLimit(name.to_owned()));
            }
        }
        Ok(InFlightLayer {
            shared: Arc::new(Shared {
                store: self.store,
                caps: self.caps,
                format: self.format,
                without_peer: WithoutPeer::Unknown,
                unreleased: Mutex::new(Vec::new()),
            }),
        })
    }
}
