//! The hot-key door: a fixed window for one key, sharded across cores.
//!
//! # Why
//!
//! A limiter that keeps one key's count in one atomic word is exact and
//! cheap while few threads touch the key. When every core checks the same
//! key, every check is a read-modify-write of the same cache line, and the
//! line has to travel to each core in turn: the check then gets slower as
//! cores are added, not faster. The seed notes this crate grew from (003)
//! measured exactly that on an 8-core machine: one atomic counter for one
//! hot key managed about 229k checks/s, while the same count split into one
//! counter per scheduler reached about 23.8M checks/s.
//!
//! [`ShardedWindow`] splits one key's window quota into shards, one per core
//! by default, each an atomic word on a cache line of its own. A thread
//! draws from its *home* shard (threads are given homes round-robin), so
//! threads on different cores write different lines. Only when its home
//! shard runs dry does a thread look at the others.
//!
//! # Exactness
//!
//! The shard caps are `limit / n`, plus one for the first `limit % n`
//! shards: they add up to the limit exactly. Every unit is taken by one
//! successful compare-and-swap on one shard, and a swap never raises a
//! shard past its cap, so no window ever admits more than the limit.
//! A request of cost 1 is denied only after it has seen every shard at its
//! cap; within one window a shard's count only grows, so by then the window
//! has admitted exactly `limit` units. A request of cost above 1 may gather
//! its units from several shards; if it cannot gather them all, it gives
//! back what it took and is denied, so such requests can leave a window
//! short of its limit while they race, but never over it.
//!
//! Each shard word packs the low 32 bits of the window index (`now /
//! window`) with the count, so moving a shard to a new window and taking
//! from it is one swap. A shard that was last written more than 2^31 windows
//! ago is told apart from a later window by the latest window index the
//! limiter keeps in full; only one last written an exact multiple of 2^32
//! windows ago is mistaken for the current window, and then it counts short,
//! never over, until the window ends.
//!
//! The [`remaining`](Decision::remaining) of a decision adds up the shards'
//! counts one after another while other threads may be changing them: under
//! contention it is a snapshot, not an exact count. Adding them up reads
//! every core's shard on every call, which is the very cache-line traffic
//! sharding avoids: measured with two threads on two cores, `check` was no
//! faster than one shared word. Callers on the hot path that need only a yes
//! or no use [`admit`](ShardedWindow::admit): it decides exactly as
//! [`check`](ShardedWindow::check) does, and an allowed `admit` touches only
//! its home shard (and `check` remains for when the count is wanted, such
//! as a rate-limit header).
//!
//! # The trade
//!
//! This is a [`FixedWindow`](crate::FixedWindow): windows are aligned to the
//! clock's epoch and the quota comes back whole at each boundary. A client
//! can spend the end of one window and the start of the next back to back,
//! so up to **twice the limit** can pass within one window's length. That is
//! acceptable for a throughput quota; for a security control, or anything
//! that must be smooth, use a [`TokenBucket`](crate::TokenBucket) or
//! [`Gcra`](crate::Gcra) in a [`MemoryLimiter`](crate::MemoryLimiter): exact
//! in shape as well as in count, at the price of one contended word.
//!
//! A clock that goes back into an earlier window does not bring a quota
//! back: the limiter remembers the latest window it has seen and keeps
//! counting in it, as [`FixedWindow`](crate::FixedWindow) does.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::{RetryAfter, Timestamp, clock::ManualClock, memory::ShardedWindow};
//!
//! let clock = ManualClock::new(Timestamp::from_millis(1_200));
//! // 5 per second, over 4 shards (caps 2, 1, 1, 1).
//! let limiter = ShardedWindow::with_shards(5, Duration::from_secs(1), 4)
//!     .unwrap()
//!     .with_clock(clock.clone());
//!
//! // One thread gets all 5: when its own shard is empty it takes from the others.
//! for left in (0..5).rev() {
//!     let d = limiter.check(1);
//!     assert!(d.is_allowed());
//!     assert_eq!(d.remaining(), left);
//! }
//! let denied = limiter.check(1);
//! assert!(!denied.is_allowed());
//! assert_eq!(denied.retry_after(), RetryAfter::After(Duration::from_millis(800)));
//!
//! // The next window starts whole.
//! clock.set(Timestamp::from_secs(2));
//! assert!(limiter.check(5).is_allowed());
//! ```

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{check_period, check_quota, MAX_QUOTA};
use crate::{clock::MonotonicClock, policy::PolicyError, Clock, Decision, RetryAfter, Timestamp};

/// The largest number of units one shard can hold: its count is 32 bits.
const MAX_SHARD_CAP: u64 = u32::MAX as u64;

/// The most shards a limiter may have; more would only cost memory.
const MAX_SHARDS: usize = 1 << 16;

/// One shard's word, alone on its cache line.
///
/// 128 bytes rather than 64: Intel cores fetch cache lines in adjacent
/// pairs, so two shards 64 bytes apart would still disturb each other.
#[repr(align(128))]
struct Shard {
    /// The window index (low 32 bits of `now / window`) in the high half,
    /// the units used in that window in the low half.
    word: AtomicU64,
    /// The most units this shard hands out per window.
    cap: u64,
}

/// A word on a cache line of its own.
#[repr(align(128))]
struct Padded(AtomicU64);

/// A shard word's window index and count.
#[inline]
fn unpack(word: u64) -> (u32, u64) {
    ((word >> 32) as u32, word & MAX_SHARD_CAP)
}

/// The shard word for `used` units in window `index` (`used <= u32::MAX`).
#[inline]
fn pack(index: u32, used: u64) -> u64 {
    (u64::from(index) << 32) | used
}

/// How a shard's stored window relates to the window being counted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// The shard counts the current window (or a later one, which is
    /// treated the same): its count holds.
    Counting,
    /// The shard counts an earlier window: it is empty for this one.
    Stale,
}

/// The window a request is counted in.
#[derive(Clone, Copy)]
struct Window {
    /// The full window index.
    index: u64,
    /// Time from the request to the end of that window.
    until_end: Duration,
}

static NEXT_HOME: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's home, `usize::MAX` until the first check.
    static HOME: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's home, an index handed out round-robin across threads
/// (taken modulo a limiter's shard count).
#[inline]
fn home() -> usize {
    HOME.try_with(|home| {
        let h = home.get();
        if h != usize::MAX {
            return h;
        }
        let h = NEXT_HOME.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        home.set(h);
        h
    })
    .unwrap_or(0)
}

/// The number of shards [`ShardedWindow::new`] uses: the parallelism the
/// system reports, at least 1.
fn default_shards() -> usize {
    std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, MAX_SHARDS)
}

struct Inner<C> {
    shards: Box<[Shard]>,
    /// The latest full window index any request has counted in; never
    /// decreases.
    latest: Padded,
    limit: u64,
    /// Nanoseconds, at least 1.
    window: u64,
    clock: C,
}

/// A fixed window for one hot key, its count sharded across cores.
///
/// At most `limit` units per `window`, windows aligned to the clock's epoch,
/// like [`FixedWindow`](crate::FixedWindow), for a key that every core checks
/// at once: one atomic word per key makes all cores fight over one cache
/// line, while this splits the quota into per-core shards, each on its own
/// line. A thread takes from its home shard and sweeps the others when that
/// is empty, so the count stays exact: the shard caps add up to the limit,
/// a window never admits more than it, and single-unit requests are denied
/// only once it has admitted all of it.
///
/// What it gives up is the shape of the limit: like any fixed window it can
/// pass twice the limit across a window boundary. Use a
/// [`TokenBucket`](crate::TokenBucket) or [`Gcra`](crate::Gcra) where that
/// matters. A clock that goes back never brings a quota back.
///
/// Clones share the count: hand one to each thread.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::memory::ShardedWindow;
///
/// let limiter = ShardedWindow::new(1_000, Duration::from_secs(1)).unwrap();
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         let limiter = limiter.clone();
///         s.spawn(move || {
///             for _ in 0..100 {
///                 assert!(limiter.check(1).is_allowed());
///             }
///         });
///     }
/// });
/// ```
pub struct ShardedWindow<C: Clock = MonotonicClock> {
    inner: Arc<Inner<C>>,
}

impl<C: Clock> Clone for ShardedWindow<C> {
    fn clone(&self) -> Self {
        ShardedWindow {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C: Clock> fmt::Debug for ShardedWindow<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedWindow")
            .field("limit", &self.inner.limit)
            .field("window", &self.window())
            .field("shards", &self.inner.shards.len())
            .finish_non_exhaustive()
    }
}

impl ShardedWindow<MonotonicClock> {
    /// At most `limit` units per `window` on a [`MonotonicClock`], with one
    /// shard per unit of [`std::thread::available_parallelism`].
    ///
    /// `limit` must be in `1..=MAX_QUOTA` and `window` in `1 ns..=MAX_PERIOD`,
    /// as for [`FixedWindow`](crate::FixedWindow); each shard's slice of the
    /// limit must also fit its 32-bit count, so the limit is at most
    /// `shards * u32::MAX` ([`PolicyError::TooLarge`] otherwise).
    pub fn new(limit: u64, window: Duration) -> Result<Self, PolicyError> {
        Self::with_shards(limit, window, default_shards())
    }

    /// As [`new`](ShardedWindow::new), with `shards` shards (1 to 65 536).
    ///
    /// More shards than threads only spreads the quota thinner; fewer makes
    /// threads share shards. A limit below the shard count is fine: the
    /// shards past the limit have a cap of 0 and requests sweep past them.
    pub fn with_shards(limit: u64, window: Duration, shards: usize) -> Result<Self, PolicyError> {
        Self::build(limit, window, shards, MonotonicClock::new())
    }
}

impl<C: Clock> ShardedWindow<C> {
    fn build(limit: u64, window: Duration, shards: usize, clock: C) -> Result<Self, PolicyError> {
        let limit = check_quota("limit", limit)?;
        let window = check_period("window", window)?;
        if shards == 0 {
            return Err(PolicyError::Zero { field: "shards" });
        }
        if shards > MAX_SHARDS {
            return Err(PolicyError::TooLarge {
                field: "shards",
                value: shards as u128,
                max: MAX_SHARDS as u128,
            });
        }
        let n = shards as u64;
        if limit.div_ceil(n) > MAX_SHARD_CAP {
            return Err(PolicyError::TooLarge {
                field: "limit",
                value: limit.into(),
                max: MAX_QUOTA.min(n * MAX_SHARD_CAP).into(),
            });
        }
        Ok(Self::assemble(limit, window, shards, clock))
    }

    /// A limiter from checked numbers (`window` in nanoseconds).
    fn assemble(limit: u64, window: u64, shards: usize, clock: C) -> Self {
        let n = shards as u64;
        let (base, extra) = (limit / n, limit % n);
        let shards = (0..n)
            .map(|i| Shard {
                word: AtomicU64::new(pack(0, 0)),
                // The remainder goes to the low shards, so the caps add up
                // to the limit.
                cap: base + u64::from(i < extra),
            })
            .collect();
        ShardedWindow {
            inner: Arc::new(Inner {
                shards,
                latest: Padded(AtomicU64::new(0)),
                limit,
                window,
                clock,
            }),
        }
    }

    /// The same limit, window and shard count, reading time from `clock`.
    ///
    /// The result starts with nothing counted: counts are named by the
    /// windows of the clock they were taken under, which mean nothing to
    /// another clock.
    pub fn with_clock<D: Clock>(self, clock: D) -> ShardedWindow<D> {
        let inner = &self.inner;
        ShardedWindow::assemble(inner.limit, inner.window, inner.shards.len(), clock)
    }

    /// Units allowed per window.
    pub fn limit(&self) -> u64 {
        self.inner.limit
    }

    /// The window's length.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.inner.window)
    }

    /// The number of shards the quota is split into.
    pub fn shards(&self) -> usize {
        self.inner.shards.len()
    }

    /// Decides a request of `cost` units now, by the limiter's clock.
    #[inline]
    pub fn check(&self, cost: u64) -> Decision {
        self.check_at(self.inner.clock.now(), cost)
    }

    /// The status now without taking anything: the same as `check(0)`.
    pub fn peek(&self) -> Decision {
        self.check(0)
    }

    /// Units left in the current window: a snapshot under contention.
    pub fn remaining(&self) -> u64 {
        let inner = &*self.inner;
        inner.remaining_in(inner.window_at(inner.clock.now()).index)
    }

    /// [`check`](ShardedWindow::check) at `now`.
    ///
    /// The request takes from this thread's home shard, and when that shard
    /// cannot cover it, from the other shards in turn. A cost of 0 only
    /// reports; a cost above the limit is denied with
    /// [`RetryAfter::Never`]. A denied request of cost up to the limit may
    /// retry at the end of the window. A request of several units may take
    /// them from several shards; when it cannot take them all it gives back
    /// what it took.
    ///
    /// The decision's [`remaining`](Decision::remaining) adds up every shard
    /// while other threads may change them: under contention it is a
    /// snapshot. Reading every shard costs cache traffic on a busy key;
    /// [`admit`](ShardedWindow::admit) decides the same way without it.
    fn check_at(&self, now: Timestamp, cost: u64) -> Decision {
        let inner = &*self.inner;
        let window = inner.window_at(now);
        if cost == 0 {
            return inner.report(window);
        }
        if cost > inner.limit {
            let remaining = inner.remaining_in(window.index);
            return Decision::denied(
                inner.limit,
                remaining,
                inner.reset(window, remaining),
                RetryAfter::Never,
            );
        }
        if inner.acquire(window.index, cost) {
            let remaining = inner.remaining_in(window.index);
            Decision::allowed(inner.limit, remaining, window.until_end)
        } else {
            let remaining = inner.remaining_in(window.index);
            Decision::denied(
                inner.limit,
                remaining,
                inner.reset(window, remaining),
                RetryAfter::After(window.until_end),
            )
        }
    }

    /// Decides a request of `cost` units now, by the limiter's clock,
    /// exactly as [`check`](ShardedWindow::check) does, and returns only
    /// whether it was allowed.
    ///
    /// This is the fastest path: a [`Decision`]'s `remaining` adds up every
    /// shard, which reads the cache lines the other cores are writing, while
    /// an allowed `admit` touches only the shard it takes from. Give the
    /// limiter a [`CoarseClock`](crate::clock::CoarseClock) to take the
    /// clock read off it too.
    #[inline]
    pub fn admit(&self, cost: u64) -> bool {
        let inner = &*self.inner;
        cost == 0
            || (cost <= inner.limit
                && inner.acquire(inner.window_at(inner.clock.now()).index, cost))
    }
}

impl<C> Inner<C> {
    /// The window to count a request at `now` in: `now`'s, or the latest one
    /// counted if the clock has gone back since.
    #[inline]
    fn window_at(&self, now: Timestamp) -> Window {
        let now = now.as_nanos();
        let index = now / self.window;
        let in_window = Window {
            index,
            until_end: Duration::from_nanos(self.window - now % self.window),
        };
        let latest = self.latest.0.load(Ordering::Acquire);
        if index == latest {
            return in_window;
        }
        let latest = if index > latest {
            // Published before any shard is stamped with `index`.
            self.latest.0.fetch_max(index, Ordering::AcqRel)
        } else {
            latest
        };
        if latest <= index {
            in_window
        } else {
            // The clock went back into an earlier window: keep counting the
            // later one, measured from its start as `FixedWindow` does.
            Window {
                index: latest,
                until_end: Duration::from_nanos(self.window),
            }
        }
    }

    /// How a shard stamped `stamp` relates to window `index`.
    #[inline]
    fn seen(&self, stamp: u32, index: u64) -> Seen {
        // Serial-number arithmetic on the 32-bit stamps.
        let ahead = stamp.wrapping_sub(index as u32) as i32;
        if ahead == 0 {
            return Seen::Counting;
        }
        if ahead < 0 {
            return Seen::Stale;
        }
        // A later window: another thread's clock moved on after we read
        // `latest`. Every stamp is published in `latest` before it is
        // written, so reading `latest` again tells a real later window from
        // a stamp so old that it wrapped around.
        let latest = self.latest.0.load(Ordering::Acquire) as u32;
        if (latest.wrapping_sub(stamp) as i32) >= 0 {
            Seen::Counting
        } else {
            Seen::Stale
        }
    }

    /// Takes `cost` (at most the limit) in window `index`: from this
    /// thread's home shard if it can, else from the others. Returns whether
    /// it was taken; on `false` nothing is kept.
    #[inline]
    fn acquire(&self, index: u64, cost: u64) -> bool {
        let home = home() % self.shards.len();
        self.take(home, index, cost, true).0 == cost || self.sweep(home, index, cost)
    }

    /// Takes up to `want` units from shard `i` for window `index` (exactly
    /// `want` or nothing when `whole`), and returns how many it took and the
    /// window stamp it took them under.
    #[inline]
    fn take(&self, i: usize, index: u64, want: u64, whole: bool) -> (u64, u32) {
        let shard = &self.shards[i];
        let mut word = shard.word.load(Ordering::Acquire);
        loop {
            let (stamp, used) = unpack(word);
            let (stamp, used) = match self.seen(stamp, index) {
                Seen::Counting => (stamp, used),
                Seen::Stale => (index as u32, 0),
            };
            let free = shard.cap.saturating_sub(used);
            let k = if whole {
                if want <= free {
                    want
                } else {
                    0
                }
            } else {
                want.min(free)
            };
            if k == 0 {
                return (0, stamp);
            }
            match shard.word.compare_exchange_weak(
                word,
                pack(stamp, used + k),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (k, stamp),
                Err(current) => word = current,
            }
        }
    }

    /// Gives `units` taken from shard `i` under `stamp` back, unless the
    /// shard has moved to another window since (the units lapsed with it).
    fn give_back(&self, i: usize, stamp: u32, units: u64) {
        let shard = &self.shards[i];
        let mut word = shard.word.load(Ordering::Acquire);
        loop {
            let (now_stamp, used) = unpack(word);
            if now_stamp != stamp || used < units {
                return;
            }
            match shard.word.compare_exchange_weak(
                word,
                pack(stamp, used - units),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(current) => word = current,
            }
        }
    }

    /// After the home shard could not cover `cost`: tries each other shard
    /// for the whole cost, then gathers it from several. Returns whether the
    /// cost was taken; on `false` nothing is kept.
    #[cold]
    fn sweep(&self, home: usize, index: u64, cost: u64) -> bool {
        let n = self.shards.len();
        let others = || (1..n).map(move |k| (home + k) % n);
        for i in others() {
            if self.take(i, index, cost, true).0 == cost {
                return true;
            }
        }
        if cost == 1 {
            return false;
        }
        // No shard holds it alone: gather it, and give it all back on failure.
        let mut taken = Vec::new();
        let mut need = cost;
        for i in std::iter::once(home).chain(others()) {
            let (k, stamp) = self.take(i, index, need, false);
            if k > 0 {
                taken.push((i, stamp, k));
                need -= k;
                if need == 0 {
                    return true;
                }
            }
        }
        for (i, stamp, k) in taken {
            self.give_back(i, stamp, k);
        }
        false
    }

    /// The units left in window `index`, adding up the shards one by one.
    fn remaining_in(&self, index: u64) -> u64 {
        self.shards
            .iter()
            .map(|shard| {
                let (stamp, used) = unpack(shard.word.load(Ordering::Acquire));
                match self.seen(stamp, index) {
                    Seen::Counting => shard.cap.saturating_sub(used),
                    Seen::Stale => shard.cap,
                }
            })
            .sum()
    }

    /// The time until the quota is whole: none if nothing is counted.
    fn reset(&self, window: Window, remaining: u64) -> Duration {
        if remaining >= self.limit {
            Duration::ZERO
        } else {
            window.until_end
        }
    }

    fn report(&self, window: Window) -> Decision {
        let remaining = self.remaining_in(window.index);
        Decision::allowed(self.limit, remaining, self.reset(window, remaining))
    }
}
