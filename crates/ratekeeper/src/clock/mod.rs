//! Where time comes from.
//!
//! Policies take time as an argument; only limiters read a [`Clock`]. Tests
//! use a [`ManualClock`] and move it by hand, so no test has to sleep.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod timestamp;

pub use timestamp::Timestamp;

/// A source of [`Timestamp`]s.
///
/// A clock's timestamps count from its own epoch: states written under one
/// clock must be read under a clock with the same epoch. [`UnixClock`] is the
/// one to use when states are shared between processes or machines.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

impl<C: Clock + ?Sized> Clock for Box<C> {
    fn now(&self) -> Timestamp {
        (**self).now()
    }
}

/// A monotonic clock whose epoch is the moment it was created, or, made by
/// [`MonotonicClock::since_unix_epoch`], the Unix epoch.
///
/// It never goes backwards and ignores changes to the system time, so it is
/// the right clock for limits kept in one process. Clones share the epoch.
///
/// It reads the processor's time-stamp counter where that is reliable (via
/// the `quanta` crate, as governor does), which costs about half of
/// [`std::time::Instant::now`], and falls back to the operating system's
/// monotonic clock elsewhere.
#[derive(Clone, Debug)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    /// The moment the clock was made, as a raw reading of `clock`: a
    /// reading is scaled to nanoseconds once, as a difference, without a
    /// `Duration` between.
    origin: u64,
    /// What the clock reads at `origin`, in nanoseconds: 0, or the Unix
    /// time then.
    start: u64,
}

impl MonotonicClock {
    /// A clock whose epoch is now: it reads zero when made.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock {
            clock,
            origin,
            start: 0,
        }
    }

    /// A clock that counts from the Unix epoch: it reads the system's wall
    /// clock once, when made, and goes on from there monotonically.
    ///
    /// Fixed windows (whose boundaries fall on multiples of the window
    /// since the epoch) then start on the wall clock's minutes, hours and
    /// days, as they do in a store that runs on its server's wall clock
    /// (Redis): a minute limit resets on the minute. A later change of the
    /// system time moves nothing.
    ///
    /// ```
    /// use std::time::{SystemTime, UNIX_EPOCH};
    /// use ratekeeper::{Clock, clock::MonotonicClock};
    ///
    /// let before = SystemTime::now().duration_since(UNIX_EPOCH)?;
    /// let clock = MonotonicClock::since_unix_epoch();
    /// assert!(clock.now().as_duration() >= before);
    /// # Ok::<(), std::time::SystemTimeError>(())
    /// ```
    pub fn since_unix_epoch() -> Self {
        let clock = MonotonicClock::new();
        let start = UnixClock.now().as_nanos();
        MonotonicClock { start, ..clock }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Timestamp {
        // Zero for a reading at or before the epoch (quanta's rule for a
        // counter that differs between cores): never before it.
        let elapsed = self.clock.delta_as_nanos(self.origin, self.clock.raw());
        Timestamp::from_nanos(self.start.saturating_add(elapsed))
    }
}

/// The system's wall clock, counting from the Unix epoch.
///
/// Use it for states kept outside the process (files, databases), whose
/// timestamps must mean the same to every reader. The system time can step
/// backwards; the policies then use the state's own time, so a step back
/// never grants more. A system time before 1970 reads as the epoch.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixClock;

impl Clock for UnixClock {
    fn now(&self) -> Timestamp {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(Timestamp::from_duration)
            .unwrap_or(Timestamp::ZERO)
    }
}

/// A clock that moves only when told to, for tests.
///
/// Clones share the same time, so a test can hand one clone to a limiter and
/// move the other.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{Clock, Timestamp, clock::ManualClock};
///
/// let clock = ManualClock::new(Timestamp::ZERO);
/// let handle = clock.clone();
/// handle.advance(Duration::from_millis(250));
/// assert_eq!(clock.now(), Timestamp::from_millis(250));
/// handle.set(Timestamp::from_millis(100)); // time may also go backwards
/// assert_eq!(clock.now(), Timestamp::from_millis(100));
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that reads `start` until moved.
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(start.as_nanos())),
        }
    }

    /// Moves the clock forward by `by` (saturating).
    pub fn advance(&self, by: Duration) {
        let by = Timestamp::ZERO.saturating_add(by).as_nanos();
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_add(by))
            });
    }

    /// Sets the clock to `to`, forwards or backwards.
    pub fn set(&self, to: Timestamp) {
        self.nanos.store(to.as_nanos(), Ordering::Release);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.nanos.load(Ordering::Acquire))
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &self.now())
            .finish()
    }
}

/// A monotonic clock read from a cached timestamp that a background thread
/// refreshes every `resolution`.
///
/// Reading it is one relaxed atomic load. On virtual machines where reading
/// the processor's time-stamp counter is slow or stalls the pipeline, this
/// makes a keyed check several times cheaper (see BENCHMARKS.md), at the
/// price of time advancing in steps of `resolution`: decisions stay exact
/// in what they count, but a refill or window boundary is seen up to one
/// step late. Use a resolution well below the policy's emission interval
/// (1 ms for limits up to hundreds per second).
///
/// Clones share the timestamp and the thread; the thread ends when the last
/// clone is dropped.
#[derive(Clone)]
pub struct CoarseClock {
    shared: Arc<CoarseShared>,
}

struct CoarseShared {
    nanos: AtomicU64,
    resolution: Duration,
    /// Dropped with the last clone, which wakes and ends the thread.
    _stop: std::sync::mpsc::Sender<()>,
}

impl CoarseClock {
    /// A clock refreshed every `resolution` (at least 1 µs), counting from
    /// now, or an error if its thread cannot be started.
    pub fn new(resolution: Duration) -> std::io::Result<Self> {
        let resolution = resolution.max(Duration::from_micros(1));
        let source = MonotonicClock::new();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let shared = Arc::new(CoarseShared {
            nanos: AtomicU64::new(source.now().as_nanos()),
            resolution,
            _stop: stop,
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("rk-coarse-clock".into())
            .spawn(move || loop {
                match stopped.recv_timeout(resolution) {
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let Some(shared) = weak.upgrade() else { return };
                shared
                    .nanos
                    .store(source.now().as_nanos(), Ordering::Relaxed);
            })?;
        Ok(CoarseClock { shared })
    }

    /// How often the timestamp is refreshed.
    pub fn resolution(&self) -> Duration {
        self.shared.resolution
    }
}

impl Clock for CoarseClock {
    #[inline]
    fn now(&self) -> Timestamp {
        Timestamp::from_nanos(self.shared.nanos.load(Ordering::Relaxed))
    }
}

impl fmt::Debug for CoarseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CoarseClock")
            .field("now", &self.now())
            .field("resolution", &self.shared.resolution)
            .finish()
    }
}
