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
use std::time::Duration;

use ratekeeper::{FixedWindow, Limit, Rate};

use super::key_text::escape_into;
use super::shown::{RateUnit, Shown};
use super::{PlanError, RateOverride};
use crate::config::{CapError, KeyPart, LimitConfig, Match, OnSaturated};
use crate::engine::ActiveLimit;
use ratekeeper_formats::envoy::Entry;

/// The override limits made so far, by `(requests_per_unit, unit)`.
#[derive(Debug, Default)]
pub(crate) struct OverrideLimits {
    made: Mutex<HashMap<(u32, RateUnit), Arc<ActiveLimit>>>,
}

impl OverrideLimits {
    /// The limit for `requests` per `unit`: the one made before, or one
    /// `make` makes now if fewer than `max` rates are kept; otherwise
    /// [`CapError::OverrideRates`] for the descriptor at `index`.
    pub(crate) fn get_or_make<E: From<CapError>>(
        &self,
        index: usize,
        (requests, unit): (u32, RateUnit),
        max: usize,
        make: impl FnOnce() -> Result<Arc<ActiveLimit>, E>,
    ) -> Result<Arc<ActiveLimit>, E> {
        let mut made = self.made.lock().unwrap_or_else(PoisonError::into_inner);
        let rate = (requests, unit);
        if let Some(limit) = made.get(&rate) {
            return Ok(Arc::clone(limit));
        }
        if made.len() >= max {
            return Err(E::from(CapError::OverrideRates {
                index,
                requests,
                unit: unit.name().to_owned(),
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

/// What a descriptor's override asks for.
pub(super) enum Override {
    /// A limit of its own.
    Limit(Arc<ActiveLimit>, Shown),
    /// Zero requests per unit: every hit is over the limit.
    Zero(Shown, Duration),
}

/// The limit a descriptor's override asks for: a fixed window of
/// `requests_per_unit` per unit, as Envoy's own service counts, named
/// `envoy-override-N-per-UNIT` so that different overrides never share a
/// count. Made once per rate and kept in `made`, at most `max` rates.
pub(super) fn override_limit(
    index: usize,
    asked: RateOverride,
    made: &OverrideLimits,
    max: usize,
) -> Result<Override, PlanError> {
    let invalid = |reason: String| PlanError::InvalidOverride { index, reason };
    let unit = RateUnit::from_number(asked.unit)
        .ok_or_else(|| invalid(format!("unknown unit {}", asked.unit)))?;
    let window = unit
        .duration()
        .ok_or_else(|| invalid("the unit is UNKNOWN".to_owned()))?;
    let requests = asked.requests_per_unit;
    let shown = Shown {
        name: format!("envoy-override-{requests}-per-{}", unit.name()),
        requests_per_unit: requests,
        unit,
    };
    if requests == 0 {
        return Ok(Override::Zero(shown, window));
    }
    let active = made.get_or_make(index, (requests, unit), max, || {
        let rate = Rate::new(u64::from(requests), window).map_err(|e| invalid(e.to_string()))?;
        let policy = FixedWindow::from_rate(&rate).map_err(|e| invalid(e.to_string()))?;
        let limit = Limit::new(shown.name.clone(), policy).map_err(|e| invalid(e.to_string()))?;
        Ok::<_, PlanError>(Arc::new(ActiveLimit::new(LimitConfig {
            limit,
            rate,
            ban: false,
            key: vec![KeyPart::Global],
            shadow: false,
            on_saturated: OnSaturated::default(),
            allow_overrides: true,
            allow_refunds: true,
            allow_reports: true,
            count_refused: false,
            after_response: None,
            max_wait: None,
            penalty: None,
            plans: None,
            matcher: Match::default(),
        })))
    })?;
    Ok(Override::Limit(active, shown))
}

/// The key of an override: the domain and every entry, as Envoy's service
/// keys it, with `|`, `=` and `\` escaped so different descriptors never
/// share a key.
pub(super) fn override_key<E: Entry>(domain: &str, entries: &[E]) -> Vec<u8> {
    let mut key = Vec::with_capacity(domain.len() + 16 * entries.len());
    escape_into(&mut key, domain);
    for entry in entries {
        key.push(b'|');
        escape_into(&mut key, entry.key());
        key.push(b'=');
        escape_into(&mut key, entry.value());
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_keys_never_mix_domains_or_entries() {
        let a = override_key("d", &[("k", "a|b=c")]);
        assert_eq!(a, b"d|k=a\\|b\\=c");
        assert_ne!(a, override_key("d", &[("k", "a"), ("b", "c")]));
        assert_ne!(
            override_key::<(&str, &str)>("d|k=v", &[]),
            override_key("d", &[("k", "v")])
        );
    }

    fn asked(requests_per_unit: u32, unit: i32) -> RateOverride {
        RateOverride {
            requests_per_unit,
            unit,
        }
    }

    #[test]
    fn overrides_are_checked() {
        let made = OverrideLimits::default();
        let check = |at, o| override_limit(at, o, &made, 8);
        assert!(matches!(
            check(2, asked(1, 0)),
            Err(PlanError::InvalidOverride { index: 2, .. })
        ));
        assert!(check(0, asked(1, 99)).is_err());
        let Ok(Override::Limit(limit, shown)) = check(0, asked(100, RateUnit::Month as i32)) else {
            panic!("a valid override");
        };
        assert_eq!(limit.name(), "envoy-override-100-per-month");
        assert_eq!(limit.window(), Duration::from_secs(30 * 86_400));
        assert_eq!(
            (shown.requests_per_unit, shown.unit),
            (100, RateUnit::Month)
        );
        assert!(!limit.is_shadow());
        // Nothing invalid was kept.
        assert_eq!(made.len(), 1);
    }

    #[test]
    fn override_rates_are_made_once_and_capped() {
        let made = OverrideLimits::default();
        let per_minute = |requests| asked(requests, RateUnit::Minute as i32);
        let limit_of = |o: Result<Override, PlanError>| match o {
            Ok(Override::Limit(limit, _)) => limit,
            _ => panic!("a limit"),
        };
        let first = limit_of(override_limit(0, per_minute(5), &made, 3));
        let again = limit_of(override_limit(1, per_minute(5), &made, 3));
        assert!(Arc::ptr_eq(&first, &again), "one limit per rate");
        for requests in [6, 7] {
            limit_of(override_limit(0, per_minute(requests), &made, 3));
        }
        // A fourth rate is refused, naming the cap; the three known still work.
        let refused = override_limit(4, per_minute(8), &made, 3);
        let Err(
            error @ PlanError::OverCap(CapError::OverrideRates {
                index: 4, max: 3, ..
            }),
        ) = refused
        else {
            panic!("the cap refuses a fourth rate");
        };
        assert!(
            error.to_string().contains("requests.max_override_rates"),
            "{error}"
        );
        limit_of(override_limit(0, per_minute(6), &made, 3));
        // Zero overrides are not limits and take no room.
        assert!(matches!(
            override_limit(0, per_minute(0), &made, 3),
            Ok(Override::Zero(..))
        ));
        assert_eq!(made.len(), 3);
    }
}
