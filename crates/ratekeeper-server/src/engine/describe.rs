//! A limit described for people: `GET /v1/limits` and the dashboard.

use std::collections::BTreeMap;

use ratekeeper::policy::Algorithm;
use serde::Serialize;

use crate::config::{KeyPart, LimitConfig, Match, ValueMatch};

/// One entry of `GET /v1/limits`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LimitDescription {
    /// The name.
    pub name: String,
    /// The policy: `token_bucket`, `gcra`, `fixed_window`, `sliding_log`
    /// or `sliding_window`.
    pub policy: String,
    /// The rate as configured (`100/minute`).
    pub rate: String,
    /// Units granted per window.
    pub quota: u64,
    /// The window in milliseconds.
    pub window_ms: u64,
    /// The key's parts.
    pub key: Vec<String>,
    /// Whether it only reports.
    pub shadow: bool,
    /// Whether an Envoy descriptor override may replace it.
    pub allow_overrides: bool,
    /// Whether refunds are accepted.
    pub allow_refunds: bool,
    /// Whether reports (units charged after the fact) are accepted.
    pub allow_reports: bool,
    /// Whether refused hits of descriptors are counted too.
    pub count_refused: bool,
    /// How long the proxy may hold a request it refuses (`max_wait`), in
    /// milliseconds; `None` when it refuses at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_ms: Option<u64>,
    /// How long a key it refuses is blocked: the first block, the
    /// longest, and how long an offence counts, in milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub penalty: Option<PenaltyDescription>,
    /// Its plans, if it has some: where a request names its plan, and each
    /// plan as configured; `rate` is the default plan's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans: Option<PlansDescription>,
    /// Which requests it applies to.
    #[serde(rename = "match")]
    pub matcher: MatchDescription,
}

/// A limit's penalty, as `GET /v1/limits` shows it.
#[derive(Clone, Copy, Debug, Serialize)]
#[non_exhaustive]
pub struct PenaltyDescription {
    /// `block_for`.
    pub block_for_ms: u64,
    /// `block_max`.
    pub block_max_ms: u64,
    /// `block_forget`.
    pub block_forget_ms: u64,
}

/// A limit's plans, as `GET /v1/limits` shows them.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct PlansDescription {
    /// `plan_from`: `header:NAME` or `descriptor:KEY`.
    pub from: String,
    /// `plan_from_peers`, for a header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_peers: Option<Vec<String>>,
    /// Each plan: a rate, `unlimited` or `deny`.
    pub plans: BTreeMap<String, String>,
}

/// A duration in whole milliseconds, saturating.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A limit's `match`, as `GET /v1/limits` shows it.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct MatchDescription {
    /// Envoy's domain.
    pub domain: Option<String>,
    /// Descriptor entries: `{"key": K}` for any value, `{"key": K,
    /// "value": V}` (each `*` any run of characters), with
    /// `"except": [V...]` and `"share_threshold": true` when set.
    pub descriptors: Vec<BTreeMap<String, serde_json::Value>>,
    /// HTTP methods; empty for any.
    pub methods: Vec<String>,
    /// The start of the path.
    pub path_prefix: Option<String>,
}

impl LimitDescription {
    /// The description of `config`.
    pub fn new(config: &LimitConfig) -> LimitDescription {
        let policy = config.limit.policy();
        LimitDescription {
            name: config.limit.name().to_owned(),
            policy: policy.kind().to_string(),
            rate: config.rate_text(),
            quota: if config.ban { 0 } else { policy.quota() },
            window_ms: u64::try_from(policy.window().as_millis()).unwrap_or(u64::MAX),
            key: config.key.iter().map(part_name).collect(),
            shadow: config.shadow,
            allow_overrides: config.allow_overrides,
            allow_refunds: config.allow_refunds,
            allow_reports: config.allow_reports,
            count_refused: config.count_refused,
            max_wait_ms: config.max_wait.map(millis),
            penalty: config.penalty.map(|penalty| PenaltyDescription {
                block_for_ms: millis(penalty.block_for),
                block_max_ms: millis(penalty.block_max),
                block_forget_ms: millis(penalty.block_forget),
            }),
            plans: config.plans.as_ref().map(|plans| PlansDescription {
                from: plans.from.to_string(),
                from_peers: match &plans.from {
                    crate::config::PlanFrom::Header { peers, .. } => {
                        Some(peers.iter().map(ToString::to_string).collect())
                    }
                    crate::config::PlanFrom::Descriptor(_) | crate::config::PlanFrom::Table(_) => {
                        None
                    }
                },
                plans: plans.written.iter().cloned().collect(),
            }),
            matcher: MatchDescription::new(&config.matcher),
        }
    }
}

impl MatchDescription {
    /// The description of `matcher`: a limit's, or a cap's.
    pub fn new(matcher: &Match) -> MatchDescription {
        let descriptors = matcher
            .descriptors
            .iter()
            .map(|entry| {
                let mut map = BTreeMap::from([("key".to_owned(), entry.key.clone().into())]);
                if entry.value != ValueMatch::Any {
                    map.insert("value".to_owned(), entry.value.to_string().into());
                }
                if !entry.except.is_empty() {
                    let except = entry.except.iter().map(|v| v.to_string().into()).collect();
                    map.insert("except".to_owned(), serde_json::Value::Array(except));
                }
                if entry.share_threshold {
                    map.insert("share_threshold".to_owned(), true.into());
                }
                map
            })
            .collect();
        MatchDescription {
            domain: matcher.domain.clone(),
            descriptors,
            methods: matcher
                .methods
                .iter()
                .map(|m| m.as_str().to_owned())
                .collect(),
            path_prefix: matcher.path_prefix.clone(),
        }
    }
}

/// A key part as the configuration file writes it.
fn part_name(part: &KeyPart) -> String {
    match part {
        KeyPart::ClientIp(..) => "client_ip".to_owned(),
        other => other.to_string(),
    }
}
