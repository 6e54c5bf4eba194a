//! The engine every front door decides through: the limits in force and the
//! store, with all-or-nothing checks of several limits.
//!
//! A front door turns a request into [`LimitCheck`]s (a limit, a key built by
//! [`ActiveLimit::key`] from a [`KeySource`], a cost) and asks
//! [`Engine::check`]; the [`Verdict`] says what each limit decided. The
//! limits can be replaced while requests run ([`Engine::replace_limits`]):
//! requests already deciding finish on the set they started with, and the
//! store keeps every count (a limit whose policy changed starts fresh in
//! the in-memory store, as [`MemoryStore`](ratekeeper::MemoryStore) says).
//!
//! ```
//! use std::sync::Arc;
//! use ratekeeper::{Timestamp, clock::ManualClock};
//! use ratekeeper_server::engine::{LimitCheck, Engine, OrUnknown, NamedParts};
//! use ratekeeper_server::Config;
//!
//! # tokio_test_block_on(async {
//! let config = Config::from_toml_str(
//!     "[[limits]]\nname = \"per-user\"\nrate = \"2/minute\"\nkey = [\"header:x-user\"]\n",
//!     "example.toml",
//! )?;
//! let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
//! let engine = Engine::builder(&config).clock(clock).start().await?;
//!
//! let parts = [("header:x-user".to_owned(), "alice".to_owned())].into();
//! let limits = engine.limits();
//! let limit = limits.get("per-user").unwrap();
//! let key = limit.key(&OrUnknown(NamedParts(&parts))).unwrap();
//! let check = || vec![LimitCheck::new(Arc::clone(limit), key.clone(), 1)];
//! assert!(engine.check(check()).await?.is_allowed());
//! assert!(engine.check(check()).await?.is_allowed());
//! assert!(!engine.check(check()).await?.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
//! # }
//! ```

mod ban;
mod builder;
mod connecting;
mod describe;
mod descriptor_index;
mod envoy_files;
mod error;
pub mod explain;
mod forwarding;
pub(crate) mod headers;
mod health;
mod histogram;
mod in_flight;
mod key;
mod key_plans;
mod leasing;
mod limitador;
mod limits;
pub mod matching;
mod metrics;
mod penalty;
mod plan;
mod reloads;
mod renumbered;
mod reservations;
mod store;
mod store_latency;
mod trace;
mod unmatched;
mod verdict;

use std::sync::Arc;

use arc_swap::ArcSwap;
use ratekeeper::{
    stats::Stats,
    store::{Check as StoreCheck, StoreError},
    Clock, Decision, Limit, Outcome, Store, Timestamp,
};
use smallvec::SmallVec;
use tracing::Instrument as _;

pub use builder::EngineBuilder;
pub use connecting::Connecting;
pub use describe::{LimitDescription, MatchDescription, PenaltyDescription, PlansDescription};
pub use envoy_files::EnvoyLimits;
pub use error::StartError;
pub use forwarding::{is_trusted, untrusted_forwarding};
pub use health::{StoreState, MONITOR_INTERVAL, PROBE_TIMEOUT};
pub use in_flight::{Acquired, ActiveInFlight, SlotCheck, SlotResult};
pub use key::{compose_key, HttpSource, KeySource, NamedParts, OrUnknown};
pub use leasing::Leasable;
pub use limitador::{LimitadorCheck, LimitadorLimits, NAME_PREFIX as LIMITADOR_NAME_PREFIX};
pub use limits::{ActiveLimit, LimitSet, TOP_CHARGED};
pub use metrics::{
    is_near_limit, DecisionMetrics, LatencyHistogram, Reservations, Slots, NEAR_LIMIT_PERCENT,
};
pub use penalty::{BlockedKey, Blocks, MAX_REMEMBERED_BLOCKS};
#[cfg(test)]
pub(crate) use plan::work;
pub(crate) use plan::HttpRequest;
pub use plan::{
    ban_unit, shown_rate, slot_tokens, Descriptor, DescriptorAnswer, DescriptorPlan,
    DescriptorRequest, DescriptorSlot, DescriptorVerdict, DoorRules, MissingPart, PlanError,
    Planned, RateOverride, RateUnit, Shown, Uncounted, SLOT_ENTRY, SLOT_HEADER, SLOT_SEPARATOR,
};
pub use reloads::{ReloadRefusal, ReloadSnapshot, ReloadStats, MAX_REFUSAL_BYTES};
pub use renumbered::{changed_limits, ChangedLimit, KeysAfterChange};
pub use store::{AnyStore, SharedClock};
pub use store_latency::{StoreLatency, StoreOperation};
pub use unmatched::{
    DecisionDoor, UnmatchedRequests, UnmatchedSample, LOG_EVERY_SECS as UNMATCHED_LOG_EVERY_SECS,
    UNKNOWN_DOMAIN,
};
pub use verdict::{LimitCheck, LimitResult, Verdict, SATURATED_HEADER, STORE_HEADER};

use verdict::refuses;

use crate::access::Access;
use crate::config::{Config, Counting, EnvoyDoorConfig, RequestCaps, StoreConfig};

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("limits", &self.limits.load().len())
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// The limits in force and the store: cheap to clone, shared by every
/// front door.
#[derive(Clone, Debug)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    limits: ArcSwap<LimitSet>,
    /// What one request may hold; replaced with the limits.
    requests: ArcSwap<RequestCaps>,
    /// What the Envoy door adds to its answers; replaced with the limits.
    envoy_door: ArcSwap<EnvoyDoorConfig>,
    store: AnyStore,
    store_config: StoreConfig,
    /// The limit `/readyz` reads through to ask the store if it answers.
    probe: Limit,
    /// What each configured limit decided.
    stats: Stats,
    /// The wall clock the statistics' calendar windows follow.
    wall_clock: SharedClock,
    /// Decision latencies and near-limit counts, for `/metrics`.
    metrics: DecisionMetrics,
    /// The tokens the doors ask for; replaced with the limits.
    access: Arc<Access>,
    /// The store's state as last seen.
    monitor: health::StoreMonitor,
    /// The remote store's call latencies, for `/metrics`.
    store_latency: StoreLatency,
    /// What the configuration reloads did, for `/metrics`.
    reloads: ReloadStats,
    /// `[enforcement] shadow_mode`, as the limits in force were made
    /// with; replaced with them.
    shadow_mode: std::sync::atomic::AtomicBool,
    /// Requests no limit applied to.
    unmatched: UnmatchedRequests,
    /// The limits Envoy's descriptor overrides asked for, one per rate.
    overrides: plan::OverrideLimits,
    /// The clock decisions are made by here: when a block ends.
    clock: SharedClock,
    /// The blocks of penalty limits this instance has seen.
    blocks: penalty::Blocks,
    /// The requests the proxy holds for a limit's `max_wait`: bounded by
    /// `[requests]` as the service started, kept across reloads.
    wait_queue: ratekeeper_tower::WaitQueue,
}

impl Engine {
    /// An engine to start on `config`: its clocks and store, then
    /// [`start`](EngineBuilder::start).
    pub fn builder(config: &Config) -> EngineBuilder<'_> {
        EngineBuilder::new(config)
    }

    /// The engine on `store`, its statistics following `wall_clock`.
    fn assemble(
        config: &Config,
        store: AnyStore,
        clock: SharedClock,
        wall_clock: SharedClock,
    ) -> Engine {
        let probe = Limit::new(
            "ratekeeper-readyz",
            ratekeeper::Gcra::per_second(1).expect("1 per second is a valid rate"),
        )
        .expect("ratekeeper-readyz is a valid limit name");
        let stats = Stats::new();
        let loaded = wall_clock.now();
        let opening = store.opening_error().map(|error| error.to_string());
        let monitor = health::StoreMonitor::new(StoreState::new(wall_clock.now(), opening));
        Engine {
            inner: Arc::new(Inner {
                limits: ArcSwap::from_pointee(
                    LimitSet::with_stats(
                        &config.limits,
                        config.envoy.files.as_ref(),
                        config.limitador.as_ref(),
                        &stats,
                    )
                    .with_in_flight(&config.in_flight),
                ),
                requests: ArcSwap::from_pointee(config.requests),
                envoy_door: ArcSwap::from_pointee(config.envoy.clone()),
                store,
                store_config: config.store.clone(),
                probe,
                stats,
                wall_clock,
                metrics: DecisionMetrics::new(),
                access: Arc::new(Access::new(&config.access)),
                monitor,
                store_latency: StoreLatency::default(),
                reloads: ReloadStats::new(loaded),
                shadow_mode: config.shadow_mode.into(),
                unmatched: UnmatchedRequests::default(),
                overrides: plan::OverrideLimits::default(),
                clock,
                blocks: penalty::Blocks::default(),
                wait_queue: ratekeeper_tower::WaitQueue::new(
                    config.requests.max_waiting,
                    config.requests.max_waiting_per_key,
                ),
            }),
        }
    }

    /// The queue of requests the proxy holds for a limit's `max_wait`,
    /// and what became of them, for `/metrics`.
    pub fn wait_queue(&self) -> &ratekeeper_tower::WaitQueue {
        &self.inner.wait_queue
    }

    /// The limits in force now.
    pub fn limits(&self) -> Arc<LimitSet> {
        self.inner.limits.load_full()
    }

    /// What one request may hold now (`[requests]`): the front doors
    /// refuse a request over a cap before deciding anything.
    pub(crate) fn request_caps(&self) -> RequestCaps {
        **self.inner.requests.load()
    }

    /// What the Envoy gRPC door adds to its answers now (`[envoy]`).
    pub(crate) fn envoy_door(&self) -> Arc<EnvoyDoorConfig> {
        self.inner.envoy_door.load_full()
    }

    /// Puts `config`'s limits, request caps, `[envoy]` options and access
    /// tokens in force.
    /// The store cannot change without a restart, but for its leasing
    /// settings ([`Engine::settle_leases`] puts those in force): `false`
    /// says `config` names another store, whose section was ignored.
    pub fn replace_limits(&self, config: &Config) -> bool {
        self.inner.access.replace(&config.access);
        self.inner.requests.store(Arc::new(config.requests));
        self.inner.envoy_door.store(Arc::new(config.envoy.clone()));
        self.inner
            .shadow_mode
            .store(config.shadow_mode, std::sync::atomic::Ordering::Relaxed);
        self.inner.limits.store(Arc::new(
            LimitSet::with_stats(
                &config.limits,
                config.envoy.files.as_ref(),
                config.limitador.as_ref(),
                &self.inner.stats,
            )
            .with_in_flight(&config.in_flight),
        ));
        let mut store = config.store.clone();
        store.lease.clone_from(&self.inner.store_config.lease);
        store == self.inner.store_config
    }

    /// After a reload from `before` to the limits in force now: puts
    /// `config`'s leasing settings in force (a leasing store replaced
    /// gives its units back), and gives back the units leased for limits
    /// whose numbers changed or that went, so that the store counts under
    /// the new numbers only what was spent. Returns the units given back.
    pub async fn settle_leases(&self, before: &LimitSet, config: &Config) -> u64 {
        let store = &self.inner.store;
        let mut returned = 0;
        if store.lease_settings() != config.store.lease {
            returned += store.apply_lease(config.store.lease.clone()).await;
            tracing::info!(
                leasing = config.store.lease.is_some(),
                units_given_back = returned,
                "the store's leasing settings changed"
            );
        }
        let after = self.limits();
        let changed = changed_limits(before, &after).into_iter().map(|c| c.name);
        let gone = before
            .iter()
            .filter(|limit| after.get(limit.name()).is_none())
            .map(|limit| limit.name().to_owned());
        if store.lease_settings().is_none() {
            return returned;
        }
        for name in changed.chain(gone) {
            let units = store.give_back_limit(&name).await;
            tracing::info!(
                limit = %name,
                units,
                "leased units given back: the limit's numbers changed, or it went"
            );
            returned += units;
        }
        returned
    }

    /// The `[store]` the engine was started with (a reload cannot change
    /// it).
    pub(crate) fn store_config(&self) -> &StoreConfig {
        &self.inner.store_config
    }

    /// Whether `[enforcement] shadow_mode` is on: no limit refuses.
    pub fn shadow_mode(&self) -> bool {
        self.inner
            .shadow_mode
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The tokens the doors ask for (`[access]`), and their refusals: each
    /// door (the HTTP and admin routers, the gRPC service) puts its
    /// [layer](Access::layer) on itself.
    pub fn access(&self) -> &Arc<Access> {
        &self.inner.access
    }

    /// What the configured limits decided so far, by name.
    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Counts (and now and then logs) a request of `door` in `domain`
    /// (empty for HTTP requests) that no limit of `limits` applied to,
    /// described by `describe` when it is logged.
    pub(crate) fn record_unmatched(
        &self,
        door: DecisionDoor,
        limits: &LimitSet,
        domain: &str,
        describe: impl FnOnce() -> String,
    ) {
        let now = self.inner.wall_clock.now().as_nanos() / 1_000_000_000;
        self.inner
            .unmatched
            .record(door, limits, domain, now, describe);
    }

    /// The limits made for descriptor overrides so far.
    fn overrides(&self) -> &plan::OverrideLimits {
        &self.inner.overrides
    }

    /// The requests no limit applied to, per door and domain.
    pub fn unmatched(&self) -> &UnmatchedRequests {
        &self.inner.unmatched
    }

    /// Which limits in force apply to `probe`, and why the others do not.
    pub fn explain(&self, probe: &explain::Probe) -> explain::Explanation {
        explain::explain(&self.limits(), probe)
    }

    /// How long decisions took, and how many came near their limit.
    pub fn decision_metrics(&self) -> &DecisionMetrics {
        &self.inner.metrics
    }

    /// How long the store's calls took, by operation (SQLite and Redis).
    pub(crate) fn store_latency(&self) -> &StoreLatency {
        &self.inner.store_latency
    }

    /// What the configuration reloads did (counted by the reloader of
    /// `serve` and `proxy`).
    pub(crate) fn reload_stats(&self) -> &ReloadStats {
        &self.inner.reloads
    }

    /// The store, its calls timed into [`Engine::store_latency`].
    fn timed_store(&self) -> store_latency::Timed<'_> {
        store_latency::Timed {
            store: &self.inner.store,
            latency: &self.inner.store_latency,
        }
    }

    /// Looks for a forwarding header that `limit`'s `client_ip` ignored
    /// because `peer` is not a proxy it trusts (see
    /// [`untrusted_forwarding`]; `also` are more headers the front door
    /// reads, such as nginx's `X-Real-IP`): counts it for `/metrics`, and
    /// logs the first of each limit with the fix.
    pub(crate) fn watch_forwarding(
        &self,
        limit: &ActiveLimit,
        headers: &http::HeaderMap,
        peer: Option<std::net::IpAddr>,
        also: &[http::HeaderName],
    ) {
        let Some(header) = untrusted_forwarding(limit.key_parts(), headers, peer, also) else {
            return;
        };
        if self.inner.metrics.record_untrusted_forwarding(limit.name()) {
            let peer = peer.map_or_else(|| "an unknown peer".to_owned(), |ip| ip.to_string());
            tracing::warn!(
                limit = limit.name(),
                %header,
                %peer,
                "limit {name} is keyed by client_ip, but {header} came from {peer}, which is not \
                 one of its trusted proxies: the header is ignored and the peer is the client. \
                 If {peer} is your proxy or load balancer, add it to the limit's trusted_proxies \
                 (\"private\" trusts the private networks). Said once per limit; \
                 ratekeeper_untrusted_forwarding_headers_total counts every such request",
                name = limit.name(),
            );
        }
    }

    /// Now, by the wall clock the statistics follow.
    pub(crate) fn wall_now(&self) -> Timestamp {
        self.inner.wall_clock.now()
    }

    /// The store.
    pub fn store(&self) -> &AnyStore {
        &self.inner.store
    }

    /// Whether the store answers (the failure policy aside).
    pub async fn ready(&self) -> Result<(), StoreError> {
        self.inner.store.ping(&self.inner.probe).await
    }

    /// Decides one request against every check, all or nothing: if any
    /// limit not in shadow mode refuses, nothing is taken from the others.
    ///
    /// Shadow limits are decided after the others, and charged only when
    /// the others let the request through (otherwise only read): they
    /// report what they would have done without changing what happens
    /// ([`check_shadow`](ratekeeper::store::check_shadow), which the tower layer decides its shadow rules
    /// by too).
    ///
    /// Its latency, failed or not, goes to
    /// [`decision_metrics`](Engine::decision_metrics).
    pub async fn check(&self, checks: Vec<LimitCheck>) -> Result<Verdict, StoreError> {
        self.check_counting(checks, Counting::AllOrNothing).await
    }

    /// [`Engine::check`], counting as `counting` says: all or nothing, or
    /// each limit on its own, as envoyproxy/ratelimit counts every
    /// descriptor of a request (`[envoy] counting = "each_descriptor"`).
    pub(crate) async fn check_counting(
        &self,
        checks: Vec<LimitCheck>,
        counting: Counting,
    ) -> Result<Verdict, StoreError> {
        let started = std::time::Instant::now();
        // A disabled span, made without allocating, unless traces are
        // exported (crate::telemetry).
        let span = trace::decision_span(self.inner.store.kind(), &checks);
        let verdict = if counting == Counting::AllOrNothing && self.takes_steps(&checks) {
            self.decide_detached(checks).instrument(span.clone()).await
        } else if span.is_none() {
            // Without a span to enter, the decision is not wrapped: each
            // wrapper is one more move of the decision's future.
            self.decide(checks, counting).await
        } else {
            self.decide(checks, counting).instrument(span.clone()).await
        };
        trace::record_verdict(&span, &verdict);
        self.inner.metrics.observe(started.elapsed());
        verdict
    }

    /// Whether deciding `checks` may take several calls to a store that
    /// answers later (a charge, then a refund when a later limit refuses),
    /// so that a caller who stops waiting could cut it short.
    fn takes_steps(&self, checks: &[LimitCheck]) -> bool {
        checks.len() > 1 && !self.inner.store.decides_in_one_step()
    }

    /// [`Engine::decide`] in a task of its own: a caller that stops waiting
    /// (a connection closed, a request timed out, a client's reset) must
    /// not stop it between taking one limit's units and giving them back,
    /// or a refused request would keep what it took.
    async fn decide_detached(&self, checks: Vec<LimitCheck>) -> Result<Verdict, StoreError> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self.decide(checks, Counting::AllOrNothing).await;
        };
        let engine = self.clone();
        // The task stays in the decision's span (when traces are exported).
        let span = crate::telemetry::current_span();
        match runtime
            .spawn(
                async move { engine.decide(checks, Counting::AllOrNothing).await }.instrument(span),
            )
            .await
        {
            Ok(verdict) => verdict,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            // The runtime is shutting down: nothing decides any more.
            Err(_) => Err(StoreError::unavailable("the service is shutting down")),
        }
    }

    /// [`Engine::check_counting`], unmeasured.
    async fn decide(
        &self,
        checks: Vec<LimitCheck>,
        counting: Counting,
    ) -> Result<Verdict, StoreError> {
        // A request meets a few limits: none of these allocate for them.
        let mut outcomes: SmallVec<[Option<Outcome>; 4]> = smallvec::smallvec![None; checks.len()];
        for (check, outcome) in checks.iter().zip(outcomes.iter_mut()) {
            if ban::is_ban(check) {
                *outcome = Some(ban::answer(check));
            }
        }
        // A key this instance knows is blocked is refused from here.
        let mut blocked = false;
        for (check, outcome) in checks.iter().zip(outcomes.iter_mut()) {
            if outcome.is_none() {
                *outcome = self.known_block(check);
                blocked |= outcome.is_some();
            }
        }
        let (shadow, enforced): (Positions, Positions) = (0..checks.len())
            .filter(|&i| outcomes[i].is_none())
            .partition(|&i| checks[i].limit.is_shadow());

        if blocked || ban::blocks(&checks) {
            let store = &self.timed_store();
            for index in shadow.into_iter().chain(enforced) {
                let check = &checks[index];
                let decision = store.peek(check.limit.limit(), &check.key).await?;
                outcomes[index] = Some(Outcome::Decided(decision));
            }
        } else {
            let allowed = match counting {
                Counting::AllOrNothing => {
                    self.check_enforced(&checks, enforced.clone(), &mut outcomes)
                        .await?
                }
                Counting::EachDescriptor => {
                    self.check_each(&checks, &enforced, &mut outcomes).await?
                }
            };
            if !allowed {
                for &index in &enforced {
                    let check = &checks[index];
                    if let (Some(outcome), Some(_)) =
                        (outcomes[index], check.limit.config().penalty)
                    {
                        // Boxed: rare, and its calls would make every
                        // decision's future larger.
                        outcomes[index] = Some(Box::pin(self.penalize(check, outcome)).await?);
                    }
                }
            }
            self.check_shadow(&checks, &shadow, allowed, &mut outcomes)
                .await?;
        }

        let now = self.inner.wall_clock.now();
        for (check, answer) in checks.iter().zip(&outcomes) {
            if let Some(outcome) = answer {
                self.record(now, check, outcome);
            }
        }
        let results = checks
            .into_iter()
            .zip(outcomes)
            .filter_map(|(check, answer)| {
                Some(LimitResult {
                    check,
                    outcome: answer?,
                })
            })
            .collect();
        Ok(Verdict { results })
    }

    /// Counts what `check` was answered in its limit's statistics and the
    /// decision metrics.
    fn record(&self, now: Timestamp, check: &LimitCheck, outcome: &Outcome) {
        let Some(stats) = check.limit.stats() else {
            return;
        };
        stats.record(now, !refuses(check, outcome), &check.key);
        self.inner
            .metrics
            .record_outcome(check.limit.name(), outcome);
        let by = outcome.answered_by();
        if by.is_failover() {
            self.inner.metrics.record_failover(check.limit.name(), by);
        }
    }

    /// Decides the shadow checks (those at `shadow`) once the others have:
    /// charged as if enforced when the request is `allowed`, only read
    /// when not ([`check_shadow`](ratekeeper::store::check_shadow)'s
    /// rule, here with who answered each).
    async fn check_shadow(
        &self,
        checks: &[LimitCheck],
        shadow: &[usize],
        allowed: bool,
        outcomes: &mut [Option<Outcome>],
    ) -> Result<(), StoreError> {
        let store = &self.timed_store();
        for &index in shadow {
            let check = &checks[index];
            let (limit, key) = (check.limit.limit(), &check.key);
            let outcome = match allowed {
                true => store.check(limit, key, check.cost).await?,
                false => Outcome::Decided(store.peek(limit, key).await?),
            };
            outcomes[index] = Some(outcome);
        }
        Ok(())
    }

    /// Decides the enforced checks all or nothing, by the store's
    /// [`check_all`](Store::check_all) (each with its own cost), filling
    /// `outcomes`; says whether all allowed.
    ///
    /// A limit whose store had no room for its key and that allows new
    /// keys then (`on_saturated = "allow"`) counts nothing and refuses
    /// nothing, so the others are decided again without it.
    async fn check_enforced(
        &self,
        checks: &[LimitCheck],
        mut active: Positions,
        outcomes: &mut [Option<Outcome>],
    ) -> Result<bool, StoreError> {
        let store = &self.timed_store();
        let passes = |index: usize, outcome: &Outcome| {
            outcome.is_saturated() && checks[index].limit.allows_saturated()
        };
        // A pass only repeats when a limit saturated since the last one, a
        // race; the bound keeps a request's work bounded regardless.
        for pass in 1..=MAX_SATURATED_PASSES {
            if active.is_empty() {
                return Ok(true);
            }
            let request: SmallVec<[StoreCheck<'_>; 4]> =
                active.iter().map(|&i| store_check(&checks[i])).collect();
            let multi = match store.immediate() {
                Some(store) => store.check_all_now(&request)?,
                None => store.check_all(&request).await?,
            };
            let results: SmallVec<[(usize, Outcome); 4]> = active
                .iter()
                .copied()
                .zip(multi.outcomes().iter().copied())
                .collect();
            if multi.is_allowed() {
                for (index, outcome) in results {
                    outcomes[index] = Some(outcome);
                }
                return Ok(true);
            }
            let only_saturation = results.iter().all(|(index, outcome)| {
                passes(*index, outcome) || !refuses(&checks[*index], outcome)
            });
            if !only_saturation || pass == MAX_SATURATED_PASSES {
                for (index, outcome) in results {
                    let outcome = if passes(index, &outcome) {
                        outcome
                    } else {
                        given_back(outcome, checks[index].cost)
                    };
                    outcomes[index] = Some(outcome);
                }
                return Ok(false);
            }
            active.clear();
            for (index, outcome) in results {
                if passes(index, &outcome) {
                    outcomes[index] = Some(outcome);
                } else {
                    active.push(index);
                }
            }
        }
        Ok(active.is_empty())
    }

    /// Decides each enforced check on its own, filling `outcomes`: a limit
    /// that allows takes its cost even when another refuses. Says whether
    /// all allowed.
    async fn check_each(
        &self,
        checks: &[LimitCheck],
        enforced: &[usize],
        outcomes: &mut [Option<Outcome>],
    ) -> Result<bool, StoreError> {
        let mut allowed = true;
        for &index in enforced {
            let check = &checks[index];
            let outcome = self
                .timed_store()
                .check(check.limit.limit(), &check.key, check.cost)
                .await?;
            allowed &= !refuses(check, &outcome);
            outcomes[index] = Some(outcome);
        }
        Ok(allowed)
    }

    /// The status of every check, taking nothing (their costs are ignored).
    pub async fn peek(&self, checks: Vec<LimitCheck>) -> Result<Verdict, StoreError> {
        let mut results = Vec::with_capacity(checks.len());
        for check in checks {
            let outcome = if ban::is_ban(&check) {
                ban::answer(&check)
            } else {
                let decision = self
                    .timed_store()
                    .peek(check.limit.limit(), &check.key)
                    .await?;
                Outcome::Decided(decision)
            };
            results.push(LimitResult { check, outcome });
        }
        Ok(Verdict { results })
    }

    /// Charges each check's cost to its key whatever its limit says: a
    /// cost known only after the request ran ([`Store::report`]). Each
    /// limit on its own, none refused; each result is allowed when the
    /// units fitted what the key had left, refused (overdrawn, with the
    /// wait until a unit fits) when they did not. A ban answers as it does
    /// a check, counting nothing. Not a request: the limits' statistics
    /// count it as none.
    pub async fn report(&self, checks: Vec<LimitCheck>) -> Result<Verdict, StoreError> {
        let store = &self.timed_store();
        let mut results = Vec::with_capacity(checks.len());
        for check in checks {
            let outcome = if ban::is_ban(&check) {
                ban::answer(&check)
            } else {
                let outcome = store
                    .report(check.limit.limit(), &check.key, check.cost)
                    .await?;
                let overdrew = refuses(&check, &outcome);
                self.inner
                    .metrics
                    .record_report(check.limit.name(), check.cost, overdrew);
                outcome
            };
            results.push(LimitResult { check, outcome });
        }
        Ok(Verdict { results })
    }

    /// Gives each check's cost back to its key.
    pub async fn refund(&self, checks: &[LimitCheck]) -> Result<(), StoreError> {
        // A ban took nothing: there is nothing to give back.
        for check in checks.iter().filter(|check| !ban::is_ban(check)) {
            self.timed_store()
                .refund(check.limit.limit(), &check.key, check.cost)
                .await?;
        }
        Ok(())
    }
}

/// Positions among a request's checks.
type Positions = SmallVec<[usize; 4]>;

/// `check` as the store takes it.
fn store_check(check: &LimitCheck) -> StoreCheck<'_> {
    StoreCheck::new(check.limit.limit(), &check.key, check.cost)
}

/// How many times [`Engine::check_enforced`] decides again
/// without the limits that let new keys through while saturated.
const MAX_SATURATED_PASSES: usize = 3;

/// The outcome of a limit that allowed a request the others refused, once
/// its units were given back: what it reports is what the request left,
/// which is nothing.
fn given_back(outcome: Outcome, cost: u64) -> Outcome {
    match outcome {
        Outcome::Decided(decision) if decision.is_allowed() => Outcome::Decided(
            Decision::allowed(
                decision.limit(),
                decision
                    .remaining()
                    .saturating_add(cost)
                    .min(decision.limit()),
                decision.reset(),
            )
            .with_answered_by(decision.answered_by()),
        ),
        other => other,
    }
}
