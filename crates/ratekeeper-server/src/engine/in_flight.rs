//! Caps on requests in flight through the engine: a request's slots taken
//! on every cap it meets, all or none, and given back from their tokens
//! ([`ratekeeper::store::in_flight`]).

use std::sync::Arc;

use ratekeeper::store::in_flight::{InFlight, Slot};
use ratekeeper::store::reservation::{ReservationError, ReservationId};
use ratekeeper::store::StoreError;
use ratekeeper::{Decision, Outcome, Store};
use ratekeeper_tower::in_flight::CapRule;

use super::key::{compose_key, KeySource};
use super::matching::{key_parts_of, DescriptorSource, Entry};
use super::metrics::Slots;
use super::{Engine, PlanError};
use super::{MissingPart, OrUnknown};
use crate::config::{InFlightConfig, KeyPart};

/// One configured cap on requests in flight, ready to match requests and
/// build keys.
#[derive(Debug)]
pub struct ActiveInFlight {
    config: InFlightConfig,
    rule: CapRule,
}

impl ActiveInFlight {
    /// `config`, in force.
    pub fn new(config: InFlightConfig) -> ActiveInFlight {
        let rule = config.rule();
        ActiveInFlight { config, rule }
    }

    /// The cap as configured.
    pub fn config(&self) -> &InFlightConfig {
        &self.config
    }

    /// The store's cap: name, most slots per key, lease.
    pub fn cap(&self) -> &InFlight {
        &self.config.cap
    }

    /// The cap's name.
    pub fn name(&self) -> &str {
        self.config.cap.name()
    }

    /// The parts its keys are made of.
    pub fn key_parts(&self) -> &[KeyPart] {
        &self.config.key
    }

    /// The key of a request whose parts `source` gives, or the first part
    /// it lacks.
    pub fn key(&self, source: &dyn KeySource) -> Result<Vec<u8>, &KeyPart> {
        compose_key(&self.config.key, source)
    }

    /// The key of a descriptor this cap matched: its configured parts,
    /// then each value its `match` takes by a wildcard, as a limit's
    /// ([`key_parts`](super::matching::key_parts)); a part the descriptor
    /// lacks is the shared `unknown`, or refused, as `missing` says.
    pub(crate) fn descriptor_key<E: Entry>(
        &self,
        entries: &[E],
        missing: MissingPart,
    ) -> Result<Vec<u8>, PlanError> {
        let parts = key_parts_of(&self.config.matcher, &self.config.key);
        let source = DescriptorSource(entries);
        let key = match missing {
            MissingPart::Unknown => compose_key(&parts, &OrUnknown(source)),
            MissingPart::Refused => compose_key(&parts, &source),
        };
        key.map_err(|part| PlanError::MissingPart {
            limit: self.name().to_owned(),
            part: part.to_string(),
        })
    }

    /// The cap as the tower layer's rule, for the proxy.
    pub fn rule(&self) -> &CapRule {
        &self.rule
    }
}

/// One cap to take a slot of: the cap and the request's key under it.
#[derive(Clone, Debug)]
pub struct SlotCheck {
    /// The cap.
    pub cap: Arc<ActiveInFlight>,
    /// The request's key under it.
    pub key: Vec<u8>,
}

/// One cap's part in an acquire: its check and what the store answered
/// (allowed with the slots left, or refused with `Retry-After`).
#[derive(Clone, Debug)]
pub struct SlotResult {
    /// The cap and key, as asked.
    pub check: SlotCheck,
    /// The store's answer.
    pub outcome: Outcome,
}

impl SlotResult {
    /// Whether the cap refused the request (a store that had no room for
    /// one more slot refuses too).
    pub fn refused(&self) -> bool {
        !matches!(self.outcome, Outcome::Decided(decision) if decision.is_allowed())
    }

    /// The decision, a saturated store's as a refusal until room returns.
    pub fn decision(&self) -> Decision {
        match self.outcome {
            Outcome::Decided(decision) => decision,
            Outcome::Saturated { retry_after, .. } => Decision::denied(
                self.check.cap.cap().max(),
                0,
                retry_after,
                ratekeeper::RetryAfter::After(retry_after),
            ),
        }
    }
}

/// What an acquire answered: each cap's result, and the slots taken (one
/// per cap, in order; none when a cap refused).
#[derive(Debug, Default)]
pub struct Acquired {
    /// Each cap's result, in the order asked; after a refusal, the caps
    /// not tried are absent.
    pub results: Vec<SlotResult>,
    /// The slots, to give back when the request ends.
    pub slots: Vec<Slot>,
}

impl Acquired {
    /// The first cap that refused.
    pub fn refused_by(&self) -> Option<&SlotResult> {
        self.results.iter().find(|result| result.refused())
    }
}

impl Engine {
    /// Takes one slot of each of `checks`' caps for its key, all or none:
    /// when one cap refuses, the slots already taken are given back and
    /// the caps after it are not tried.
    pub async fn acquire(&self, checks: Vec<SlotCheck>) -> Result<Acquired, StoreError> {
        self.take_slots(checks, true).await
    }

    /// Takes one slot of each of `checks`' caps for its key, each on its
    /// own: a cap that refuses takes nothing, and the others are still
    /// taken (for a door in shadow mode, where nothing refuses).
    pub async fn acquire_each(&self, checks: Vec<SlotCheck>) -> Result<Acquired, StoreError> {
        self.take_slots(checks, false).await
    }

    /// [`Engine::acquire`] (`all_or_none`) or [`Engine::acquire_each`]; a
    /// store that fails gives back the slots taken and is the error.
    async fn take_slots(
        &self,
        checks: Vec<SlotCheck>,
        all_or_none: bool,
    ) -> Result<Acquired, StoreError> {
        let mut acquired = Acquired {
            results: Vec::with_capacity(checks.len()),
            slots: Vec::with_capacity(checks.len()),
        };
        for check in checks {
            let id = ReservationId::random();
            let outcome = match self.take_slot(check.cap.cap(), &check.key, id).await {
                Ok(outcome) => outcome,
                Err(error) => {
                    self.release_all(&acquired.slots).await;
                    return Err(error);
                }
            };
            let result = SlotResult { check, outcome };
            let refused = result.refused();
            if !refused {
                let (cap, key) = (result.check.cap.name(), &result.check.key[..]);
                acquired.slots.push(Slot::new(cap, key, id));
            }
            acquired.results.push(result);
            if refused && all_or_none {
                self.release_all(&std::mem::take(&mut acquired.slots)).await;
                break;
            }
        }
        Ok(acquired)
    }

    /// Gives back `slots` taken for a request that will not run; a slot
    /// that cannot be given back is freed by its lease.
    async fn release_all(&self, slots: &[Slot]) {
        let _ = self.release(slots).await;
    }

    /// Gives `slots` back, each once. Every slot is given back that can
    /// be; the first that could not (its cap gone in a reload:
    /// [`PlanError::UnknownLimit`]; not taken any more, released already or
    /// past its lease: the store's [`ReservationError::Unknown`]) is the
    /// error.
    pub async fn release(&self, slots: &[Slot]) -> Result<(), PlanError> {
        let limits = self.limits();
        let mut failed = None;
        for slot in slots {
            let Some(cap) = limits.in_flight(slot.limit()) else {
                failed.get_or_insert(PlanError::UnknownLimit(slot.limit().to_owned()));
                continue;
            };
            if let Err(error) = self.free_slot(cap.cap(), slot.key(), slot.id()).await {
                failed.get_or_insert(PlanError::Store(error));
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Takes slot `id` of `cap` for `key` on the engine's store, counted
    /// in `/metrics`; for a front end that makes its own ids (the proxy's
    /// tower layer).
    pub(crate) async fn take_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        let outcome = self.timed_store().take_slot(cap, key, id).await?;
        let what = match outcome {
            Outcome::Decided(decision) if decision.is_allowed() => Slots::Taken,
            _ => Slots::Refused,
        };
        self.inner.metrics.record_slot(cap.name(), what);
        Ok(outcome)
    }

    /// Gives slot `id` of `cap` for `key` back on the engine's store,
    /// counted in `/metrics`.
    pub(crate) async fn free_slot(
        &self,
        cap: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        let freed = self.timed_store().free_slot(cap, key, id).await;
        match &freed {
            Ok(()) => self.inner.metrics.record_slot(cap.name(), Slots::Released),
            Err(error) if error.reservation() == Some(&ReservationError::Unknown) => {
                self.inner.metrics.record_slot(cap.name(), Slots::Unknown);
            }
            Err(_) => {}
        }
        freed
    }
}
