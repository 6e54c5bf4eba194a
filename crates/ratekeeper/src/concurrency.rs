//! A cap on requests in flight.
//!
//! The rate policies limit how often requests *start*; a
//! [`ConcurrencyLimiter`] limits how many are *running at once*. Each request
//! takes a [`Permit`] before it starts and gives it back when the permit is
//! dropped, so a permit held across the work (including an early return, a
//! `?` or a panic) always frees its slot.
//!
//! The limiter needs no async runtime: the non-blocking
//! [`try_acquire`](ConcurrencyLimiter::try_acquire) is a lock-free
//! compare-and-swap, the async [`acquire`](ConcurrencyLimiter::acquire) family
//! waits with [`event-listener`](https://docs.rs/event-listener) and times out
//! with [`futures-timer`](https://docs.rs/futures-timer), and
//! [`acquire_blocking`](ConcurrencyLimiter::acquire_blocking) parks a thread.
//! Futures from any executor (Tokio, async-std, smol, `futures`) can wait on
//! the same limiter.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use futures_executor::block_on;
//! use ratekeeper::concurrency::{AcquireError, ConcurrencyLimiter};
//!
//! // At most two requests in flight.
//! let limiter = ConcurrencyLimiter::new(2).unwrap();
//!
//! let first = limiter.try_acquire().unwrap();
//! let second = block_on(limiter.acquire());
//! assert_eq!(limiter.in_flight(), 2);
//!
//! // Full: a third request is refused, or times out while waiting.
//! assert!(limiter.try_acquire().is_none());
//! let waited = block_on(limiter.acquire_timeout(Duration::from_millis(10)));
//! assert_eq!(waited.unwrap_err(), AcquireError::Timeout);
//!
//! // Dropping a permit frees its slot.
//! drop(first);
//! assert_eq!(limiter.available(), 1);
//! let third = limiter.try_acquire().unwrap();
//! # drop((second, third));
//! ```
//!
//! See [`ConcurrencyLimiter`] for how waiters are woken.

use std::fmt;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use event_listener::{Event, IntoNotification, Listener};
use futures_timer::Delay;
use thiserror::Error;

use crate::policy::PolicyError;

/// Why no permit was acquired.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// The timeout passed (or the deadline was reached) before enough permits
    /// were free.
    #[error("timed out waiting for a permit")]
    Timeout,
    /// More permits were requested than the limiter has in total, so waiting
    /// could never succeed.
    #[error("requested {requested} permits but the limiter allows at most {max} in flight")]
    ExceedsCapacity {
        /// How many permits were requested.
        requested: usize,
        /// The limiter's maximum.
        max: usize,
    },
}

/// State shared by all clones of a limiter and all of its permits.
struct Shared {
    /// The cap; never zero.
    max: usize,
    /// Permits currently held; never above `max`.
    in_flight: AtomicUsize,
    /// How many waiters want more than one permit. While any do, a release
    /// wakes every waiter, because the one it would otherwise wake may need
    /// more than was freed.
    many_waiters: AtomicUsize,
    /// Signalled whenever permits are released.
    released: Event,
}

impl Shared {
    fn try_acquire(self: &Arc<Self>, n: usize) -> Option<Permit> {
        // `in_flight <= max` always holds, so `max - current` cannot underflow
        // and the comparison cannot overflow.
        let mut current = self.in_flight.load(Ordering::SeqCst);
        loop {
            if n > self.max - current {
                return None;
            }
            match self.in_flight.compare_exchange_weak(
                current,
                current + n,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => {
                    return Some(Permit {
                        shared: Arc::clone(self),
                        count: n,
                    })
                }
                Err(actual) => current = actual,
            }
        }
    }

    fn release(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.in_flight.fetch_sub(n, Ordering::SeqCst);
        // A waiter registers in `many_waiters` before it listens and re-checks
        // `in_flight`, so (all `SeqCst`) either it sees these permits or this
        // load sees it.
        if self.many_waiters.load(Ordering::SeqCst) > 0 {
            self.released.notify(usize::MAX);
        } else {
            // `additional`: a listener notified earlier but not yet run must
            // not absorb this notification too.
            self.released.notify(n.additional());
        }
    }
}

/// Counts a waiter for more than one permit in `Shared::many_waiters` while
/// it lives.
struct ManyWaiter<'a>(&'a Shared);

impl<'a> ManyWaiter<'a> {
    fn register(shared: &'a Shared, n: usize) -> Option<Self> {
        (n > 1).then(|| {
            shared.many_waiters.fetch_add(1, Ordering::SeqCst);
            ManyWaiter(shared)
        })
    }
}

impl Drop for ManyWaiter<'_> {
    fn drop(&mut self) {
        self.0.many_waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Caps how many requests are in flight at once.
///
/// A request holds a [`Permit`] while it runs; dropping the permit frees its
/// slot and wakes a waiter. Cloning a limiter is cheap and the clones share
/// one cap, so a clone can be moved into each task or thread.
///
/// Permits can be taken without waiting ([`try_acquire`](Self::try_acquire)),
/// by awaiting on any executor ([`acquire`](Self::acquire),
/// [`acquire_timeout`](Self::acquire_timeout)), or by blocking a thread that
/// has no runtime ([`acquire_blocking`](Self::acquire_blocking)).
///
/// # Example
///
/// ```
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use std::sync::Arc;
/// use std::thread;
/// use ratekeeper::concurrency::ConcurrencyLimiter;
///
/// // Eight workers, at most three of them inside the critical part at once.
/// let limiter = ConcurrencyLimiter::new(3).unwrap();
/// let inside = Arc::new(AtomicUsize::new(0));
/// let workers: Vec<_> = (0..8)
///     .map(|_| {
///         let (limiter, inside) = (limiter.clone(), Arc::clone(&inside));
///         thread::spawn(move || {
///             let _permit = limiter.acquire_blocking();
///             assert!(inside.fetch_add(1, Ordering::SeqCst) < 3);
///             inside.fetch_sub(1, Ordering::SeqCst);
///             // `_permit` is dropped here, letting the next worker in.
///         })
///     })
///     .collect();
/// for worker in workers {
///     worker.join().unwrap();
/// }
/// assert_eq!(limiter.in_flight(), 0);
/// ```
///
/// # Fairness
///
/// Waiters are woken in the order they started waiting, but a freed permit
/// is not handed to a particular waiter: whoever asks first after a release
/// gets it, including a caller of `try_acquire` that never waited. This
/// keeps the fast path lock-free. A consequence is that a waiter for many
/// permits at once ([`acquire_many`](Self::acquire_many)) may wait for as
/// long as smaller requests keep the limiter busy.
#[derive(Clone)]
pub struct ConcurrencyLimiter {
    shared: Arc<Shared>,
}

impl ConcurrencyLimiter {
    /// A limiter allowing at most `max` permits out at once.
    ///
    /// # Errors
    ///
    /// [`PolicyError::Zero`] with `field: "max"` if `max` is zero.
    ///
    /// ```
    /// use ratekeeper::{concurrency::ConcurrencyLimiter, policy::PolicyError};
    ///
    /// assert_eq!(ConcurrencyLimiter::new(8).unwrap().max(), 8);
    /// assert_eq!(ConcurrencyLimiter::new(0).unwrap_err(), PolicyError::Zero { field: "max" });
    /// ```
    pub fn new(max: usize) -> Result<Self, PolicyError> {
        if max == 0 {
            return Err(PolicyError::Zero { field: "max" });
        }
        Ok(Self {
            shared: Arc::new(Shared {
                max,
                in_flight: AtomicUsize::new(0),
                many_waiters: AtomicUsize::new(0),
                released: Event::new(),
            }),
        })
    }

    /// The most permits that can be out at once.
    pub fn max(&self) -> usize {
        self.shared.max
    }

    /// Permits currently held.
    ///
    /// Other threads may change this at any moment, so it is a snapshot for
    /// metrics and tests, not a promise about the next acquire.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }

    /// Permits free right now: `max() - in_flight()`, as a snapshot.
    pub fn available(&self) -> usize {
        self.shared.max - self.in_flight()
    }

    /// Takes one permit if one is free, without waiting.
    ///
    /// ```
    /// use ratekeeper::concurrency::ConcurrencyLimiter;
    ///
    /// let limiter = ConcurrencyLimiter::new(1).unwrap();
    /// let permit = limiter.try_acquire().unwrap();
    /// assert!(limiter.try_acquire().is_none());
    /// drop(permit);
    /// assert!(limiter.try_acquire().is_some());
    /// ```
    #[must_use = "the permit is released as soon as it is dropped"]
    pub fn try_acquire(&self) -> Option<Permit> {
        self.shared.try_acquire(1)
    }

    /// Takes `n` permits at once if that many are free, without waiting; a
    /// request is never partly granted. `n == 0` always succeeds with an
    /// empty permit.
    #[must_use = "the permits are released as soon as they are dropped"]
    pub fn try_acquire_many(&self, n: usize) -> Option<Permit> {
        self.shared.try_acquire(n)
    }

    /// Waits until a permit is free and takes it.
    ///
    /// Works on any executor. Dropping the future before it completes gives
    /// up its place without taking a permit.
    pub async fn acquire(&self) -> Permit {
        match self.acquire_inner(1, None).await {
            Ok(permit) => permit,
            // `1 <= max` and there is no deadline.
            Err(_) => unreachable!("acquiring one permit without a deadline cannot fail"),
        }
    }

    /// Waits until `n` permits are free and takes them together.
    ///
    /// # Errors
    ///
    /// [`AcquireError::ExceedsCapacity`] at once if `n` is greater than
    /// [`max`](Self::max), rather than waiting forever.
    pub async fn acquire_many(&self, n: usize) -> Result<Permit, AcquireError> {
        self.acquire_inner(n, None).await
    }

    /// Waits at most `timeout` for a permit.
    ///
    /// A free permit is taken at once even with a zero timeout. A timeout too
    /// large to add to the current time waits without a deadline.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Timeout`] if no permit came free in time.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Permit, AcquireError> {
        self.acquire_inner(1, Instant::now().checked_add(timeout))
            .await
    }

    /// Waits until `deadline` at the latest for a permit.
    ///
    /// A free permit is taken at once even if the deadline has passed.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Timeout`] if no permit came free by the deadline.
    pub async fn acquire_until(&self, deadline: Instant) -> Result<Permit, AcquireError> {
        self.acquire_inner(1, Some(deadline)).await
    }

    /// Waits at most `timeout` for `n` permits and takes them together.
    ///
    /// # Errors
    ///
    /// [`AcquireError::ExceedsCapacity`] at once if `n` is greater than
    /// [`max`](Self::max); [`AcquireError::Timeout`] if `n` permits did not
    /// come free in time.
    pub async fn acquire_many_timeout(
        &self,
        n: usize,
        timeout: Duration,
    ) -> Result<Permit, AcquireError> {
        self.acquire_inner(n, Instant::now().checked_add(timeout))
            .await
    }

    /// Blocks the current thread until a permit is free and takes it.
    ///
    /// For threads without an async runtime; do not call it from async code,
    /// where it would block the executor.
    pub fn acquire_blocking(&self) -> Permit {
        match self.acquire_blocking_inner(1, None) {
            Ok(permit) => permit,
            // `1 <= max` and there is no deadline.
            Err(_) => unreachable!("acquiring one permit without a deadline cannot fail"),
        }
    }

    /// Blocks the current thread for at most `timeout` until a permit is
    /// free and takes it.
    ///
    /// For threads without an async runtime; do not call it from async code.
    /// A timeout too large to add to the current time waits without a
    /// deadline.
    ///
    /// # Errors
    ///
    /// [`AcquireError::Timeout`] if no permit came free in time.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::concurrency::{AcquireError, ConcurrencyLimiter};
    ///
    /// let limiter = ConcurrencyLimiter::new(1).unwrap();
    /// let held = limiter.acquire_blocking_timeout(Duration::from_secs(1)).unwrap();
    /// let refused = limiter.acquire_blocking_timeout(Duration::from_millis(5));
    /// assert_eq!(refused.unwrap_err(), AcquireError::Timeout);
    /// # drop(held);
    /// ```
    pub fn acquire_blocking_timeout(&self, timeout: Duration) -> Result<Permit, AcquireError> {
        self.acquire_blocking_inner(1, Instant::now().checked_add(timeout))
    }

    fn check_capacity(&self, n: usize) -> Result<(), AcquireError> {
        if n > self.shared.max {
            Err(AcquireError::ExceedsCapacity {
                requested: n,
                max: self.shared.max,
            })
        } else {
            Ok(())
        }
    }

    async fn acquire_inner(
        &self,
        n: usize,
        deadline: Option<Instant>,
    ) -> Result<Permit, AcquireError> {
        self.check_capacity(n)?;
        if let Some(permit) = self.shared.try_acquire(n) {
            return Ok(permit);
        }
        let _many = ManyWaiter::register(&self.shared, n);
        let mut timer =
            deadline.map(|deadline| Delay::new(deadline.saturating_duration_since(Instant::now())));
        loop {
            // Listen first, then re-check: a release between the check and
            // the wait then still notifies this listener.
            let mut listener = self.shared.released.listen();
            if let Some(permit) = self.shared.try_acquire(n) {
                return Ok(permit);
            }
            let timed_out = poll_fn(|cx| {
                if Pin::new(&mut listener).poll(cx).is_ready() {
                    return Poll::Ready(false);
                }
                if let Some(timer) = timer.as_mut() {
                    if Pin::new(timer).poll(cx).is_ready() {
                        return Poll::Ready(true);
                    }
                }
                Poll::Pending
            })
            .await;
            if timed_out {
                // One last look; if none is free, dropping the listener passes
                // on any notification it received to another waiter.
                return self.shared.try_acquire(n).ok_or(AcquireError::Timeout);
            }
        }
    }

    fn acquire_blocking_inner(
        &self,
        n: usize,
        deadline: Option<Instant>,
    ) -> Result<Permit, AcquireError> {
        self.check_capacity(n)?;
        if let Some(permit) = self.shared.try_acquire(n) {
            return Ok(permit);
        }
        let _many = ManyWaiter::register(&self.shared, n);
        loop {
            let listener = self.shared.released.listen();
            if let Some(permit) = self.shared.try_acquire(n) {
                return Ok(permit);
            }
            match deadline {
                None => listener.wait(),
                Some(deadline) => {
                    if listener.wait_deadline(deadline).is_none() {
                        return self.shared.try_acquire(n).ok_or(AcquireError::Timeout);
                    }
                }
            }
        }
    }
}

impl fmt::Debug for ConcurrencyLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimiter")
            .field("max", &self.max())
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// Permission for one or more requests to be in flight, from a
/// [`ConcurrencyLimiter`].
///
/// Dropping the permit releases everything it holds and wakes waiters. A
/// permit keeps its limiter's shared state alive, can be sent to another
/// thread and outlive the limiter handle it came from.
#[must_use = "the permit is released as soon as it is dropped"]
pub struct Permit {
    shared: Arc<Shared>,
    count: usize,
}

impl Permit {
    /// How many permits this holds (1 unless taken with a `_many` method).
    pub fn count(&self) -> usize {
        self.count
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.shared.release(self.count);
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}
