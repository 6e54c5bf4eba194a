//! The layer and its builder.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::store::reservation::MAX_RESERVATION_TTL;
use ratekeeper::Limit;
use tower::Layer;

use crate::Rule;

use super::cost::Cost;
use super::service::ResponseCost;
use crate::limit::key::WithoutPeer;
use crate::{Key, LayerError, ResponseFormat};

/// Rate limits by what responses cost, charged when they are known: see
/// the [module](super).
pub struct ResponseCostLayer<S> {
    pub(super) shared: Arc<Shared<S>>,
}

impl<S> Clone for ResponseCostLayer<S> {
    fn clone(&self) -> Self {
        ResponseCostLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> std::fmt::Debug for ResponseCostLayer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseCostLayer")
            .field("rules", &self.shared.rules.len())
            .field("cost", &self.shared.cost)
            .finish_non_exhaustive()
    }
}

/// What the layer's services share.
pub(super) struct Shared<S> {
    pub(super) store: S,
    pub(super) rules: Vec<Rule>,
    pub(super) cost: Cost,
    pub(super) estimate: Estimate,
    pub(super) format: ResponseFormat,
    pub(super) without_peer: WithoutPeer,
}

/// The units held before a request, and for how long.
#[derive(Clone, Copy, Debug)]
pub(super) struct Estimate {
    pub(super) units: u64,
    pub(super) ttl: Duration,
}

/// The estimate when the builder gives none: one unit, for a minute.
const DEFAULT_ESTIMATE: Estimate = Estimate {
    units: 1,
    ttl: Duration::from_secs(60),
};

impl<S> ResponseCostLayer<S> {
    /// A builder on `store`.
    pub fn builder(store: S) -> ResponseCostLayerBuilder<S> {
        ResponseCostLayerBuilder {
            store,
            rules: Vec::new(),
            cost: None,
            estimate: DEFAULT_ESTIMATE,
            format: ResponseFormat::default(),
        }
    }
}

impl<Inner, S> Layer<Inner> for ResponseCostLayer<S> {
    type Service = ResponseCost<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        ResponseCost::new(inner, Arc::clone(&self.shared))
    }
}

/// Builds a [`ResponseCostLayer`]; made by [`ResponseCostLayer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct ResponseCostLayerBuilder<S> {
    store: S,
    rules: Vec<Rule>,
    cost: Option<Cost>,
    estimate: Estimate,
    format: ResponseFormat,
}

impl<S> ResponseCostLayerBuilder<S> {
    /// Charges `limit`, keyed by `key`, what each response cost.
    pub fn limit(self, limit: Limit, key: Key) -> Self {
        self.rule(Rule::new(limit, key))
    }

    /// Charges `rule`'s limit what each response it applies to cost (its
    /// methods and path); a shadow rule holds and charges as the others,
    /// and never refuses.
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Where the cost is read; one unit per response by default
    /// ([`Cost::successes`] and failures alike would be a plain rate
    /// limit: use [`RateLimitLayer`](crate::RateLimitLayer) for that).
    pub fn cost(mut self, cost: Cost) -> Self {
        self.cost = Some(cost);
        self
    }

    /// Holds `units` for each request before it runs, as a reservation
    /// of at most `ttl` ([`Store::reserve`](ratekeeper::Store::reserve)),
    /// so that a burst of concurrent requests cannot all pass before any
    /// has been charged; the response's cost then settles it. By default
    /// one unit for a minute: a request is refused when its key has not
    /// one unit left.
    ///
    /// A response whose cost cannot be read (no header, no trailer, a
    /// stream dropped before its end) is charged the estimate. One that
    /// outlives `ttl` is charged its cost all the same.
    pub fn estimate(mut self, units: u64, ttl: Duration) -> Self {
        self.estimate = Estimate { units, ttl };
        self
    }

    /// How refusals are written (text, the default, or problem+json).
    pub fn response_format(mut self, format: ResponseFormat) -> Self {
        self.format = format;
        self
    }

    /// The layer; an error without a limit, with two limits of one name,
    /// or with an estimate's ttl of zero or over an hour.
    pub fn build(self) -> Result<ResponseCostLayer<S>, LayerError> {
        if self.rules.is_empty() {
            return Err(LayerError::NoLimits);
        }
        for (index, rule) in self.rules.iter().enumerate() {
            let name = rule.limit().name();
            if self.rules[..index]
                .iter()
                .any(|other| other.limit().name() == name)
            {
                return Err(LayerError::DuplicateLimit(name.to_owned()));
            }
        }
        let ttl = self.estimate.ttl;
        if ttl.is_zero() || ttl > MAX_RESERVATION_TTL {
            return Err(LayerError::ReservationTtl(ttl));
        }
        Ok(ResponseCostLayer {
            shared: Arc::new(Shared {
                store: self.store,
                rules: self.rules,
                cost: self.cost.unwrap_or(Cost::Status(|_| true)),
                estimate: self.estimate,
                format: self.format,
                without_peer: WithoutPeer::Unknown,
            }),
        })
    }
}
