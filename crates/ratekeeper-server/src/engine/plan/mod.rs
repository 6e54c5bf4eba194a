//! A request of descriptors (Envoy's `ShouldRateLimit`, the JSON API's
//! `descriptors`), or an HTTP request ([`http`]), planned once: which limits apply to each descriptor,
//! under which key and cost, and what the request's answer is.
//!
//! A door converts its wire format into a [`DescriptorRequest`] (its
//! descriptors read in place through [`Descriptor`]) and asks
//! [`Engine::decide_descriptors`]; the [`DescriptorVerdict`] says what each
//! limit decided and each descriptor's status, which the door converts
//! back. The plan brings together, per descriptor:
//!
//! - a descriptor's limit override (Envoy's `limit`), in a domain the
//!   service knows, unless a limit it matches forbids overrides
//!   ([`overrides`]);
//! - the limit envoyproxy/ratelimit's files give it (lookup, `replaces`,
//!   unlimited, zero, shadow and quota modes: [`files`]);
//! - the native `[[limits]]` that match it ([`crate::engine::matching`]),
//!   keyed by its entries;
//! - Limitador's limits of the domain ([`limitador`]);
//! - for a door that takes slots, the caps on requests in flight it
//!   matches, and the slots it gives back by their tokens ([`in_flight`]).
//!
//! Slots named for release and refunds (`is_negative_hits`) are given
//! back first; then the caps take their slots, all or none; the rest is
//! decided all or nothing, or descriptor by descriptor as `[envoy]
//! counting` says; a descriptor refused outright (a limit of zero, or a
//! full cap) makes the others only report, and a refused request gives
//! its slots back.

mod files;
mod http;
mod in_flight;
mod key_text;
mod limitador;
mod overrides;
mod shown;
mod status;

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::store::in_flight::Slot;
use ratekeeper::store::{AnsweredBy, StoreError};
use ratekeeper::{Decision, RetryAfter};

pub(crate) use http::HttpRequest;
pub use in_flight::{slot_tokens, DescriptorSlot, SLOT_ENTRY, SLOT_HEADER, SLOT_SEPARATOR};
pub(crate) use overrides::OverrideLimits;
pub use shown::{ban_unit, shown_rate, RateUnit, Shown};
#[cfg(test)]
pub(crate) use status::work;
pub use status::DescriptorAnswer;

use super::explain::describe_descriptors;
use super::matching::{self, DescriptorSource};
use super::{
    compose_key, ActiveLimit, DecisionDoor, Engine, KeySource, LimitCheck, LimitResult, LimitSet,
    OrUnknown, SlotCheck, Verdict,
};
use crate::config::{CapError, Counting, KeyPart};
use ratekeeper_formats::envoy::Entry;

/// One descriptor of a request, read in place from the door's own type.
pub trait Descriptor {
    /// Its entries' type.
    type Entry: Entry;

    /// The entries, in order.
    fn entries(&self) -> &[Self::Entry];

    /// Its own cost, when it has one (Envoy's descriptor `hits_addend`);
    /// otherwise the request's.
    fn hits(&self) -> Option<u64> {
        None
    }

    /// Whether its hits are given back (Envoy's `is_negative_hits`).
    fn is_refund(&self) -> bool {
        false
    }

    /// The rate it asks for instead of the configured limits (Envoy's
    /// descriptor `limit`).
    fn rate_override(&self) -> Option<RateOverride> {
        None
    }
}

/// A rate a descriptor asks for: `requests_per_unit` per `unit`, Envoy's
/// number of a [`RateUnit`] (a number Envoy does not define is refused
/// when the request is planned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateOverride {
    /// Requests per unit (0 refuses every hit).
    pub requests_per_unit: u32,
    /// The unit, as Envoy numbers it.
    pub unit: i32,
}

/// How a door's requests are counted and answered (`[envoy]` for the gRPC
/// door; all or nothing, as configured, for the JSON API).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorRules {
    /// All or nothing, or each descriptor on its own.
    pub counting: Counting,
    /// Every limit of envoyproxy/ratelimit's files in quota mode.
    pub quota_mode: bool,
    /// Nothing refuses: statuses say what the limits decided, and the
    /// request goes on.
    pub shadow_mode: bool,
}

/// What a key part a descriptor cannot give becomes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingPart {
    /// `unknown`, shared by every such request: limited together, never
    /// let through unlimited (Envoy's door: Envoy cannot be asked again).
    #[default]
    Unknown,
    /// An error naming the limit and the part (the JSON API, whose caller
    /// can fix its request).
    Refused,
}

/// A request of descriptors, as a door received it.
#[derive(Clone, Copy, Debug)]
pub struct DescriptorRequest<'a, D> {
    /// The domain (Envoy's), or a Limitador namespace.
    pub domain: &'a str,
    /// The descriptors.
    pub descriptors: &'a [D],
    /// What each descriptor costs unless it says otherwise.
    pub hits: u64,
    /// The door asking, for the count of requests no limit applied to.
    pub door: DecisionDoor,
    /// How the door counts and answers.
    pub rules: DoorRules,
    /// What a key part the descriptor cannot give becomes.
    pub missing: MissingPart,
    /// Whether the door takes slots of the caps on requests in flight a
    /// descriptor matches, and gives back those its [`SLOT_ENTRY`]
    /// entries name (the gRPC door, the JSON API's `/v1/acquire`);
    /// otherwise caps are not looked at.
    pub in_flight: bool,
}

/// Why a request of descriptors could not be planned or decided.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The request has no domain.
    #[error("the rate limit domain must not be empty")]
    EmptyDomain,
    /// The request has no descriptors.
    #[error("the rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor's limit override cannot be used.
    #[error("descriptors[{index}].limit: {reason}")]
    InvalidOverride {
        /// The descriptor's position in the request.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A descriptor gives hits back to a limit that accepts no refunds
    /// (`allow_refunds = false`).
    #[error(
        "descriptors[{index}]: limit {limit} accepts no refunds (allow_refunds = false), so \
         is_negative_hits is refused"
    )]
    RefundForbidden {
        /// The descriptor's position in the request.
        index: usize,
        /// The limit.
        limit: String,
    },
    /// A limit's key needs a part the descriptor does not give (with
    /// [`MissingPart::Refused`]).
    #[error("limit {limit:?} needs the key part {part:?}")]
    MissingPart {
        /// The limit.
        limit: String,
        /// The part, as written in the configuration.
        part: String,
    },
    /// A limit the request names does not exist.
    #[error("no limit is named {0:?}")]
    UnknownLimit(String),
    /// The request holds more than `[requests]` allows.
    #[error("{0}")]
    OverCap(#[from] CapError),
    /// The store failed, and the failure policy refuses.
    #[error("the rate-limit store failed: {0}")]
    Store(#[from] StoreError),
}

/// One check of a request, and what it belongs to.
#[derive(Clone, Debug)]
pub struct Planned {
    /// The request descriptor it comes from.
    pub descriptor: usize,
    /// Whether its hits are given back (`is_negative_hits`).
    pub refund: bool,
    /// The limit as Envoy's `current_limit` shows it.
    pub shown: Shown,
    /// A limit of envoyproxy/ratelimit's files in quota mode: decided as a
    /// shadow limit is, and over its limit only refusing the request when
    /// every quota of the request is.
    pub quota: bool,
}

/// What envoyproxy/ratelimit's files (or Limitador's, or an override) say
/// of a descriptor that no limit counts.
#[derive(Clone, Debug)]
pub enum Uncounted {
    /// `unlimited`: allowed, with the largest remaining count.
    Unlimited,
    /// Zero requests per unit: over the limit, unless in shadow or quota
    /// mode.
    Zero {
        /// The limit as shown.
        shown: Shown,
        /// Its window.
        window: Duration,
        /// In shadow mode: shown, never refusing.
        shadow: bool,
        /// In quota mode.
        quota: bool,
    },
}

/// The checks of a request of descriptors: those that take, those that
/// give back, and what the descriptors no limit counts say.
#[derive(Debug, Default)]
pub struct DescriptorPlan {
    takes: Vec<LimitCheck>,
    take_plans: Vec<Planned>,
    refunds: Vec<LimitCheck>,
    refund_plans: Vec<Planned>,
    /// Per descriptor.
    uncounted: Vec<Option<Uncounted>>,
    /// Whether a limit of zero refuses the request whatever the store says.
    blocked: bool,
    /// The slots of caps on requests in flight to take.
    slots: Vec<in_flight::PlannedSlot>,
    /// The slots to give back, named by the request.
    releases: Vec<Slot>,
}

impl DescriptorPlan {
    fn take(&mut self, check: LimitCheck, plan: Planned) {
        self.takes.push(check);
        self.take_plans.push(plan);
    }

    fn push(&mut self, check: LimitCheck, plan: Planned) {
        if plan.refund {
            self.refunds.push(check);
            self.refund_plans.push(plan);
        } else {
            self.take(check, plan);
        }
    }

    /// Whether nothing applies to the request.
    pub fn is_empty(&self) -> bool {
        self.takes.is_empty()
            && self.refunds.is_empty()
            && self.uncounted.iter().all(Option::is_none)
            && self.slots.is_empty()
            && self.releases.is_empty()
    }

    /// The checks that take units, in order.
    pub fn takes(&self) -> &[LimitCheck] {
        &self.takes
    }

    /// The checks that take units, in order, owned.
    pub(crate) fn into_takes(self) -> Vec<LimitCheck> {
        self.takes
    }
}

/// What the engine decided for a request of descriptors.
#[derive(Debug)]
pub struct DescriptorVerdict {
    /// The checks that took (or were read, when a limit of zero refused the
    /// request), in order.
    pub taken: Verdict,
    /// The checks that gave back, as read after the refund.
    pub refunded: Vec<LimitResult>,
    /// Each result's plan: those of `taken`, then those of `refunded`.
    pub plans: Vec<Planned>,
    /// Each result's decision, in the same order.
    pub decisions: Vec<Decision>,
    /// Each descriptor's status, in the request's order.
    pub statuses: Vec<DescriptorAnswer>,
    /// Whether the request is over its limit (never in shadow mode).
    pub over: bool,
    /// What each cap on requests in flight answered, by descriptor.
    pub caps: Vec<DescriptorSlot>,
    /// The slots the request holds, to give back when it ends (none when
    /// it is over its limit): their tokens are what the door answers.
    pub slots: Vec<Slot>,
}

impl DescriptorVerdict {
    /// Every result with its plan and decision: those that took, then
    /// those that gave back.
    pub fn results(&self) -> impl Iterator<Item = (&LimitResult, &Planned, &Decision)> {
        self.taken
            .results
            .iter()
            .chain(&self.refunded)
            .zip(&self.plans)
            .zip(&self.decisions)
            .map(|((result, plan), decision)| (result, plan, decision))
    }

    /// When to try again: the longest wait among the limits and caps that
    /// refused.
    pub fn retry_after(&self) -> RetryAfter {
        let caps = self
            .caps
            .iter()
            .filter(|cap| cap.result.refused())
            .map(|cap| cap.result.decision().retry_after());
        caps.fold(self.taken.retry_after(), |longest, wait| {
            match (longest, wait) {
                (RetryAfter::After(current), RetryAfter::After(wait)) if wait > current => {
                    RetryAfter::After(wait)
                }
                (RetryAfter::After(_), RetryAfter::Never) => RetryAfter::Never,
                _ => longest,
            }
        })
    }

    /// Who answered: the store, or the failure policy while it failed.
    pub fn answered_by(&self) -> AnsweredBy {
        self.taken
            .results
            .iter()
            .chain(&self.refunded)
            .fold(AnsweredBy::Store, |by, result| by.or(result.answered_by()))
    }
}

impl Engine {
    /// Plans `request`: the checks each descriptor makes (see the
    /// [module](self)). A request no limit applies to is counted as
    /// unmatched. Refused before any work when over a cap of
    /// `[requests]`; the work is linear in the request's size.
    pub(crate) fn plan_descriptors<D: Descriptor>(
        &self,
        limits: &LimitSet,
        request: &DescriptorRequest<'_, D>,
    ) -> Result<DescriptorPlan, PlanError> {
        let DescriptorRequest {
            domain,
            descriptors,
            ..
        } = *request;
        if domain.is_empty() {
            return Err(PlanError::EmptyDomain);
        }
        if descriptors.is_empty() {
            return Err(PlanError::NoDescriptors);
        }
        // Before any work: a request over a cap costs no more than one at it.
        let caps = self.request_caps();
        caps.check_descriptors(descriptors.iter().map(|descriptor| {
            descriptor
                .entries()
                .iter()
                .map(|entry| (entry.key(), entry.value()))
        }))?;
        caps.value(domain, || "domain".to_owned())?;

        let envoy = limits.envoy();
        let tree = envoy.and_then(|envoy| envoy.domain(domain));
        let knows_domain = tree.is_some() || matching::knows_domain(limits, domain);
        // Envoy's service: an override replaces the configured limits, in
        // a domain it knows, unless one of them forbids it.
        let honoured: Vec<Option<RateOverride>> = descriptors
            .iter()
            .map(|descriptor| match descriptor.rate_override() {
                Some(asked) if knows_domain => self
                    .overrides_allowed(limits, domain, descriptor.entries())
                    .then_some(asked),
                _ => None,
            })
            .collect();
        let matched = match tree {
            Some(tree) => files::matched(
                tree,
                descriptors
                    .iter()
                    .zip(&honoured)
                    .map(|(descriptor, honoured)| (descriptor.entries(), honoured.is_some())),
            ),
            None => Vec::new(),
        };

        let mut plan = DescriptorPlan {
            uncounted: vec![None; descriptors.len()],
            ..DescriptorPlan::default()
        };
        for (index, descriptor) in descriptors.iter().enumerate() {
            let hits = descriptor.hits().unwrap_or(request.hits);
            let refund = descriptor.is_refund();
            let entries = descriptor.entries();
            if request.in_flight {
                // Slots named for release: matched by no limit.
                if let Some(named) = entries.iter().find(|entry| entry.key() == SLOT_ENTRY) {
                    plan.releases.extend(in_flight::named_slots(named.value()));
                    continue;
                }
                // A slot is a request in flight: a descriptor that only
                // reports (no hits) or gives back takes none.
                if hits > 0 && !refund {
                    for cap in limits.in_flight_for_descriptor(domain, entries) {
                        let key = cap.descriptor_key(entries, request.missing)?;
                        plan.slots.push(in_flight::PlannedSlot {
                            descriptor: index,
                            check: SlotCheck {
                                cap: Arc::clone(cap),
                                key,
                            },
                        });
                    }
                }
            }
            let planned = |shown, quota| Planned {
                descriptor: index,
                refund,
                shown,
                quota,
            };
            if let Some(asked) = honoured[index] {
                let made = overrides::override_limit(
                    index,
                    asked,
                    self.overrides(),
                    caps.max_override_rates,
                )?;
                match made {
                    overrides::Override::Limit(limit, shown) => {
                        let key = overrides::override_key(domain, descriptor.entries());
                        plan.push(LimitCheck::new(limit, key, hits), planned(shown, false));
                    }
                    overrides::Override::Zero(shown, window) => {
                        plan.blocked |= hits > 0 && !refund;
                        plan.uncounted[index] = Some(Uncounted::Zero {
                            shown,
                            window,
                            shadow: false,
                            quota: false,
                        });
                    }
                }
                continue;
            }
            if let (Some(envoy), Some(found)) = (envoy, matched.get(index).and_then(Option::as_ref))
            {
                let limit = found.limit;
                let quota = limit.quota_mode || request.rules.quota_mode;
                match envoy.limit(limit) {
                    Some(active) => {
                        let key = files::counter_key(&found.counter_key);
                        let check = LimitCheck::new(Arc::clone(active), key, hits);
                        plan.push(check, planned(files::shown(limit), quota));
                    }
                    None if limit.unlimited => plan.uncounted[index] = Some(Uncounted::Unlimited),
                    None => {
                        plan.blocked |= hits > 0 && !refund && !limit.shadow_mode && !quota;
                        plan.uncounted[index] = Some(Uncounted::Zero {
                            shown: files::shown(limit),
                            window: files::window(limit),
                            shadow: limit.shadow_mode,
                            quota,
                        });
                    }
                }
            }
            for limit in matching::applicable(limits, domain, entries) {
                if refund && !limit.config().allow_refunds {
                    return Err(PlanError::RefundForbidden {
                        index,
                        limit: limit.name().to_owned(),
                    });
                }
                // The key's plan's numbers; an unlimited plan counts nothing.
                let Some(chosen) = self.plan_limit(limit, &DescriptorSource(entries)) else {
                    plan.uncounted[index].get_or_insert(Uncounted::Unlimited);
                    continue;
                };
                let parts = matching::key_parts(limit.config());
                let key = planned_key(limit, &parts, DescriptorSource(entries), request.missing)?;
                let shown = configured(&chosen);
                plan.push(LimitCheck::new(chosen, key, hits), planned(shown, false));
            }
        }
        limitador::plan(limits, domain, descriptors, request.hits, &mut plan);

        if plan.is_empty() {
            self.record_unmatched(request.door, limits, domain, || {
                describe_descriptors(domain, descriptors.iter().map(Descriptor::entries))
            });
        }
        Ok(plan)
    }

    /// Plans `request` and decides it: refunds first (they never depend on
    /// the rest), then the checks that take, as `request.rules` counts;
    /// a limit of zero makes the others only report. Says what each limit
    /// decided and each descriptor's status.
    pub(crate) async fn decide_descriptors<D: Descriptor>(
        &self,
        request: &DescriptorRequest<'_, D>,
    ) -> Result<DescriptorVerdict, PlanError> {
        let limits = self.limits();
        let plan = self.plan_descriptors(&limits, request)?;
        let DescriptorPlan {
            takes,
            take_plans,
            refunds,
            refund_plans,
            uncounted,
            blocked,
            slots,
            releases,
        } = plan;
        let rules = request.rules;
        if !releases.is_empty() {
            self.release_named(&releases).await?;
        }
        if !refunds.is_empty() {
            self.refund(&refunds).await?;
        }
        // Global shadow mode counts each limit that allows, as enforcing
        // would, whatever the others say: the request goes on either way.
        let counting = match rules.shadow_mode {
            true => Counting::EachDescriptor,
            false => rules.counting,
        };
        let (caps, slots) = self.take_planned_slots(slots, rules.shadow_mode).await?;
        let capped = caps.iter().any(|cap| cap.result.refused());
        // A full cap refuses the request as a limit of zero does: all or
        // nothing, the rate limits only report.
        let blocked = blocked || (capped && counting == Counting::AllOrNothing);
        let decided = self
            .decide_takes(
                takes,
                refunds,
                blocked && !rules.shadow_mode,
                counting,
                rules,
            )
            .await;
        let (taken, refunded) = match decided {
            Ok(decided) => decided,
            Err(error) => {
                let _ = self.release(&slots).await;
                return Err(error.into());
            }
        };
        let mut plans = take_plans;
        plans.extend(refund_plans);
        let decisions = taken
            .results
            .iter()
            .chain(&refunded)
            .map(LimitResult::decision)
            .collect();
        let mut verdict = DescriptorVerdict {
            taken,
            refunded,
            plans,
            decisions,
            statuses: Vec::new(),
            over: false,
            caps,
            slots: Vec::new(),
        };
        let (mut statuses, mut over) = status::statuses(&verdict, uncounted, rules.shadow_mode);
        for cap in &verdict.caps {
            if let Some(status) = statuses.get_mut(cap.descriptor) {
                in_flight::add_to_status(status, &cap.result);
            }
        }
        over |= capped;
        verdict.statuses = statuses;
        verdict.over = over;
        if over && rules.shadow_mode {
            verdict.over = false;
            self.decision_metrics().record_global_shadow();
        }
        // A refused request does not run: its slots go back now.
        match verdict.over {
            true => {
                let _ = self.release(&slots).await;
            }
            false => verdict.slots = slots,
        }
        Ok(verdict)
    }

    /// The takes decided as `counting` says (only read when `blocked`),
    /// then the refunds read after their refund.
    async fn decide_takes(
        &self,
        takes: Vec<LimitCheck>,
        refunds: Vec<LimitCheck>,
        blocked: bool,
        counting: Counting,
        rules: DoorRules,
    ) -> Result<(Verdict, Vec<LimitResult>), StoreError> {
        let taken = self
            .take_or_report(takes, blocked, counting, rules.shadow_mode)
            .await?;
        let refunded = match refunds.is_empty() {
            true => Vec::new(),
            false => self.peek(refunds).await?.results,
        };
        Ok((taken, refunded))
    }

    /// Decides a request's takes: the hits of limits that count refused
    /// hits (`count_refused`) first, each charged by a report whatever it
    /// says; then the others as `counting` says, or only read when the
    /// request is refused already (`blocked` by a limit of zero, or a
    /// report that overdrew, unless in global shadow mode). The results
    /// keep the order of `takes`.
    async fn take_or_report(
        &self,
        takes: Vec<LimitCheck>,
        blocked: bool,
        counting: Counting,
        shadow_mode: bool,
    ) -> Result<Verdict, StoreError> {
        let reports = |check: &LimitCheck| check.limit.config().count_refused && check.cost > 0;
        if !takes.iter().any(reports) {
            // A zero limit refuses the request: the others only report (in
            // global shadow mode, where nothing refuses, they count).
            return match blocked {
                true => self.peek(takes).await,
                false => self.check_counting(takes, counting).await,
            };
        }
        let (reported_at, checked_at): (Vec<usize>, Vec<usize>) =
            (0..takes.len()).partition(|&i| reports(&takes[i]));
        let mut slots: Vec<Option<LimitCheck>> = takes.into_iter().map(Some).collect();
        let mut pick = |at: &[usize]| -> Vec<LimitCheck> {
            at.iter().filter_map(|&i| slots[i].take()).collect()
        };
        let (to_report, to_check) = (pick(&reported_at), pick(&checked_at));
        let reported = self.report(to_report).await?;
        let overdrawn = !shadow_mode && reported.results.iter().any(LimitResult::refused);
        let checked = match blocked || overdrawn {
            true => self.peek(to_check).await?,
            false => self.check_counting(to_check, counting).await?,
        };
        let mut results: Vec<Option<LimitResult>> = (0..slots.len()).map(|_| None).collect();
        for (at, result) in reported_at.iter().zip(reported.results) {
            results[*at] = Some(result);
        }
        for (at, result) in checked_at.iter().zip(checked.results) {
            results[*at] = Some(result);
        }
        Ok(Verdict {
            results: results.into_iter().flatten().collect(),
        })
    }

    /// Whether a descriptor's override may replace the limits it matches:
    /// not when one of them says `allow_overrides = false`. Each such limit
    /// counts the refusal, and logs its first with the fix.
    fn overrides_allowed<E: Entry>(&self, limits: &LimitSet, domain: &str, entries: &[E]) -> bool {
        let mut allowed = true;
        for limit in matching::applicable(limits, domain, entries) {
            if limit.config().allow_overrides {
                continue;
            }
            allowed = false;
            if self
                .decision_metrics()
                .record_override_refused(limit.name())
            {
                tracing::warn!(
                    limit = limit.name(),
                    "limit {name} has allow_overrides = false: a descriptor's limit override \
                     was ignored and {name} decided. If your Envoy sets overrides on purpose \
                     (a rate limit action's `limit` from metadata), set allow_overrides = true \
                     on {name}; otherwise a caller is trying to raise its own limit. Said once \
                     per limit; ratekeeper_overrides_refused_total counts every one",
                    name = limit.name(),
                );
            }
        }
        allowed
    }
}

/// A configured limit as Envoy's `current_limit` shows it.
fn configured(limit: &ActiveLimit) -> Shown {
    let config = limit.config();
    let rate = &config.rate;
    let (requests_per_unit, unit) = match config.ban {
        true => (0, ban_unit(rate.period())),
        false => shown_rate(rate.amount(), rate.period()),
    };
    Shown {
        name: limit.name().to_owned(),
        requests_per_unit,
        unit,
    }
}

/// `limit`'s key of `parts` from `source`; a part the source lacks is
/// refused, or is the shared `unknown`, as `missing_part` says.
fn planned_key<S: KeySource>(
    limit: &ActiveLimit,
    parts: &[KeyPart],
    source: S,
    missing_part: MissingPart,
) -> Result<Vec<u8>, PlanError> {
    let key = match missing_part {
        // OrUnknown gives every part, so this cannot fail.
        MissingPart::Unknown => compose_key(parts, &OrUnknown(source)),
        MissingPart::Refused => compose_key(parts, &source),
    };
    key.map_err(|part| missing(limit, part))
}

fn missing(limit: &ActiveLimit, part: &KeyPart) -> PlanError {
    PlanError::MissingPart {
        limit: limit.name().to_owned(),
        part: part.to_string(),
    }
}
