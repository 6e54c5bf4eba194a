//! The layer: its shared state, and the `Layer` that makes the service.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::request::Parts;
use http::{Method, Response};
use http_body_util::Full;
use ratekeeper::{store::PreparedLimit, Limit, Store};
use tower::Layer;

use super::builder::RateLimitLayerBuilder;
use super::key::WithoutPeer;
use super::response::{Refusal, ResponseFormat};
use super::rule::Rule;
use super::service::RateLimit;
use super::wait::WaitQueue;
use super::warnings::LayerWarning;
use crate::headers::{HeaderStyle, ResetStyle};

pub(crate) type CustomResponse = dyn Fn(&Refusal) -> Option<Response<Full<Bytes>>> + Send + Sync;
pub(crate) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;

/// Everything the services of one layer share.
pub(crate) struct Shared<S> {
    pub(crate) store: S,
    pub(crate) rules: Vec<Rule>,
    pub(crate) headers: HeaderStyle,
    pub(crate) reset: ResetStyle,
    pub(crate) format: ResponseFormat,
    pub(crate) skip_paths: Vec<String>,
    pub(crate) skip_methods: Vec<Method>,
    pub(crate) allow_keys: HashSet<Vec<u8>>,
    /// Every rule applies to every request and none is in shadow mode:
    /// each request is checked against all of them, all or nothing.
    pub(crate) uniform: bool,
    pub(crate) partition_keys: bool,
    pub(crate) custom: Option<Arc<CustomResponse>>,
    pub(crate) cost: Option<Arc<CostFn>>,
    /// How keys treat a request without a socket peer.
    pub(crate) without_peer: WithoutPeer,
    /// Whether the missing peer was logged (once per layer).
    pub(crate) missing_peer_logged: AtomicBool,
    /// Requests keyed to the unknown key for want of a socket peer.
    pub(crate) missing_peer_requests: AtomicU64,
    /// `RateLimit-Policy` for every rule, made once (without partition
    /// keys it depends only on the limits).
    pub(crate) policy_value: Option<http::HeaderValue>,
    /// The one rule's limit prepared on the store, when there is one rule
    /// and the store decides at once: no look-up by name per request.
    pub(crate) prepared: Option<Arc<dyn PreparedLimit>>,
    /// A key or the cost is a function of the request's `Parts`, so the
    /// head must be split off the request to call it.
    pub(crate) needs_parts: bool,
    /// One rule, keyed by the socket peer, prepared, every request costing
    /// one: the service's shortest path (the usual per-IP limit).
    pub(crate) peer_only: bool,
    /// A rule has plans: each request's limits are chosen per request,
    /// so no limit is prepared and no single-rule path is taken.
    pub(crate) planned: bool,
    /// Requests that named a plan their rule does not have.
    pub(crate) unknown_plans: AtomicU64,
    /// Requests whose plan header came from a peer not trusted to set it.
    pub(crate) untrusted_plans: AtomicU64,
    /// Whether an untrusted plan header was logged (once per layer).
    pub(crate) untrusted_plan_logged: AtomicBool,
    /// What looked wrong when the layer was built.
    pub(crate) warnings: Vec<LayerWarning>,
    /// Where refused requests wait, when a rule has a `max_wait`.
    pub(crate) wait_queue: Option<WaitQueue>,
    /// Units of held requests dropped while the store could not answer
    /// at once: given back before the next request that waits for it.
    pub(crate) unrefunded: Mutex<Vec<(Limit, Vec<u8>, u64)>>,
}

/// A tower [`Layer`] that rate-limits requests through a [`Store`].
///
/// Every service the layer makes, and every clone of those, shares one
/// store and one configuration: limits hold across all of them (tower's own
/// `RateLimit` keeps a count per clone, which under axum means per
/// connection or per request).
pub struct RateLimitLayer<S> {
    // One `Arc` and nothing else: axum clones the layer, and the service it
    // makes, for every request to a route it wraps, and each `Arc` more is
    // two more atomic read-modify-writes per request.
    pub(crate) shared: Arc<Shared<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("rules", &self.shared.rules)
            .finish_non_exhaustive()
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// A builder for a layer deciding through `store`.
    pub fn builder(store: S) -> RateLimitLayerBuilder<S> {
        RateLimitLayerBuilder::new(store)
    }
}

impl<S> RateLimitLayer<S> {
    /// The configuration warnings found when the layer was built.
    pub fn warnings(&self) -> &[LayerWarning] {
        &self.shared.warnings
    }

    /// The store the layer decides through.
    pub fn store(&self) -> &S {
        &self.shared.store
    }

    /// How many requests so far were keyed to the shared
    /// [`UNKNOWN_KEY`](crate::UNKNOWN_KEY) because a limit keyed by the
    /// client's address found no socket peer on them (counted once per
    /// request, across every service and clone of this layer).
    ///
    /// Anything but 0 means the server does not provide the peer: with
    /// axum, serve with
    /// `app.into_make_service_with_connect_info::<SocketAddr>()`; with
    /// another server insert a [`PeerAddr`](crate::PeerAddr) into each
    /// request's extensions. The layer also logs an error, once, the first
    /// time it happens.
    pub fn missing_peer_requests(&self) -> u64 {
        self.shared.missing_peer_requests.load(Ordering::Relaxed)
    }

    /// How many requests so far named a plan their rule does not have
    /// ([`Rule::with_plans`](super::Rule::with_plans)): checked against the
    /// limit's own numbers. A typo in the edge's plan names, or a plan
    /// added there before here.
    pub fn unknown_plans(&self) -> u64 {
        self.shared.unknown_plans.load(Ordering::Relaxed)
    }

    /// How many requests so far carried a plan header from a peer its
    /// [`PlanSource::header`](super::PlanSource::header) does not list: the
    /// header was ignored and the limit's own numbers applied. A client
    /// naming its own plan, or an edge missing from the list; the layer
    /// also logs the first.
    pub fn untrusted_plans(&self) -> u64 {
        self.shared.untrusted_plans.load(Ordering::Relaxed)
    }

    /// The queue of requests held for their units, when a rule has a
    /// [`max_wait`](super::Rule::max_wait).
    pub fn wait_queue(&self) -> Option<&WaitQueue> {
        self.shared.wait_queue.as_ref()
    }
}

impl<S, Inner> Layer<Inner> for RateLimitLayer<S> {
    type Service = RateLimit<Inner, S>;

    fn layer(&self, inner: Inner) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}
