//! Which limits apply to a request, and why the others do not: what
//! `ratekeeper explain` prints and the admin port's `POST /explain`
//! answers.
//!
//! The answer comes from the rules the doors decide by
//! ([`matching::mismatch`], [`matching::http_mismatch`], the
//! envoyproxy/ratelimit files' tree and Limitador's expressions), not from
//! a description of them, so it cannot drift from what a request meets.
//!
//! ```
//! use ratekeeper_server::engine::explain::{explain, Probe};
//! use ratekeeper_server::engine::LimitSet;
//! use ratekeeper_server::Config;
//!
//! let config = Config::from_toml_str(
//!     "[[limits]]\nname = \"per-ip\"\nrate = \"10/s\"\nkey = [\"peer\"]\n\
//!      [limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"remote_address\" }]\n",
//!     "edge.toml",
//! )?;
//! let limits = LimitSet::new(&config.limits);
//! let probe = Probe::descriptors("Edge", vec![vec![("remote_address", "10.0.0.1")]]);
//! let explanation = explain(&limits, &probe);
//! assert!(explanation.is_unmatched());
//! assert!(explanation.to_string().contains("case included"));
//! # Ok::<(), ratekeeper_server::ConfigError>(())
//! ```

mod reason;
mod request;
mod text;

use std::net::IpAddr;

use http::{HeaderMap, Method};
use ratekeeper_formats::envoy::Entry;
use ratekeeper_formats::limitador::Descriptors;
use serde::Serialize;

pub use reason::Reason;
pub use request::{DescriptorInput, ExplainError, ExplainRequest};
pub use text::describe_descriptors;

use super::key_plans::Chosen;
use super::matching::{self, HttpMismatch, Mismatch};
use super::{compose_key, ActiveLimit, HttpSource, KeySource, LimitSet, OrUnknown};
use crate::config::{Match, Reach, Unreachable};
use ratekeeper::plan::DEFAULT_PLAN;

/// A request to explain: an HTTP request, as the JSON API (by method and
/// path), nginx's `auth_request` and the proxy see one; or Envoy
/// descriptors in a domain, as the gRPC door and the JSON API's
/// `descriptors` see them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Probe {
    /// An HTTP request.
    Http {
        /// Its method.
        method: Method,
        /// Its path, without the query.
        path: String,
        /// Its headers (for keys made of headers or forwarded addresses).
        headers: HeaderMap,
        /// The socket peer, when known.
        peer: Option<IpAddr>,
    },
    /// Envoy descriptors.
    Descriptors {
        /// The domain.
        domain: String,
        /// Each descriptor's entries, in order.
        descriptors: Vec<Vec<ProbeEntry>>,
    },
}

impl Probe {
    /// An HTTP request without headers or a known peer.
    pub fn http(method: Method, path: impl Into<String>) -> Probe {
        Probe::Http {
            method,
            path: path.into(),
            headers: HeaderMap::new(),
            peer: None,
        }
    }

    /// Descriptors in `domain`, each given as its `(key, value)` entries.
    pub fn descriptors<K, V>(domain: impl Into<String>, descriptors: Vec<Vec<(K, V)>>) -> Probe
    where
        K: Into<String>,
        V: Into<String>,
    {
        Probe::Descriptors {
            domain: domain.into(),
            descriptors: descriptors
                .into_iter()
                .map(|entries| {
                    entries
                        .into_iter()
                        .map(|(key, value)| ProbeEntry {
                            key: key.into(),
                            value: value.into(),
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

/// One descriptor entry of a [`Probe`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ProbeEntry {
    /// The entry's key.
    pub key: String,
    /// Its value.
    pub value: String,
}

impl Entry for ProbeEntry {
    fn key(&self) -> &str {
        &self.key
    }
    fn value(&self) -> &str {
        &self.value
    }
}

/// Where a limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A `[[limits]]` table of the configuration.
    Config,
    /// envoyproxy/ratelimit's YAML files (`[envoy] config_dir`).
    EnvoyFiles,
    /// The Limitador limits file (`[limitador] config_file`).
    Limitador,
}

/// What one limit makes of the request, or of one of its descriptors.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LimitVerdict {
    /// The limit's name (for envoyproxy/ratelimit's files, the rule the
    /// descriptor reached, as their statistics name it).
    pub limit: String,
    /// Where it comes from.
    pub from: Origin,
    /// The descriptor it was matched against, from 0; none for HTTP
    /// requests and Limitador's limits, which read every descriptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub descriptor: Option<usize>,
    /// Whether it applies.
    pub applies: bool,
    /// The key it would count under, when it applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The plan whose numbers the key is checked against, when it
    /// applies and the limit has plans (`plan_from`): a plan's name, or
    /// `default` with why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Why it does not apply, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
    /// [`reason`](Self::reason) in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl LimitVerdict {
    fn applies(limit: String, from: Origin, descriptor: Option<usize>, key: String) -> Self {
        LimitVerdict {
            limit,
            from,
            descriptor,
            applies: true,
            key: Some(key),
            plan: None,
            reason: None,
            why: None,
        }
    }

    /// With the plan of the request `source` gives, when `limit` has
    /// plans.
    fn on_plan(mut self, limit: &ActiveLimit, source: &dyn KeySource) -> Self {
        let Some(plans) = limit.plan_limits() else {
            return self;
        };
        self.plan = Some(match plans.choose(source) {
            Chosen::Plan(at) => plans.name_at(at),
            Chosen::Default => DEFAULT_PLAN.to_owned(),
            Chosen::Unknown(name) => {
                format!("{DEFAULT_PLAN} (the limit has no plan {name:?})")
            }
            Chosen::Untrusted(peer) => {
                format!("{DEFAULT_PLAN} ({peer} is not in plan_from_peers: its header is ignored)")
            }
        });
        self
    }

    fn skipped(limit: String, from: Origin, descriptor: Option<usize>, reason: Reason) -> Self {
        LimitVerdict {
            limit,
            from,
            descriptor,
            applies: false,
            key: None,
            plan: None,
            why: Some(reason.to_string()),
            reason: Some(reason),
        }
    }
}

/// Which limits apply to a request and why the others do not.
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    /// The request, in words.
    pub request: String,
    /// Every limit in force, against the request or each of its
    /// descriptors: the configuration's in its order, then the files'.
    pub limits: Vec<LimitVerdict>,
    /// What else decides at a door that the request alone does not show.
    pub notes: Vec<String>,
}

impl Explanation {
    /// The verdicts of the limits that apply.
    pub fn applied(&self) -> impl Iterator<Item = &LimitVerdict> {
        self.limits.iter().filter(|verdict| verdict.applies)
    }

    /// Whether no limit applies: the request would be allowed unlimited.
    pub fn is_unmatched(&self) -> bool {
        self.applied().next().is_none()
    }
}

/// Which of `limits` apply to `probe`, and why the others do not.
pub fn explain(limits: &LimitSet, probe: &Probe) -> Explanation {
    match probe {
        Probe::Http {
            method,
            path,
            headers,
            peer,
        } => explain_http(limits, method, path, headers, *peer),
        Probe::Descriptors {
            domain,
            descriptors,
        } => explain_descriptors(limits, domain, descriptors),
    }
}

fn explain_http(
    limits: &LimitSet,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    peer: Option<IpAddr>,
) -> Explanation {
    let source = OrUnknown(HttpSource {
        method,
        path,
        headers,
        peer,
    });
    let verdicts = limits
        .iter()
        .map(|limit| {
            let name = limit.name().to_owned();
            let matcher = &limit.config().matcher;
            match matching::http_mismatch(matcher, Some(method), Some(path)) {
                None => {
                    let key = limit.key(&source).unwrap_or_default();
                    LimitVerdict::applies(name, Origin::Config, None, text::key(&key))
                        .on_plan(limit, &source)
                }
                Some(mismatch) => {
                    let reason = http_reason(matcher, mismatch, method, path);
                    LimitVerdict::skipped(name, Origin::Config, None, reason)
                }
            }
        })
        .collect();
    let mut notes = Vec::new();
    if peer.is_none() {
        notes.push("no peer given: keys made of the client's address show \"unknown\"".to_owned());
    }
    if limits.envoy().is_some() || limits.limitador().config().is_some() {
        notes.push(
            "envoyproxy/ratelimit's and Limitador's limits apply to descriptors only".to_owned(),
        );
    }
    Explanation {
        request: format!("HTTP {method} {path}"),
        limits: verdicts,
        notes,
    }
}

fn http_reason(matcher: &Match, mismatch: HttpMismatch, method: &Method, path: &str) -> Reason {
    match mismatch {
        HttpMismatch::ForDescriptors => match matcher.reach() {
            Reach::Nowhere(Unreachable::HttpAndDescriptors) => Reason::HttpConditions,
            Reach::Nowhere(_) => Reason::Incomplete,
            _ => Reason::ForDescriptors,
        },
        HttpMismatch::Method | HttpMismatch::NoMethod => Reason::Method {
            want: matcher.methods.iter().map(ToString::to_string).collect(),
            got: method.to_string(),
        },
        HttpMismatch::Path | HttpMismatch::NoPath => Reason::Path {
            prefix: matcher.path_prefix.clone().unwrap_or_default(),
            got: path.to_owned(),
        },
    }
}

fn explain_descriptors(
    limits: &LimitSet,
    domain: &str,
    descriptors: &[Vec<ProbeEntry>],
) -> Explanation {
    let mut verdicts = Vec::new();
    for (index, entries) in descriptors.iter().enumerate() {
        let source = OrUnknown(matching::DescriptorSource(entries.as_slice()));
        for limit in limits.iter() {
            let name = limit.name().to_owned();
            let matcher = &limit.config().matcher;
            verdicts.push(match matching::mismatch(matcher, domain, entries) {
                None => {
                    let parts = matching::key_parts(limit.config());
                    let key = compose_key(&parts, &source).unwrap_or_default();
                    LimitVerdict::applies(name, Origin::Config, Some(index), text::key(&key))
                        .on_plan(limit, &source)
                }
                Some(mismatch) => {
                    let reason = descriptor_reason(matcher, mismatch, domain, entries);
                    LimitVerdict::skipped(name, Origin::Config, Some(index), reason)
                }
            });
        }
        verdicts.extend(explain_files(limits, domain, index, entries));
    }
    verdicts.extend(explain_limitador(limits, domain, descriptors));
    let mut notes = Vec::new();
    if descriptors.is_empty() {
        notes.push("no descriptors: the gRPC door refuses such a request".to_owned());
    }
    notes.push(
        "a descriptor's `limit` (Envoy's override) replaces these in a domain the \
         configuration knows, unless the limit sets allow_overrides = false"
            .to_owned(),
    );
    Explanation {
        request: describe_descriptors(domain, descriptors.iter().map(Vec::as_slice)),
        limits: verdicts,
        notes,
    }
}

fn descriptor_reason(
    matcher: &Match,
    mismatch: Mismatch,
    domain: &str,
    entries: &[ProbeEntry],
) -> Reason {
    let want = |index: usize| &matcher.descriptors[index];
    match mismatch {
        Mismatch::ForHttp => Reason::ForHttp,
        Mismatch::Incomplete => Reason::Incomplete,
        Mismatch::HttpConditions => Reason::HttpConditions,
        Mismatch::Domain => Reason::Domain {
            want: matcher.domain.clone().unwrap_or_default(),
            got: domain.to_owned(),
        },
        Mismatch::Length => Reason::Length {
            want: matcher.descriptors.len(),
            got: entries.len(),
        },
        Mismatch::Key(index) => Reason::Key {
            index,
            want: want(index).key.clone(),
            got: entries[index].key.clone(),
        },
        Mismatch::Value(index) => Reason::Value {
            index,
            key: entries[index].key.clone(),
            want: want(index).value.to_string(),
            got: entries[index].value.clone(),
        },
        Mismatch::Except(index, except) => Reason::Except {
            index,
            key: entries[index].key.clone(),
            except: want(index).except[except].to_string(),
            got: entries[index].value.clone(),
        },
    }
}

/// The rule of envoyproxy/ratelimit's files a descriptor reaches, if the
/// files define its domain.
fn explain_files(
    limits: &LimitSet,
    domain: &str,
    index: usize,
    entries: &[ProbeEntry],
) -> Option<LimitVerdict> {
    let envoy = limits.envoy()?;
    let Some(tree) = envoy.domain(domain) else {
        let known: Vec<&str> = envoy
            .files()
            .config()
            .domains()
            .map(|domain| domain.name())
            .collect();
        let near = known
            .iter()
            .find(|known| known.eq_ignore_ascii_case(domain))
            .or(known.first())?;
        return Some(LimitVerdict::skipped(
            format!("{near} (files)"),
            Origin::EnvoyFiles,
            Some(index),
            Reason::Domain {
                want: (*near).to_owned(),
                got: domain.to_owned(),
            },
        ));
    };
    Some(match tree.get_limit(entries) {
        Some(found) => {
            let what = match (found.limit.unlimited, envoy.limit(found.limit)) {
                (true, _) => "unlimited".to_owned(),
                (false, None) => "refuses every request (0 per unit)".to_owned(),
                (false, Some(active)) => active.name().to_owned(),
            };
            LimitVerdict::applies(
                found.stats_key(),
                Origin::EnvoyFiles,
                Some(index),
                format!("{} ({what})", found.counter_key.envoy_cache_key("")),
            )
        }
        None => {
            let rule_for_first = (1..entries.len())
                .rev()
                .find(|&n| tree.get_limit(&entries[..n]).is_some())
                .unwrap_or(0);
            LimitVerdict::skipped(
                format!("{domain} (files)"),
                Origin::EnvoyFiles,
                Some(index),
                Reason::NoRuleInFiles { rule_for_first },
            )
        }
    })
}

/// Limitador's limits of the namespace `domain`: each applies when its
/// conditions hold and its variables are in the descriptors.
fn explain_limitador(
    limits: &LimitSet,
    domain: &str,
    descriptors: &[Vec<ProbeEntry>],
) -> Vec<LimitVerdict> {
    let all = Descriptors::new(
        descriptors
            .iter()
            .map(|entries| entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))),
    );
    limits
        .limitador()
        .limits(domain)
        .enumerate()
        .map(|(index, limit)| {
            let name = limit.name().map_or_else(
                || format!("{domain} #{index} (limitador)"),
                |name| format!("{name} (limitador)"),
            );
            if let Some(condition) = limit.conditions().iter().find(|c| !c.test(&all)) {
                let reason = Reason::Condition {
                    condition: condition.source().to_owned(),
                };
                return LimitVerdict::skipped(name, Origin::Limitador, None, reason);
            }
            if let Some(variable) = limit.variables().iter().find(|v| v.value(&all).is_none()) {
                let reason = Reason::Variable {
                    variable: variable.source().to_owned(),
                };
                return LimitVerdict::skipped(name, Origin::Limitador, None, reason);
            }
            let values: Vec<String> = limit
                .variables()
                .iter()
                .filter_map(|variable| variable.value(&all))
                .collect();
            LimitVerdict::applies(name, Origin::Limitador, None, values.join(", "))
        })
        .collect()
}
