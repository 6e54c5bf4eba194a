//! `plan_from` and `[limits.plans]`: a limit whose numbers depend on the
//! plan of the request's key ([`ratekeeper::plan`]).

use http::HeaderName;
use ipnet::IpNet;
use ratekeeper::plan::Plans;
use ratekeeper::Rate;

use super::KeyPart;

/// A limit's plans and where a request's plan is read.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// Where a request names its plan.
    pub from: PlanFrom,
    /// The numbers of each plan; the limit's own are the default, for a
    /// request that names none or one not listed.
    pub plans: Plans,
    /// Each plan as written (`"100/minute"`, `"unlimited"`, `"deny"`), by
    /// name, in name order: what `/v1/limits` shows.
    pub written: Vec<(String, String)>,
    /// The rate each limited plan was built from, by name, in name order:
    /// the numbers its answers show (Envoy's `current_limit`, the
    /// `RateLimit-Policy` header).
    pub rates: Vec<(String, Rate)>,
}

/// Where a request names its plan (`plan_from`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFrom {
    /// A request header (`header:NAME`), believed only from one of `peers`
    /// on the doors that read a client's request (nginx's
    /// `auth_request`): any client can write a header, so only one your
    /// edge sets and strips from clients is a plan. The JSON API's
    /// callers state it among the key parts.
    Header {
        /// The header.
        name: HeaderName,
        /// The peers whose header is believed (`plan_from_peers`).
        peers: Vec<IpNet>,
    },
    /// A descriptor entry's value (`descriptor:KEY`): Envoy's descriptors
    /// are built by Envoy, from what its route configuration says.
    Descriptor(String),
}

impl PlanFrom {
    /// The key part whose value names the plan.
    pub fn part(&self) -> KeyPart {
        match self {
            PlanFrom::Header { name, .. } => KeyPart::Header(name.clone()),
            PlanFrom::Descriptor(key) => KeyPart::Descriptor(key.clone()),
        }
    }
}

impl std::fmt::Display for PlanFrom {
    /// As written in the file.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanFrom::Header { name, .. } => write!(f, "header:{name}"),
            PlanFrom::Descriptor(key) => write!(f, "descriptor:{key}"),
        }
    }
}

/// Two plan configurations are the same when written the same: the same
/// source, default numbers and plans.
impl PartialEq for PlanConfig {
    fn eq(&self, other: &PlanConfig) -> bool {
        self.from == other.from
            && self.written == other.written
            && self.plans.limit() == other.plans.limit()
    }
}

impl Eq for PlanConfig {}
