//! envoyproxy/ratelimit's files in a request's plan: the limit each
//! descriptor reaches in its domain's tree, the limits another's
//! `replaces` drops, and the counter's key.

use std::time::Duration;

use super::key_text::escape_into;
use super::shown::{RateUnit, Shown};
use ratekeeper_formats::envoy::{CounterKey, Domain, Entry, FileRateLimit, Matched, Unit};

/// The files' limit of each descriptor (none where `skip` says so: an
/// honoured override replaces the files there), then without those whose
/// name another's `replaces` names (an unlimited one's `replaces` counts
/// too), as envoyproxy/ratelimit does across one request's descriptors.
pub(super) fn matched<'a, E: Entry + 'a>(
    tree: &'a Domain,
    descriptors: impl Iterator<Item = (&'a [E], bool)>,
) -> Vec<Option<Matched<'a>>> {
    let mut matched: Vec<Option<Matched<'a>>> = descriptors
        .map(|(entries, skip)| match skip {
            true => None,
            false => tree.get_limit(entries),
        })
        .collect();
    drop_replaced(&mut matched);
    matched
}

fn drop_replaced(matched: &mut [Option<Matched<'_>>]) {
    // Most configurations replace nothing: no work for them.
    if !matched
        .iter()
        .flatten()
        .any(|found| !found.limit.replaces.is_empty())
    {
        return;
    }
    let replaced = |name: &str| {
        matched
            .iter()
            .flatten()
            .any(|found| found.limit.replaces.iter().any(|r| r == name))
    };
    let drop: Vec<bool> = matched
        .iter()
        .map(|found| {
            found
                .as_ref()
                .and_then(|found| found.limit.name.as_deref())
                .is_some_and(replaced)
        })
        .collect();
    for (found, drop) in matched.iter_mut().zip(drop) {
        if drop {
            *found = None;
        }
    }
}

/// A limit of the files as Envoy's `current_limit` shows it: its name
/// (empty when it has none) and rate, as envoyproxy/ratelimit shows it.
pub(super) fn shown(limit: &FileRateLimit) -> Shown {
    let unit = match limit.unit {
        None => RateUnit::Unknown,
        Some(Unit::Second) => RateUnit::Second,
        Some(Unit::Minute) => RateUnit::Minute,
        Some(Unit::Hour) => RateUnit::Hour,
        Some(Unit::Day) => RateUnit::Day,
        Some(Unit::Week) => RateUnit::Week,
        Some(Unit::Month) => RateUnit::Month,
        Some(Unit::Year) => RateUnit::Year,
    };
    Shown {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit,
    }
}

/// The window of a file's limit (none without a unit).
pub(super) fn window(limit: &FileRateLimit) -> Duration {
    limit.unit.map_or(Duration::ZERO, |unit| unit.duration())
}

/// The key of a counter of the files within its limit: every entry,
/// escaped as override keys are (a `share_threshold` wildcard's entries
/// carry its pattern, so they share it).
pub(super) fn counter_key(key: &CounterKey<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.parts.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (name, value) in &key.parts {
        out.push(b'|');
        escape_into(&mut out, name);
        out.push(b'=');
        escape_into(&mut out, value);
    }
    out
}
