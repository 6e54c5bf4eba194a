//! The in-memory store: a [`MemoryLimiter`] per limit, made on first use.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use smallvec::SmallVec;

use super::in_flight::InFlight;
use super::reservation::{Ledger, ReservationError, ReservationId};
use super::{Check, Immediate, Limit, PreparedLimit, Store, StoreError, Taken};
use crate::{
    clock::MonotonicClock,
    memory::{check_all, check_max_keys, BuildError, DEFAULT_MAX_KEYS},
    store::MultiOutcome,
    Clock, Decision, MemoryLimiter, Outcome, Policy, Timestamp,
};

/// How many policies a limit's entry remembers it replaced.
const RETIRED: usize = 4;

/// For how long after a limit's numbers change a request still carrying
/// the numbers it had before is taken for one in flight during the reload
/// (and decided on the new table) rather than for a change back.
pub const RETIRED_GRACE: Duration = Duration::from_secs(1);

/// One limit's table (one plan's, for a limit with plans).
struct Entry<C> {
    /// The limit's name (the map's key is its table's name).
    limit: Arc<str>,
    /// Whether the table is one plan's: it shares keys with the limit's
    /// other plans' tables.
    planned: bool,
    policy: Policy,
    limiter: MemoryLimiter<C>,
    /// The policies this limit had before, newest first: until
    /// `retired_until`, a request still carrying one (started before a
    /// reload with the limits it had then) is decided on this table,
    /// rather than turning the limit back and forth.
    retired: SmallVec<[Policy; 2]>,
    retired_until: Timestamp,
}

impl<C> Entry<C> {
    /// Whether a request with `policy` is decided on this table without
    /// asking more: the hot path's test.
    #[inline]
    fn serves(&self, policy: &Policy) -> bool {
        self.policy == *policy
    }
}

/// Each table by its name ([`Limit::table`]).
type Limiters<C> = HashMap<Arc<str>, Arc<Entry<C>>, ahash::RandomState>;

struct Inner<C> {
    /// Read on every decision without a lock; replaced whole when a limit
    /// is added or its policy changes.
    limiters: ArcSwap<Limiters<C>>,
    /// Serializes the rare replacements.
    writer: Mutex<()>,
    max_keys: usize,
    clock: C,
    background_sweep: bool,
    /// Open reservations ([`Store::reserve`]).
    reservations: Ledger,
    /// Slots taken under in-flight caps ([`Store::acquire`]): at most
    /// `max_keys` over every cap.
    in_flight: Ledger,
}

/// The embedded default store: each limit's keys in a [`MemoryLimiter`] of
/// this process, made the first time the limit is used.
///
/// Decisions are exact and lock-free (see [`MemoryLimiter`]); finding a
/// limit's table is one lock-free load of the current map.
///
/// When a limit comes back with other numbers under the same name (a
/// configuration reload), its table is replaced by its
/// [successor](MemoryLimiter::successor): each key's state is carried to
/// the new numbers ([`Policy::carry`]), so tightening a limit gives no key
/// a fresh quota. A change of policy kind starts the keys fresh. For
/// [`RETIRED_GRACE`] after a change, requests still carrying a policy the
/// limit had before (in flight during the reload) are decided on the new
/// table; after it, such a request is a change back, carried in turn.
///
/// ```
/// use ratekeeper::{Gcra, Limit, MemoryStore, Store};
///
/// # futures_executor::block_on(async {
/// let store = MemoryStore::new();
/// let per_user = Limit::new("per-user", Gcra::per_second(1)?)?;
/// assert!(store.check(&per_user, b"alice", 1).await?.is_allowed());
/// assert!(!store.check(&per_user, b"alice", 1).await?.is_allowed());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub struct MemoryStore<C = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for MemoryStore<C> {
    fn clone(&self) -> Self {
        MemoryStore {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limiters = self.inner.limiters.load();
        f.debug_struct("MemoryStore")
            .field("limits", &limiters.keys().collect::<Vec<_>>())
            .field("max_keys", &self.inner.max_keys)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryStore<MonotonicClock> {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore<MonotonicClock> {
    /// A store whose limits each track up to [`DEFAULT_MAX_KEYS`] keys, on
    /// the [`MonotonicClock`], swept in the background.
    pub fn new() -> Self {
        Self::builder()
            .build()
            .expect("the default key count is valid")
    }

    /// A store with other settings than [`new`](MemoryStore::new)'s, as
    /// [`MemoryLimiter::builder`] makes a limiter:
    ///
    /// ```
    /// use ratekeeper::{clock::ManualClock, MemoryStore, Timestamp};
    ///
    /// let clock = ManualClock::new(Timestamp::from_secs(1_000));
    /// let store = MemoryStore::builder()
    ///     .max_keys(1_000)
    ///     .clock(clock.clone())
    ///     .background_sweep(false)
    ///     .build()?;
    /// # Ok::<(), ratekeeper::memory::BuildError>(())
    /// ```
    pub fn builder() -> MemoryStoreBuilder<MonotonicClock> {
        MemoryStoreBuilder {
            max_keys: DEFAULT_MAX_KEYS,
            clock: MonotonicClock::new(),
            background_sweep: true,
        }
    }
}

/// Settings of a [`MemoryStore`]: made by [`MemoryStore::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct MemoryStoreBuilder<C> {
    max_keys: usize,
    clock: C,
    background_sweep: bool,
}

impl<C: Clock + Clone + 'static> MemoryStoreBuilder<C> {
    /// Each limit tracks at most `max_keys` keys (default
    /// [`DEFAULT_MAX_KEYS`], at most [`MAX_KEYS`](crate::memory::MAX_KEYS)).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Decides on `clock` (default [`MonotonicClock`]; a
    /// [`ManualClock`](crate::clock::ManualClock) for tests).
    pub fn clock<D: Clock + Clone + 'static>(self, clock: D) -> MemoryStoreBuilder<D> {
        MemoryStoreBuilder {
            max_keys: self.max_keys,
            clock,
            background_sweep: self.background_sweep,
        }
    }

    /// Whether each limit's table is swept by a thread of its own (default
    /// yes); without, [`MemoryStore::sweep`] does it when called.
    pub fn background_sweep(mut self, background_sweep: bool) -> Self {
        self.background_sweep = background_sweep;
        self
    }

    /// The store.
    ///
    /// # Errors
    ///
    /// [`BuildError::ZeroMaxKeys`] or [`BuildError::TooManyKeys`] for a
    /// `max_keys` out of range.
    pub fn build(self) -> Result<MemoryStore<C>, BuildError> {
        Ok(MemoryStore {
            inner: Arc::new(Inner {
                limiters: ArcSwap::from_pointee(Limiters::default()),
                writer: Mutex::new(()),
                max_keys: check_max_keys(self.max_keys)?,
                clock: self.clock,
                background_sweep: self.background_sweep,
                reservations: Ledger::default(),
                in_flight: Ledger::default(),
            }),
        })
    }
}

impl<C: Clock + Clone + 'static> MemoryStore<C> {
    /// The table of `limit`, made if this is its first use.
    pub fn limiter(&self, limit: &Limit) -> Result<MemoryLimiter<C>, StoreError> {
        self.with_limiter(limit, MemoryLimiter::clone)
    }

    /// Sweeps every limit's table now: the keys evicted.
    pub fn sweep(&self) -> usize {
        self.inner
            .limiters
            .load()
            .values()
            .map(|entry| entry.limiter.sweep())
            .sum()
    }

    /// Keys tracked over all limits.
    pub fn len(&self) -> usize {
        self.inner
            .limiters
            .load()
            .values()
            .map(|entry| entry.limiter.len())
            .sum()
    }

    /// Keys tracked for the limit called `name`: 0 before its first
    /// decision. With [`len`](MemoryStore::len), what a dashboard needs to
    /// tell which limit fills its table (each holds at most `max_keys`).
    ///
    /// ```
    /// use ratekeeper::{Gcra, Limit, MemoryStore, Store};
    ///
    /// # futures_executor::block_on(async {
    /// let store = MemoryStore::new();
    /// let per_user = Limit::new("per-user", Gcra::per_second(1)?)?;
    /// store.check(&per_user, b"alice", 1).await?;
    /// store.check(&per_user, b"bob", 1).await?;
    /// assert_eq!(store.keys_of("per-user"), 2);
    /// assert_eq!(store.keys_of("per-ip"), 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn keys_of(&self, name: &str) -> usize {
        self.inner
            .limiters
            .load()
            .values()
            .filter(|entry| &*entry.limit == name)
            .map(|entry| entry.limiter.len())
            .sum()
    }

    /// How many reservations are open ([`Store::reserve`]), over every
    /// limit and key.
    pub fn open_reservations(&self) -> usize {
        self.inner.reservations.len(self.inner.clock.now())
    }

    /// How many slots are taken under in-flight caps ([`Store::acquire`]),
    /// over every cap and key, their leases not passed.
    pub fn slots_taken(&self) -> usize {
        self.inner.in_flight.len(self.inner.clock.now())
    }

    /// How many reservations expired before anyone settled them (and so
    /// stay at their estimate), since the store was made.
    pub fn expired_reservations(&self) -> u64 {
        self.inner.reservations.expired(self.inner.clock.now())
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Runs `f` on the table of `limit`.
    #[inline]
    fn with_limiter<R>(
        &self,
        limit: &Limit,
        f: impl FnOnce(&MemoryLimiter<C>) -> R,
    ) -> Result<R, StoreError> {
        {
            let limiters = self.inner.limiters.load();
            if let Some(entry) = limiters.get(limit.table()) {
                if entry.serves(limit.policy()) {
                    return Ok(f(&entry.limiter));
                }
            }
        }
        let entry = self.add(limit)?;
        Ok(f(&entry.limiter))
    }

    /// Makes (or remakes, for a changed policy) the table of `limit`.
    #[cold]
    fn add(&self, limit: &Limit) -> Result<Arc<Entry<C>>, StoreError> {
        let _writer = self
            .inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let current = self.inner.limiters.load_full();
        let previous = current.get(limit.table());
        let now = self.inner.clock.now();
        if let Some(entry) = previous {
            let in_flight = now < entry.retired_until && entry.retired.contains(limit.policy());
            if entry.serves(limit.policy()) || in_flight {
                return Ok(Arc::clone(entry));
            }
        }
        let policy = limit.policy().clone();
        let planned = limit.plan().is_some();
        // Another plan's table of the limit, whose keys this one shares.
        let sibling = || {
            current
                .values()
                .find(|entry| entry.planned && *entry.limit == *limit.name())
        };
        let limiter = match previous {
            Some(entry) => entry.limiter.successor(policy.clone()),
            None => match sibling().filter(|_| planned) {
                Some(sibling) => sibling.limiter.plan_sibling(policy.clone()),
                None => {
                    let builder = MemoryLimiter::builder(policy.clone())
                        .max_keys(self.inner.max_keys)
                        .clock(self.inner.clock.clone())
                        .background_sweep(self.inner.background_sweep);
                    if planned {
                        builder.build_for_plans()
                    } else {
                        builder.build()
                    }
                }
            },
        }
        .map_err(StoreError::unavailable)?;
        let retired = previous.map_or_else(SmallVec::new, |entry| {
            std::iter::once(&entry.policy)
                .chain(&entry.retired)
                .filter(|retired| **retired != policy)
                .take(RETIRED)
                .cloned()
                .collect()
        });
        let entry = Arc::new(Entry {
            limit: limit.name().into(),
            planned,
            policy,
            limiter,
            retired,
            retired_until: now.saturating_add(RETIRED_GRACE),
        });
        let mut next = (*current).clone();
        next.insert(limit.table().into(), Arc::clone(&entry));
        self.inner.limiters.store(Arc::new(next));
        Ok(entry)
    }
}

impl<C: Clock + Clone + 'static> Store for MemoryStore<C> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.with_limiter(limit, |limiter| limiter.check(key, cost))
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.with_limiter(limit, |limiter| limiter.peek(key))
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.with_limiter(limit, |limiter| limiter.refund(key, units))
    }

    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.with_limiter(limit, |limiter| limiter.report(key, units))
    }

    /// Under the lock of the key's reservations: its count, the check and
    /// the new reservation are one step for every other reservation of
    /// the key.
    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let now = self.inner.clock.now();
        let ledger = &self.inner.reservations;
        let owner = ledger.owner(limit.name(), key);
        let mut open = ledger.shard(owner, now);
        open.room(owner)?;
        let outcome = self.with_limiter(limit, |limiter| limiter.check(key, units))?;
        if outcome.is_allowed() {
            open.insert(owner, id, units, now.saturating_add(ttl));
        }
        Ok(outcome)
    }

    /// Under the lock of the key's slots: the count, the decision and the
    /// new slot are one step for every other acquire of the key. The
    /// slots of every cap together are bounded by `max_keys`: past it a
    /// key that holds none is saturated.
    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let now = self.inner.clock.now();
        let ledger = &self.inner.in_flight;
        let owner = ledger.owner(limit.name(), key);
        if ledger.total() >= self.inner.max_keys {
            // Full, or holding expired slots other shards have not
            // forgotten yet: forget them everywhere before refusing.
            ledger.len(now);
        }
        let mut slots = ledger.shard(owner, now);
        let taken = slots.open_of(owner) as u64;
        let decision = limit.decide(taken);
        if decision.is_allowed() {
            if ledger.total() >= self.inner.max_keys {
                return Ok(Outcome::Saturated {
                    retry_after: super::in_flight::RETRY_AFTER_FULL,
                    answered_by: super::AnsweredBy::Store,
                });
            }
            slots.insert(owner, id, 1, now.saturating_add(limit.lease()));
        }
        Ok(Outcome::Decided(decision))
    }

    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        let now = self.inner.clock.now();
        let ledger = &self.inner.in_flight;
        let owner = ledger.owner(limit.name(), key);
        match ledger.shard(owner, now).take(owner, id) {
            Some(_) => Ok(()),
            None => Err(ReservationError::Unknown.into()),
        }
    }

    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let now = self.inner.clock.now();
        let ledger = &self.inner.reservations;
        let owner = ledger.owner(limit.name(), key);
        let held = ledger
            .shard(owner, now)
            .take(owner, id)
            .ok_or(ReservationError::Unknown)?;
        self.with_limiter(limit, |limiter| {
            let actual = actual.unwrap_or(0);
            if actual > held {
                limiter.report(key, actual - held)
            } else {
                limiter.refund(key, held - actual);
                Outcome::Decided(limiter.peek(key))
            }
        })
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.decide_all(checks)
    }

    async fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> Result<Taken, StoreError> {
        // Read before deciding, so the take is no earlier than it says.
        let at = self.inner.clock.now();
        let taken = super::take::take_by_checks(self, limit, key, cost, up_to).await?;
        Ok(taken.at(at))
    }

    async fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> Result<bool, StoreError> {
        // One limiter, one clock: the refund runs right after the reading,
        // with nothing between that could wait.
        if self.inner.clock.now() >= deadline {
            return Ok(false);
        }
        self.refund(limit, key, units).await?;
        Ok(true)
    }

    fn immediate(&self) -> Option<&dyn Immediate> {
        Some(self)
    }
}

impl<C: Clock + Clone + 'static> Immediate for MemoryStore<C> {
    fn check_all_now(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        self.decide_all(checks)
    }

    fn prepare(&self, limit: &Limit) -> Result<Arc<dyn PreparedLimit>, StoreError> {
        Ok(Arc::new(self.limiter(limit)?))
    }
}

/// A limit's table is its own prepared handle: a check skips finding the
/// table by name.
impl<C: Clock + Clone + 'static> PreparedLimit for MemoryLimiter<C> {
    fn check(&self, key: &[u8], cost: u64) -> Outcome {
        MemoryLimiter::check(self, key, cost)
    }
}

impl<C: Clock + Clone + 'static> MemoryStore<C> {
    /// Several limits at once, all or nothing, by the crate's one
    /// algorithm over each limit's table.
    fn decide_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        {
            // Every table made already (the usual case): borrowed from one
            // snapshot of the map, nothing cloned.
            let limiters = self.inner.limiters.load();
            let found: Option<SmallVec<[_; 4]>> = checks
                .iter()
                .map(|check| {
                    let entry = limiters.get(check.limit.table())?;
                    entry.serves(check.limit.policy()).then_some((
                        &entry.limiter,
                        check.key,
                        check.cost,
                    ))
                })
                .collect();
            if let Some(found) = found {
                return Ok(check_all(&found));
            }
        }
        let limiters = checks
            .iter()
            .map(|check| self.limiter(check.limit))
            .collect::<Result<SmallVec<[_; 4]>, _>>()?;
        let limits: SmallVec<[_; 4]> = limiters
            .iter()
            .zip(checks)
            .map(|(limiter, check)| (limiter, check.key, check.cost))
            .collect();
        Ok(check_all(&limits))
    }
}
