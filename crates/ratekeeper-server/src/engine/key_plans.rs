//! Which of a limit's plans a request's key is on (`plan_from`,
//! `[limits.plans]`): each plan is a limit of its own numbers, made once
//! per configuration, so choosing one is a lookup.
//!
//! A plan that is not configured, a request that names none, and a header
//! from a peer not in `plan_from_peers` all get the limit's own numbers
//! (the default plan), never no limit; the last two are counted in
//! `/metrics`, and the first untrusted header of each limit is logged.

use std::net::IpAddr;
use std::sync::Arc;

use ratekeeper::plan::Plan;

use super::{ActiveLimit, Engine, KeySource};
use crate::config::{KeyPart, LimitConfig, PlanConfig, PlanFrom, PlanTable};

/// One plan: its name, and its limit (`None`: unlimited).
type NamedPlan = (Box<[u8]>, Option<Arc<ActiveLimit>>);

/// The limits of each of a limit's plans; `None` for an unlimited one.
#[derive(Debug)]
pub(crate) struct PlanLimits {
    /// The key part whose value names a request's plan (`None`: the
    /// table names it).
    part: Option<KeyPart>,
    /// The table of keys and their plans, and the parts of the key it is
    /// looked up by (the limit's own key).
    table: Option<(Arc<PlanTable>, Vec<KeyPart>)>,
    /// The peers whose header names it (`None`: a descriptor entry).
    peers: Option<Vec<ipnet::IpNet>>,
    /// Sorted by name: at most 64, found by a binary search on the bytes
    /// the request sent.
    by_name: Vec<NamedPlan>,
}

impl PlanLimits {
    /// The plans of `config` (whose `limit` is the default plan's), each
    /// made by `make` from the configuration it decides by.
    pub(crate) fn new(
        config: &LimitConfig,
        plans: &PlanConfig,
        make: impl Fn(LimitConfig) -> ActiveLimit,
    ) -> PlanLimits {
        let mut by_name: Vec<NamedPlan> = plans
            .plans
            .iter()
            .map(|(name, plan)| {
                let limit = match plan {
                    Plan::Unlimited => None,
                    Plan::Limited(limit) => Some(LimitConfig {
                        limit: limit.clone(),
                        rate: plans
                            .rates
                            .iter()
                            .find(|(rated, _)| rated == name)
                            .map_or(config.rate, |(_, rate)| *rate),
                        plans: None,
                        ..config.clone()
                    }),
                    // A ban of the limit's own window: refused without a
                    // store, as a rate of 0 is.
                    Plan::Deny => Some(LimitConfig {
                        ban: true,
                        penalty: None,
                        plans: None,
                        ..config.clone()
                    }),
                };
                (
                    Box::from(name.as_bytes()),
                    limit.map(|config| Arc::new(make(config))),
                )
            })
            .collect();
        by_name.sort_by(|a, b| a.0.cmp(&b.0));
        let peers = match &plans.from {
            PlanFrom::Header { peers, .. } => Some(peers.clone()),
            PlanFrom::Descriptor(_) | PlanFrom::Table(_) => None,
        };
        let table = match &plans.from {
            PlanFrom::Table(table) => Some((
                Arc::clone(table),
                super::matching::key_parts(config).into_owned(),
            )),
            PlanFrom::Header { .. } | PlanFrom::Descriptor(_) => None,
        };
        PlanLimits {
            part: plans.from.part(),
            table,
            peers,
            by_name,
        }
    }
}

/// Which of a limit's plans a request is on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// The plan at this place of `by_name`.
    Plan(usize),
    /// The limit's own numbers: no plan named (or the table does not list
    /// the key).
    Default,
    /// The limit's own numbers: a plan the limit does not have.
    Unknown(String),
    /// The limit's own numbers: a header from a peer not trusted to set
    /// it.
    Untrusted(IpAddr),
}

impl PlanLimits {
    /// The place of the plan `name` in `by_name`, if the limit has it.
    fn position(&self, name: &[u8]) -> Option<usize> {
        self.by_name
            .binary_search_by(|(plan, _)| (**plan).cmp(name))
            .ok()
    }

    /// The plan of the request `source` gives, without counting anything.
    pub(crate) fn choose(&self, source: &dyn KeySource) -> Chosen {
        let at = |name: &[u8]| self.position(name);
        if let Some((table, parts)) = &self.table {
            // A key the table does not list, or a request without every
            // part of the key, is on the default plan; the table names
            // only plans the limit has.
            let Ok(key) = super::key::compose_key(parts, source) else {
                return Chosen::Default;
            };
            return match table.plan_of(&key).and_then(|plan| at(plan.as_bytes())) {
                Some(at) => Chosen::Plan(at),
                None => Chosen::Default,
            };
        }
        let Some(part) = &self.part else {
            return Chosen::Default;
        };
        let value = source.part(part);
        match (&value, &self.peers, source.peer()) {
            // A door that fills what a request lacks with `unknown`.
            (None, ..) => Chosen::Default,
            (Some(value), ..) if **value == *ratekeeper_tower::UNKNOWN_KEY => Chosen::Default,
            // A door that reads a client's request: its peer must be one
            // that sets the header.
            (Some(_), Some(peers), Some(peer)) if !peers.iter().any(|net| net.contains(&peer)) => {
                Chosen::Untrusted(peer)
            }
            (Some(name), ..) => match at(name) {
                Some(at) => Chosen::Plan(at),
                None if **name == *ratekeeper::plan::DEFAULT_PLAN.as_bytes() => Chosen::Default,
                None => Chosen::Unknown(String::from_utf8_lossy(name).into_owned()),
            },
        }
    }

    /// The name of the plan at `at` of `by_name`.
    pub(crate) fn name_at(&self, at: usize) -> String {
        String::from_utf8_lossy(&self.by_name[at].0).into_owned()
    }
}

impl Engine {
    /// The limit a request of `source` is checked against under `limit`:
    /// `limit` itself unless it has plans; then its key's plan's, or
    /// `None` when that plan is unlimited.
    #[inline]
    pub(crate) fn plan_limit(
        &self,
        limit: &Arc<ActiveLimit>,
        source: &dyn KeySource,
    ) -> Option<Arc<ActiveLimit>> {
        match limit.plan_limits() {
            None => Some(Arc::clone(limit)),
            Some(plans) => self.choose_plan(limit, plans, source),
        }
    }

    fn choose_plan(
        &self,
        limit: &Arc<ActiveLimit>,
        plans: &PlanLimits,
        source: &dyn KeySource,
    ) -> Option<Arc<ActiveLimit>> {
        match self.find_plan(limit, plans, source) {
            Some(at) => plans.by_name[at].1.clone(),
            None => Some(Arc::clone(limit)),
        }
    }

    /// Counts what was odd about a request's plan under `limit` (an
    /// unknown plan, a header from an untrusted peer), for a door whose
    /// checks choose the plan elsewhere: the proxy's tower layer.
    pub(crate) fn observe_plan(&self, limit: &ActiveLimit, source: &dyn KeySource) {
        if let Some(plans) = limit.plan_limits() {
            self.find_plan(limit, plans, source);
        }
    }

    /// The place of the request's plan in `plans.by_name`; `None` for the
    /// limit's own numbers (no plan named, an unknown one, an untrusted
    /// header: the last two counted).
    fn find_plan(
        &self,
        limit: &ActiveLimit,
        plans: &PlanLimits,
        source: &dyn KeySource,
    ) -> Option<usize> {
        match plans.choose(source) {
            Chosen::Plan(at) => Some(at),
            Chosen::Default => None,
            Chosen::Unknown(_) => {
                self.inner.metrics.record_unknown_plan(limit.name());
                None
            }
            Chosen::Untrusted(peer) => {
                if let Some(part) = &plans.part {
                    self.record_untrusted_plan(limit, part, peer);
                }
                None
            }
        }
    }

    /// The limit of `limit`'s plan `plan`, as the tower layer's rule
    /// chose it (`None` for an unlimited plan, which the layer does not
    /// check); `limit` itself for the default plan or a limit without
    /// plans.
    pub(crate) fn limit_of_plan(limit: &Arc<ActiveLimit>, plan: &str) -> Option<Arc<ActiveLimit>> {
        let Some(plans) = limit.plan_limits() else {
            return Some(Arc::clone(limit));
        };
        match plans.position(plan.as_bytes()) {
            Some(at) => plans.by_name[at].1.clone(),
            None => Some(Arc::clone(limit)),
        }
    }

    /// Counts a plan header from `peer`, which `plan_from_peers` does not
    /// list, and logs the first of each limit.
    #[cold]
    fn record_untrusted_plan(&self, limit: &ActiveLimit, part: &KeyPart, peer: IpAddr) {
        if self.inner.metrics.record_untrusted_plan(limit.name()) {
            tracing::warn!(
                limit = limit.name(),
                %peer,
                "limit {name} reads its plan from {part}, but {peer} is not in its \
                 plan_from_peers: the header is ignored and the limit's own numbers apply. If \
                 {peer} is your edge, add it to plan_from_peers. Said once per limit; \
                 ratekeeper_plan_untrusted_total counts every such request",
                name = limit.name(),
            );
        }
    }
}
