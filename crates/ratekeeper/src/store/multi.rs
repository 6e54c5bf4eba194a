//! Several limits at once, all or nothing: the family in one place.
//! [`Check`] (one limit of a request), [`MultiOutcome`] (what they
//! decided), [`check_shadow`] (the limits that only report) and the one
//! algorithm below; [`memory::check_all`](crate::memory::check_all) runs
//! it over in-memory limiters (in `memory/check_all.rs`, under its path).
//!
//! A request is often under several limits: global, per address, per
//! session, per route. It is admitted only if every one allows, and a
//! request refused by one takes nothing from the others.
//!
//! # The one algorithm
//!
//! Every path that checks several limits without a single atomic step of
//! its own (the in-memory store, [`memory::check_all`](crate::memory::check_all),
//! the [`Store::check_all`] default that custom stores inherit) runs
//! [`all_or_nothing`] here:
//!
//! 1. each limit takes its cost in turn;
//! 2. when one refuses (or its store fails), the limits before it are given
//!    their units back, and the ones after it are only asked what they
//!    would decide, taking nothing, so that the report names every limit
//!    that refuses.
//!
//! So the limits never admit more than their quotas and a refused request
//! keeps nothing. Between a charge and its refund another request may see a
//! limit as tighter than it ends up, never looser. Stores that can decide
//! the whole request in one atomic step (Redis's script, SQLite's
//! transaction) do that instead, with the same results.
//!
//! Each limit has its own cost: Envoy's descriptors carry their own hits.

use std::future::Future;

use crate::store::{AnsweredBy, Limit, Store, StoreError};
use crate::{Decision, Outcome, RetryAfter};

/// One limit a request is checked against: the limit, the key under it, and
/// what the request costs there.
///
/// ```
/// use ratekeeper::{Gcra, Limit, store::Check};
///
/// let per_user = Limit::new("per-user", Gcra::per_second(10)?)?;
/// let check = Check::new(&per_user, b"alice", 1);
/// assert_eq!(check.cost, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Check<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The key under the limit.
    pub key: &'a [u8],
    /// The units the request takes from this limit (0 only reads it).
    pub cost: u64,
}

impl<'a> Check<'a> {
    /// `cost` units of `limit` for `key`.
    pub fn new(limit: &'a Limit, key: &'a [u8], cost: u64) -> Self {
        Check { limit, key, cost }
    }
}

/// What a check of several limits decided: one outcome per limit, in the
/// order given, and who decided ([`AnsweredBy`]: the store, or a failure
/// policy while it was down).
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an outcome says whether the request may proceed"]
pub struct MultiOutcome {
    outcomes: Vec<Outcome>,
    denied_by: Option<usize>,
    answered_by: AnsweredBy,
}

impl MultiOutcome {
    /// One outcome per limit, in order, and the index of the limit that
    /// denied, if one did: for stores that decide several limits themselves.
    pub fn new(outcomes: Vec<Outcome>, denied_by: Option<usize>) -> Self {
        MultiOutcome {
            outcomes,
            denied_by,
            answered_by: AnsweredBy::Store,
        }
    }

    /// These outcomes, made by `answered_by` (what a
    /// [`Resilient`](crate::store::Resilient) store says of the answers
    /// its failure policy made), each decision saying so too.
    pub fn with_answered_by(mut self, answered_by: AnsweredBy) -> Self {
        self.answered_by = answered_by;
        for outcome in &mut self.outcomes {
            *outcome = outcome.with_answered_by(answered_by);
        }
        self
    }

    /// Who decided: [`AnsweredBy::Store`] unless a failure policy
    /// answered for a store that failed.
    pub fn answered_by(&self) -> AnsweredBy {
        self.answered_by
    }

    /// Whether every limit allowed the request (and it was counted in all).
    pub fn is_allowed(&self) -> bool {
        self.denied_by.is_none()
    }

    /// The index of the limit that denied the request, if one did.
    pub fn denied_by(&self) -> Option<usize> {
        self.denied_by
    }

    /// Each limit's outcome, in the order the limits were given. When the
    /// request was denied, the others' outcomes say what they would have
    /// decided; nothing was taken from them.
    pub fn outcomes(&self) -> &[Outcome] {
        &self.outcomes
    }

    /// The decision with the least remaining: the limit closest to denying.
    pub fn tightest(&self) -> Option<&Decision> {
        self.outcomes
            .iter()
            .filter_map(Outcome::decision)
            .min_by_key(|d| d.remaining())
    }

    /// When to try again: the longest wait among the limits that deny now.
    pub fn retry_after(&self) -> RetryAfter {
        self.outcomes
            .iter()
            .filter(|outcome| !outcome.is_allowed())
            .map(Outcome::retry_after)
            .max()
            .unwrap_or(RetryAfter::NOW)
    }
}

/// The limits of one request, as [`all_or_nothing`] takes them: the `i`th
/// limit charged, given back and read.
pub(crate) trait Steps: Sync {
    /// What a step fails with.
    type Error;
    /// How many limits.
    fn len(&self) -> usize;
    /// Takes the `i`th limit's cost, if it allows.
    fn charge(&self, i: usize) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;
    /// Gives the `i`th limit's cost back.
    fn give_back(&self, i: usize) -> impl Future<Output = Result<(), Self::Error>> + Send;
    /// What the `i`th limit would decide for its cost, taking nothing (a
    /// store that cannot tell without taking gives the limit's status).
    fn preview(&self, i: usize) -> impl Future<Output = Result<Outcome, Self::Error>> + Send;
}

/// Checks every limit of `steps`, all or nothing (see the module docs).
pub(crate) async fn all_or_nothing<S: Steps>(steps: &S) -> Result<MultiOutcome, S::Error> {
    let count = steps.len();
    let mut outcomes = Vec::with_capacity(count);
    for index in 0..count {
        let outcome = match steps.charge(index).await {
            Ok(outcome) => outcome,
            Err(error) => {
                give_back(steps, index).await;
                return Err(error);
            }
        };
        outcomes.push(outcome);
        if !outcome.is_allowed() {
            give_back(steps, index).await;
            // The limits before keep the outcome they reported before the
            // refund: what they would have decided; the ones after say what
            // they would decide, so that every limit that refuses is named.
            for later in index + 1..count {
                outcomes.push(steps.preview(later).await?);
            }
            return Ok(MultiOutcome::new(outcomes, Some(index)));
        }
    }
    Ok(MultiOutcome::new(outcomes, None))
}

/// Decides the limits of a request that only report (shadow mode: a limit
/// tried on real traffic before it is enforced), once the enforced limits
/// have decided: with `request_allowed`, each takes its cost as if it were
/// enforced; without, each is only read. Each is decided on its own, never
/// all or nothing with the others.
///
/// So a shadow limit never changes what happens to a request (it cannot
/// refuse it, and a request the enforced limits refused costs it nothing,
/// as it costs them nothing), while what it reports is what it would have
/// decided. The tower layer and the service both decide shadow limits
/// here.
///
/// Shadow limits must not go in the same [`Store::check_all`] as the
/// enforced ones: their refusal would give back what the enforced limits
/// took for a request that passes.
///
/// ```
/// use ratekeeper::{Gcra, Limit, MemoryStore, Store, store::{check_shadow, Check}};
///
/// # futures_executor::block_on(async {
/// let store = MemoryStore::new();
/// let enforced = Limit::new("per-user", Gcra::per_minute(10)?)?;
/// let trial = Limit::new("per-user-strict", Gcra::per_minute(1)?)?;
/// for expected in [true, false] {
///     let decided = store.check_all(&[Check::new(&enforced, b"alice", 1)]).await?;
///     let shadow = check_shadow(&store, &[Check::new(&trial, b"alice", 1)], decided.is_allowed()).await?;
///     // Both requests pass; the second would have been refused by the trial.
///     assert!(decided.is_allowed());
///     assert_eq!(shadow[0].is_allowed(), expected);
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
pub async fn check_shadow<S: Store + ?Sized>(
    store: &S,
    checks: &[Check<'_>],
    request_allowed: bool,
) -> Result<Vec<Outcome>, StoreError> {
    let mut outcomes = Vec::with_capacity(checks.len());
    for check in checks {
        outcomes.push(if request_allowed {
            store.check(check.limit, check.key, check.cost).await?
        } else {
            Outcome::Decided(store.peek(check.limit, check.key).await?)
        });
    }
    Ok(outcomes)
}

/// Gives back the first `taken` limits' costs, ignoring failures: the
/// caller is already reporting a refusal or an error, and a refund that
/// fails can only leave a limit stricter than it should be, never looser.
async fn give_back<S: Steps>(steps: &S, taken: usize) {
    for index in 0..taken {
        let _ = steps.give_back(index).await;
    }
}

/// A [`Store`]'s limits for one request: what the [`Store::check_all`]
/// default runs.
pub(crate) struct StoreSteps<'a, S: ?Sized> {
    pub(crate) store: &'a S,
    pub(crate) checks: &'a [Check<'a>],
}

impl<S: Store + ?Sized> Steps for StoreSteps<'_, S> {
    type Error = StoreError;

    fn len(&self) -> usize {
        self.checks.len()
    }

    fn charge(&self, i: usize) -> impl Future<Output = Result<Outcome, StoreError>> + Send {
        let check = self.checks[i];
        self.store.check(check.limit, check.key, check.cost)
    }

    fn give_back(&self, i: usize) -> impl Future<Output = Result<(), StoreError>> + Send {
        let check = self.checks[i];
        self.store.refund(check.limit, check.key, check.cost)
    }

    async fn preview(&self, i: usize) -> Result<Outcome, StoreError> {
        let check = self.checks[i];
        self.store
            .peek(check.limit, check.key)
            .await
            .map(Outcome::Decided)
    }
}
