//! Stores: where the states of many keys live, behind one async trait.
//!
//! Every front end (the tower middleware, the service) decides through a
//! [`Store`]. ratekeeper brings three: [`MemoryStore`] here, and the SQLite
//! and Redis stores in their own crates. Putting a limiter on another
//! database takes one of:
//!
//! - [`Store`] itself: three methods (and a fourth, [`Store::check_all`],
//!   for a database that can decide several limits in one atomic step), for
//!   a database that can run a whole decision atomically (a script, a
//!   transaction);
//! - [`WindowCounter`]: one method, an atomic "add to this key's count in
//!   window N", enough for fixed windows on almost anything;
//!
//! and [`Resilient`] wraps any store with a [`FailurePolicy`]: fail open or
//! closed, and an optional in-memory fallback while the store is down.

mod answered;
mod error;
pub mod in_flight;
pub mod lease;
mod limit;
mod memory_store;
pub(crate) mod multi;
pub mod reservation;
mod resilient;
mod take;
mod window_counter;

use std::future::Future;
use std::sync::Arc;

pub use answered::AnsweredBy;
pub use error::{BackendError, StoreError};
pub(crate) use limit::check_name;
pub use limit::{Limit, LimitNameError, MAX_LIMIT_NAME};
pub use memory_store::{MemoryStore, MemoryStoreBuilder, RETIRED_GRACE};
pub use resilient::{FailureMode, FailurePolicy, Resilient, ResilientStats};
pub use take::{take_by, Taken};
pub use window_counter::{CounterStore, WindowCounter};

pub use multi::{check_shadow, Check, MultiOutcome};
pub use reservation::{Reservation, Reserved};

use in_flight::{Acquired, InFlight, Slot};
use multi::{all_or_nothing, StoreSteps};
use reservation::{ReservationError, ReservationId};

use crate::{Decision, Outcome, Timestamp};

/// Where rate-limit states live.
///
/// A store decides each request **atomically**: two concurrent requests can
/// never both take a key's last unit, whichever process or host they come
/// from. It keeps one state per `(limit, key)`, under the limit's name.
///
/// The futures are `Send`, so the trait works on any async runtime; it is
/// not object-safe (use generics, or an enum of stores).
pub trait Store: Send + Sync {
    /// Decides a request of `cost` for `key` under `limit`, and records it if
    /// allowed.
    fn check(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send;

    /// The status of `key` under `limit`, taking nothing.
    fn peek(
        &self,
        limit: &Limit,
        key: &[u8],
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Gives `units` back to `key` under `limit` (a failed request that
    /// should not count, Envoy's negative hits).
    fn refund(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Charges `units` to `key` under `limit` whatever the limit says: a
    /// cost known only after the request ran (the tokens a model answered
    /// with, a failed login counted once its answer is known). It never
    /// refuses and may overdraw: the key's checks are then refused until
    /// the policy's time has paid the overdraft off
    /// ([`Algorithm::report`](crate::policy::Algorithm::report) says how
    /// long, per policy). The decision says whether the units fitted what
    /// the key had left; [`Outcome::Saturated`] means nothing was counted.
    ///
    /// The default refuses with [`StoreError::UnsupportedOperation`]: a
    /// store must count it atomically, as it does a check.
    ///
    /// ```
    /// use ratekeeper::{Limit, MemoryStore, Store, TokenBucket};
    ///
    /// # futures_executor::block_on(async {
    /// let store = MemoryStore::new();
    /// let tokens = Limit::new("llm-tokens", TokenBucket::per_minute(10_000)?)?;
    /// // The answer is known: 12,000 tokens, 2,000 more than were left.
    /// let charged = store.report(&tokens, b"key-1", 12_000).await?;
    /// assert!(!charged.is_allowed());
    /// assert!(!store.check(&tokens, b"key-1", 1).await?.is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    fn report(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        let _ = (limit, key, units);
        std::future::ready(Err(StoreError::UnsupportedOperation(
            "charge units after the fact (report)",
        )))
    }

    /// Decides `estimate` units for `key` under `limit` as a check does
    /// and, when allowed, holds them as an open [`Reservation`] until
    /// [`commit`](Store::commit) or [`cancel`](Store::cancel) settles it,
    /// or `ttl` passes (it is then settled at its estimate). See the
    /// [`reservation`] module.
    ///
    /// Errors: a `ttl` of zero or over an hour, a key over 4 KiB, or a key
    /// with [`MAX_OPEN_RESERVATIONS`](reservation::MAX_OPEN_RESERVATIONS)
    /// open ([`ReservationError`]); a store that keeps no reservations
    /// ([`StoreError::UnsupportedOperation`]).
    fn reserve(
        &self,
        limit: &Limit,
        key: &[u8],
        estimate: u64,
        ttl: std::time::Duration,
    ) -> impl Future<Output = Result<Reserved, StoreError>> + Send {
        async move {
            reservation::check_ttl(ttl)?;
            if key.len() > reservation::MAX_RESERVATION_KEY {
                return Err(ReservationError::KeyTooLong.into());
            }
            let id = ReservationId::random();
            let outcome = self.hold(limit, key, estimate, id, ttl).await?;
            let reservation = outcome
                .is_allowed()
                .then(|| Reservation::new(limit.name(), key, id));
            Ok(Reserved {
                outcome,
                reservation,
            })
        }
    }

    /// Settles `reservation` at `actual` units: what the estimate held
    /// over it is given back, what `actual` is over the estimate is
    /// charged as a [report](Store::report) (so it may overdraw). The
    /// outcome is the key's status after it (the report's, when there was
    /// an excess). [`ReservationError::Unknown`] when it is not open (never
    /// made, settled already, or expired).
    fn commit(
        &self,
        limit: &Limit,
        reservation: &Reservation,
        actual: u64,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        async move {
            same_limit(limit, reservation)?;
            self.settle(limit, reservation.key(), reservation.id(), Some(actual))
                .await
        }
    }

    /// Gives all of `reservation`'s units back and closes it; errors as
    /// [`commit`](Store::commit).
    fn cancel(
        &self,
        limit: &Limit,
        reservation: &Reservation,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            same_limit(limit, reservation)?;
            self.settle(limit, reservation.key(), reservation.id(), None)
                .await
                .map(|_| ())
        }
    }

    /// The store's half of [`reserve`](Store::reserve), which a store
    /// implements: in one atomic step, refuse when `key` holds
    /// [`MAX_OPEN_RESERVATIONS`](reservation::MAX_OPEN_RESERVATIONS) open
    /// (after forgetting those past their expiry), else decide `units` as
    /// a check and, when allowed, remember reservation `id` of `units`
    /// until `ttl` from now on the store's clock.
    ///
    /// The default refuses with [`StoreError::UnsupportedOperation`].
    fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: std::time::Duration,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        let _ = (limit, key, units, id, ttl);
        std::future::ready(Err(StoreError::UnsupportedOperation("keep reservations")))
    }

    /// The store's half of [`commit`](Store::commit) and
    /// [`cancel`](Store::cancel), which a store implements: in one atomic
    /// step, forget reservation `id` of `key` (or fail with
    /// [`ReservationError::Unknown`] when it is not open), and charge
    /// `actual` units instead of the ones it held (`None`: none).
    ///
    /// The default refuses with [`StoreError::UnsupportedOperation`].
    fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        let _ = (limit, key, id, actual);
        std::future::ready(Err(StoreError::UnsupportedOperation("keep reservations")))
    }

    /// Takes one of `key`'s slots under the in-flight cap `limit`, for a
    /// request about to run: allowed while fewer than
    /// [`limit.max()`](InFlight::max) are taken (their leases not passed),
    /// with the [`Slot`] to [release](Store::release) when the request
    /// ends; if nobody does, the store frees it at the lease's end. See the
    /// [`in_flight`] module.
    ///
    /// Errors: a key over 4 KiB ([`ReservationError::KeyTooLong`]); a store
    /// that keeps no slots ([`StoreError::UnsupportedOperation`]).
    fn acquire(
        &self,
        limit: &InFlight,
        key: &[u8],
    ) -> impl Future<Output = Result<Acquired, StoreError>> + Send {
        async move {
            if key.len() > reservation::MAX_RESERVATION_KEY {
                return Err(ReservationError::KeyTooLong.into());
            }
            let id = ReservationId::random();
            let outcome = self.take_slot(limit, key, id).await?;
            let slot = outcome
                .is_allowed()
                .then(|| Slot::new(limit.name(), key, id));
            Ok(Acquired { outcome, slot })
        }
    }

    /// Gives `slot` back to its key under `limit`, once: a slot not taken
    /// (released already, past its lease, or never made) is
    /// [`ReservationError::Unknown`], and one of another cap
    /// [`ReservationError::OtherLimit`].
    fn release(
        &self,
        limit: &InFlight,
        slot: &Slot,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        async move {
            if slot.limit() != limit.name() {
                return Err(ReservationError::OtherLimit {
                    reserved: slot.limit().to_owned(),
                    given: limit.name().to_owned(),
                }
                .into());
            }
            self.free_slot(limit, slot.key(), slot.id()).await
        }
    }

    /// The store's half of [`acquire`](Store::acquire), which a store
    /// implements: in one atomic step, forget `key`'s slots whose lease has
    /// passed, then, when fewer than the cap remain, take slot `id` until
    /// the lease from now on the store's clock. Answers
    /// [`InFlight::decide`] on the slots taken before it (or saturated, a
    /// store that cannot keep one more). Kept apart from the reservations
    /// and states of a rate limit of the same name.
    ///
    /// The default refuses with [`StoreError::UnsupportedOperation`].
    fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        let _ = (limit, key, id);
        std::future::ready(Err(StoreError::UnsupportedOperation(
            "cap requests in flight",
        )))
    }

    /// The store's half of [`release`](Store::release), which a store
    /// implements: in one atomic step, free slot `id` of `key`, or fail
    /// with [`ReservationError::Unknown`] when it is not taken.
    ///
    /// The default refuses with [`StoreError::UnsupportedOperation`].
    fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (limit, key, id);
        std::future::ready(Err(StoreError::UnsupportedOperation(
            "cap requests in flight",
        )))
    }

    /// Decides one request against several limits, all or nothing: it is
    /// recorded in every limit if each allows it, and in none otherwise.
    /// Each limit takes its own check's cost.
    ///
    /// The default is the crate's one algorithm (see [`MultiOutcome`]'s
    /// module): each limit takes its cost in turn; when one refuses, the
    /// ones before it are given their units back and the rest only read.
    /// Stores that can decide the whole request in one atomic step (a
    /// script, a transaction) override it.
    ///
    /// ```
    /// use ratekeeper::{Gcra, Limit, MemoryStore, Store, store::Check};
    ///
    /// # futures_executor::block_on(async {
    /// let store = MemoryStore::new();
    /// let global = Limit::new("global", Gcra::per_second(1_000)?)?;
    /// let per_user = Limit::new("per-user", Gcra::per_second(1)?)?;
    /// let request = [Check::new(&global, b"*", 1), Check::new(&per_user, b"alice", 1)];
    /// assert!(store.check_all(&request).await?.is_allowed());
    /// let refused = store.check_all(&request).await?;
    /// assert_eq!(refused.denied_by(), Some(1));
    /// // The refused request took nothing from the global limit.
    /// assert_eq!(store.peek(&global, b"*").await?.remaining(), 999);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    fn check_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<MultiOutcome, StoreError>> + Send {
        async move {
            all_or_nothing(&StoreSteps {
                store: self,
                checks,
            })
            .await
        }
    }

    /// Takes between `cost` and `up_to` units for `key`: `up_to` if the key
    /// has that many left, else all it has left if that is at least `cost`;
    /// refused (nothing taken) otherwise, with the decision on `cost` alone.
    /// What [leasing](lease) asks of a store.
    ///
    /// The default is one check of `up_to`, and when that is refused, one
    /// of what the refusal said was left (or of `cost`): each atomic, so
    /// nothing is ever taken that the key did not have. Stores that can
    /// decide it in one step (a script) override it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use ratekeeper::{FixedWindow, Limit, MemoryStore, Store};
    ///
    /// # futures_executor::block_on(async {
    /// let store = MemoryStore::new();
    /// let limit = Limit::new("api", FixedWindow::new(10, Duration::from_secs(60))?)?;
    /// assert_eq!(store.take(&limit, b"k", 1, 8).await?.units, 8);
    /// // 2 were left: both taken.
    /// assert_eq!(store.take(&limit, b"k", 1, 8).await?.units, 2);
    /// assert_eq!(store.take(&limit, b"k", 1, 8).await?.units, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> impl Future<Output = Result<Taken, StoreError>> + Send {
        take::take_by_checks(self, limit, key, cost, up_to)
    }

    /// Gives `units` back as [`refund`](Store::refund) does, but only while
    /// the store's own time is before `deadline` (a time on the clock
    /// [`Taken::at`] reads); `Ok(false)` when it did not. Leases give units
    /// back with it: a unit given back after it stopped being safe (a
    /// window that has ended) would be counted off the wrong window.
    ///
    /// The default gives nothing back (`Ok(false)`): a store that cannot
    /// tell its time in the same call cannot promise it.
    fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = (limit, key, units, deadline);
        std::future::ready(Ok(false))
    }

    /// This store as one that decides without waiting, if it is one (an
    /// in-memory store is; a networked one is not). Front ends ask it once
    /// and skip the asynchronous path where nothing would wait.
    fn immediate(&self) -> Option<&dyn Immediate> {
        None
    }
}

/// A reservation is settled under the limit it was made under.
fn same_limit(limit: &Limit, reservation: &Reservation) -> Result<(), StoreError> {
    if reservation.limit() == limit.name() {
        Ok(())
    } else {
        Err(ReservationError::OtherLimit {
            reserved: reservation.limit().to_owned(),
            given: limit.name().to_owned(),
        }
        .into())
    }
}

/// A store shared behind an [`Arc`] is the store itself: one value that
/// several owners (a wrapper that may be replaced, tasks) decide through.
impl<S: Store> Store for Arc<S> {
    fn check(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        S::check(self, limit, key, cost)
    }

    fn peek(
        &self,
        limit: &Limit,
        key: &[u8],
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        S::peek(self, limit, key)
    }

    fn refund(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        S::refund(self, limit, key, units)
    }

    fn report(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        S::report(self, limit, key, units)
    }

    fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: std::time::Duration,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        S::hold(self, limit, key, units, id, ttl)
    }

    fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        S::settle(self, limit, key, id, actual)
    }

    fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        S::take_slot(self, limit, key, id)
    }

    fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        S::free_slot(self, limit, key, id)
    }

    fn check_all(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<MultiOutcome, StoreError>> + Send {
        S::check_all(self, checks)
    }

    fn take(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
        up_to: u64,
    ) -> impl Future<Output = Result<Taken, StoreError>> + Send {
        S::take(self, limit, key, cost, up_to)
    }

    fn refund_before(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        deadline: Timestamp,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        S::refund_before(self, limit, key, units, deadline)
    }

    fn immediate(&self) -> Option<&dyn Immediate> {
        S::immediate(self)
    }
}

/// A store that decides without waiting: what [`Store::immediate`] gives.
///
/// The fast path of front ends that check on every request: the tower
/// layer prepares its fixed limits once and checks them here.
pub trait Immediate: Send + Sync {
    /// [`Store::check_all`], at once.
    fn check_all_now(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError>;

    /// `limit` looked up once, for a caller that checks the same limit on
    /// every request: its checks then skip finding the limit by name.
    ///
    /// The handle keeps deciding on the state it was prepared on: if the
    /// store later replaces that limit's state (the same name with another
    /// policy, as a configuration reload does), prepare it again.
    ///
    /// ```
    /// use ratekeeper::{Gcra, Limit, MemoryStore, Store};
    ///
    /// let store = MemoryStore::new();
    /// let per_user = Limit::new("per-user", Gcra::per_second(1)?)?;
    /// let immediate = store.immediate().expect("the in-memory store decides at once");
    /// let prepared = immediate.prepare(&per_user)?;
    /// assert!(prepared.check(b"alice", 1).is_allowed());
    /// assert!(!prepared.check(b"alice", 1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn prepare(&self, limit: &Limit) -> Result<Arc<dyn PreparedLimit>, StoreError>;
}

/// One limit of a store that decides at once, looked up once by
/// [`Immediate::prepare`].
pub trait PreparedLimit: Send + Sync {
    /// Decides a request of `cost` for `key`, and records it if allowed.
    fn check(&self, key: &[u8], cost: u64) -> Outcome;
}
