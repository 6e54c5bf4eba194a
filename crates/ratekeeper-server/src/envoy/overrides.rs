//! The limits Envoy's descriptor overrides ask for: one per distinct rate,
//! made on first use and kept, at most `requests.max_override_rates` of them.
//!
//! Each distinct rate is a limit of its own, so a table of its own in the
//! in-memory store (its slots allocated up front, its own sweeper). The
//! rates come from the request, so without a cap every request could name a
//! new one and the service would grow without bound. The cap counts rates,
//! not requests: the same override asked again reuses its limit (and spares
//! the request building one).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use super::proto::RateLimitUnit;
use crate::config::CapError;
use crate::engine::ActiveLimit;

/// The override limits made so far, by `(requests_per_unit, unit)`.
#[derive(Debug, Default)]
pub(crate) struct OverrideLimits {
    made: Mutex<HashMap<(u32, i32), Arc<ActiveLimit>>>,
}

impl OverrideLimits {
    /// The limit for `requests` per `unit`: the one made before, or one
    /// `make` makes now if fewer than `max` rates are kept; otherwise
    /// [`CapError::OverrideRates`] for the descriptor at `index`.
    pub(crate) fn get_or_make<E: From<CapError>>(
        &self,
        index: usize,
        (requests, unit): (u32, RateLimitUnit),
        max: usize,
        make: impl FnOnce() -> Result<Arc<ActiveLimit>, E>,
    ) -> Result<Arc<ActiveLimit>, E> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let rate = (requests, unit as i32);
        if let Some(limit) = made.get(&rate) {
            return Ok(Arc::clone(limit));
        }
        if made.len() >= max {
            return Err(E::from(CapError::OverrideRates {
                index,
                requests,
                unit: unit.as_str_name().to_ascii_lowercase(),
                max,
            }));
        }
        let limit = make()?;
        made.insert(rate, Arc::clone(&limit));
        Ok(limit)
    }

    /// How many rates are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.made
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
