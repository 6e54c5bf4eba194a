//! The keyed in-memory limiter.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use thiserror::Error;

use super::demand::{DemandGates, ShardSwept};
use super::key::KeyHasher;
use super::locked_table::LockedTable;
use super::one_word::{self, OneWord};
use super::plan_tables::PlanTables;
use super::slot_table::{Decide, SlotTable, Update};
use crate::{
    clock::MonotonicClock,
    policy::{Algorithm, State},
    Clock, Decision, FixedWindow, Gcra, Outcome, Policy, Timestamp,
};

/// How many keys a limiter tracks unless told otherwise.
pub const DEFAULT_MAX_KEYS: usize = 100_000;

/// The most keys one limiter may track: 2^30.
pub const MAX_KEYS: usize = 1 << 30;

/// The shortest time between two background sweeps. Sweeps follow the
/// policy's window (at most a minute apart) but never run more often than
/// this, so a nanosecond window does not turn the sweeper into a busy loop.
pub const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(10);

/// How many tables a limiter may inherit from through its predecessors
/// (changes of numbers within the old states' lifetime): past it, a
/// successor first moves every key of the older tables in, so that the
/// tables kept stay bounded however often the numbers change.
const MAX_INHERITED: usize = 4;

/// The longest time between two background sweeps.
pub const MAX_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Why a [`MemoryLimiter`] could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `max_keys` was zero.
    #[error("max_keys must be at least 1")]
    ZeroMaxKeys,
    /// `max_keys` was above [`MAX_KEYS`].
    #[error("max_keys is {requested}, above the largest supported value {max}")]
    TooManyKeys {
        /// The value given.
        requested: usize,
        /// [`MAX_KEYS`].
        max: usize,
    },
    /// The background sweeper thread could not be started.
    #[error("could not start the sweeper thread")]
    Sweeper(#[source] std::io::Error),
}

/// Told when a [`MemoryLimiter`] forgets keys, so that what is kept about
/// them elsewhere goes too (see [`MemoryLimiterBuilder::on_forget`]).
///
/// [`LimitStats`](crate::stats::LimitStats) implements it: its per-key denial
/// counts are reaped after each sweep and dropped when a key is reset.
/// Neither call is on the path of a decision.
pub trait ForgetHook: Send + Sync + 'static {
    /// A sweep at `now`, a time of the limiter's clock, evicted the keys
    /// whose state was fresh: those idle for about a window.
    fn swept(&self, now: Timestamp);
    /// [`MemoryLimiter::reset`] forgot `key`.
    fn reset(&self, key: &[u8]);
}

/// Reaps the per-key counts after each sweep and forgets a reset key's.
///
/// The sweep's time is the limiter's clock's, and the stats' times are Unix
/// time: attach the stats to a limiter on a [`UnixClock`](crate::clock::UnixClock)
/// (or, in tests, a [`ManualClock`](crate::clock::ManualClock) set to Unix time).
/// For a limiter on a monotonic clock, implement [`ForgetHook`] on a
/// wrapper that calls [`LimitStats::reap`](crate::stats::LimitStats::reap) with a
/// `UnixClock` reading instead. Set the stats'
/// [`key_retention`](crate::stats::StatsConfig::key_retention) to how long the
/// limiter keeps an idle key (see there): a key's count then goes at the
/// first sweep after the key itself could.
impl ForgetHook for crate::stats::LimitStats {
    fn swept(&self, now: Timestamp) {
        self.reap(now);
    }

    fn reset(&self, key: &[u8]) {
        self.forget(key);
    }
}

/// The optional hook, with a `Debug` for the builder's.
#[derive(Clone)]
struct Hook(Arc<dyn ForgetHook>);

impl fmt::Debug for Hook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ForgetHook")
    }
}

/// Where the states live: lock-free slots for one-word policies, locked
/// maps for the sliding ones.
#[derive(Debug)]
enum Table {
    Slots { policy: OneWord, slots: SlotTable },
    Locked { rows: LockedTable },
}

struct Shared<C> {
    policy: Policy,
    table: Table,
    hasher: KeyHasher,
    clock: C,
    max_keys: usize,
    sweep_interval: Duration,
    /// Whether a background thread sweeps the table.
    background_sweep: bool,
    /// When each shard may next be swept for a new key.
    demand: DemandGates,
    on_forget: Option<Hook>,
    /// The table this one took over from ([`MemoryLimiter::successor`]),
    /// read for each key this one has not seen yet.
    inherited: ArcSwapOption<Inherited<C>>,
    /// Whether a key this table has not seen may be held by another:
    /// `inherited` may hold a table, or this is one plan's table of a
    /// limit. The one load every decision pays for both (relaxed: a table
    /// is set before the limiter is shared, and a late look at a cleared
    /// one finds nothing).
    inheriting: AtomicBool,
    /// The tables of the limit's other plans, if this is one plan's
    /// ([`MemoryLimiter::plan_sibling`]): a key new here is looked for in
    /// them.
    plans: Option<Arc<PlanTables<Shared<C>>>>,
    /// Whether a successor took this table's place: it then takes no key
    /// from the other plans' tables (the successor does).
    succeeded: AtomicBool,
    /// Dropped with the limiter, which tells the sweeper thread to stop.
    _stop_sweeper: Option<Sender<()>>,
}

/// The table a limiter took over from, kept while its states may count.
struct Inherited<C> {
    from: MemoryLimiter<C>,
    /// When every state `from` holds is fresh: after it, nothing is taken.
    until: Timestamp,
}

/// `max_keys` if a table may track that many keys: from 1 to [`MAX_KEYS`].
pub(crate) fn check_max_keys(max_keys: usize) -> Result<usize, BuildError> {
    match max_keys {
        0 => Err(BuildError::ZeroMaxKeys),
        n if n > MAX_KEYS => Err(BuildError::TooManyKeys {
            requested: n,
            max: MAX_KEYS,
        }),
        n => Ok(n),
    }
}

/// A rate limiter for many keys, kept in this process's memory.
///
/// One policy, applied to each key separately: per client address, per API
/// key, per user. Clones are cheap and share the same table, so hand one to
/// every thread or request handler.
///
/// # What it guarantees
///
/// - **Exact under contention.** Token buckets (run as GCRA), GCRA and fixed
///   windows live in a lock-free table: each decision is one
///   compare-and-swap of the key's slot, so two threads can never both take
///   the last unit. Sliding logs and sliding window counters, whose states
///   do not fit one word, decide under a per-shard lock.
/// - **Bounded.** At most [`max_keys`](MemoryLimiterBuilder::max_keys) keys,
///   exactly, however many first requests race. A new key past the cap gets
///   [`Outcome::Saturated`] and nothing is counted; keys already tracked
///   keep being limited. A key is only evicted once its state equals a
///   fresh one, so flooding the table cannot reset anyone's limit.
/// - **Not locked out.** A new key that finds the table full sweeps it for
///   room on demand, shard by shard, so room returns as soon as known keys
///   are fresh again (600 ms after a flood of one request per key under
///   100/minute GCRA), not at the next background sweep. Each shard is
///   swept this way only when its first key may have turned fresh, and at
///   most once per [`MIN_DEMAND_SWEEP_GAP`](crate::memory::MIN_DEMAND_SWEEP_GAP),
///   whatever the number of new keys; while nothing can be fresh, a
///   saturated answer costs one atomic load, and its retry-after is the
///   time until the first known key is fresh again.
/// - **Fixed row size.** Keys are kept as 64-bit keyed hashes, seeded at
///   random per limiter: any key length costs the same, and nobody can
///   choose colliding keys. A chance collision makes two keys share a state,
///   which can only deny earlier, never allow more. The lock-free table
///   takes 16 bytes per slot, with two slots per key of `max_keys`,
///   allocated up front.
/// - **Swept.** A background thread evicts fresh states at most a window
///   (and at most a minute) apart; it never blocks decisions on known keys,
///   and stops when the last clone is dropped. Without it,
///   [`sweep`](MemoryLimiter::sweep) does the same when called (and a full
///   table still sweeps for new keys, as above).
///
/// # Example
///
/// ```
/// use ratekeeper::{Gcra, MemoryLimiter, Timestamp, clock::ManualClock};
///
/// let clock = ManualClock::new(Timestamp::ZERO);
/// let limiter = MemoryLimiter::builder(Gcra::per_second(2)?)
///     .max_keys(10_000)
///     .clock(clock.clone())
///     .build()?;
///
/// assert!(limiter.check("alice", 1).is_allowed());
/// assert!(limiter.check("alice", 1).is_allowed());
/// assert!(!limiter.check("alice", 1).is_allowed());
/// assert!(limiter.check("bob", 1).is_allowed()); // every key has its own quota
/// assert_eq!(limiter.len(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemoryLimiter<C = MonotonicClock> {
    shared: Arc<Shared<C>>,
}

impl<C> Clone for MemoryLimiter<C> {
    fn clone(&self) -> Self {
        MemoryLimiter {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<C> fmt::Debug for MemoryLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLimiter")
            .field("policy", &self.shared.policy)
            .field("len", &self.len())
            .field("max_keys", &self.shared.max_keys)
            .finish_non_exhaustive()
    }
}

impl MemoryLimiter<MonotonicClock> {
    /// A limiter for `policy` with the defaults: [`DEFAULT_MAX_KEYS`] keys,
    /// the [`MonotonicClock`] and a background sweeper.
    pub fn new(policy: impl Into<Policy>) -> Result<Self, BuildError> {
        Self::builder(policy).build()
    }

    /// A builder for a limiter of `policy`.
    pub fn builder(policy: impl Into<Policy>) -> MemoryLimiterBuilder<MonotonicClock> {
        MemoryLimiterBuilder {
            policy: policy.into(),
            max_keys: DEFAULT_MAX_KEYS,
            clock: MonotonicClock::new(),
            background_sweep: true,
            on_forget: None,
        }
    }
}

/// The time of one decision: given, or read from the clock when first
/// needed, then the same for every retry of that decision.
enum Now<'a, C> {
    Read(Timestamp),
    Unread(&'a C),
}

impl<C: Clock> Now<'_, C> {
    #[inline(always)]
    fn get(&mut self) -> Timestamp {
        match *self {
            Now::Read(now) => now,
            Now::Unread(clock) => {
                let now = clock.now();
                *self = Now::Read(now);
                now
            }
        }
    }
}

/// What an update does: a check (`REPORT` false), which takes `cost` when
/// it fits, or a report, which takes it whatever the limit says
/// ([`Algorithm::report`]). One const parameter, so that each is its own
/// specialized update loop.
const CHECK: bool = false;
const REPORT: bool = true;

/// A GCRA check (or report) of `cost` at `now` on the lock-free table.
struct GcraCheck<'a, 'c, C, const OP: bool> {
    gcra: &'a Gcra,
    now: &'a mut Now<'c, C>,
    cost: u64,
}

impl<C: Clock, const OP: bool> Decide for GcraCheck<'_, '_, C, OP> {
    type Result = Decision;

    #[inline(always)]
    fn decide(&mut self, word: Option<u64>) -> (Decision, Option<u64>) {
        match OP {
            CHECK => one_word::decide_gcra(self.gcra, word, self.now.get(), self.cost),
            REPORT => one_word::report_gcra(self.gcra, word, self.now.get(), self.cost),
        }
    }
}

/// A fixed-window check (or report) of `cost` at `now` on the lock-free
/// table.
struct WindowCheck<'a, 'c, C, const OP: bool> {
    window: &'a FixedWindow,
    now: &'a mut Now<'c, C>,
    cost: u64,
}

impl<C: Clock, const OP: bool> Decide for WindowCheck<'_, '_, C, OP> {
    type Result = Decision;

    #[inline(always)]
    fn decide(&mut self, word: Option<u64>) -> (Decision, Option<u64>) {
        match OP {
            CHECK => one_word::decide_window(self.window, word, self.now.get(), self.cost),
            REPORT => one_word::report_window(self.window, word, self.now.get(), self.cost),
        }
    }
}

/// A decision only for a key the table tracks: a new key gets `None`, and
/// no row.
struct Tracked<D>(D);

impl<D: Decide> Decide for Tracked<D> {
    type Result = Option<D::Result>;

    #[inline]
    fn decide(&mut self, state: Option<u64>) -> (Option<D::Result>, Option<u64>) {
        match state {
            Some(state) => {
                let (result, next) = self.0.decide(Some(state));
                (Some(result), next)
            }
            None => (None, None),
        }
    }
}

impl<C: Clock> MemoryLimiter<C> {
    /// Decides a request of `cost` for `key` now.
    #[inline]
    pub fn check(&self, key: impl AsRef<[u8]>, cost: u64) -> Outcome {
        self.decide(key.as_ref(), &mut Now::Unread(&self.shared.clock), cost)
    }

    #[inline]
    fn decide(&self, key: &[u8], now: &mut Now<'_, C>, cost: u64) -> Outcome {
        self.decide_op::<CHECK>(key, now, cost)
    }

    /// A check (`OP` [`CHECK`]) or a report ([`REPORT`]) of `cost`.
    #[inline(always)]
    fn decide_op<const OP: bool>(&self, key: &[u8], now: &mut Now<'_, C>, cost: u64) -> Outcome {
        let fingerprint = self.shared.hasher.fingerprint(key);
        if self.shared.inheriting.load(Ordering::Relaxed) {
            if let Some(outcome) = self.decide_inheriting::<OP>(fingerprint, now, cost) {
                return outcome;
            }
        }
        match self.update_at::<OP>(fingerprint, now, cost) {
            Update::Done(decision) => Outcome::Decided(decision),
            Update::Saturated => self.decide_when_full::<OP>(fingerprint, now, cost),
        }
    }

    /// A new key that found the table full: sweeps for room, then tries
    /// once more. Out of line, so that the table's update is inlined once,
    /// into every check's path, and not a second time here.
    #[cold]
    #[inline(never)]
    fn decide_when_full<const OP: bool>(
        &self,
        fingerprint: u64,
        now: &mut Now<'_, C>,
        cost: u64,
    ) -> Outcome {
        if self.shared.make_room(now.get()) {
            if let Update::Done(decision) = self.update_at::<OP>(fingerprint, now, cost) {
                return Outcome::Decided(decision);
            }
        }
        self.shared.saturated(now.get())
    }

    /// A decision on a table that may have to take the key from another:
    /// after moving it from the table this one took over from, `None`
    /// (decide as usual); on one plan's table, the decision.
    ///
    /// A plan's table decides a key it tracks without a lock, as any
    /// table; a key it does not track is looked for in the other plans'
    /// tables and decided under their moves lock. Every key enters a
    /// plan's table under that lock, so a key that another plan's request
    /// takes away between this table finding it and updating it is not
    /// made afresh here: the update finds it gone and comes to the lock,
    /// where it takes the key back.
    #[cold]
    #[inline(never)]
    fn decide_inheriting<const OP: bool>(
        &self,
        fingerprint: u64,
        now: &mut Now<'_, C>,
        cost: u64,
    ) -> Option<Outcome> {
        self.inherit_predecessor(fingerprint, now.get());
        let plans = self.shared.plans.as_ref()?;
        if self.shared.succeeded.load(Ordering::Relaxed) {
            return None;
        }
        if let Some(decision) = self.update_existing_at::<OP>(fingerprint, now, cost) {
            return Some(Outcome::Decided(decision));
        }
        let _moving = plans.lock_moves();
        self.take_from_plans(plans, fingerprint, now.get());
        Some(match self.update_at::<OP>(fingerprint, now, cost) {
            Update::Done(decision) => Outcome::Decided(decision),
            Update::Saturated => self.decide_when_full::<OP>(fingerprint, now, cost),
        })
    }

    /// [`update_at`](MemoryLimiter::update_at) for a key this table
    /// tracks: `None`, and nothing changed, if it does not.
    fn update_existing_at<const OP: bool>(
        &self,
        fingerprint: u64,
        now: &mut Now<'_, C>,
        cost: u64,
    ) -> Option<Decision> {
        let tracked = match &self.shared.table {
            Table::Slots {
                policy: OneWord::Gcra(gcra),
                slots,
            } => slots.update(fingerprint, Tracked(GcraCheck::<C, OP> { gcra, now, cost })),
            Table::Slots {
                policy: OneWord::FixedWindow(window),
                slots,
            } => slots.update(
                fingerprint,
                Tracked(WindowCheck::<C, OP> { window, now, cost }),
            ),
            Table::Locked { rows } => {
                return rows.update_existing(fingerprint, |state| {
                    let policy = &self.shared.policy;
                    let now = now.get();
                    let (decision, next) = match OP {
                        CHECK => policy.decide(state, now, cost),
                        REPORT => policy.report(state, now, cost),
                    };
                    (decision, (next != *state).then_some(next))
                });
            }
        };
        match tracked {
            Update::Done(decision) => decision,
            Update::Saturated => None,
        }
    }

    /// One decision on the table: the state's update, or saturated. The
    /// clock is read once the key's row is found: at 100,000 keys and more
    /// the row is a cache miss, and the read then runs while it loads.
    ///
    /// Always inlined into `decide`, so that the time read once and the
    /// decision stay in registers; the locked table's path is a call.
    #[inline(always)]
    fn update_at<const OP: bool>(
        &self,
        fingerprint: u64,
        now: &mut Now<'_, C>,
        cost: u64,
    ) -> Update<Decision> {
        match &self.shared.table {
            // One update loop for each one-word policy, each with its
            // arithmetic inlined, rather than one loop matching on the
            // policy inside.
            Table::Slots {
                policy: OneWord::Gcra(gcra),
                slots,
            } => slots.update(fingerprint, GcraCheck::<C, OP> { gcra, now, cost }),
            Table::Slots {
                policy: OneWord::FixedWindow(window),
                slots,
            } => slots.update(fingerprint, WindowCheck::<C, OP> { window, now, cost }),
            Table::Locked { rows } => self.update_locked::<OP>(rows, fingerprint, now, cost),
        }
    }

    /// [`update_at`](MemoryLimiter::update_at) for the sliding policies,
    /// whose decisions take a lock: out of line, as a call costs them
    /// little and keeps the one-word policies' path short.
    #[inline(never)]
    fn update_locked<const OP: bool>(
        &self,
        rows: &LockedTable,
        fingerprint: u64,
        now: &mut Now<'_, C>,
        cost: u64,
    ) -> Update<Decision> {
        rows.update(fingerprint, |state| {
            let policy = &self.shared.policy;
            let now = now.get();
            let decide = |state: &State| match OP {
                CHECK => policy.decide(state, now, cost),
                REPORT => policy.report(state, now, cost),
            };
            let (decision, next) = match state {
                Some(state) => {
                    let (decision, next) = decide(state);
                    (decision, (next != *state).then_some(next))
                }
                None => {
                    let fresh = policy.fresh();
                    let (decision, next) = decide(&fresh);
                    (decision, (next != fresh).then_some(next))
                }
            };
            (decision, next)
        })
    }

    /// Charges `units` to `key` now, whatever its quota says: a cost known
    /// only after the request ran. It never refuses and may overdraw, so
    /// that later checks are refused until the policy's time has paid it
    /// off (see [`Algorithm::report`]); the decision says whether the
    /// units fitted. [`Outcome::Saturated`] when the key is new and the
    /// table has no room for it: then nothing was counted.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{MemoryLimiter, TokenBucket};
    ///
    /// // 100 tokens a minute; a response turned out to cost 130.
    /// let limiter = MemoryLimiter::new(TokenBucket::per_minute(100)?)?;
    /// let charged = limiter.report("alice", 130);
    /// assert!(!charged.is_allowed());
    /// // 30 tokens of debt and one more: 31 tokens' refill, 18.6 s.
    /// assert_eq!(charged.retry_after().duration(), Some(Duration::from_millis(18_600)));
    /// assert!(!limiter.check("alice", 1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn report(&self, key: impl AsRef<[u8]>, units: u64) -> Outcome {
        // The check's own path, specialized for a report: as cheap.
        self.decide_op::<REPORT>(key.as_ref(), &mut Now::Unread(&self.shared.clock), units)
    }

    /// Gives `units` back to `key` now, for requests that should not count
    /// after all (a failed call, a cancelled job). The quota never grows
    /// past whole; an untracked key is left alone.
    pub fn refund(&self, key: impl AsRef<[u8]>, units: u64) {
        self.refund_at(key, self.shared.clock.now(), units)
    }

    /// Gives `units` back to `key` at `now`.
    pub(crate) fn refund_at(&self, key: impl AsRef<[u8]>, now: Timestamp, units: u64) {
        let fingerprint = self.shared.hasher.fingerprint(key.as_ref());
        self.inherit_at(fingerprint, now);
        // A refund never needs a new row: an untracked key is already whole.
        let _ = match &self.shared.table {
            Table::Slots { policy, slots } => slots.update_existing(fingerprint, |word| {
                ((), policy.refund(Some(word), now, units))
            }),
            Table::Locked { rows } => rows.update_existing(fingerprint, |state| {
                let next = self.shared.policy.refund(state, now, units);
                ((), (next != *state).then_some(next))
            }),
        };
    }

    /// What a check at `now` would decide, without storing anything: the decision,
    /// or saturated if the key is new, would need a row, and there is none.
    pub(crate) fn preview_at(&self, key: &[u8], now: Timestamp, cost: u64) -> Outcome {
        let fingerprint = self.shared.hasher.fingerprint(key);
        self.inherit_at(fingerprint, now);
        let (decision, tracked) = match &self.shared.table {
            Table::Slots { policy, slots } => {
                let word = slots.get(fingerprint);
                let (decision, next) = policy.decide(word, now, cost);
                (decision, word.is_some() || next.is_none())
            }
            Table::Locked { rows } => {
                let policy = &self.shared.policy;
                let state = rows.get(fingerprint);
                let current = state.clone().unwrap_or_else(|| policy.fresh());
                let (decision, next) = policy.decide(&current, now, cost);
                (decision, state.is_some() || next == current)
            }
        };
        let full = || self.len() >= self.shared.max_keys;
        if !tracked && full() && (!self.shared.make_room(now) || full()) {
            self.shared.saturated(now)
        } else {
            Outcome::Decided(decision)
        }
    }

    /// The status of `key` now, taking nothing.
    pub fn peek(&self, key: impl AsRef<[u8]>) -> Decision {
        self.peek_at(key, self.shared.clock.now())
    }

    /// The status of `key` at `now`, taking nothing. An untracked key
    /// reports a fresh quota.
    pub(crate) fn peek_at(&self, key: impl AsRef<[u8]>, now: Timestamp) -> Decision {
        let fingerprint = self.shared.hasher.fingerprint(key.as_ref());
        self.inherit_at(fingerprint, now);
        match &self.shared.table {
            Table::Slots { policy, slots } => policy.decide(slots.get(fingerprint), now, 0).0,
            Table::Locked { rows } => {
                let policy = &self.shared.policy;
                let state = rows.get(fingerprint).unwrap_or_else(|| policy.fresh());
                policy.peek(&state, now)
            }
        }
    }

    /// Forgets `key`, as if it had never been seen: whether it was tracked.
    /// The [`ForgetHook`], if any, is told either way.
    pub fn reset(&self, key: impl AsRef<[u8]>) -> bool {
        let key = key.as_ref();
        let fingerprint = self.shared.hasher.fingerprint(key);
        let tracked = match &self.shared.table {
            Table::Slots { slots, .. } => slots.remove(fingerprint),
            Table::Locked { rows } => rows.remove(fingerprint),
        };
        if let Some(hook) = &self.shared.on_forget {
            hook.0.reset(key);
        }
        tracked
    }

    /// Evicts the keys whose state is the same as a fresh one now: the
    /// number evicted.
    pub fn sweep(&self) -> usize {
        self.sweep_at(self.shared.clock.now())
    }

    /// Evicts the keys whose state is the same as a fresh one at `now`.
    pub(crate) fn sweep_at(&self, now: Timestamp) -> usize {
        self.shared.sweep_at(now)
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.shared.clock
    }

    /// [`inherit`](MemoryLimiter::inherit) while there is a table to
    /// inherit from.
    #[inline]
    fn inherit_at(&self, fingerprint: u64, now: Timestamp) {
        if self.shared.inheriting.load(Ordering::Relaxed) {
            self.inherit(fingerprint, now);
        }
    }

    /// Moves `fingerprint`'s state into this table from the table this
    /// one took over from, then, if the key is still not here, from
    /// another plan's table of the same limit.
    #[cold]
    #[inline(never)]
    fn inherit(&self, fingerprint: u64, now: Timestamp) {
        self.inherit_predecessor(fingerprint, now);
        if let Some(plans) = &self.shared.plans {
            self.adopt_from_plans(plans, fingerprint, now);
        }
    }

    /// Moves `fingerprint`'s state from the table this one took over from
    /// into this one, carried to this policy, unless this table tracks the
    /// key already (or is full: the key is then saturated here, and its
    /// old state stays where it was).
    ///
    /// The move happens under this table's shard lock, so the state is
    /// taken once however many threads meet the key first; each key moves
    /// on its first request, so a reload costs no pause, only a lookup in
    /// the old table per new key until the old states are all fresh.
    fn inherit_predecessor(&self, fingerprint: u64, now: Timestamp) {
        let guard = self.shared.inherited.load();
        let Some(inherited) = guard.as_ref() else {
            return;
        };
        if now >= inherited.until {
            self.shared
                .inheriting
                .store(self.shared.plans.is_some(), Ordering::Relaxed);
            self.shared.inherited.store(None);
            return;
        }
        let from = &inherited.from;
        match &self.shared.table {
            Table::Slots { policy, slots } => {
                if slots.get(fingerprint).is_none() {
                    let to = policy.policy();
                    slots.adopt(fingerprint, || {
                        policy.pack(&from.take_carried(fingerprint, now, &to)?)
                    });
                }
            }
            Table::Locked { rows } => rows.adopt(fingerprint, || {
                from.take_carried(fingerprint, now, &self.shared.policy)
            }),
        }
    }

    /// Moves `fingerprint`'s state from another plan's table into this
    /// one, carried to this plan's numbers, if this table does not track
    /// the key and another does: the key's plan changed.
    fn adopt_from_plans(&self, plans: &PlanTables<Shared<C>>, fingerprint: u64, now: Timestamp) {
        let tracked = match &self.shared.table {
            Table::Slots { slots, .. } => slots.get(fingerprint).is_some(),
            Table::Locked { rows } => rows.contains(fingerprint),
        };
        if tracked || self.shared.succeeded.load(Ordering::Relaxed) {
            return;
        }
        let _moving = plans.lock_moves();
        self.take_from_plans(plans, fingerprint, now);
    }

    /// [`adopt_from_plans`](MemoryLimiter::adopt_from_plans) under the
    /// moves lock.
    fn take_from_plans(&self, plans: &PlanTables<Shared<C>>, fingerprint: u64, now: Timestamp) {
        let others = plans.others(&self.shared);
        if others.is_empty() {
            return;
        }
        let take = |to: &Policy| {
            others.iter().find_map(|other| {
                let other = MemoryLimiter {
                    shared: Arc::clone(other),
                };
                other.take_carried(fingerprint, now, to)
            })
        };
        match &self.shared.table {
            Table::Slots { policy, slots } => {
                let to = policy.policy();
                slots.adopt(fingerprint, || policy.pack(&take(&to)?));
            }
            Table::Locked { rows } => rows.adopt(fingerprint, || take(&self.shared.policy)),
        }
    }

    /// Takes `fingerprint`'s state out of this table (after taking it from
    /// the one this inherits from, if any), carried into `to` at `now`;
    /// `None` if the key is untracked, or its state fresh or not carried.
    fn take_carried(&self, fingerprint: u64, now: Timestamp, to: &Policy) -> Option<State> {
        if self.shared.inheriting.load(Ordering::Relaxed) {
            self.inherit_predecessor(fingerprint, now);
        }
        let (state, from) = match &self.shared.table {
            Table::Slots { policy, slots } => (
                policy.unpack(slots.take(fingerprint)?, now),
                policy.policy(),
            ),
            Table::Locked { rows } => (rows.take(fingerprint)?, self.shared.policy.clone()),
        };
        let carried = to.carry(&from, &state, now)?;
        (to.expires_at(&carried) > now).then_some(carried)
    }

    /// How many tables this one inherits from, through its predecessors.
    fn inherited_tables(&self) -> usize {
        let mut count = 0;
        let mut link = self.shared.inherited.load_full();
        while let Some(inherited) = link {
            count += 1;
            link = inherited.from.shared.inherited.load_full();
        }
        count
    }

    /// Moves every key the tables this one inherits from still hold into
    /// this one (carried, as their first requests would), then lets those
    /// tables go. Decisions go on meanwhile: each key moves under its
    /// shard's lock, as on a first request.
    fn absorb_inherited(&self) {
        let now = self.shared.clock.now();
        let mut fingerprints = Vec::new();
        let mut link = self.shared.inherited.load_full();
        while let Some(inherited) = link {
            fingerprints.extend(inherited.from.fingerprints());
            link = inherited.from.shared.inherited.load_full();
        }
        for fingerprint in fingerprints {
            self.inherit_predecessor(fingerprint, now);
        }
        self.shared
            .inheriting
            .store(self.shared.plans.is_some(), Ordering::Relaxed);
        self.shared.inherited.store(None);
    }

    /// Every key's fingerprint in this table.
    fn fingerprints(&self) -> Vec<u64> {
        match &self.shared.table {
            Table::Slots { slots, .. } => slots.fingerprints(),
            Table::Locked { rows } => rows.fingerprints(),
        }
    }

    /// A limiter for `policy` that takes this one's keys over: each key's
    /// state moves to it, [carried](Policy::carry) to the new numbers, on
    /// the key's first request to it, so that changing a limit's numbers
    /// (a configuration reload) gives no key a fresh quota. Keys start
    /// fresh when the policy is of another kind.
    ///
    /// Use the new limiter from then on: requests decided by this one after
    /// a key has moved are not seen by the new one. The new limiter has
    /// this one's settings (keys, clock, sweeping, hook) and holds on to
    /// this one until every state it had is fresh (two of its windows).
    /// Changed again and again within that time, a limiter keeps at most
    /// four such tables: making a fifth first moves every key of the older
    /// ones into this one.
    ///
    /// ```
    /// use ratekeeper::{FixedWindow, MemoryLimiter, Timestamp, clock::ManualClock};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new(Timestamp::from_secs(600));
    /// let minute = Duration::from_secs(60);
    /// let five = MemoryLimiter::builder(FixedWindow::new(5, minute)?)
    ///     .clock(clock.clone())
    ///     .background_sweep(false)
    ///     .build()?;
    /// for _ in 0..3 {
    ///     assert!(five.check("abuser", 1).is_allowed());
    /// }
    /// // Tightened to 4 a minute: the 3 already taken still count.
    /// let four = five.successor(FixedWindow::new(4, minute)?)?;
    /// assert!(four.check("abuser", 1).is_allowed());
    /// assert!(!four.check("abuser", 1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`BuildError::Sweeper`] if the new limiter's sweeper thread could
    /// not start.
    pub fn successor(&self, policy: impl Into<Policy>) -> Result<MemoryLimiter<C>, BuildError>
    where
        C: Clone + 'static,
    {
        let policy = policy.into();
        if self.inherited_tables() >= MAX_INHERITED {
            self.absorb_inherited();
        }
        let inherited = (policy.kind() == self.shared.policy.kind()).then(|| {
            let now = self.shared.clock.now();
            let window = self.shared.policy.window().saturating_mul(2);
            let mut until = now.saturating_add(window);
            if let Some(older) = self.shared.inherited.load().as_ref() {
                until = until.max(older.until);
            }
            Inherited {
                from: self.clone(),
                until,
            }
        });
        let successor = self.settings(policy).build_with(
            self.shared.hasher.clone(),
            inherited,
            self.shared.plans.clone(),
        )?;
        if let Some(plans) = &self.shared.plans {
            plans.join(&successor.shared, Some(&self.shared));
        }
        self.shared.succeeded.store(true, Ordering::Relaxed);
        Ok(successor)
    }

    /// A table for another plan of the same limit: `policy`, this table's
    /// settings, and keys moving between the two (and every other plan's
    /// table made so) when their plan changes, carried to the numbers of
    /// the plan they move to. This table must be a plan's
    /// ([`MemoryLimiterBuilder::build_for_plans`]).
    pub(crate) fn plan_sibling(&self, policy: Policy) -> Result<MemoryLimiter<C>, BuildError>
    where
        C: Clone + 'static,
    {
        let plans = self.shared.plans.clone();
        let sibling = self
            .settings(policy)
            .build_with(self.shared.hasher.clone(), None, plans)?;
        if let Some(plans) = &self.shared.plans {
            plans.join(&sibling.shared, None);
        }
        Ok(sibling)
    }

    /// A builder with this table's settings and `policy`.
    fn settings(&self, policy: Policy) -> MemoryLimiterBuilder<C>
    where
        C: Clone,
    {
        MemoryLimiterBuilder {
            policy,
            max_keys: self.shared.max_keys,
            clock: self.shared.clock.clone(),
            background_sweep: self.shared.background_sweep,
            on_forget: self.shared.on_forget.clone(),
        }
    }
}

impl<C> MemoryLimiter<C> {
    /// How many keys are tracked.
    pub fn len(&self) -> usize {
        match &self.shared.table {
            Table::Slots { slots, .. } => slots.len(),
            Table::Locked { rows } => rows.len(),
        }
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys tracked at once.
    pub fn max_keys(&self) -> usize {
        self.shared.max_keys
    }

    /// The policy applied to each key.
    pub fn policy(&self) -> &Policy {
        &self.shared.policy
    }

    /// The time between two background sweeps: the longest retry-after of
    /// a saturated outcome while the background sweeper runs.
    pub fn sweep_interval(&self) -> Duration {
        self.shared.sweep_interval
    }

    /// How many shard sweeps new keys have run on demand, finding the table
    /// full (see [`MIN_DEMAND_SWEEP_GAP`](crate::memory::MIN_DEMAND_SWEEP_GAP)).
    pub fn demand_sweeps(&self) -> u64 {
        self.shared.demand.sweeps()
    }

    /// Bytes of memory the table holds: fixed for the lock-free table (its
    /// slots are allocated up front), an estimate that grows with the keys
    /// for the locked one.
    pub fn memory_bytes(&self) -> usize {
        match &self.shared.table {
            Table::Slots { slots, .. } => slots.memory_bytes(),
            Table::Locked { rows } => rows.memory_bytes(),
        }
    }
}

impl<C> Shared<C> {
    /// Sweeps shards for room at `now`, as far as their gates allow:
    /// whether a key was evicted. The [`ForgetHook`] is not
    /// told: it follows the background (or manual) sweeps, which cover the
    /// whole table.
    fn make_room(&self, now: Timestamp) -> bool {
        match &self.table {
            Table::Slots { policy, slots } => self.demand.make_room(now, |shard| {
                swept_at(now, |fresh| {
                    slots.sweep_shard(shard, |word| fresh(policy.fresh_at(word, now)))
                })
            }),
            Table::Locked { rows } => self.demand.make_room(now, |shard| {
                swept_at(now, |fresh| {
                    rows.sweep_shard(shard, |state| fresh(self.policy.expires_at(state)))
                })
            }),
        }
    }

    /// The answer for a new key that found no room at `now`: retry when
    /// the next round of sweeps may find room (the first known key turns
    /// fresh), and with the background sweeper on, no later than its next
    /// sweep.
    fn saturated(&self, now: Timestamp) -> Outcome {
        let mut wait = self.demand.wait(now);
        if wait.is_zero() {
            // Room was just made and others took it: the next round may
            // take a gap to find more.
            wait = super::demand::MIN_DEMAND_SWEEP_GAP;
        }
        if self.background_sweep {
            wait = wait.min(self.sweep_interval);
        }
        Outcome::Saturated {
            retry_after: wait,
            answered_by: crate::store::AnsweredBy::Store,
        }
    }

    fn sweep_at(&self, now: Timestamp) -> usize {
        // A table inherited from is let go once its states are all fresh,
        // even if no request comes to find that out.
        if self.inheriting.load(Ordering::Relaxed)
            && self
                .inherited
                .load()
                .as_ref()
                .is_some_and(|i| now >= i.until)
        {
            self.inheriting
                .store(self.plans.is_some(), Ordering::Relaxed);
            self.inherited.store(None);
        }
        let evicted = match &self.table {
            Table::Slots { policy, slots } => slots.sweep(|word| policy.is_fresh(word, now)),
            Table::Locked { rows } => rows.sweep(|state| self.policy.expires_at(state) <= now),
        };
        if let Some(hook) = &self.on_forget {
            hook.0.swept(now);
        }
        evicted
    }
}

/// One shard's sweep at `now`: `sweep` hands each state's fresh time to
/// the predicate it is given, which evicts the states fresh by `now` and
/// remembers the earliest time among the others.
fn swept_at(
    now: Timestamp,
    sweep: impl FnOnce(&mut dyn FnMut(Timestamp) -> bool) -> usize,
) -> ShardSwept {
    let mut next_fresh: Option<Timestamp> = None;
    let evicted = sweep(&mut |at| {
        if at <= now {
            return true;
        }
        next_fresh = Some(next_fresh.map_or(at, |earliest| earliest.min(at)));
        false
    });
    ShardSwept {
        evicted,
        next_fresh,
    }
}

/// Builds a [`MemoryLimiter`]; made by [`MemoryLimiter::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct MemoryLimiterBuilder<C = MonotonicClock> {
    policy: Policy,
    max_keys: usize,
    clock: C,
    background_sweep: bool,
    on_forget: Option<Hook>,
}

impl<C> MemoryLimiterBuilder<C> {
    /// Tracks at most `max_keys` keys (default [`DEFAULT_MAX_KEYS`], at most
    /// [`MAX_KEYS`]). Size it for the keys active within one window: a key
    /// leaves once its quota is whole again.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Reads time from `clock` (default: [`MonotonicClock`]).
    pub fn clock<C2>(self, clock: C2) -> MemoryLimiterBuilder<C2> {
        MemoryLimiterBuilder {
            policy: self.policy,
            max_keys: self.max_keys,
            clock,
            background_sweep: self.background_sweep,
            on_forget: self.on_forget,
        }
    }

    /// Tells `hook` after each sweep and each [`reset`](MemoryLimiter::reset),
    /// so that what is kept about keys elsewhere, such as a
    /// [`LimitStats`](crate::stats::LimitStats)' per-key denials, goes with them
    /// (default: none). Decisions never call it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{FixedWindow, MemoryLimiter, Timestamp, clock::ManualClock, stats::{LimitStats, StatsConfig}};
    ///
    /// let window = FixedWindow::new(1, Duration::from_secs(10))?;
    /// let mut config = StatsConfig::default();
    /// config.key_retention = Duration::from_secs(10); // the policy's window
    /// let stats = LimitStats::with_config(config);
    /// let clock = ManualClock::new(Timestamp::from_secs(1_704_672_000)); // Unix time
    /// let limiter = MemoryLimiter::builder(window)
    ///     .clock(clock.clone())
    ///     .background_sweep(false)
    ///     .on_forget(stats.clone())
    ///     .build()?;
    ///
    /// for _ in 0..2 {
    ///     let outcome = limiter.check("carol", 1);
    ///     stats.record(clock.now(), outcome.is_allowed(), "carol");
    /// }
    /// assert_eq!(stats.denied_for("carol"), Some(1));
    ///
    /// clock.advance(Duration::from_secs(10));
    /// limiter.sweep(); // the limiter forgets carol, and so do the stats
    /// assert_eq!(stats.denied_for("carol"), None);
    /// # use ratekeeper::Clock;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn on_forget(mut self, hook: impl ForgetHook) -> Self {
        self.on_forget = Some(Hook(Arc::new(hook)));
        self
    }

    /// Whether a background thread sweeps the table (default: yes). Turn it
    /// off to sweep by hand with [`MemoryLimiter::sweep`], as tests on a
    /// [`ManualClock`](crate::clock::ManualClock) do.
    pub fn background_sweep(mut self, enabled: bool) -> Self {
        self.background_sweep = enabled;
        self
    }

    /// Builds the limiter, starting its sweeper thread if asked to.
    pub fn build(self) -> Result<MemoryLimiter<C>, BuildError>
    where
        C: Clock + 'static,
    {
        self.build_with(KeyHasher::new(), None, None)
    }

    /// Builds the first plan's table of a limit: the tables made from it
    /// by [`MemoryLimiter::plan_sibling`] share its keys.
    pub(crate) fn build_for_plans(self) -> Result<MemoryLimiter<C>, BuildError>
    where
        C: Clock + 'static,
    {
        let plans = Arc::new(PlanTables::new());
        let table = self.build_with(KeyHasher::new(), None, Some(Arc::clone(&plans)))?;
        plans.join(&table.shared, None);
        Ok(table)
    }

    /// Builds the limiter on `hasher`, inheriting from `inherited`'s table
    /// (which hashes keys with the same `hasher`), one of `plans` if given
    /// (the caller joins it).
    fn build_with(
        self,
        hasher: KeyHasher,
        inherited: Option<Inherited<C>>,
        plans: Option<Arc<PlanTables<Shared<C>>>>,
    ) -> Result<MemoryLimiter<C>, BuildError>
    where
        C: Clock + 'static,
    {
        check_max_keys(self.max_keys)?;
        let table = match OneWord::for_policy(&self.policy) {
            Some(policy) => Table::Slots {
                policy,
                slots: SlotTable::new(self.max_keys),
            },
            None => Table::Locked {
                rows: LockedTable::new(self.max_keys),
            },
        };
        let sweep_interval = self
            .policy
            .window()
            .clamp(MIN_SWEEP_INTERVAL, MAX_SWEEP_INTERVAL);
        let (stop, stopped) = mpsc::channel::<()>();
        let shards = match &table {
            Table::Slots { slots, .. } => slots.shard_count(),
            Table::Locked { rows } => rows.shard_count(),
        };
        let shared = Arc::new(Shared {
            policy: self.policy,
            table,
            hasher,
            clock: self.clock,
            max_keys: self.max_keys,
            sweep_interval,
            background_sweep: self.background_sweep,
            demand: DemandGates::new(shards),
            on_forget: self.on_forget,
            inheriting: AtomicBool::new(inherited.is_some() || plans.is_some()),
            inherited: ArcSwapOption::from(inherited.map(Arc::new)),
            plans,
            succeeded: AtomicBool::new(false),
            _stop_sweeper: self.background_sweep.then_some(stop),
        });
        if self.background_sweep {
            let weak = Arc::downgrade(&shared);
            thread::Builder::new()
                .name("rk-sweeper".into())
                .spawn(move || sweep_until_dropped(weak, stopped, sweep_interval))
                .map_err(BuildError::Sweeper)?;
        }
        Ok(MemoryLimiter { shared })
    }
}

/// The sweeper thread: sweeps every `interval` until the limiter is gone.
///
/// It holds only a weak reference, and waits on a channel whose sender the
/// limiter owns: dropping the last clone disconnects the channel and wakes
/// the thread at once.
fn sweep_until_dropped<C: Clock>(
    shared: Weak<Shared<C>>,
    stop: mpsc::Receiver<()>,
    interval: Duration,
) {
    loop {
        match stop.recv_timeout(interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.sweep_at(shared.clock.now());
    }
}
