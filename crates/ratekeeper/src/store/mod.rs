//! Stores: where the states of many keys live, behind one async trait.
//!
//! Every front end (the tower middleware, the service) decides through a
//! [`Store`]. ratekeeper brings three: [`MemoryStore`] here, and the SQLite
//! and Redis stores in their own crates. Putting a limiter on another
//! database takes one of:
//!
//! - [`Store`] itself: four methods, for a database that can run a whole
//!   decision atomically (a script, a transaction);
//! - [`WindowCounter`]: one method, an atomic "add to this key's count in
//!   window N", enough for fixed windows on almost anything;
//!
//! and [`Resilient`] wraps any store with a [`FailurePolicy`]: fail open or
//! closed, and an optional in-memory fallback while the store is down.

mod error;
mod limit;
mod memory_store;
mod resilient;
mod window_counter;

use std::future::Future;
use std::sync::Arc;

pub use error::{BackendError, StoreError};
pub use limit::{Limit, LimitNameError, MAX_LIMIT_NAME};
pub use memory_store::{MemoryStore, MemoryStoreBuilder};
pub use resilient::{FailureMode, FailurePolicy, Resilient, ResilientStats};
pub use window_counter::{CounterStore, WindowCounter};

pub use crate::multi::MultiOutcome;

use crate::{Decision, Outcome};

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

    /// Decides one limit at once, without waiting, when this store can:
    /// [`check_all_now`](Store::check_all_now) for the most common request,
    /// under a single limit, without the list of outcomes. `None` (the
    /// default) means the caller must use [`check`](Store::check).
    fn check_now(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Option<Result<Outcome, StoreError>> {
        let _ = (limit, key, cost);
        None
    }

    /// `limit` looked up once, for a caller that checks the same limit on
    /// every request (a middleware's fixed rules): its checks then decide at
    /// once without the store finding the limit by name each time. `None`
    /// (the default) means this store cannot decide without waiting, or
    /// cannot take the limit; the caller keeps using
    /// [`check_now`](Store::check_now) and [`check`](Store::check), which
    /// also report why.
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
    /// let prepared = store.prepare(&per_user).expect("the in-memory store decides at once");
    /// assert!(prepared.check_now(b"alice", 1).is_allowed());
    /// assert!(!prepared.check_now(b"alice", 1).is_allowed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn prepare(&self, limit: &Limit) -> Option<Arc<dyn PreparedLimit>> {
        let _ = limit;
        None
    }

    /// Decides at once, without waiting, when this store can: an in-memory
    /// store can, a networked one cannot. `None` (the default) means the
    /// caller must use [`check_all`](Store::check_all). Front ends try this
    /// first, to skip the asynchronous path where nothing would wait.
    fn check_all_now(
        &self,
        checks: &[(&Limit, &[u8])],
        cost: u64,
    ) -> Option<Result<MultiOutcome, StoreError>> {
        let _ = (checks, cost);
        None
    }

    /// Decides one request against several limits, all or nothing: it is
    /// recorded in every limit if each allows it, and in none otherwise.
    ///
    /// The default checks the limits in order, refunds the ones already
    /// charged when one denies, and peeks the rest for the report. Stores
    /// that can do better in one round trip (a script, a transaction)
    /// override it.
    fn check_all(
        &self,
        checks: &[(&Limit, &[u8])],
        cost: u64,
    ) -> impl Future<Output = Result<MultiOutcome, StoreError>> + Send {
        async move {
            let mut outcomes = Vec::with_capacity(checks.len());
            for (index, &(limit, key)) in checks.iter().enumerate() {
                let outcome = match self.check(limit, key, cost).await {
                    Ok(outcome) => outcome,
                    Err(error) => {
                        refund_all(self, &checks[..index], cost).await;
                        return Err(error);
                    }
                };
                if !outcome.is_allowed() {
                    refund_all(self, &checks[..index], cost).await;
                    // The limits before keep the outcome they reported
                    // before the refund; the ones after are only peeked.
                    outcomes.push(outcome);
                    for &(limit, key) in &checks[index + 1..] {
                        outcomes.push(Outcome::Decided(self.peek(limit, key).await?));
                    }
                    return Ok(MultiOutcome::new(outcomes, Some(index)));
                }
                outcomes.push(outcome);
            }
            Ok(MultiOutcome::new(outcomes, None))
        }
    }
}

/// One limit of a store that decides at once, looked up once by
/// [`Store::prepare`].
pub trait PreparedLimit: Send + Sync {
    /// Decides a request of `cost` for `key`, and records it if allowed.
    fn check_now(&self, key: &[u8], cost: u64) -> Outcome;
}

/// Refunds `cost` to every check, ignoring failures: the caller is already
/// reporting a denial or an error, and a refund that fails can only leave a
/// limit stricter than it should be, never looser.
async fn refund_all<S: Store + ?Sized>(store: &S, checks: &[(&Limit, &[u8])], cost: u64) {
    for &(limit, key) in checks {
        let _ = store.refund(limit, key, cost).await;
    }
}
