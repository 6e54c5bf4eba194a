//! A rule's plans ([`Rule::with_plans`](super::Rule::with_plans)): which
//! plan a request's key is on, and so which numbers it is checked against.
//!
//! A client must not choose its own plan. The plan comes either from a
//! header that only the edge in front of the application sets, believed
//! only from that edge's addresses, or from a [`KeyPlan`] that the
//! application's own code (a layer that verified a token, a lookup of the
//! key) put in the request's extensions, which no client can reach. A plan
//! the rule does not have, a header from another peer, and a request that
//! names none all get the limit's own numbers, never no limit.

use std::net::IpAddr;
use std::sync::Arc;

use http::HeaderName;
use ipnet::IpNet;
use ratekeeper::plan::{Plan, Plans};
use ratekeeper::Limit;

use super::key::{peer_of, Head, Key, WithoutPeer};

/// Where a request names its key's plan, for
/// [`Rule::with_plans`](super::Rule::with_plans).
///
/// ```
/// use ratekeeper_tower::PlanSource;
///
/// // Set by the load balancer on 10.0.0.0/8 from the verified API key;
/// // the same header from anyone else is ignored (and counted).
/// let from_edge = PlanSource::header("x-plan".parse()?, ["10.0.0.0/8".parse()?]);
/// // Or set by the application's own authentication layer.
/// let from_code = PlanSource::extension();
/// # drop((from_edge, from_code));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct PlanSource(Source);

/// A function from a request's key to its plan.
type ByKey = dyn Fn(&[u8]) -> Option<Arc<str>> + Send + Sync;

#[derive(Clone)]
enum Source {
    Header { name: HeaderName, peers: Vec<IpNet> },
    Extension,
    ByKey(Arc<ByKey>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Header { name, peers } => f
                .debug_struct("Header")
                .field("name", name)
                .field("peers", peers)
                .finish(),
            Source::Extension => f.write_str("Extension"),
            Source::ByKey(_) => f.write_str("ByKey"),
        }
    }
}

impl PlanSource {
    /// The header `name`, believed only on requests whose socket peer is
    /// in `peers` (the edge that sets it, and strips a client's own). From
    /// any other peer the header is ignored and the request gets the
    /// limit's own numbers; [`RateLimitLayer::untrusted_plans`] counts
    /// such requests. Without a socket peer the header is believed only
    /// under
    /// [`trust_headers_without_peer`](crate::RateLimitLayerBuilder::trust_headers_without_peer).
    ///
    /// [`RateLimitLayer::untrusted_plans`]: crate::RateLimitLayer::untrusted_plans
    pub fn header(name: HeaderName, peers: impl IntoIterator<Item = IpNet>) -> PlanSource {
        PlanSource(Source::Header {
            name,
            peers: peers.into_iter().collect(),
        })
    }

    /// A [`KeyPlan`] in the request's extensions, put there by an earlier
    /// layer of the application: a request without one gets the limit's
    /// own numbers.
    pub fn extension() -> PlanSource {
        PlanSource(Source::Extension)
    }

    /// The plan `lookup` gives the request's key (the rule's [`Key`]):
    /// a table of API keys and their plans, say. A key it gives no plan
    /// is on the limit's own numbers.
    ///
    /// ```
    /// use std::collections::HashMap;
    /// use std::sync::Arc;
    /// use ratekeeper_tower::PlanSource;
    ///
    /// let table: HashMap<Vec<u8>, Arc<str>> = HashMap::from([(b"key-1".to_vec(), "pro".into())]);
    /// let source = PlanSource::by_key(move |key| table.get(key).cloned());
    /// # drop(source);
    /// ```
    pub fn by_key(
        lookup: impl Fn(&[u8]) -> Option<Arc<str>> + Send + Sync + 'static,
    ) -> PlanSource {
        PlanSource(Source::ByKey(Arc::new(lookup)))
    }

    /// The header this source reads, if it reads one.
    pub fn header_name(&self) -> Option<&HeaderName> {
        match &self.0 {
            Source::Header { name, .. } => Some(name),
            Source::Extension | Source::ByKey(_) => None,
        }
    }

    /// The peers whose header is believed (none for an extension).
    pub fn peers(&self) -> &[IpNet] {
        match &self.0 {
            Source::Header { peers, .. } => peers,
            Source::Extension | Source::ByKey(_) => &[],
        }
    }

    /// What the request (whose key is `key`'s) says its plan is.
    fn read<'a>(&self, request: &'a impl Head, key: &Key, without_peer: WithoutPeer) -> Named<'a> {
        match &self.0 {
            Source::ByKey(lookup) => match lookup(&key.extract(request, without_peer).key) {
                Some(plan) => Named::Looked(plan),
                None => Named::Nothing,
            },
            Source::Extension => match request.extensions().get::<KeyPlan>() {
                Some(plan) => Named::Plan(&plan.0),
                None => Named::Nothing,
            },
            Source::Header { name, peers } => {
                let Some(value) = request.headers().get(name) else {
                    return Named::Nothing;
                };
                let trusted = match peer_of(request) {
                    Some(peer) => crate::client::ip::is_in(peers, peer),
                    None => without_peer == WithoutPeer::TrustHeaders,
                };
                if !trusted {
                    return Named::Untrusted(peer_of(request));
                }
                match value.to_str() {
                    Ok(plan) => Named::Plan(plan.trim()),
                    // Not a name any plan could have.
                    Err(_) => Named::Plan(""),
                }
            }
        }
    }
}

/// A request's plan, as the application found it (from a verified token,
/// a table of keys): put it in the request's extensions for a rule whose
/// plans come from [`PlanSource::extension`].
///
/// ```
/// use http::Request;
/// use ratekeeper_tower::KeyPlan;
///
/// let mut request = Request::new(());
/// request.extensions_mut().insert(KeyPlan::new("pro"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyPlan(Arc<str>);

impl KeyPlan {
    /// The plan `name`.
    pub fn new(name: impl Into<Arc<str>>) -> KeyPlan {
        KeyPlan(name.into())
    }

    /// The plan's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

/// What a request's plan source said.
enum Named<'a> {
    /// Nothing: the default plan.
    Nothing,
    /// A header from a peer not trusted to set it (`None`: no peer).
    Untrusted(Option<IpAddr>),
    /// This plan's name.
    Plan(&'a str),
    /// This plan's name, as a lookup gave it.
    Looked(Arc<str>),
}

/// A rule's plans and where requests name theirs.
#[derive(Clone, Debug)]
pub(crate) struct RulePlans {
    pub(crate) plans: Plans,
    pub(crate) from: PlanSource,
}

/// What a request's plan does to a rule.
pub(crate) enum Planned<'a> {
    /// Checked against this limit.
    Limited(&'a Limit),
    /// Not limited: the rule does not apply.
    Unlimited,
    /// Refused without asking the store.
    Deny,
}

/// How one request's plan was found, for the layer's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlanNote {
    /// Nothing to count.
    Fine,
    /// A plan the rule does not have: the default.
    Unknown,
    /// A header from a peer not trusted to set it: the default.
    Untrusted(Option<IpAddr>),
}

impl RulePlans {
    /// The plan of `request`'s key.
    pub(crate) fn choose<'a>(
        &'a self,
        request: &impl Head,
        key: &Key,
        without_peer: WithoutPeer,
    ) -> (Planned<'a>, PlanNote) {
        let (plan, note) = match self.from.read(request, key, without_peer) {
            Named::Nothing => (self.plans.default_plan(), PlanNote::Fine),
            Named::Untrusted(peer) => (self.plans.default_plan(), PlanNote::Untrusted(peer)),
            Named::Plan(name) => self.named(name),
            Named::Looked(name) => self.named(&name),
        };
        let planned = match plan {
            Plan::Limited(limit) => Planned::Limited(limit),
            Plan::Unlimited => Planned::Unlimited,
            Plan::Deny => Planned::Deny,
        };
        (planned, note)
    }

    fn named(&self, name: &str) -> (&Plan, PlanNote) {
        match self.plans.find(name) {
            Some(plan) => (plan, PlanNote::Fine),
            None => (self.plans.default_plan(), PlanNote::Unknown),
        }
    }
}
