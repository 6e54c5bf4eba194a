//! The running set of limits: the configuration's limits, ready to match
//! requests and build keys. Replaced whole on a reload.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::Method;
use ratekeeper::{
    policy::{Algorithm, PolicyKind},
    stats::{LimitStats, Stats, StatsConfig},
    Limit,
};
use ratekeeper_tower::Rule;

use super::descriptor_index::DescriptorIndex;
use super::envoy_files::EnvoyLimits;
use super::in_flight::ActiveInFlight;
use super::key::{compose_key, KeySource};
use super::key_plans::PlanLimits;
use super::limitador::LimitadorLimits;
use super::matching::Entry;
use crate::config::{EnvoyFiles, InFlightConfig, KeyPart, LimitConfig, LimitadorSource};

/// One configured limit.
#[derive(Debug)]
pub struct ActiveLimit {
    config: LimitConfig,
    stats: Option<LimitStats>,
    /// The limit as the tower layer's rule, made when first asked for:
    /// the per-request limits Envoy's overrides build never need it.
    rule: OnceLock<Option<Rule>>,
    /// The limits of its plans, if it has some (`[limits.plans]`).
    plans: Option<PlanLimits>,
}

impl ActiveLimit {
    /// A limit that no configuration file names, checked through the
    /// engine like the configured ones: Envoy's per-descriptor limit
    /// overrides are built this way.
    ///
    /// It keeps no statistics: they are kept by name, for the limits of
    /// the configuration.
    pub fn new(config: LimitConfig) -> ActiveLimit {
        ActiveLimit::with_plans(config, None)
    }

    /// `config` recording its decisions in `stats`, with the limits of its
    /// plans, which record theirs there too.
    fn with_plans(config: LimitConfig, stats: Option<LimitStats>) -> ActiveLimit {
        let plans = config.plans.as_ref().map(|plans| {
            PlanLimits::new(&config, plans, |config| ActiveLimit {
                config,
                stats: stats.clone(),
                rule: OnceLock::new(),
                plans: None,
            })
        });
        ActiveLimit {
            config,
            stats,
            rule: OnceLock::new(),
            plans,
        }
    }

    /// The limits of its plans, if it has some.
    pub(crate) fn plan_limits(&self) -> Option<&PlanLimits> {
        self.plans.as_ref()
    }

    /// What this limit decided so far (counts, windows, keys denied most);
    /// `None` for limits built outside the configuration.
    pub fn stats(&self) -> Option<&LimitStats> {
        self.stats.as_ref()
    }

    /// The limit as configured.
    pub fn config(&self) -> &LimitConfig {
        &self.config
    }

    /// The store's limit: name and policy.
    pub fn limit(&self) -> &Limit {
        &self.config.limit
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        self.config.limit.name()
    }

    /// The time over which the quota is granted.
    pub fn window(&self) -> Duration {
        self.config.limit.policy().window()
    }

    /// Whether the limit decides and reports but never refuses.
    pub fn is_shadow(&self) -> bool {
        self.config.shadow
    }

    /// Whether a new key is let through, uncounted, while the store's
    /// table is full (`on_saturated = "allow"`).
    pub fn allows_saturated(&self) -> bool {
        self.config.on_saturated == crate::config::OnSaturated::Allow
    }

    /// The parts its keys are made of.
    pub fn key_parts(&self) -> &[KeyPart] {
        &self.config.key
    }

    /// The key of a request whose parts `source` gives, or the first part
    /// it lacks.
    pub fn key(&self, source: &dyn KeySource) -> Result<Vec<u8>, &KeyPart> {
        compose_key(&self.config.key, source)
    }

    /// The limit as the tower layer's [`Rule`] for HTTP requests
    /// ([`LimitConfig::rule`]); `None` when its `match` names an Envoy
    /// domain or descriptors, which no HTTP request has.
    pub fn http_rule(&self) -> Option<&Rule> {
        self.rule
            .get_or_init(|| self.config.applies_to_http().then(|| self.config.rule()))
            .as_ref()
    }
}

/// The limits in force: the configuration's, in its order, and those of
/// envoyproxy/ratelimit's files and of a Limitador limits file.
#[derive(Debug, Default)]
pub struct LimitSet {
    limits: Vec<Arc<ActiveLimit>>,
    by_name: HashMap<String, usize>,
    envoy: Option<EnvoyLimits>,
    /// Limitador's limits (`[limitador]`), apart: they apply by their
    /// namespace and expressions, not by `match`.
    limitador: LimitadorLimits,
    /// The domains the configuration's limits name: which domains the
    /// service knows, without a walk over every limit per request.
    native_domains: HashSet<Box<str>>,
    /// The configuration's limits for descriptors, by domain, keys and
    /// values: what [`matching::applicable`](super::matching::applicable)
    /// finds them through.
    descriptors: DescriptorIndex,
    /// The positions of the configuration's limits for HTTP requests: an
    /// HTTP request never walks the limits for descriptors.
    http: Vec<usize>,
    /// The caps on requests in flight (`policy = "concurrency"`), in the
    /// configuration's order.
    in_flight: Vec<Arc<ActiveInFlight>>,
}

/// Counters of each limit's charged-keys summary
/// ([`StatsConfig::top_charged`]): enough to find any key that takes more
/// than an eighth of a limit's requests.
pub const TOP_CHARGED: usize = 8;

/// `config` as a limit recording its decisions in `stats` under its name:
/// the statistics it had before, if a limit of that name had some.
pub(super) fn active_with_stats(config: &LimitConfig, stats: &Stats) -> Arc<ActiveLimit> {
    let name = config.limit.name();
    let limit_stats = stats.get(name).unwrap_or_else(|| {
        let mut stats_config = StatsConfig::default();
        // The dashboard shows the key a limit charges most: every request
        // under one address is a proxy that is not trusted, or one client.
        stats_config.top_charged = TOP_CHARGED;
        // A key's denials go when the store forgets the key: after a
        // window (two for the sliding window counter, whose previous
        // window still counts).
        let window = config.limit.policy().window();
        stats_config.key_retention = match config.limit.policy().kind() {
            PolicyKind::SlidingWindow => window.saturating_mul(2),
            _ => window,
        };
        let fresh = LimitStats::with_config(stats_config);
        stats.insert(name, fresh.clone());
        fresh
    });
    Arc::new(ActiveLimit::with_plans(config.clone(), Some(limit_stats)))
}

impl LimitSet {
    /// The set of `limits` (whose names the configuration made unique),
    /// keeping no statistics.
    pub fn new(limits: &[LimitConfig]) -> LimitSet {
        let limits = limits
            .iter()
            .map(|config| Arc::new(ActiveLimit::new(config.clone())))
            .collect();
        LimitSet::index(limits)
    }

    /// The configuration's limits, `envoy`'s and `limitador`'s, each
    /// recording its decisions in `stats` under its name: a limit that a
    /// reload keeps keeps its statistics, and the statistics of limits no
    /// longer configured are dropped.
    pub fn with_stats(
        limits: &[LimitConfig],
        envoy: Option<&EnvoyFiles>,
        limitador: Option<&LimitadorSource>,
        stats: &Stats,
    ) -> LimitSet {
        let native: Vec<Arc<ActiveLimit>> = limits
            .iter()
            .map(|config| active_with_stats(config, stats))
            .collect();
        let mut set = LimitSet::index(native);
        set.envoy = envoy.map(|files| EnvoyLimits::new(files, stats));
        let mut names: HashSet<String> = set.by_name.keys().cloned().collect();
        names.extend(
            set.envoy
                .iter()
                .flat_map(EnvoyLimits::iter)
                .map(|l| l.name().to_owned()),
        );
        // Limitador's names are made to miss the others'.
        set.limitador = LimitadorLimits::new(limitador, stats, &|name| names.contains(name));
        names.extend(set.limitador.names().map(str::to_owned));
        for name in stats.names() {
            if !names.contains(&name) {
                stats.remove(&name);
            }
        }
        set
    }

    /// The limits of envoyproxy/ratelimit's files, when `[envoy]
    /// config_dir` names some.
    pub fn envoy(&self) -> Option<&EnvoyLimits> {
        self.envoy.as_ref()
    }

    fn index(limits: Vec<Arc<ActiveLimit>>) -> LimitSet {
        let by_name = limits
            .iter()
            .enumerate()
            .map(|(index, limit)| (limit.name().to_owned(), index))
            .collect();
        let native_domains = limits
            .iter()
            .filter_map(|limit| limit.config().matcher.domain.as_deref())
            .map(Box::from)
            .collect();
        let descriptors = DescriptorIndex::new(&limits);
        let http = (0..limits.len())
            .filter(|&position| limits[position].config().applies_to_http())
            .collect();
        LimitSet {
            limits,
            by_name,
            envoy: None,
            limitador: LimitadorLimits::default(),
            native_domains,
            descriptors,
            http,
            in_flight: Vec::new(),
        }
    }

    /// This set with `caps`, the configuration's caps on requests in
    /// flight.
    pub fn with_in_flight(mut self, caps: &[InFlightConfig]) -> LimitSet {
        self.in_flight = caps
            .iter()
            .map(|config| Arc::new(ActiveInFlight::new(config.clone())))
            .collect();
        // A domain only caps name is known too: its requests are limited.
        self.native_domains.extend(
            caps.iter()
                .filter_map(|cap| cap.matcher.domain.as_deref())
                .map(Box::from),
        );
        self
    }

    /// The caps on requests in flight, in the configuration's order.
    pub fn in_flight_caps(&self) -> &[Arc<ActiveInFlight>] {
        &self.in_flight
    }

    /// The cap on requests in flight called `name`.
    pub fn in_flight(&self, name: &str) -> Option<&Arc<ActiveInFlight>> {
        self.in_flight.iter().find(|cap| cap.name() == name)
    }

    /// The caps that apply to an HTTP request with `method` and `path`
    /// (a condition on something unknown does not hold), in order.
    pub fn in_flight_for_http<'a>(
        &'a self,
        method: Option<&'a Method>,
        path: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<ActiveInFlight>> + 'a {
        self.in_flight.iter().filter(move |cap| {
            super::matching::http_mismatch(&cap.config().matcher, method, path).is_none()
        })
    }

    /// The caps that apply to the descriptor `entries` of a request in
    /// `domain`, in order. Caps are few, and looked through one by one.
    pub fn in_flight_for_descriptor<'a, E: super::matching::Entry>(
        &'a self,
        domain: &'a str,
        entries: &'a [E],
    ) -> impl Iterator<Item = &'a Arc<ActiveInFlight>> + 'a {
        self.in_flight
            .iter()
            .filter(move |cap| super::matching::matches(&cap.config().matcher, domain, entries))
    }

    /// The caps that apply to HTTP requests, in order: those the proxy
    /// takes slots of.
    pub fn in_flight_for_any_http(&self) -> impl Iterator<Item = &Arc<ActiveInFlight>> {
        self.in_flight
            .iter()
            .filter(|cap| cap.config().applies_to_http())
    }

    /// Whether a `[[limits]]` table names `domain` in its `match`.
    pub fn has_native_domain(&self, domain: &str) -> bool {
        self.native_domains.contains(domain)
    }

    /// Whether any limit in force names `domain`: a `[[limits]]` table, a
    /// domain of envoyproxy/ratelimit's files or a Limitador namespace.
    pub fn knows_domain(&self, domain: &str) -> bool {
        self.has_native_domain(domain)
            || self
                .envoy
                .as_ref()
                .is_some_and(|envoy| envoy.domain(domain).is_some())
            || self.limitador.knows(domain)
    }

    /// The Limitador limits in force (none without `[limitador]`).
    pub fn limitador(&self) -> &LimitadorLimits {
        &self.limitador
    }

    /// Every limit, in the configuration's order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ActiveLimit>> {
        self.limits.iter()
    }

    /// The configuration's limits that may apply to the descriptor
    /// `entries` of a request in `domain`, in its order: every one that
    /// does, found through the index without a walk over every limit, and
    /// some that [`matching::matches`](super::matching::matches) must
    /// still refuse.
    pub(super) fn descriptor_candidates<'a, E: Entry>(
        &'a self,
        domain: &str,
        entries: &[E],
    ) -> impl Iterator<Item = &'a Arc<ActiveLimit>> + 'a {
        self.descriptors
            .candidates(domain, entries)
            .into_iter()
            .map(move |position| &self.limits[position])
    }

    /// Every limit in force: the configuration's, in its order, then
    /// those of envoyproxy/ratelimit's files and of the Limitador file.
    pub fn every(&self) -> impl Iterator<Item = &Arc<ActiveLimit>> {
        let files = self.envoy.iter().flat_map(EnvoyLimits::iter);
        self.limits
            .iter()
            .chain(files)
            .chain(self.limitador.active())
    }

    /// The limit called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<ActiveLimit>> {
        self.by_name.get(name).map(|&index| &self.limits[index])
    }

    /// How many limits there are.
    pub fn len(&self) -> usize {
        self.limits.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.limits.is_empty()
    }

    /// The configuration's limits that apply to an HTTP request with
    /// `method` and `path`, either of which may be unknown (a condition on
    /// something unknown does not hold), in its order. Only the limits for
    /// HTTP requests are walked, never those for descriptors.
    pub fn for_http_request<'a>(
        &'a self,
        method: Option<&'a Method>,
        path: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Arc<ActiveLimit>> + 'a {
        self.http
            .iter()
            .map(move |&position| &self.limits[position])
            .filter(move |limit| {
                super::matching::http_mismatch(&limit.config().matcher, method, path).is_none()
            })
    }
}
