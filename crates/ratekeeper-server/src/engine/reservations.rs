//! Reservations through the engine: a request's estimate held on every
//! limit it meets, all or nothing, and settled later from the
//! reservations' tokens ([`ratekeeper::store::reservation`]).

use std::time::Duration;

use ratekeeper::store::reservation::{ReservationError, ReservationId};
use ratekeeper::store::{Reservation, StoreError};
use ratekeeper::{Outcome, Store};

use super::verdict::refuses;
use super::{ban, given_back, Engine, LimitCheck, LimitResult, PlanError, Reservations, Verdict};

impl Engine {
    /// Reserves each check's cost for `ttl` ([`Store::reserve`]), all or
    /// nothing: when one limit refuses, the reservations already made are
    /// cancelled, the limits after it only read, and the verdict says
    /// which refused. Returns the verdict and the reservations, one per
    /// limit in the order of the checks (none when refused).
    pub async fn reserve(
        &self,
        checks: Vec<LimitCheck>,
        ttl: Duration,
    ) -> Result<(Verdict, Vec<Reservation>), StoreError> {
        let started = std::time::Instant::now();
        let store = &self.timed_store();
        let mut results = Vec::with_capacity(checks.len());
        let mut held = Vec::with_capacity(checks.len());
        let mut refused = false;
        for check in checks {
            let (limit, key) = (check.limit.limit(), &check.key[..]);
            let outcome = if refused {
                Outcome::Decided(store.peek(limit, key).await?)
            } else if ban::is_ban(&check) {
                ban::answer(&check)
            } else {
                let reserved = store.reserve(limit, key, check.cost, ttl).await?;
                if reserved.reservation.is_some() {
                    self.inner
                        .metrics
                        .record_reservation(check.limit.name(), Reservations::Held);
                }
                held.extend(reserved.reservation);
                reserved.outcome
            };
            refused |= refuses(&check, &outcome);
            results.push(LimitResult { check, outcome });
        }
        if refused {
            for reservation in held.drain(..) {
                let Some(result) = results
                    .iter_mut()
                    .find(|result| result.check.limit.name() == reservation.limit())
                else {
                    continue;
                };
                // A cancel that fails leaves the units held until the ttl:
                // stricter, never looser.
                if store
                    .cancel(result.check.limit.limit(), &reservation)
                    .await
                    .is_ok()
                {
                    self.inner
                        .metrics
                        .record_reservation(result.check.limit.name(), Reservations::Cancelled);
                    result.outcome = given_back(result.outcome, result.check.cost);
                }
            }
        }
        let now = self.inner.wall_clock.now();
        for result in &results {
            self.record(now, &result.check, &result.outcome);
        }
        self.inner.metrics.observe(started.elapsed());
        Ok((Verdict { results }, held))
    }

    /// Holds `check`'s cost as reservation `id` for `ttl` on the engine's
    /// store ([`Store::hold`]): a request's decision, counted in its
    /// limit's statistics; for a front end that makes its own ids (the
    /// proxy's tower layer).
    pub(crate) async fn hold(
        &self,
        check: &LimitCheck,
        id: ReservationId,
        ttl: Duration,
    ) -> Result<Outcome, StoreError> {
        let (limit, key) = (check.limit.limit(), &check.key[..]);
        let outcome = if ban::is_ban(check) {
            ban::answer(check)
        } else {
            let held = self
                .timed_store()
                .hold(limit, key, check.cost, id, ttl)
                .await?;
            if held.is_allowed() {
                self.inner
                    .metrics
                    .record_reservation(check.limit.name(), Reservations::Held);
            }
            held
        };
        self.record(self.inner.wall_clock.now(), check, &outcome);
        Ok(outcome)
    }

    /// Settles reservation `id` of `check`'s key at `actual` units
    /// (`None`: cancels it) on the engine's store ([`Store::settle`]).
    pub(crate) async fn settle_one(
        &self,
        check: &LimitCheck,
        id: ReservationId,
        actual: Option<u64>,
    ) -> Result<Outcome, StoreError> {
        let (limit, key) = (check.limit.limit(), &check.key[..]);
        let settled = self.timed_store().settle(limit, key, id, actual).await;
        let what = match (&settled, actual) {
            (Ok(_), Some(_)) => Some(Reservations::Committed),
            (Ok(_), None) => Some(Reservations::Cancelled),
            (Err(error), _) if error.reservation() == Some(&ReservationError::Unknown) => {
                Some(Reservations::Unknown)
            }
            (Err(_), _) => None,
        };
        if let Some(what) = what {
            self.inner.metrics.record_reservation(limit.name(), what);
        }
        settled
    }

    /// Settles `reservations` at `actual` units each (`None`: cancels
    /// them, giving their estimates back): what the estimate held over
    /// `actual` is given back, what `actual` is over it is charged as a
    /// report. The verdict is each key's status after it (a report's
    /// refusal when the excess overdrew it).
    ///
    /// Every reservation is settled that can be; the first that could not
    /// (its limit gone in a reload: [`PlanError::UnknownLimit`]; not open:
    /// the store's [`ReservationError::Unknown`])
    /// is the error.
    pub async fn settle(
        &self,
        reservations: &[Reservation],
        actual: Option<u64>,
    ) -> Result<Verdict, PlanError> {
        let limits = self.limits();
        let mut results = Vec::with_capacity(reservations.len());
        let mut failed = None;
        for reservation in reservations {
            let Some(limit) = limits.get(reservation.limit()) else {
                failed.get_or_insert(PlanError::UnknownLimit(reservation.limit().to_owned()));
                continue;
            };
            // Not a request: the statistics counted its reservation
            // already.
            let key = reservation.key().to_vec();
            let check = LimitCheck::new(std::sync::Arc::clone(limit), key, actual.unwrap_or(0));
            match self.settle_one(&check, reservation.id(), actual).await {
                Ok(outcome) => results.push(LimitResult { check, outcome }),
                Err(error) => {
                    failed.get_or_insert(PlanError::Store(error));
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(Verdict { results }),
        }
    }
}
