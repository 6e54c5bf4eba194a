//! The least a store must offer: an atomic counter per fixed window.

use std::future::Future;
use std::time::Duration;

use super::{Limit, Store, StoreError};
use crate::key::bounded;
use crate::{
    clock::UnixClock,
    policy::{Algorithm, PolicyKind},
    Clock, Decision, Outcome, Policy, RetryAfter, Timestamp,
};

/// An atomic counter per key and fixed window, the least a database needs
/// to hold fixed-window limits: most can do it (an `UPDATE ... RETURNING`,
/// an `INCRBY`, a conditional write).
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use ratekeeper::{Timestamp, store::{StoreError, WindowCounter}};
///
/// /// Counts in a map; a real one would be a database table.
/// #[derive(Default)]
/// struct MapCounter(Mutex<HashMap<(String, u64), u64>>);
///
/// impl WindowCounter for MapCounter {
///     async fn increment(&self, key: &str, window: u64, cost: u64, _expires_at: Timestamp) -> Result<u64, StoreError> {
///         let mut counts = self.0.lock().unwrap();
///         let count = counts.entry((key.to_owned(), window)).or_default();
///         *count += cost;
///         Ok(*count)
///     }
/// }
/// ```
pub trait WindowCounter: Send + Sync {
    /// Adds `cost` to `key`'s count in fixed window number `window` and
    /// returns the window's count, this request included. Must be atomic per
    /// key. The count is not needed after `expires_at` (Unix time), so the
    /// database may expire it then. A cost of 0 only reads.
    fn increment(
        &self,
        key: &str,
        window: u64,
        cost: u64,
        expires_at: Timestamp,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;
}

/// The most units one report adds to a [`WindowCounter`]: past the
/// largest limit a policy takes, and an integer a double holds exactly.
const MAX_REPORT: u64 = 1 << 42;

/// A [`Store`] for fixed-window limits on any [`WindowCounter`].
///
/// Keys are `{limit}:{key}` (the key's bytes as lossy UTF-8, a key over 64
/// bytes as [`bounded`](crate::key::bounded) keeps it), windows are
/// numbered by Unix time so every process agrees. Other policies are refused
/// with [`StoreError::Unsupported`]; refunds with
/// [`StoreError::UnsupportedOperation`]. Unlike the pure fixed window, a
/// denied request is counted too (an increment cannot be taken back): the
/// first `limit` units of a window still pass, and a heavy request denied
/// late in a window can make a light one that would have fitted wait for
/// the next.
#[derive(Debug, Clone)]
pub struct CounterStore<W, C = UnixClock> {
    counter: W,
    clock: C,
}

impl<W: WindowCounter> CounterStore<W, UnixClock> {
    /// Fixed windows counted by `counter`, on Unix time.
    pub fn new(counter: W) -> Self {
        CounterStore {
            counter,
            clock: UnixClock,
        }
    }
}

impl<W: WindowCounter, C: Clock> CounterStore<W, C> {
    /// Fixed windows counted by `counter`, on `clock` (which every process
    /// sharing the counter must agree on).
    pub fn with_clock(counter: W, clock: C) -> Self {
        CounterStore { counter, clock }
    }

    /// The counter underneath.
    pub fn counter(&self) -> &W {
        &self.counter
    }

    /// A check of `cost`, or with `report` a charge counted whatever the
    /// limit says.
    async fn count(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        report: bool,
    ) -> Result<Decision, StoreError> {
        // A counter per numbered window: windows on the epoch's multiples
        // only, not from each key's first hit.
        let Policy::FixedWindow(window) = limit.policy().clone() else {
            return Err(StoreError::Unsupported(limit.policy().kind()));
        };
        if window.is_from_first_hit() {
            return Err(StoreError::Unsupported(limit.policy().kind()));
        }
        let window = &window;
        let now = self.clock.now();
        let length = window.window().as_nanos() as u64;
        let number = now.as_nanos() / length;
        let start = Timestamp::from_nanos(number * length);
        let end = start + window.window();
        let until_end = end.duration_since(now);
        let name = format!(
            "{}:{}",
            limit.name(),
            String::from_utf8_lossy(&bounded(key))
        );
        let limit_units = window.limit();
        if cost > limit_units && !report {
            let used = self.counter.increment(&name, number, 0, end).await?;
            let remaining = limit_units.saturating_sub(used);
            return Ok(Decision::denied(
                limit_units,
                remaining,
                reset(used, until_end),
                RetryAfter::Never,
            ));
        }
        let count = self.counter.increment(&name, number, cost, end).await?;
        if count <= limit_units {
            Ok(Decision::allowed(
                limit_units,
                limit_units - count,
                reset(count, until_end),
            ))
        } else if report {
            // Counted over the limit: refused until the window ends.
            Ok(Decision::denied(
                limit_units,
                0,
                until_end,
                RetryAfter::After(until_end),
            ))
        } else {
            let before = count.saturating_sub(cost);
            let remaining = limit_units.saturating_sub(before);
            Ok(Decision::denied(
                limit_units,
                remaining,
                until_end,
                RetryAfter::After(until_end),
            ))
        }
    }
}

fn reset(count: u64, until_end: Duration) -> Duration {
    if count == 0 {
        Duration::ZERO
    } else {
        until_end
    }
}

impl<W: WindowCounter, C: Clock> Store for CounterStore<W, C> {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.count(limit, key, cost, false)
            .await
            .map(Outcome::Decided)
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.count(limit, key, 0, false).await
    }

    /// Counts `units` in the key's window whatever the limit says, at most
    /// 2^42 a call (past any limit, and far from overflowing a counter that
    /// adds them up).
    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        self.count(limit, key, units.min(MAX_REPORT), true)
            .await
            .map(Outcome::Decided)
    }

    async fn refund(&self, limit: &Limit, _key: &[u8], _units: u64) -> Result<(), StoreError> {
        match limit.policy().kind() {
            PolicyKind::FixedWindow => Err(StoreError::UnsupportedOperation(
                "refund: a window counter only counts up",
            )),
            other => Err(StoreError::Unsupported(other)),
        }
    }
}
