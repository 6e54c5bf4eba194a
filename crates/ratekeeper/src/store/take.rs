//! Taking several units at once, as many as a key has left: what leasing
//! asks of a store.

use super::{Limit, Store, StoreError};
use crate::{Outcome, Timestamp};

/// What [`Store::take`] took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Taken {
    /// The units taken: between the request's cost and the most asked for
    /// when allowed, 0 when refused.
    pub units: u64,
    /// The store's decision on the units taken (or, refused, on the
    /// request's own cost).
    pub outcome: Outcome,
    /// The store's own time at the take, or earlier, when it can tell it:
    /// what [`Store::refund_before`] deadlines are measured on.
    pub at: Option<Timestamp>,
}

impl Taken {
    /// `units` taken with `outcome`, at a store time not told.
    pub fn new(units: u64, outcome: Outcome) -> Self {
        Taken {
            units,
            outcome,
            at: None,
        }
    }

    /// With the store's time of the take.
    pub fn at(mut self, at: Timestamp) -> Self {
        self.at = Some(at);
        self
    }
}

/// The default [`Store::take`]: [`take_by`] over [`Store::check`],
/// without the store's time.
pub(super) async fn take_by_checks<S: Store + ?Sized>(
    store: &S,
    limit: &Limit,
    key: &[u8],
    cost: u64,
    up_to: u64,
) -> Result<Taken, StoreError> {
    take_by(cost, up_to, |units| async move {
        Ok((store.check(limit, key, units).await?, None))
    })
    .await
}

/// [`Store::take`] for a store whose atomic step is `check`, a decision of
/// some units that also tells the store's time of it, if it can: a check
/// of `up_to`, and when that is refused but some units are left, a check
/// of what is left (or of `cost`, whose decision then says when it can
/// pass). Each check is atomic, so the units taken never exceed what the
/// key had; a race with another taker only costs one more check.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{FixedWindow, Limit, MemoryStore, Store, store::take_by};
///
/// # futures_executor::block_on(async {
/// let store = MemoryStore::new();
/// let limit = Limit::new("api", FixedWindow::new(5, Duration::from_secs(60))?)?;
/// let taken = take_by(1, 8, |units| {
///     let (store, limit) = (&store, &limit);
///     async move { Ok((store.check(limit, b"k", units).await?, None)) }
/// })
/// .await?;
/// assert_eq!(taken.units, 5);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn take_by<F, Fut>(cost: u64, up_to: u64, mut check: F) -> Result<Taken, StoreError>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(Outcome, Option<Timestamp>), StoreError>>,
{
    let mut ask = up_to.max(cost);
    loop {
        let (outcome, at) = check(ask).await?;
        let taken = |units| Taken { units, outcome, at };
        if outcome.is_allowed() {
            return Ok(taken(ask));
        }
        let left = match outcome.decision() {
            Some(decision) if ask > cost => decision.remaining(),
            // Refused at the request's own cost, or saturated.
            _ => return Ok(taken(0)),
        };
        // Fewer than asked: what is left if that covers the cost, else the
        // cost alone, for its own decision (its wait).
        ask = if left >= cost && left < ask {
            left
        } else {
            cost
        };
    }
}
