//! What to do when a store fails: fail open, fail closed, or fall back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::in_flight::InFlight;
use super::reservation::ReservationId;
use super::{AnsweredBy, Check, Limit, MemoryStore, Store, StoreError};
use crate::{
    clock::MonotonicClock, policy::Algorithm, store::MultiOutcome, Clock, Decision, Outcome,
};

/// Whether requests pass while the store is failing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureMode {
    /// Allow every request (and count it): an outage of the store does not
    /// become an outage of every route behind it, but nothing is limited.
    Open,
    /// Deny with the store's error, which front ends turn into 503: nothing
    /// passes unlimited, and nothing passes at all.
    #[default]
    Closed,
}

/// How a [`Resilient`] store behaves when its store fails.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FailurePolicy {
    /// Open or closed, when there is no fallback.
    pub mode: FailureMode,
    /// Decide in this process's memory while the store is down: limits hold
    /// per process instead of globally, rather than not at all.
    pub fallback: bool,
    /// After a failure, how long to skip the store (answering by the mode or
    /// the fallback at once) before trying it again. Keeps a dead store from
    /// costing every request a timeout; also bounds how long decisions take
    /// to come back to the store once it recovers.
    pub retry_after: Duration,
    /// Log a failure at most once per this interval.
    pub log_interval: Duration,
}

impl Default for FailurePolicy {
    /// Closed, no fallback, retry after 500 ms, log every 10 s.
    fn default() -> Self {
        FailurePolicy {
            mode: FailureMode::Closed,
            fallback: false,
            retry_after: Duration::from_millis(500),
            log_interval: Duration::from_secs(10),
        }
    }
}

impl FailurePolicy {
    /// The default policy with `mode`.
    pub fn new(mode: FailureMode) -> Self {
        FailurePolicy {
            mode,
            ..Self::default()
        }
    }

    /// With (or without) the in-memory fallback.
    pub fn with_fallback(mut self, fallback: bool) -> Self {
        self.fallback = fallback;
        self
    }

    /// With another retry interval.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }
}

/// Counts of what a [`Resilient`] store did about failures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ResilientStats {
    /// Calls the store failed.
    pub failures: u64,
    /// Requests allowed because the store failed open.
    pub failed_open: u64,
    /// Requests refused because the store failed closed.
    pub failed_closed: u64,
    /// Requests decided by the in-memory fallback.
    pub fallback: u64,
}

/// A store wrapped with a [`FailurePolicy`].
///
/// Every call goes to the store first. When it fails, the failure is logged
/// (at most once per `log_interval`) and counted, the request is decided by
/// the policy, and the store is left alone for `retry_after`; after that the
/// next call tries it again, so decisions return to it without a restart.
///
/// An answer the policy made says so: [`Decision::answered_by`] on every
/// decision, and [`MultiOutcome::answered_by`]. With [`Resilient::at`], every error it returns or logs
/// names the store's address.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::store::{AnsweredBy, Check, FailureMode, FailurePolicy, Resilient, StoreError};
/// use ratekeeper::{Decision, Gcra, Limit, Outcome, Store};
///
/// /// A store whose server is gone.
/// struct Gone;
/// impl Store for Gone {
///     async fn check(&self, _: &Limit, _: &[u8], _: u64) -> Result<Outcome, StoreError> {
///         Err(StoreError::Timeout(Duration::from_millis(100)))
///     }
///     async fn peek(&self, _: &Limit, _: &[u8]) -> Result<Decision, StoreError> {
///         Err(StoreError::Timeout(Duration::from_millis(100)))
///     }
///     async fn refund(&self, _: &Limit, _: &[u8], _: u64) -> Result<(), StoreError> {
///         Err(StoreError::Timeout(Duration::from_millis(100)))
///     }
/// }
///
/// # futures_executor::block_on(async {
/// let limit = Limit::new("per-user", Gcra::per_second(1)?)?;
/// let open = Resilient::new(Gone, FailurePolicy::new(FailureMode::Open));
/// let answer = open.check_all(&[Check::new(&limit, b"alice", 1)]).await?;
/// assert!(answer.is_allowed());
/// assert_eq!(answer.answered_by(), AnsweredBy::FailOpen);
///
/// let closed = Resilient::new(Gone, FailurePolicy::default()).at("redis://10.0.0.5:6379");
/// let error = closed.check(&limit, b"alice", 1).await.unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "the rate-limit store did not answer within 100ms (store: redis://10.0.0.5:6379)"
/// );
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct Resilient<S, C = MonotonicClock> {
    store: S,
    policy: FailurePolicy,
    /// The store's address or path, named in its errors.
    address: Option<Arc<str>>,
    /// The message of the last failure: what a call skipped while the
    /// store is down says.
    last_error: RwLock<Arc<str>>,
    fallback: Option<MemoryStore<C>>,
    clock: MonotonicClock,
    /// Monotonic nanoseconds before which the store is not asked; 0: ask.
    down_until: AtomicU64,
    last_log: AtomicU64,
    failures: AtomicU64,
    failed_open: AtomicU64,
    failed_closed: AtomicU64,
    fallback_decisions: AtomicU64,
}

impl<S: Store> Resilient<S, MonotonicClock> {
    /// `store` with `policy`; the fallback, if asked for, is a default
    /// [`MemoryStore`].
    pub fn new(store: S, policy: FailurePolicy) -> Self {
        let fallback = policy.fallback.then(MemoryStore::new);
        Self::with_fallback_store(store, policy, fallback)
    }
}

impl<S: Store, C: Clock + Clone + 'static> Resilient<S, C> {
    /// `store` with `policy` and the given fallback store (used only if the
    /// policy asks for a fallback).
    pub fn with_fallback_store(
        store: S,
        policy: FailurePolicy,
        fallback: Option<MemoryStore<C>>,
    ) -> Self {
        let fallback = if policy.fallback { fallback } else { None };
        Resilient {
            store,
            policy,
            fallback,
            address: None,
            last_error: RwLock::new(Arc::from("")),
            clock: MonotonicClock::new(),
            down_until: AtomicU64::new(0),
            last_log: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            failed_open: AtomicU64::new(0),
            failed_closed: AtomicU64::new(0),
            fallback_decisions: AtomicU64::new(0),
        }
    }

    /// This store, naming `address` (its URL without credentials, or its
    /// path) in every error it returns or logs ([`StoreError::at`]).
    pub fn at(mut self, address: impl Into<Arc<str>>) -> Self {
        self.address = Some(address.into());
        self
    }

    /// The address given to [`Resilient::at`].
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.store
    }

    /// The failure policy.
    pub fn policy(&self) -> &FailurePolicy {
        &self.policy
    }

    /// What has been done about failures so far.
    pub fn stats(&self) -> ResilientStats {
        ResilientStats {
            failures: self.failures.load(Ordering::Relaxed),
            failed_open: self.failed_open.load(Ordering::Relaxed),
            failed_closed: self.failed_closed.load(Ordering::Relaxed),
            fallback: self.fallback_decisions.load(Ordering::Relaxed),
        }
    }

    /// Whether the store is being skipped after a recent failure.
    pub fn is_down(&self) -> bool {
        let until = self.down_until.load(Ordering::Acquire);
        until != 0 && self.clock.now().as_nanos() < until
    }

    /// Records a failure: skip the store for a while, log now and then.
    fn failed(&self, error: &StoreError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        *self
            .last_error
            .write()
            .unwrap_or_else(PoisonError::into_inner) =
            // The skipped calls' error names the store itself.
            Arc::from(error.without_store().to_string());
        let now = self.clock.now().as_nanos().max(1);
        let retry = self.policy.retry_after.as_nanos().min(u64::MAX as u128) as u64;
        self.down_until
            .store(now.saturating_add(retry), Ordering::Release);
        let last = self.last_log.load(Ordering::Relaxed);
        let interval = self.policy.log_interval.as_nanos().min(u64::MAX as u128) as u64;
        if (last == 0 || now.saturating_sub(last) >= interval)
            && self
                .last_log
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            tracing::warn!(
                error = %error,
                store = self.address.as_deref().unwrap_or("-"),
                mode = ?self.policy.mode,
                fallback = self.fallback.is_some(),
                failures = self.failures.load(Ordering::Relaxed),
                "rate-limit store failed"
            );
        }
    }

    fn recovered(&self) {
        if self.down_until.load(Ordering::Relaxed) != 0 {
            self.down_until.store(0, Ordering::Release);
            tracing::info!(
                store = self.address.as_deref().unwrap_or("-"),
                "rate-limit store answers again"
            );
        }
    }

    /// The error to fail closed with while the store is skipped: the
    /// failure that took it down.
    fn down_error(&self) -> StoreError {
        let last_error = self
            .last_error
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        StoreError::Down {
            retry_within: self.policy.retry_after,
            last_error,
        }
    }

    /// `error`, naming the store's address if it has one.
    fn located(&self, error: StoreError) -> StoreError {
        match &self.address {
            Some(address) => error.at(Arc::clone(address)),
            None => error,
        }
    }

    /// `outcome` when the store answered (or answered about a
    /// reservation); while it fails, the `fallback` call's (the same call on
    /// the in-memory fallback, if there is one, made only then),
    /// or the failure policy's: failing open an unknown but allowed answer,
    /// failing closed the error. Each answer says who made it.
    async fn or_by_policy<F>(
        &self,
        limit: &Limit,
        outcome: Result<Outcome, StoreError>,
        fallback: impl FnOnce() -> Option<F>,
    ) -> Result<Outcome, StoreError>
    where
        F: std::future::Future<Output = Result<Outcome, StoreError>>,
    {
        let error = match outcome {
            Ok(outcome) => return Ok(outcome),
            Err(error) if error.reservation().is_some() => return Err(error),
            Err(error) => error,
        };
        if let Some(call) = fallback() {
            self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
            let outcome = call.await?;
            return Ok(outcome.with_answered_by(AnsweredBy::Fallback));
        }
        match self.policy.mode {
            FailureMode::Open => {
                self.failed_open.fetch_add(1, Ordering::Relaxed);
                Ok(Outcome::Decided(unknown_but_allowed(limit)))
            }
            FailureMode::Closed => {
                self.failed_closed.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// Runs `call` on the store unless it is down; an error means decide
    /// by the failure policy, with the error to fail closed with.
    async fn attempt<T>(
        &self,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if self.is_down() {
            return Err(self.located(self.down_error()));
        }
        match call.await {
            Ok(value) => {
                self.recovered();
                Ok(value)
            }
            // The store answered: about a reservation, not for want of
            // being there.
            Err(error) if error.reservation().is_some() => {
                self.recovered();
                Err(error)
            }
            Err(error) => {
                let error = self.located(error);
                self.failed(&error);
                Err(error)
            }
        }
    }
}

impl<S: Store, C: Clock + Clone + 'static> Store for Resilient<S, C> {
    /// The store's outcome; while it fails, the fallback's or the failure
    /// policy's, its decision saying who answered
    /// ([`Decision::answered_by`]).
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        let outcome = self.attempt(self.store.check(limit, key, cost)).await;
        let fallback = || {
            self.fallback
                .as_ref()
                .map(|store| store.check(limit, key, cost))
        };
        self.or_by_policy(limit, outcome, fallback).await
    }

    /// The store's decision; while it fails, the fallback's or the failure
    /// policy's, saying who answered ([`Decision::answered_by`]).
    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        match self.attempt(self.store.peek(limit, key)).await {
            Ok(decision) => Ok(decision),
            Err(error) => match (&self.fallback, self.policy.mode) {
                (Some(fallback), _) => Ok(fallback
                    .peek(limit, key)
                    .await?
                    .with_answered_by(AnsweredBy::Fallback)),
                (None, FailureMode::Open) => Ok(unknown_but_allowed(limit)),
                (None, FailureMode::Closed) => Err(error),
            },
        }
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        match self.attempt(self.store.refund(limit, key, units)).await {
            Ok(()) => Ok(()),
            Err(error) => match &self.fallback {
                Some(fallback) => fallback.refund(limit, key, units).await,
                // A lost refund leaves a limit stricter, never looser.
                None if self.policy.mode == FailureMode::Open => Ok(()),
                None => Err(error),
            },
        }
    }

    /// The store's outcome; while it fails, the fallback's, or the failure
    /// policy's: failing open, the units are not counted anywhere (the
    /// decision says [`AnsweredBy::FailOpen`]); failing closed, the error.
    async fn report(&self, limit: &Limit, key: &[u8], units: u64) -> Result<Outcome, StoreError> {
        let outcome = self.attempt(self.store.report(limit, key, units)).await;
        let fallback = || {
            self.fallback
                .as_ref()
                .map(|store| store.report(limit, key, units))
        };
        self.or_by_policy(limit, outcome, fallback).await
    }

    /// The store's outcome; while it fails, the fallback's (which then
    /// keeps the reservation), or the failure policy's: failing open, the
    /// estimate is allowed and held nowhere; failing closed, the error.
    async fn hold(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let outcome = self
            .attempt(self.store.hold(limit, key, units, id, ttl))
            .await;
        let fallback = || {
            self.fallback
                .as_ref()
                .map(|store| store.hold(limit, key, units, id, ttl))
        };
        self.or_by_policy(limit, outcome, fallback).await
    }

    /// The store's outcome; while it fails, the fallback's (where a
    /// reservation made while the store was down is), or failing open, an
    /// unknown but allowed answer (the settle is lost: the estimate
    /// stands); failing closed, the error.
    async fn settle(
        &self,
        limit: &Limit,
        key: &[u8],
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        match self
            .attempt(self.store.settle(limit, key, id, actual))
            .await
        {
            Ok(outcome) => Ok(outcome),
            Err(error) if error.reservation().is_some() => Err(error),
            Err(error) => match (&self.fallback, self.policy.mode) {
                (Some(fallback), _) => Ok(fallback
                    .settle(limit, key, id, actual)
                    .await?
                    .with_answered_by(AnsweredBy::Fallback)),
                (None, FailureMode::Open) => Ok(Outcome::Decided(unknown_but_allowed(limit))),
                (None, FailureMode::Closed) => Err(error),
            },
        }
    }

    /// The store's outcome; while it fails, the fallback's (a slot taken
    /// in this process's memory), or failing open, an allowed answer whose
    /// slot no store holds; failing closed, the error.
    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let error = match self.attempt(self.store.take_slot(limit, key, id)).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) if error.reservation().is_some() => return Err(error),
            Err(error) => error,
        };
        if let Some(fallback) = &self.fallback {
            self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
            let outcome = fallback.take_slot(limit, key, id).await?;
            return Ok(outcome.with_answered_by(AnsweredBy::Fallback));
        }
        match self.policy.mode {
            FailureMode::Open => {
                self.failed_open.fetch_add(1, Ordering::Relaxed);
                let allowed = limit.decide(0).with_answered_by(AnsweredBy::FailOpen);
                Ok(Outcome::Decided(allowed))
            }
            FailureMode::Closed => {
                self.failed_closed.fetch_add(1, Ordering::Relaxed);
                Err(error)
            }
        }
    }

    /// The store's answer; while it fails, the fallback's (where a slot
    /// taken while the store was down is), or failing open, done (a slot
    /// the store holds frees itself at its lease's end); failing closed,
    /// the error.
    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        match self.attempt(self.store.free_slot(limit, key, id)).await {
            Ok(()) => Ok(()),
            Err(error) if error.reservation().is_some() => Err(error),
            Err(error) => match (&self.fallback, self.policy.mode) {
                (Some(fallback), _) => fallback.free_slot(limit, key, id).await,
                (None, FailureMode::Open) => Ok(()),
                (None, FailureMode::Closed) => Err(error),
            },
        }
    }

    async fn check_all(&self, checks: &[Check<'_>]) -> Result<MultiOutcome, StoreError> {
        match self.attempt(self.store.check_all(checks)).await {
            Ok(outcome) => Ok(outcome),
            Err(error) => {
                if let Some(fallback) = &self.fallback {
                    self.fallback_decisions.fetch_add(1, Ordering::Relaxed);
                    let outcome = fallback.check_all(checks).await?;
                    return Ok(outcome.with_answered_by(AnsweredBy::Fallback));
                }
                match self.policy.mode {
                    FailureMode::Open => {
                        self.failed_open.fetch_add(1, Ordering::Relaxed);
                        let outcomes = checks
                            .iter()
                            .map(|check| Outcome::Decided(unknown_but_allowed(check.limit)))
                            .collect();
                        Ok(
                            MultiOutcome::new(outcomes, None)
                                .with_answered_by(AnsweredBy::FailOpen),
                        )
                    }
                    FailureMode::Closed => {
                        self.failed_closed.fetch_add(1, Ordering::Relaxed);
                        Err(error)
                    }
                }
            }
        }
    }
}

/// The decision of a store that failed open: allowed, with the quota
/// reported whole because nothing is known.
fn unknown_but_allowed(limit: &Limit) -> Decision {
    let quota = limit.policy().quota();
    Decision::allowed(quota, quota, Duration::ZERO).with_answered_by(AnsweredBy::FailOpen)
}
