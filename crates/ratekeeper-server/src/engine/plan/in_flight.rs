//! Caps on requests in flight in a request of descriptors: the slots a
//! descriptor takes, the slots a descriptor gives back by their tokens,
//! and a cap's part in a descriptor's status.
//!
//! Envoy cannot say "give back the slot this request took": its
//! stream-done call is sent for refused requests too, so a release by
//! key would free another request's slot. Instead, an allowed request's
//! answer carries its slots' tokens in a request header
//! ([`SLOT_HEADER`]), which Envoy adds to the request; a stream-done rate
//! limit with a `request_headers` action on that header sends them back
//! as a descriptor entry [`SLOT_ENTRY`], and each named slot is given
//! back once. A refused request never gets the header, so its stream-done
//! call names no slot.

use ratekeeper::store::in_flight::Slot;
use ratekeeper::store::StoreError;

use super::{DescriptorAnswer, RateUnit, Shown};
use crate::engine::{Engine, SlotCheck, SlotResult};

/// The request header an allowed answer of the gRPC door asks Envoy to
/// add (`request_headers_to_add`), holding the tokens of the slots the
/// request took, separated by [`SLOT_SEPARATOR`]: what the stream-done
/// call sends back to give them back.
///
/// A client could send this header itself: Envoy then sends the client's
/// value first, and the request's real slot waits for its lease. Strip it
/// at the edge (the quick start's `header_mutation` filter does).
pub const SLOT_HEADER: &str = "x-ratekeeper-slot";

/// The descriptor entry key that gives slots back: a descriptor holding
/// an entry `ratekeeper_slot` with the value of [`SLOT_HEADER`] gives
/// those slots back, and is matched by no limit.
pub const SLOT_ENTRY: &str = "ratekeeper_slot";

/// What separates the tokens of several slots in [`SLOT_HEADER`] (and in
/// the JSON API's `slot`): a token never holds it.
pub const SLOT_SEPARATOR: &str = ".";

/// One cap's slot a descriptor asks for.
#[derive(Clone, Debug)]
pub(crate) struct PlannedSlot {
    /// The request descriptor it comes from.
    pub(crate) descriptor: usize,
    /// The cap and the descriptor's key under it.
    pub(crate) check: SlotCheck,
}

/// A cap's answer for one descriptor.
#[derive(Clone, Debug)]
pub struct DescriptorSlot {
    /// The request descriptor it belongs to.
    pub descriptor: usize,
    /// What the cap answered.
    pub result: SlotResult,
}

/// The slots named by the value of a [`SLOT_ENTRY`] entry; a token that
/// names no slot (forged, or cut short) is left out, as a slot released
/// already would be: the answer to a stream-done call changes nothing.
pub(crate) fn named_slots(value: &str) -> impl Iterator<Item = Slot> + '_ {
    value
        .split(SLOT_SEPARATOR)
        .filter_map(|token| Slot::from_token(token).ok())
}

/// The tokens of `slots`, as [`SLOT_HEADER`] holds them.
pub fn slot_tokens(slots: &[Slot]) -> String {
    let tokens: Vec<String> = slots.iter().map(Slot::to_token).collect();
    tokens.join(SLOT_SEPARATOR)
}

/// Puts a cap's answer into its descriptor's `status`: a refusal is the
/// status (over, no slot left); a slot taken is shown when it is closer
/// to its cap than the rate limits shown.
pub(super) fn add_to_status(status: &mut DescriptorAnswer, slot: &SlotResult) {
    let decision = slot.decision();
    let remaining = u32::try_from(decision.remaining()).unwrap_or(u32::MAX);
    let refused = slot.refused();
    let show = refused || status.limit.is_none() || (!status.over && remaining < status.remaining);
    if !show {
        return;
    }
    let cap = slot.check.cap.cap();
    status.over |= refused;
    status.limit = Some(Shown {
        name: cap.name().to_owned(),
        requests_per_unit: u32::try_from(cap.max()).unwrap_or(u32::MAX),
        // A cap is not a rate: Envoy's unit for "none".
        unit: RateUnit::Unknown,
    });
    status.remaining = remaining;
    // No slot frees at a known time: a full cap's wait is its suggestion.
    status.until_reset = match refused {
        true => decision.retry_after().duration(),
        false => Some(decision.reset()),
    };
}

impl Engine {
    /// Takes the planned slots: all or none, or (in global shadow mode,
    /// where nothing refuses) each cap on its own. Each answer is kept
    /// with its descriptor; the slots taken are returned with them.
    pub(super) async fn take_planned_slots(
        &self,
        planned: Vec<PlannedSlot>,
        each: bool,
    ) -> Result<(Vec<DescriptorSlot>, Vec<Slot>), StoreError> {
        if planned.is_empty() {
            return Ok((Vec::new(), Vec::new()));
        }
        let descriptors: Vec<usize> = planned.iter().map(|slot| slot.descriptor).collect();
        let checks = planned.into_iter().map(|slot| slot.check).collect();
        let acquired = match each {
            true => self.acquire_each(checks).await?,
            false => self.acquire(checks).await?,
        };
        let answers = descriptors
            .into_iter()
            .zip(acquired.results)
            .map(|(descriptor, result)| DescriptorSlot { descriptor, result })
            .collect();
        Ok((answers, acquired.slots))
    }

    /// Gives back the slots the request's [`SLOT_ENTRY`] entries name:
    /// each one once; one not taken any more (released already, past its
    /// lease, its cap gone) is counted in `/metrics` and otherwise
    /// ignored. A store that fails is the error.
    pub(super) async fn release_named(&self, slots: &[Slot]) -> Result<(), StoreError> {
        let limits = self.limits();
        for slot in slots {
            let Some(cap) = limits.in_flight(slot.limit()) else {
                continue;
            };
            match self.free_slot(cap.cap(), slot.key(), slot.id()).await {
                Err(error) if error.reservation().is_none() => return Err(error),
                _ => {}
            }
        }
        Ok(())
    }
}
