//! What the stats report: plain, serializable values.
//!
//! Times are whole seconds since the Unix epoch rather than
//! [`Timestamp`](crate::Timestamp)s: nanoseconds since 1970 do not fit the
//! 53 bits a JSON number keeps exactly in JavaScript, and every window
//! starts on a whole minute anyway.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Requests counted in one calendar window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct WindowTraffic {
    /// When the window starts, in seconds since the Unix epoch.
    pub start_unix_secs: u64,
    /// Requests recorded in the window, allowed and denied.
    pub requests: u64,
    /// Of those, the denied ones.
    pub denied: u64,
}

impl WindowTraffic {
    /// Requests allowed in the window.
    pub fn allowed(&self) -> u64 {
        self.requests.saturating_sub(self.denied)
    }
}

/// One period's current window (the one holding the snapshot's time) and
/// the window before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PeriodTraffic {
    /// The window holding the snapshot's time, so far.
    pub current: WindowTraffic,
    /// The whole window before it.
    pub previous: WindowTraffic,
}

/// Traffic in the calendar windows of each [`Period`](crate::stats::Period), in
/// UTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TrafficWindows {
    /// This minute and the one before.
    pub minute: PeriodTraffic,
    /// This hour and the one before.
    pub hour: PeriodTraffic,
    /// Today and yesterday (UTC).
    pub day: PeriodTraffic,
    /// This week and last week, weeks starting on Monday 00:00 UTC.
    pub week: PeriodTraffic,
}

/// A key among those denied (or charged) most, as the Space-Saving summary
/// estimates it.
///
/// Its true number of denials (or requests) is between `count - error` and
/// `count`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TopKey {
    /// The key. Serialized as text, with bytes that are not UTF-8 replaced
    /// by U+FFFD.
    #[serde(with = "key_as_text")]
    pub key: Vec<u8>,
    /// Denials (or requests) counted for the key: at least its true number.
    pub count: u64,
    /// How much `count` may overstate it: the denials of keys it replaced
    /// in the summary.
    pub error: u64,
}

impl TopKey {
    /// The fewest denials the key can have had: `count - error`.
    pub fn guaranteed(&self) -> u64 {
        self.count.saturating_sub(self.error)
    }
}

/// Everything one limit's stats hold, at one time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct LimitSnapshot {
    /// The time of the snapshot, in seconds since the Unix epoch.
    pub at_unix_secs: u64,
    /// Requests allowed since the stats were made.
    pub allowed: u64,
    /// Requests denied since the stats were made.
    pub denied: u64,
    /// Traffic in this and the previous minute, hour, day and week.
    pub windows: TrafficWindows,
    /// Traffic in each of the last 60 minutes, oldest first, the current
    /// minute last.
    pub history: Vec<WindowTraffic>,
    /// The keys denied most, most first.
    pub top_denied: Vec<TopKey>,
    /// The keys that took the most requests, allowed or denied, most
    /// first; empty unless [`top_charged`](crate::stats::StatsConfig::top_charged)
    /// is on (and absent from snapshots serialized before it existed).
    #[serde(default)]
    pub top_charged: Vec<TopKey>,
    /// Keys whose denials are counted one by one now.
    pub keys_tracked: usize,
    /// Denials of keys that found the per-key table full, so were counted
    /// only in the totals, windows and top keys.
    pub untracked_denials: u64,
}

/// Every registered limit's snapshot, by limit name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StatsSnapshot {
    /// Each limit's snapshot, by name.
    pub limits: BTreeMap<String, LimitSnapshot>,
}

/// Keys as (lossy) text in serialized form.
mod key_as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(key: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&String::from_utf8_lossy(key))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        String::deserialize(deserializer).map(String::into_bytes)
    }
}
