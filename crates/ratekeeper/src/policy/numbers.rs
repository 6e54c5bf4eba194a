//! A policy's numbers as data, so that a store can keep, with each state,
//! the policy that made it (see [`Policy::carry`]).

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{FixedWindow, Gcra, Policy, PolicyError, SlidingLog, SlidingWindow, TokenBucket};

/// What [`Policy`] serializes as: its kind and the numbers its constructor
/// takes, periods in nanoseconds.
#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
enum Numbers {
    TokenBucket {
        rate: u64,
        period_ns: u64,
        burst: u64,
    },
    Gcra {
        limit: u64,
        period_ns: u64,
        burst: u64,
    },
    FixedWindow {
        limit: u64,
        window_ns: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        from_first_hit: bool,
    },
    SlidingLog {
        limit: u64,
        window_ns: u64,
    },
    SlidingWindow {
        limit: u64,
        window_ns: u64,
    },
}

fn nanos(d: Duration) -> u64 {
    // Every policy's periods are at most MAX_PERIOD (2^62 ns).
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl From<&Policy> for Numbers {
    fn from(policy: &Policy) -> Numbers {
        use super::Algorithm;
        match policy {
            Policy::TokenBucket(p) => Numbers::TokenBucket {
                rate: p.rate(),
                period_ns: nanos(p.period()),
                burst: p.burst(),
            },
            Policy::Gcra(p) => Numbers::Gcra {
                limit: p.limit(),
                period_ns: nanos(p.period()),
                burst: p.burst(),
            },
            Policy::FixedWindow(p) => Numbers::FixedWindow {
                limit: p.limit(),
                window_ns: nanos(p.window()),
                from_first_hit: p.is_from_first_hit(),
            },
            Policy::SlidingLog(p) => Numbers::SlidingLog {
                limit: p.limit(),
                window_ns: nanos(p.window()),
            },
            Policy::SlidingWindow(p) => Numbers::SlidingWindow {
                limit: p.limit(),
                window_ns: nanos(p.window()),
            },
        }
    }
}

impl TryFrom<Numbers> for Policy {
    type Error = PolicyError;

    fn try_from(numbers: Numbers) -> Result<Policy, PolicyError> {
        let d = Duration::from_nanos;
        Ok(match numbers {
            Numbers::TokenBucket {
                rate,
                period_ns,
                burst,
            } => TokenBucket::new(rate, d(period_ns), burst)?.into(),
            Numbers::Gcra {
                limit,
                period_ns,
                burst,
            } => Gcra::new(limit, d(period_ns), burst)?.into(),
            Numbers::FixedWindow {
                limit,
                window_ns,
                from_first_hit: false,
            } => FixedWindow::new(limit, d(window_ns))?.into(),
            Numbers::FixedWindow {
                limit,
                window_ns,
                from_first_hit: true,
            } => FixedWindow::from_first_hit(limit, d(window_ns))?.into(),
            Numbers::SlidingLog { limit, window_ns } => {
                SlidingLog::new(limit, d(window_ns))?.into()
            }
            Numbers::SlidingWindow { limit, window_ns } => {
                SlidingWindow::new(limit, d(window_ns))?.into()
            }
        })
    }
}

/// A policy serializes as its kind and numbers, periods in nanoseconds;
/// reading one checks it as its constructor does.
///
/// ```
/// use ratekeeper::{Gcra, Policy};
///
/// let policy = Policy::from(Gcra::per_second(5)?);
/// let json = serde_json::to_string(&policy)?;
/// assert_eq!(json, r#"{"kind":"gcra","limit":5,"period_ns":1000000000,"burst":5}"#);
/// assert_eq!(serde_json::from_str::<Policy>(&json)?, policy);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Numbers::from(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Policy, D::Error> {
        let numbers = Numbers::deserialize(deserializer)?;
        Policy::try_from(numbers).map_err(serde::de::Error::custom)
    }
}
