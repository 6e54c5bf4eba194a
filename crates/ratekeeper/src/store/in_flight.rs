//! Caps on requests in flight per key, kept in a store: how many of a
//! key's requests may run at once, across every process sharing the store.
//!
//! The rate policies limit how often requests *start*; an [`InFlight`]
//! limit caps how many are *running*. [`Store::acquire`](super::Store::acquire)
//! takes one of the key's `max` slots before the request runs (refused when
//! all are taken) and [`Store::release`](super::Store::release) gives it
//! back when the request ends. A caller that crashes or never releases
//! cannot leak the cap: every slot has a *lease*, the longest a request may
//! run, after which the store frees it by itself.
//!
//! A slot lives in the store (the in-memory store, SQLite, Redis and
//! Redis Cluster keep them): on SQLite and Redis any process sharing the
//! store can release it, once. Its id is 128 random bits, so it cannot be
//! guessed; a release of a slot that is not taken (released already, or
//! past its lease) is [`ReservationError::Unknown`]: a slot is a
//! reservation of one place, and shares its token and errors.
//!
//! For a cap within one process, without keys, the `concurrency` feature's
//! `ratekeeper::concurrency::ConcurrencyLimiter` waits for a permit and
//! frees it on drop.
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::{store::in_flight::InFlight, MemoryStore, Store};
//!
//! # futures_executor::block_on(async {
//! let store = MemoryStore::new();
//! // Two requests of a key at once, each for at most 30 s.
//! let exports = InFlight::new("exports", 2, Duration::from_secs(30))?;
//! let first = store.acquire(&exports, b"team-a").await?;
//! let second = store.acquire(&exports, b"team-a").await?;
//! assert!(first.outcome.is_allowed() && second.outcome.is_allowed());
//! // A third is refused while both run; another key has its own two.
//! assert!(!store.acquire(&exports, b"team-a").await?.outcome.is_allowed());
//! assert!(store.acquire(&exports, b"team-b").await?.outcome.is_allowed());
//! // The first ends: its slot is free again, once.
//! let slot = first.slot.expect("taken");
//! store.release(&exports, &slot).await?;
//! assert!(store.release(&exports, &slot).await.is_err());
//! assert!(store.acquire(&exports, b"team-a").await?.outcome.is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use super::limit::{check_name, LimitNameError};
use super::reservation::{Reservation, ReservationError, ReservationId, MAX_RESERVATION_TTL};
use crate::{Decision, Outcome, RetryAfter};

/// The largest cap: slots one key may hold at once.
pub const MAX_IN_FLIGHT: u64 = 10_000;

/// The longest lease: an hour, as a reservation's longest ttl.
pub const MAX_LEASE: Duration = MAX_RESERVATION_TTL;

/// The wait a refused acquire suggests: a slot frees when one of the key's
/// requests ends, which no store can foresee.
pub const RETRY_AFTER_FULL: Duration = Duration::from_secs(1);

/// A named cap on a key's requests in flight: at most `max` at once, each
/// for at most `lease`. Its name follows a [`Limit`](crate::Limit)'s rules;
/// a rate limit and an in-flight cap may share a name in one store (their
/// keys are kept apart). Clones are cheap.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct InFlight {
    name: Arc<str>,
    max: u64,
    lease: Duration,
}

/// Why an [`InFlight`] cap was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InFlightError {
    /// The name breaks a limit's rules.
    #[error(transparent)]
    Name(#[from] LimitNameError),
    /// The cap is 0 or over [`MAX_IN_FLIGHT`].
    #[error("an in-flight cap of {max} is not allowed: it must be 1 to {MAX_IN_FLIGHT}")]
    Max {
        /// The cap given.
        max: u64,
    },
    /// The lease is zero or over [`MAX_LEASE`].
    #[error("a lease of {lease:?} is not allowed: it must be more than 0 and at most an hour")]
    Lease {
        /// The lease given.
        lease: Duration,
    },
}

impl InFlight {
    /// A cap called `name` of `max` requests in flight per key, each slot
    /// freed by itself `lease` after it was taken if nobody released it.
    pub fn new(name: impl Into<String>, max: u64, lease: Duration) -> Result<Self, InFlightError> {
        let name = name.into();
        check_name(&name)?;
        if max == 0 || max > MAX_IN_FLIGHT {
            return Err(InFlightError::Max { max });
        }
        if lease.is_zero() || lease > MAX_LEASE {
            return Err(InFlightError::Lease { lease });
        }
        Ok(InFlight {
            name: name.into(),
            max,
            lease,
        })
    }

    /// The cap's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many requests of a key may run at once.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The longest a slot is held without a release.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// The decision on a key that holds `taken` slots (its leases not
    /// passed): allowed, with what is left after this one, while `taken`
    /// is under the cap. What a store answers an acquire with; a refusal
    /// suggests [`RETRY_AFTER_FULL`]. No slot frees at a known time, so the
    /// reset is zero.
    pub fn decide(&self, taken: u64) -> Decision {
        if taken < self.max {
            Decision::allowed(self.max, self.max - taken - 1, Duration::ZERO)
        } else {
            Decision::denied(
                self.max,
                0,
                Duration::ZERO,
                RetryAfter::After(RETRY_AFTER_FULL),
            )
        }
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("name", &self.name)
            .field("max", &self.max)
            .field("lease", &self.lease)
            .finish()
    }
}

/// One request's place under an [`InFlight`] cap, which
/// [`Store::acquire`](super::Store::acquire) returns and
/// [`Store::release`](super::Store::release) gives back: the cap and key
/// it holds a place of, and its id. A service hands it to its client as a
/// [token](Slot::to_token), in a reservation's format.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot(Reservation);

impl Slot {
    /// A slot of `key` under the cap named `limit`, with `id`.
    pub fn new(limit: &str, key: &[u8], id: ReservationId) -> Slot {
        Slot(Reservation::new(limit, key, id))
    }

    /// The name of the cap it holds a place of.
    pub fn limit(&self) -> &str {
        self.0.limit()
    }

    /// The key it holds a place of.
    pub fn key(&self) -> &[u8] {
        self.0.key()
    }

    /// Its id.
    pub fn id(&self) -> ReservationId {
        self.0.id()
    }

    /// The slot as text (URL- and JSON-safe), as
    /// [`Reservation::to_token`].
    pub fn to_token(&self) -> String {
        self.0.to_token()
    }

    /// The slot a [token](Slot::to_token) names. Whether it is still taken
    /// only the store can tell.
    pub fn from_token(token: &str) -> Result<Slot, ReservationError> {
        Reservation::from_token(token).map(Slot)
    }
}

/// What [`Store::acquire`](super::Store::acquire) decided, and the slot
/// when it was allowed.
#[derive(Clone, Debug, PartialEq)]
pub struct Acquired {
    /// The decision: [`InFlight::decide`]'s, or saturated when the store
    /// could not keep one more slot.
    pub outcome: Outcome,
    /// The place taken; `None` when refused (nothing is held then).
    pub slot: Option<Slot>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_and_leases_are_bounded() {
        let minute = Duration::from_secs(60);
        assert_eq!(
            InFlight::new("a", 0, minute),
            Err(InFlightError::Max { max: 0 })
        );
        assert!(InFlight::new("a", MAX_IN_FLIGHT + 1, minute).is_err());
        assert!(InFlight::new("a", MAX_IN_FLIGHT, minute).is_ok());
        assert!(InFlight::new("a", 1, Duration::ZERO).is_err());
        assert!(InFlight::new("a", 1, MAX_LEASE + Duration::from_nanos(1)).is_err());
        assert!(matches!(
            InFlight::new("a b", 1, minute),
            Err(InFlightError::Name(_))
        ));
    }

    #[test]
    fn a_key_is_allowed_while_under_its_cap() {
        let cap = InFlight::new("exports", 2, Duration::from_secs(30)).unwrap();
        let first = cap.decide(0);
        assert!(first.is_allowed());
        assert_eq!(first.remaining(), 1);
        assert_eq!(cap.decide(1).remaining(), 0);
        let full = cap.decide(2);
        assert!(!full.is_allowed());
        assert_eq!(full.retry_after(), RetryAfter::After(RETRY_AFTER_FULL));
        // A state from a larger cap still refuses.
        assert!(!cap.decide(5).is_allowed());
    }

    #[test]
    fn a_slot_goes_through_its_token() {
        let slot = Slot::new("exports", b"team-a", ReservationId::random());
        assert_eq!(Slot::from_token(&slot.to_token()).unwrap(), slot);
        assert!(Slot::from_token("rk1_").is_err());
    }
}
