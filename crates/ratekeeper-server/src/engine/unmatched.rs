//! Requests no limit applied to: allowed, counted nowhere, and until now
//! invisible. Counted per door and domain for `/metrics` and the
//! dashboard, and logged at debug level at most once per
//! [`LOG_EVERY_SECS`] per door, with the request that matched nothing.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use super::LimitSet;

/// How often, at most, each door logs a request that matched no limit.
pub const LOG_EVERY_SECS: u64 = 10;

/// The label of a domain no limit, file or namespace names: the domain
/// itself is in the log line, never in a label, so that clients cannot
/// grow `/metrics` by making up domains.
pub const UNKNOWN_DOMAIN: &str = "(unknown)";

/// The most bytes of a request kept as the door's last unmatched sample.
const MAX_SAMPLE_BYTES: usize = 256;

/// A door that asks the engine for decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionDoor {
    /// Envoy's gRPC API (`ShouldRateLimit`).
    Grpc,
    /// The HTTP JSON API (`POST /v1/decide`).
    HttpApi,
    /// nginx's `auth_request` endpoint.
    AuthRequest,
    /// The reverse proxy.
    Proxy,
}

impl DecisionDoor {
    /// Every door, in a fixed order.
    pub const ALL: [DecisionDoor; 4] = [
        DecisionDoor::Grpc,
        DecisionDoor::HttpApi,
        DecisionDoor::AuthRequest,
        DecisionDoor::Proxy,
    ];

    /// The door's label in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionDoor::Grpc => "grpc",
            DecisionDoor::HttpApi => "http_api",
            DecisionDoor::AuthRequest => "auth_request",
            DecisionDoor::Proxy => "proxy",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The last request a door found no limit for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UnmatchedSample {
    /// When, in seconds since the Unix epoch.
    pub at_unix_secs: u64,
    /// The request, in words (cut at 256 bytes).
    pub request: String,
}

/// What each door's requests that matched no limit were.
#[derive(Debug, Default)]
pub struct UnmatchedRequests {
    /// Per door, per domain label: how many.
    counts: Mutex<HashMap<DecisionDoor, HashMap<Box<str>, u64>>>,
    /// Per door: the second before which it logs nothing more.
    quiet_until: [AtomicU64; 4],
    /// Per door: the last request logged.
    samples: Mutex<HashMap<DecisionDoor, UnmatchedSample>>,
}

impl UnmatchedRequests {
    /// Counts a request of `door` in `domain` (empty for HTTP requests)
    /// that no limit of `limits` applied to; logs it, described by
    /// `describe`, unless the door logged one in the last
    /// [`LOG_EVERY_SECS`] (`now_secs` is the wall clock's).
    pub fn record(
        &self,
        door: DecisionDoor,
        limits: &LimitSet,
        domain: &str,
        now_secs: u64,
        describe: impl FnOnce() -> String,
    ) {
        let label = match domain.is_empty() || limits.knows_domain(domain) {
            true => domain,
            false => UNKNOWN_DOMAIN,
        };
        {
            let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
            let domains = counts.entry(door).or_default();
            match domains.get_mut(label) {
                Some(count) => *count += 1,
                None => {
                    domains.insert(label.into(), 1);
                }
            }
        }
        let quiet = &self.quiet_until[door.index()];
        let until = quiet.load(Ordering::Relaxed);
        if now_secs < until
            || quiet
                .compare_exchange(
                    until,
                    now_secs + LOG_EVERY_SECS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        let mut request = describe();
        if request.len() > MAX_SAMPLE_BYTES {
            let mut cut = MAX_SAMPLE_BYTES;
            while !request.is_char_boundary(cut) {
                cut -= 1;
            }
            request.truncate(cut);
            request.push('…');
        }
        tracing::debug!(
            door = door.as_str(),
            domain,
            %request,
            "no limit applies to this request: it is allowed and counted nowhere \
             (`ratekeeper explain` says why; logged at most once per {LOG_EVERY_SECS} s per door)"
        );
        let sample = UnmatchedSample {
            at_unix_secs: now_secs,
            request,
        };
        self.samples
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(door, sample);
    }

    /// Every count: `(door, domain label, requests)`, by door then label.
    pub fn counts(&self) -> Vec<(DecisionDoor, String, u64)> {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<_> = counts
            .iter()
            .flat_map(|(door, domains)| {
                domains
                    .iter()
                    .map(|(domain, count)| (*door, domain.to_string(), *count))
            })
            .collect();
        all.sort();
        all
    }

    /// The requests that matched nothing at `door`, over every domain.
    pub fn total(&self, door: DecisionDoor) -> u64 {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts
            .get(&door)
            .map_or(0, |domains| domains.values().sum())
    }

    /// The last request each door logged as matching nothing.
    pub fn sample(&self, door: DecisionDoor) -> Option<UnmatchedSample> {
        let samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        samples.get(&door).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn limits() -> LimitSet {
        let config = Config::from_toml_str(
            "[[limits]]\nname = \"edge\"\nrate = \"1/s\"\nkey = [\"global\"]\n\
             [limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"k\" }]\n",
            "t.toml",
        )
        .unwrap();
        LimitSet::new(&config.limits)
    }

    #[test]
    fn known_domains_are_labels_and_made_up_ones_share_one() {
        let (requests, limits) = (UnmatchedRequests::default(), limits());
        for domain in ["edge", "edge", "Edge", "x1", "x2", ""] {
            requests.record(DecisionDoor::Grpc, &limits, domain, 0, String::new);
        }
        assert_eq!(
            requests.counts(),
            [
                (DecisionDoor::Grpc, "".to_owned(), 1),
                (DecisionDoor::Grpc, UNKNOWN_DOMAIN.to_owned(), 3),
                (DecisionDoor::Grpc, "edge".to_owned(), 2),
            ]
        );
        assert_eq!(requests.total(DecisionDoor::Grpc), 6);
        assert_eq!(requests.total(DecisionDoor::Proxy), 0);
    }

    #[test]
    fn each_door_keeps_one_sample_per_quiet_period() {
        let (requests, limits) = (UnmatchedRequests::default(), limits());
        let record = |door, at: u64, text: &str| {
            let text = text.to_owned();
            requests.record(door, &limits, "", at, move || text);
        };
        record(DecisionDoor::Proxy, 100, "first");
        record(DecisionDoor::Proxy, 100 + LOG_EVERY_SECS - 1, "too soon");
        record(DecisionDoor::AuthRequest, 101, "other door");
        assert_eq!(
            requests.sample(DecisionDoor::Proxy).unwrap().request,
            "first"
        );
        record(DecisionDoor::Proxy, 100 + LOG_EVERY_SECS, "later");
        let sample = requests.sample(DecisionDoor::Proxy).unwrap();
        assert_eq!(
            (sample.at_unix_secs, sample.request.as_str()),
            (110, "later")
        );
        assert_eq!(
            requests.sample(DecisionDoor::AuthRequest).unwrap().request,
            "other door"
        );
        assert_eq!(requests.sample(DecisionDoor::Grpc), None);
    }

    #[test]
    fn a_long_request_is_cut_on_a_character_boundary() {
        let (requests, limits) = (UnmatchedRequests::default(), limits());
        let long = "é".repeat(MAX_SAMPLE_BYTES);
        requests.record(DecisionDoor::Grpc, &limits, "", 0, move || long);
        let sample = requests.sample(DecisionDoor::Grpc).unwrap().request;
        assert!(sample.len() <= MAX_SAMPLE_BYTES + '…'.len_utf8());
        assert!(sample.ends_with('…'));
    }
}
