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

/// The default [`Store::take`]: a check of `up_to`, and when that is
/// refused but some units are left, a check of what is left (or of `cost`,
/// whose decision then says when it can pass). Each check is atomic, so the
/// units taken never exceed what the key had; a race with another taker
/// only costs one more check.
pub(super) async fn take_by_checks<S: Store + ?Sized>(
    store: &S,
    limit: &Limit,
    key: &[u8],
    cost: u64,
    up_to: u64,
) -> Result<Taken, StoreError> {
    let mut ask = up_to.max(cost);
    loop {
        let outcome = store.check(limit, key, ask).await?;
        if outcome.is_allowed() {
            return Ok(Taken::new(ask, outcome));
        }
        let left = match outcome.decision() {
            Some(decision) if ask > cost => decision.remaining(),
            // Refused at the request's own cost, or saturated.
            _ => return Ok(Taken::new(0, outcome)),
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
