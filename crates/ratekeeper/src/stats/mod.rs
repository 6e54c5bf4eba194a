//! What the limits did: counts, calendar windows and the keys denied most.
//!
//! A [`LimitStats`] records each decision of one limit, at a Unix time
//! passed in, and reports:
//!
//! - the allowed and denied totals;
//! - traffic (all requests, and the denied ones) in the current and the
//!   previous minute, hour, day and week, as calendar windows in UTC: a
//!   minute starts at `:00`, an hour at `HH:00`, a day at `00:00` UTC and a
//!   week on Monday at `00:00` UTC ([`Period`]);
//! - the last 60 minutes, minute by minute, for a chart;
//! - denials per key, dropped when the key is forgotten;
//! - the keys denied most, from a Space-Saving summary of bounded size,
//!   each with a count and an error bound ([`TopKey`]);
//! - when asked ([`StatsConfig::top_charged`]), the keys that took the most
//!   requests, allowed or denied, from a second such summary.
//!
//! [`Stats`] keeps the [`LimitStats`] of many limits by name, and
//! [`snapshot`](LimitStats::snapshot) turns either into serializable values.
//!
//! An allowed request costs two atomic increments; windows roll over
//! lazily, when a request or a reader first sees a new minute, so there is
//! no timer. See [`LimitStats`] for the costs and the memory bounds.
//!
//! The pieces, one per file:
//!
//! - `calendar`: which UTC minute, hour, day and week a time is in;
//! - `counters`: the all-time totals;
//! - `windows`: the live minute's counters, the rollover and the closed
//!   windows;
//! - `denied_keys`: the bounded, reaped per-key table;
//! - `top_k`: the Space-Saving summary;
//! - `snapshot`: the reported values;
//! - `limit` and `registry`: the handles.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::{Clock, Timestamp, clock::ManualClock, stats::Stats};
//!
//! // Sunday 2024-01-07 23:59:30 UTC.
//! let clock = ManualClock::new(Timestamp::from_secs(1_704_671_970));
//! let stats = Stats::new();
//! let api = stats.limit("api");
//!
//! api.record(clock.now(), true, "alice");
//! api.record(clock.now(), false, "mallory");
//! clock.advance(Duration::from_secs(30)); // Monday 00:00:00: a new week
//! api.record(clock.now(), false, "mallory");
//!
//! let windows = api.windows(clock.now());
//! assert_eq!(windows.week.current.requests, 1);
//! assert_eq!(windows.week.previous.requests, 2);
//! assert_eq!(windows.week.previous.denied, 1);
//! assert_eq!(api.denied_for("mallory"), Some(2));
//! assert_eq!(api.top_denied()[0].key, b"mallory");
//!
//! // Serializable, for a stats endpoint.
//! let json = serde_json::to_string(&stats.snapshot(clock.now()))?;
//! assert!(json.contains("\"mallory\""));
//!
//! // Per-key counts go once the key's retention (a minute here) has passed.
//! clock.advance(Duration::from_secs(60));
//! assert_eq!(api.reap(clock.now()), 1);
//! assert_eq!(api.denied_for("mallory"), None);
//! # Ok::<(), serde_json::Error>(())
//! ```

mod calendar;
mod counters;
mod denied_keys;
mod limit;
mod registry;
mod snapshot;
mod top_k;
mod windows;

pub use calendar::Period;
pub use limit::{LimitStats, StatsConfig};
pub use registry::Stats;
pub use snapshot::{
    LimitSnapshot, PeriodTraffic, StatsSnapshot, TopKey, TrafficWindows, WindowTraffic,
};
