//! Waiting instead of refusing: a key's units reserved ahead on a token
//! bucket or GCRA, and the wait until they are due.
//!
//! [`MemoryLimiter::reserve`] charges the units at once, into debt when
//! the bucket is short (as x/time/rate's `Reserve` does), and says how
//! long the caller must wait before acting; the requests after it are
//! refused, or wait longer, until the debt is paid. The count is exact
//! whatever the waits: every reserved unit is charged when it is
//! reserved. A [`Reserved`] dropped before it is [kept](Reserved::keep)
//! gives its units back, so a caller that stops waiting (a dropped
//! future, a client that went away) costs nothing.
//!
//! Only the bucket policies reserve: a fixed or sliding window forgets
//! what it counted when the window moves on, so units charged ahead into
//! a window would be forgiven and the request would run uncounted.

use std::fmt;
use std::time::Duration;

use crate::clock::Clock;
use crate::policy::PolicyKind;
use crate::{MemoryLimiter, Outcome, RetryAfter};

/// Why [`MemoryLimiter::reserve`] reserved nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WaitError {
    /// The units would be due later than the longest wait allowed (or
    /// never: a cost over the burst).
    #[error("the units would be due in {}, past the longest wait", wait_text(*.due))]
    TooLong {
        /// When the units would have been due.
        due: RetryAfter,
    },
    /// The limiter tracks its maximum number of keys and this one is new:
    /// nothing was counted.
    #[error("the limiter's table is full; room may return in {retry_after:?}")]
    Saturated {
        /// When room may return.
        retry_after: Duration,
    },
    /// The policy cannot reserve ahead: only a token bucket or GCRA can.
    #[error("a {0} cannot reserve ahead: only token_bucket and gcra can")]
    NotReservable(PolicyKind),
}

fn wait_text(due: RetryAfter) -> String {
    match due {
        RetryAfter::After(wait) => format!("{wait:?}"),
        RetryAfter::Never => "never".to_owned(),
    }
}

/// Units of a key charged ahead by [`MemoryLimiter::reserve`], to act on
/// after [`delay`](Reserved::delay). Dropped before
/// [`keep`](Reserved::keep), it gives them back.
#[must_use = "a reservation dropped at once gives its units back"]
pub struct Reserved<C: Clock> {
    limiter: MemoryLimiter<C>,
    key: Vec<u8>,
    cost: u64,
    delay: Duration,
    kept: bool,
}

impl<C: Clock> fmt::Debug for Reserved<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reserved")
            .field("cost", &self.cost)
            .field("delay", &self.delay)
            .field("kept", &self.kept)
            .finish_non_exhaustive()
    }
}

impl<C: Clock> Reserved<C> {
    /// How long to wait, from when it was reserved, before acting.
    pub fn delay(&self) -> Duration {
        self.delay
    }

    /// The units reserved.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Keeps the units charged: the request acts. (Dropping the
    /// reservation without this gives them back.)
    pub fn keep(mut self) {
        self.kept = true;
    }

    /// Waits out the delay with [`futures-timer`](https://docs.rs/futures-timer)
    /// (any runtime), plus up to `jitter` more, chosen at random so that
    /// callers reserved together do not all wake at once; then keeps the
    /// units. Cancel-safe: dropped while waiting, it gives them back.
    #[cfg(feature = "wait")]
    pub async fn wait(self, jitter: Duration) {
        let extra = match jitter.is_zero() {
            true => Duration::ZERO,
            false => jitter.mul_f64(random_fraction()),
        };
        futures_timer::Delay::new(self.delay.saturating_add(extra)).await;
        self.keep();
    }
}

impl<C: Clock> Drop for Reserved<C> {
    fn drop(&mut self) {
        if !self.kept {
            self.limiter.refund(&self.key, self.cost);
        }
    }
}

/// A fraction in `[0, 1)` from the operating system's random numbers (a
/// wait is rare and long next to one call).
#[cfg(feature = "wait")]
fn random_fraction() -> f64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.0;
    }
    // 53 random bits: every value an f64 in [0, 1) can hold evenly.
    (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

impl<C: Clock> MemoryLimiter<C> {
    /// Reserves `cost` units of `key` that will be due within `max_wait`:
    /// charged now, into debt if the bucket is short, and to act on after
    /// the [`Reserved`]'s delay (zero when the bucket has them). Refused,
    /// charging nothing, when they would be due later (or never: a cost
    /// over the burst), when the table is full, or for a window policy.
    ///
    /// The requests after a reservation see its units taken: they are
    /// refused, or reserve a longer wait, until the debt is paid. Drop the
    /// `Reserved` without [`keep`](Reserved::keep)ing it to give the units
    /// back.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use ratekeeper::{clock::ManualClock, MemoryLimiter, Timestamp, TokenBucket};
    ///
    /// let clock = Arc::new(ManualClock::new(Timestamp::ZERO));
    /// // 2 a second, a burst of 2.
    /// let limiter = MemoryLimiter::builder(TokenBucket::per_second(2)?)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let wait = Duration::from_secs(1);
    /// for _ in 0..2 {
    ///     limiter.reserve("alice", 1, wait)?.keep();
    /// }
    /// // The bucket is empty: the next token is due in 500 ms, the one
    /// // after in a second; a third would wait past the longest.
    /// let first = limiter.reserve("alice", 1, wait)?;
    /// assert_eq!(first.delay(), Duration::from_millis(500));
    /// let second = limiter.reserve("alice", 1, wait)?;
    /// assert_eq!(second.delay(), Duration::from_secs(1));
    /// assert!(limiter.reserve("alice", 1, wait).is_err());
    /// // The first caller gave up: its token goes back.
    /// drop(first);
    /// assert_eq!(limiter.reserve("alice", 1, wait)?.delay(), Duration::from_secs(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
        max_wait: Duration,
    ) -> Result<Reserved<C>, WaitError> {
        let policy = self.policy();
        if !policy.reserves_ahead() {
            return Err(WaitError::NotReservable(policy.kind()));
        }
        let key = key.as_ref();
        // Due when the same cost would be allowed: too late, or never,
        // charges nothing.
        let due = match self.check(key, cost) {
            Outcome::Saturated { retry_after, .. } => {
                return Err(WaitError::Saturated { retry_after });
            }
            Outcome::Decided(decision) if decision.is_allowed() => {
                return Ok(self.reserved(key, cost, Duration::ZERO));
            }
            Outcome::Decided(decision) => decision.retry_after(),
        };
        match due {
            RetryAfter::After(wait) if wait <= max_wait => {}
            _ => return Err(WaitError::TooLong { due }),
        }
        // Charged into debt, due when the debt is paid: later when others
        // reserved meanwhile.
        let delay = match self.report(key, cost) {
            Outcome::Saturated { retry_after, .. } => {
                return Err(WaitError::Saturated { retry_after });
            }
            Outcome::Decided(decision) => policy.reserved_delay(&decision).unwrap_or(Duration::MAX),
        };
        let reserved = self.reserved(key, cost, delay);
        if delay > max_wait {
            // Dropped: the units go back.
            return Err(WaitError::TooLong {
                due: RetryAfter::After(reserved.delay),
            });
        }
        Ok(reserved)
    }

    fn reserved(&self, key: &[u8], cost: u64, delay: Duration) -> Reserved<C> {
        Reserved {
            limiter: self.clone(),
            key: key.to_vec(),
            cost,
            delay,
            kept: false,
        }
    }

    /// Waits until `cost` units of `key` may be used, up to `max_wait`,
    /// and uses them: governor's `until_key_ready`, for a keyed limiter.
    /// [`reserve`](MemoryLimiter::reserve), then [`Reserved::wait`] with
    /// up to `jitter` more. Cancel-safe: a dropped wait gives its units
    /// back. Refused at once, charging nothing, as `reserve` is.
    ///
    /// ```
    /// # futures_executor::block_on(async {
    /// use std::time::Duration;
    /// use ratekeeper::{MemoryLimiter, TokenBucket};
    ///
    /// let limiter = MemoryLimiter::new(TokenBucket::per_second(1000)?)?;
    /// for _ in 0..1010 {
    ///     // The last ten wait a millisecond or so each, rather than fail.
    ///     limiter
    ///         .until_ready("alice", 1, Duration::from_secs(1), Duration::ZERO)
    ///         .await?;
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    #[cfg(feature = "wait")]
    pub async fn until_ready(
        &self,
        key: impl AsRef<[u8]>,
        cost: u64,
        max_wait: Duration,
        jitter: Duration,
    ) -> Result<(), WaitError> {
        self.reserve(key, cost, max_wait)?.wait(jitter).await;
        Ok(())
    }
}
