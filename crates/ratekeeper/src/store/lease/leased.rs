//! The leasing store: a shared store's units, decided on this node.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use event_listener::EventListener;

use super::allotment::{Allotment, Slice, StoreView};
use super::demand::{chunk, draining_floor, shared_floor};
use super::hold::Hold;
use super::stats::{ByLimit, Counters, LeaseStats};
use super::table::{self, Table};
use crate::clock::MonotonicClock;
use crate::store::in_flight::InFlight;
use crate::store::reservation::ReservationId;
use crate::store::{Limit, Store, StoreError, Taken};
use crate::{Clock, Decision, Outcome, Policy, Timestamp};

/// A future the leasing store runs in the background (a prefetch).
pub type Background = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What starts background work: `tokio::spawn` in a tokio program.
pub type Spawner = Arc<dyn Fn(Background) + Send + Sync>;

/// How a [`Leased`] store takes and holds units.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSettings {
    /// The most units one take asks for.
    pub max_chunk: u64,
    /// How long a chunk should last at the key's rate on this node: takes
    /// ask for the rate times this (at most `max_chunk`, at most half of
    /// what the store last said was left).
    pub chunk_for: Duration,
    /// The longest a lease lives: units unspent by then are given up (the
    /// most a node can leave unused, were it to crash).
    pub lifetime: Duration,
    /// How many keys this node holds units (and demand) for; other keys
    /// go to the store for every request.
    pub max_keys: usize,
    /// A key unused for this long gives its units back.
    pub idle: Duration,
    /// Whether units already held are spent while the store fails (on by
    /// default: they were counted in the store, so spending them stays
    /// exact). Off, a node whose last store call failed sends every
    /// request to the store (and so to its failure policy) until one
    /// succeeds.
    pub spend_while_down: bool,
}

impl Default for LeaseSettings {
    /// Chunks of at most 10,000 units lasting 100 ms, leases of at most
    /// 1 s, 10,000 keys, given back after 1 s unused, spent while the
    /// store is down.
    fn default() -> Self {
        LeaseSettings {
            max_chunk: 10_000,
            chunk_for: Duration::from_millis(100),
            lifetime: Duration::from_secs(1),
            max_keys: 10_000,
            idle: Duration::from_secs(1),
            spend_while_down: true,
        }
    }
}

struct Shared<S> {
    store: S,
    clock: Arc<dyn Clock>,
    settings: LeaseSettings,
    table: Table,
    counters: ByLimit,
    /// Units held under a limit's old numbers when new ones came (a
    /// reload), to give back at the next sweep.
    retired: Mutex<Vec<Retired>>,
    /// Whether the store's last answer was an error (see
    /// [`LeaseSettings::spend_while_down`]).
    failing: AtomicBool,
    spawner: Option<Spawner>,
}

/// Units of one key held under numbers no longer in force.
struct Retired {
    id: Box<[u8]>,
    limit: Limit,
    slices: Vec<Slice>,
}

/// A [`Store`] wrapper that takes units from a shared store in chunks and
/// decides from them on this node, so that most decisions never leave it.
///
/// See the [module](super) for how it stays exact.
pub struct Leased<S> {
    shared: Arc<Shared<S>>,
}

impl<S> Clone for Leased<S> {
    fn clone(&self) -> Self {
        Leased {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S> fmt::Debug for Leased<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leased")
            .field("settings", &self.shared.settings)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Leased`] store: [`Leased::builder`].
pub struct LeasedBuilder<S> {
    store: S,
    clock: Arc<dyn Clock>,
    settings: LeaseSettings,
    spawner: Option<Spawner>,
}

impl<S: Store + 'static> LeasedBuilder<S> {
    /// With these settings.
    pub fn settings(mut self, settings: LeaseSettings) -> Self {
        self.settings = settings;
        self
    }

    /// On this clock (this node's: it measures how long units have been
    /// held, never the store's time). A [`ManualClock`](crate::clock::ManualClock)
    /// in tests.
    pub fn clock(mut self, clock: impl Clock + 'static) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// Takes the next chunk of a busy key in the background, started by
    /// `spawn`, before the one it holds runs out, so that its requests do
    /// not wait for the store. Without one, the request that finds the
    /// chunk spent takes the next.
    pub fn spawn_with(mut self, spawn: impl Fn(Background) + Send + Sync + 'static) -> Self {
        self.spawner = Some(Arc::new(spawn));
        self
    }

    /// The store.
    pub fn build(self) -> Leased<S> {
        Leased {
            shared: Arc::new(Shared {
                table: Table::new(self.settings.max_keys),
                store: self.store,
                clock: self.clock,
                settings: self.settings,
                counters: ByLimit::default(),
                retired: Mutex::new(Vec::new()),
                failing: AtomicBool::new(false),
                spawner: self.spawner,
            }),
        }
    }
}

/// What a request that the held units could not answer does.
enum Ask {
    /// Asks the store for its own cost.
    Check,
    /// Asks the store for a chunk, of which its cost is its own.
    Take(u64),
    /// Waits for the take on its way, then looks again.
    Wait(EventListener),
}

impl<S: Store + 'static> Leased<S> {
    /// `store`, leased with the default settings.
    pub fn new(store: S) -> Self {
        Self::builder(store).build()
    }

    /// A builder for leasing `store`.
    pub fn builder(store: S) -> LeasedBuilder<S> {
        LeasedBuilder {
            store,
            clock: Arc::new(MonotonicClock::new()),
            settings: LeaseSettings::default(),
            spawner: None,
        }
    }

    /// Gives back the units of keys unused for [`LeaseSettings::idle`], and
    /// of limits whose numbers changed; forgets keys with nothing held;
    /// returns the units given back. Run it every second or so (the
    /// service does).
    pub async fn sweep(&self) -> u64 {
        let idle = self.shared.settings.idle;
        self.give_back(|a, now| a.is_idle(now, idle), |_| true)
            .await
    }

    /// Gives back every unit held (at shutdown, or before the limits
    /// change); returns the units given back.
    pub async fn give_back_all(&self) -> u64 {
        self.give_back(|a, _| !a.is_fetching(), |_| true).await
    }

    /// Gives back every unit held for the limit named `name`, whatever
    /// its numbers: before they change or it goes (a reload), so that
    /// the store counts under the new numbers only what was spent.
    /// Returns the units given back.
    pub async fn give_back_limit(&self, name: &str) -> u64 {
        let named = |limit: &Limit| limit.name() == name;
        self.give_back(
            |a, _| !a.is_fetching() && a.limit.as_ref().is_some_and(named),
            named,
        )
        .await
    }

    /// Gives back the units of the allotments `pick` picks and of the
    /// retired units whose limit `pick_retired` picks.
    async fn give_back(
        &self,
        pick: impl Fn(&Allotment, Timestamp) -> bool,
        pick_retired: impl Fn(&Limit) -> bool,
    ) -> u64 {
        let shared = &self.shared;
        let now = shared.clock.now();
        let mut returns = Returns::default();
        let retired: Vec<Retired> = {
            let mut retired = shared
                .retired
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let (picked, kept) = retired.drain(..).partition(|r| pick_retired(&r.limit));
            *retired = kept;
            picked
        };
        for r in retired {
            for slice in r.slices {
                returns.add(shared, &r.id, &r.limit, slice, now);
            }
        }
        for mut shard in shared.table.shards() {
            shard.retain(|id, a| {
                let expired = a.forget_ended(now);
                if let Some(limit) = &a.limit {
                    shared.count_expired(limit, expired);
                }
                if !pick(a, now) {
                    return true;
                }
                if let Some(limit) = &a.limit {
                    for slice in a.slices.drain(..) {
                        returns.add(shared, id, limit, slice, now);
                    }
                }
                false
            });
        }
        let mut returned = 0;
        for (id, limit, slice, units) in returns.0 {
            let key = &id[limit.name().len() + 1..];
            // Only where the store can promise to take them back while they
            // are still safe (else they expire as if spent).
            let back = match (slice.store_at, slice.hold.deadline(units)) {
                (Some(at), Some(within)) => {
                    let deadline = at.saturating_add(within);
                    matches!(
                        shared
                            .store
                            .refund_before(&limit, key, units, deadline)
                            .await,
                        Ok(true)
                    )
                }
                _ => false,
            };
            if back {
                returned += units;
                Counters::add(&shared.counters.of(limit.name()).units_returned, units);
            } else {
                shared.count_expired(&limit, units);
            }
        }
        returned
    }
}

/// The units a give-back found, to return to the store.
#[derive(Default)]
struct Returns(Vec<(Box<[u8]>, Limit, Slice, u64)>);

impl Returns {
    /// Notes the units of `slice` (of `limit`'s key `id`) still usable at
    /// `now` to go back, if they can; counts them expired if not.
    fn add<S>(
        &mut self,
        shared: &Shared<S>,
        id: &[u8],
        limit: &Limit,
        slice: Slice,
        now: Timestamp,
    ) {
        let units = slice.usable(now);
        // A draining hold cannot go back: the store would count it off the
        // top of its debt, from under other nodes' leases. It drains here
        // instead.
        if units > 0 && matches!(slice.hold, Hold::Until { .. }) {
            self.0.push((id.into(), limit.clone(), slice, units));
        } else {
            shared.count_expired(limit, units);
        }
    }
}

impl<S> Leased<S> {
    /// The store leased from.
    pub fn store(&self) -> &S {
        &self.shared.store
    }

    /// What it did so far, over every limit.
    pub fn stats(&self) -> LeaseStats {
        self.shared.counters.total()
    }

    /// What it did so far for each limit, by name (sorted).
    pub fn stats_by_limit(&self) -> Vec<(String, LeaseStats)> {
        self.shared.counters.each()
    }

    /// Its settings.
    pub fn settings(&self) -> &LeaseSettings {
        &self.shared.settings
    }

    /// Units held now, over every key (what the store counts as used and
    /// nobody has spent yet).
    pub fn held(&self) -> u64 {
        let now = self.shared.clock.now();
        self.shared
            .table
            .shards()
            .map(|shard| shard.values().map(|a| a.usable(now)).sum::<u64>())
            .sum()
    }
}

impl<S> Shared<S> {
    /// Counts `units` of `limit` as expired: counted as used in the store,
    /// and never spent.
    fn count_expired(&self, limit: &Limit, units: u64) {
        if units > 0 {
            Counters::add(&self.counters.of(limit.name()).units_expired, units);
        }
    }

    /// Keeps `slices`, held for `id` under `limit`'s numbers, to give back
    /// at the next sweep.
    fn retire(&self, id: &[u8], limit: Limit, slices: Vec<Slice>) {
        if slices.is_empty() {
            return;
        }
        let mut retired = self.retired.lock().unwrap_or_else(PoisonError::into_inner);
        retired.push(Retired {
            id: id.into(),
            limit,
            slices,
        });
    }

    /// Notes whether the store just answered (`ok`) or failed.
    fn store_answered(&self, ok: bool) {
        if !self.settings.spend_while_down && self.failing.load(Ordering::Relaxed) == ok {
            self.failing.store(!ok, Ordering::Relaxed);
        }
    }
}

impl<S: Store + 'static> Shared<S> {
    /// Decides `cost` for `id` from what this node holds, or says what to
    /// ask the store. Also starts a prefetch when the held units run low.
    fn decide_here(
        self: &Arc<Self>,
        limit: &Limit,
        key: &[u8],
        id: &[u8],
        cost: u64,
        now: Timestamp,
        may_wait: bool,
    ) -> Result<Decision, Ask> {
        let settings = &self.settings;
        let mut shard = self.table.lock(id);
        let Some(a) = self.table.entry(&mut shard, id, now, settings.idle) else {
            return Err(Ask::Check);
        };
        if a.limit.as_ref().map(Limit::policy) != Some(limit.policy()) {
            // New, or its numbers changed (a reload): what it held was
            // counted under the old ones, and goes back at the next sweep.
            if let Some(old) = a.limit.replace(limit.clone()) {
                self.retire(id, old, a.slices.drain(..).collect());
            }
            a.counters = Some(self.counters.of(limit.name()));
            a.view = None;
            a.refused = None;
        }
        if may_wait {
            // (A request that waited was counted the first time.)
            a.demand.record(now, cost.max(1));
            a.sharing.asked(cost);
        }
        let expired = a.forget_ended(now);
        self.count_expired(limit, expired);
        if !settings.spend_while_down && self.failing.load(Ordering::Relaxed) {
            return Err(Ask::Check);
        }
        if cost == 0 && a.usable(now) > 0 {
            if let Some(decision) = a.local_decision(now) {
                return Ok(decision);
            }
        }
        if cost > 0 && a.spend(now, cost) {
            if let Some(decision) = a.local_decision(now) {
                if let Some(counters) = &a.counters {
                    Counters::add(&counters.decided_here, 1);
                }
                self.maybe_prefetch(a, limit, key, id, now);
                return Ok(decision);
            }
        }
        if cost > 0 {
            if let Some(decision) = a.refusal(now, cost) {
                if let Some(counters) = &a.counters {
                    Counters::add(&counters.refused_here, 1);
                }
                return Ok(decision);
            }
        }
        // A report (cost 0) never takes a chunk; nor does a key whose
        // policy cannot hold one, or one whose take is on its way.
        if cost == 0 || !Hold::possible(limit.policy()) {
            return Err(Ask::Check);
        }
        if a.is_fetching() {
            // Its units will be here in one round trip: as soon as asking
            // the store alone, without a call of its own.
            return match a.listen() {
                Some(listener) if may_wait => Err(Ask::Wait(listener)),
                _ => Err(Ask::Check),
            };
        }
        let want = self.chunk_for(a, limit, cost, now);
        if want > cost {
            a.start_fetching();
            Err(Ask::Take(want))
        } else {
            Err(Ask::Check)
        }
    }

    /// The units to take for `a` (see [`chunk`]), for a request of `cost`.
    fn chunk_for(&self, a: &mut Allotment, limit: &Limit, cost: u64, now: Timestamp) -> u64 {
        let settings = &self.settings;
        let left = a.view.map(|v| v.decision.remaining());
        chunk(
            a.demand.per_second(now),
            settings.chunk_for,
            settings.max_chunk,
            left,
            cost,
            shared_floor(
                draining_floor(limit.policy(), settings.chunk_for, left),
                left,
                a.sharing.nodes(),
            ),
        )
    }

    /// Starts taking the next chunk for `a` in the background when what it
    /// holds would last less than a quarter of [`LeaseSettings::chunk_for`].
    fn maybe_prefetch(
        self: &Arc<Self>,
        a: &mut Allotment,
        limit: &Limit,
        key: &[u8],
        id: &[u8],
        now: Timestamp,
    ) {
        let Some(spawn) = &self.spawner else { return };
        if a.is_fetching() {
            return;
        }
        // The chunk being spent and the next, never more: where takes come
        // small (a store nearly out, shared by several nodes), they would
        // otherwise pile up past the slices a key keeps, the oldest dropped
        // with units unspent while the node took on.
        if a.slices.iter().filter(|s| s.usable(now) > 0).count() > 1 {
            return;
        }
        let per_second = a.demand.per_second(now);
        let settings = &self.settings;
        let low = chunk(
            per_second,
            settings.chunk_for / 4,
            settings.max_chunk,
            None,
            0,
            0,
        );
        if a.usable(now) > low {
            return;
        }
        let want = self.chunk_for(a, limit, 0, now);
        if want == 0 {
            return;
        }
        a.start_fetching();
        // Counted as the decision that asks for it is: whoever reads the
        // counts after it sees both.
        if let Some(counters) = &a.counters {
            Counters::add(&counters.store_calls, 1);
            Counters::add(&counters.prefetches, 1);
        }
        let shared = Arc::clone(self);
        let limit = limit.clone();
        let key = key.to_vec();
        let id = id.to_vec();
        spawn(Box::pin(async move {
            let asked_at = shared.clock.now();
            let fetching = Fetching::new(&shared, &id);
            let taken = shared.store.take(&limit, &key, 1, want).await;
            shared.store_answered(taken.is_ok());
            if let Ok(taken) = taken {
                fetching.done(&limit, asked_at, taken, 0);
            }
        }));
    }

    /// Asks the store for `cost` (and more, for `Ask::Take`), keeps what it
    /// took beyond the cost, and answers the request.
    async fn decide_at_store(
        self: &Arc<Self>,
        limit: &Limit,
        key: &[u8],
        id: &[u8],
        cost: u64,
        ask: Ask,
        asked_at: Timestamp,
    ) -> Result<Outcome, StoreError> {
        Counters::add(&self.counters.of(limit.name()).store_calls, 1);
        match ask {
            // (A request that waited asks at most once more.)
            Ask::Check | Ask::Wait(_) => {
                let outcome = self.store.check(limit, key, cost).await;
                self.store_answered(outcome.is_ok());
                let outcome = outcome?;
                if let Some(decision) = outcome.decision() {
                    let mut shard = self.table.lock(id);
                    if let Some(a) = shard.get_mut(id) {
                        if a.limit.as_ref() == Some(limit) {
                            a.view = Some(StoreView {
                                at: asked_at,
                                decision: *decision,
                            });
                            let took = if decision.is_allowed() { cost } else { 0 };
                            a.sharing.answered(
                                limit.policy(),
                                asked_at,
                                took,
                                decision.remaining(),
                            );
                            if !decision.is_allowed() {
                                a.note_refusal(asked_at, cost, *decision, self.settings.lifetime);
                            } else {
                                a.refused = None;
                                // Nothing held, but a refund of it will
                                // know where its units were counted.
                                a.add(Slice {
                                    asked_at,
                                    store_at: None,
                                    hold: Hold::after(limit.policy(), decision)
                                        .capped(self.settings.lifetime),
                                    units: cost,
                                    spent: cost,
                                });
                                self.count_expired(limit, a.take_dropped());
                            }
                        }
                    }
                }
                Ok(outcome)
            }
            Ask::Take(want) => {
                let fetching = Fetching::new(self, id);
                let taken = self.store.take(limit, key, cost, want).await;
                self.store_answered(taken.is_ok());
                let taken = taken?;
                let outcome = taken.outcome;
                let here = fetching.done(limit, asked_at, taken, cost);
                Ok(match (outcome, here) {
                    (Outcome::Decided(d), Some(local)) if d.is_allowed() => Outcome::Decided(local),
                    _ => outcome,
                })
            }
        }
    }
}

/// A take on its way: marks the key as fetching until it is done or
/// dropped (a request cancelled mid-take), so that one key has one take at
/// a time.
struct Fetching<'a, S> {
    shared: &'a Shared<S>,
    id: &'a [u8],
    done: bool,
}

impl<'a, S: Store + 'static> Fetching<'a, S> {
    fn new(shared: &'a Shared<S>, id: &'a [u8]) -> Self {
        Fetching {
            shared,
            id,
            done: false,
        }
    }

    /// Keeps what `taken` took beyond `spent` (the request's own cost), and
    /// gives the answer for the request as this node now sees it.
    fn done(
        mut self,
        limit: &Limit,
        asked_at: Timestamp,
        taken: Taken,
        spent: u64,
    ) -> Option<Decision> {
        self.done = true;
        let shared = self.shared;
        let mut shard = shared.table.lock(self.id);
        let decision = taken.outcome.decision().copied();
        let Some(a) = shard.get_mut(self.id) else {
            // The key was forgotten meanwhile: nobody holds the units.
            shared.count_expired(limit, taken.units.saturating_sub(spent));
            return None;
        };
        a.end_fetching();
        let decision = decision?;
        if a.limit.as_ref() == Some(limit) {
            a.sharing
                .answered(limit.policy(), asked_at, taken.units, decision.remaining());
            if decision.is_allowed() {
                a.refused = None;
            } else {
                a.view = Some(StoreView {
                    at: asked_at,
                    decision,
                });
                // (A prefetch asks for one unit at least.)
                let cost = spent.max(1);
                a.note_refusal(asked_at, cost, decision, shared.settings.lifetime);
                return None;
            }
        }
        if taken.units > 0 {
            let counters = shared.counters.of(limit.name());
            Counters::add(&counters.leases, 1);
            Counters::add(&counters.units_leased, taken.units - spent.min(taken.units));
        }
        let hold = Hold::after(limit.policy(), &decision).capped(shared.settings.lifetime);
        let slice = Slice {
            asked_at,
            store_at: taken.at,
            hold,
            units: taken.units,
            spent: spent.min(taken.units),
        };
        if a.limit.as_ref() != Some(limit) {
            // Its numbers changed while the take was on its way.
            shared.retire(self.id, limit.clone(), vec![slice]);
            return None;
        }
        a.view = Some(StoreView {
            at: asked_at,
            decision,
        });
        a.add(slice);
        shared.count_expired(limit, a.take_dropped());
        let now = shared.clock.now();
        a.local_decision(now)
    }
}

impl<S> Drop for Fetching<'_, S> {
    fn drop(&mut self) {
        if !self.done {
            let mut shard = self.shared.table.lock(self.id);
            if let Some(a) = shard.get_mut(self.id) {
                a.end_fetching();
            }
        }
    }
}

impl<S: Store + 'static> Store for Leased<S> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        let shared = &self.shared;
        let now = shared.clock.now();
        let id = table::id(limit.name(), key);
        let ask = match shared.decide_here(limit, key, &id, cost, now, true) {
            Ok(decision) => return Ok(Outcome::Decided(decision)),
            Err(Ask::Wait(take)) => {
                take.await;
                let now = shared.clock.now();
                match shared.decide_here(limit, key, &id, cost, now, false) {
                    Ok(decision) => return Ok(Outcome::Decided(decision)),
                    Err(ask) => ask,
                }
            }
            Err(ask) => ask,
        };
        shared
            .decide_at_store(limit, key, &id, cost, ask, now)
            .await
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        let shared = &self.shared;
        let now = shared.clock.now();
        let id = table::id(limit.name(), key);
        {
            let shard = shared.table.lock(&id);
            if let Some(a) = shard.get(&id[..]) {
                if a.limit.as_ref() == Some(limit) && a.usable(now) > 0 {
                    if let Some(decision) = a.local_decision(now) {
                        return Ok(decision);
                    }
                }
            }
        }
        shared.store.peek(limit, key).await
    }

    /// Spends what this node holds for the key first (units the store
    /// counts already), and reports the rest to the store: the units are
    /// counted once, exactly, wherever they were.
    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        let shared = &self.shared;
        let now = shared.clock.now();
        let id = table::id(limit.name(), key);
        let rest = {
            let mut shard = shared.table.lock(&id);
            match shard.get_mut(&id[..]) {
                Some(a) if a.limit.as_ref() == Some(limit) => {
                    let here = a.usable(now).min(units);
                    let spent = if here > 0 && a.spend(now, here) {
                        here
                    } else {
                        0
                    };
                    if spent == units {
                        if let Some(decision) = a.local_decision(now) {
                            Counters::add(&shared.counters.of(limit.name()).decided_here, 1);
                            return Ok(Outcome::Decided(decision));
                        }
                    }
                    units - spent
                }
                _ => units,
            }
        };
        Counters::add(&shared.counters.of(limit.name()).store_calls, 1);
        if rest == 0 {
            // Spent here, with no answer of the store's to tell from.
            return shared.store.peek(limit, key).await.map(Outcome::Decided);
        }
        let outcome = shared.store.report(limit, key, rest).await;
        shared.store_answered(outcome.is_ok());
        outcome
    }

    /// At the store: a reservation's units are held there, not on a node.
    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let shared = &self.shared;
        Counters::add(&shared.counters.of(limit.name()).store_calls, 1);
        shared.store.hold(limit, key, units, id, ttl).await
    }

    /// At the store, where the reservation is.
    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let shared = &self.shared;
        Counters::add(&shared.counters.of(limit.name()).store_calls, 1);
        shared.store.settle(limit, key, id, actual).await
    }

    /// At the store: a cap on requests in flight is not leased, every
    /// slot is the store's.
    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        self.shared.store.take_slot(limit, key, id).await
    }

    /// At the store, where the slot is.
    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.shared.store.free_slot(limit, key, id).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        let shared = &self.shared;
        let id = table::id(limit.name(), key);
        let left = {
            let mut shard = shared.table.lock(&id);
            if let Some(a) = shard.get_mut(&id[..]) {
                // Units come back: what the store refused may pass now.
                a.refused = None;
            }
            match shard.get_mut(&id[..]) {
                // The counter weighs a refund by the window it came from,
                // which only the store can tell.
                _ if matches!(limit.policy(), Policy::SlidingWindow(_)) => units,
                Some(a) if a.limit.as_ref() == Some(limit) => {
                    let left = a.unspend(units);
                    match limit.policy() {
                        // The units this node counted for the key, whose
                        // refill has reached them already: the store has
                        // them back. Given back there again, they would
                        // shorten the debt other nodes' leases drain from.
                        Policy::TokenBucket(_) | Policy::Gcra(_) => {
                            let counters = shared.counters.of(limit.name());
                            Counters::add(&counters.refunds_dropped, left);
                            0
                        }
                        // A window's count: the store takes refunds at
                        // any time without changing when leases end.
                        _ => left,
                    }
                }
                _ => units,
            }
        };
        if left > 0 {
            shared.store.refund(limit, key, left).await?;
            let counters = shared.counters.of(limit.name());
            Counters::add(&counters.refunded_at_store, left);
        }
        Ok(())
    }
}
