//! A `[[limits]]` entry: its policy, key, matches and shadow flag.

use http::{HeaderName, Method};
use ratekeeper::{Limit, Rate};
use ratekeeper_formats::Glob;
use ratekeeper_tower::client::ClientIp;
use ratekeeper_tower::{Key, PlanSource, Rule};

use super::Prefixes;

/// One named limit.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitConfig {
    /// The name and policy.
    pub limit: Limit,
    /// The rate the policy was built from; for a [`ban`](Self::ban), one
    /// per window, which only gives the window.
    pub rate: Rate,
    /// The limit refuses every request (`rate = "0/minute"`): what
    /// envoyproxy/ratelimit's `requests_per_unit: 0` says. No store is
    /// asked; a request it refuses takes nothing from the other limits
    /// (whatever the counting), unless its cost is 0 (a check only).
    pub ban: bool,
    /// The parts of the key, in order; never empty.
    pub key: Vec<KeyPart>,
    /// Decide and report, but let every request through.
    pub shadow: bool,
    /// What a new key gets while the store's table is full.
    pub on_saturated: OnSaturated,
    /// Whether an Envoy descriptor's `limit` override may replace this
    /// limit (`allow_overrides`, default `true`, as Envoy's service does).
    pub allow_overrides: bool,
    /// Whether callers may give units back (`/v1/refund`, Envoy's
    /// `is_negative_hits`; `allow_refunds`, default `true`).
    pub allow_refunds: bool,
    /// Whether callers may charge units after the fact, past the limit
    /// (`/v1/report`, Limitador's `/report`; `allow_reports`, default
    /// `true`).
    pub allow_reports: bool,
    /// Whether the hits of a request of descriptors (Envoy's gRPC door,
    /// the JSON API's `descriptors`) are counted even when refused: each
    /// is a report, charged past the limit if need be, as
    /// envoyproxy/ratelimit counts every hit it is sent (`count_refused`,
    /// default `false`: a limit counts what it lets through).
    pub count_refused: bool,
    /// For the proxy: charge what each response cost, once known
    /// (`after_response`), rather than one unit before the request.
    pub after_response: Option<AfterResponse>,
    /// For the proxy: hold a request this limit refuses for up to this
    /// long, when its units will be due by then, rather than refuse it
    /// (`max_wait`; a token bucket or GCRA on HTTP requests only).
    pub max_wait: Option<std::time::Duration>,
    /// A key it refuses is blocked for a while (`block_for`, `block_max`,
    /// `block_forget`; a token bucket or GCRA).
    pub penalty: Option<super::Penalty>,
    /// The limit's numbers per plan of the key, and where a request names
    /// its plan (`plan_from`, `[limits.plans]`); `limit` is then the
    /// default plan's.
    pub plans: Option<std::sync::Arc<super::PlanConfig>>,
    /// Which requests the limit applies to.
    pub matcher: Match,
}

impl LimitConfig {
    /// The limit as the tower layer's [`Rule`]: its key read from an HTTP
    /// request, its shadow flag, and the methods and path it applies to.
    /// The proxy limits requests with these rules, and `check` warns about
    /// them as a layer would.
    ///
    /// A `descriptor:KEY` part is never in an HTTP request: it is the
    /// shared `unknown` there, as on the service's other HTTP doors.
    pub fn rule(&self) -> Rule {
        let mut keys: Vec<Key> = self.key.iter().map(KeyPart::http_key).collect();
        let key = match keys.len() {
            1 => keys.remove(0),
            _ => Key::compose(keys),
        };
        let plans = self.plans.as_ref().and_then(|plans| match &plans.from {
            super::PlanFrom::Header { name, peers } => Some((
                plans.plans.clone(),
                PlanSource::header(name.clone(), peers.iter().copied()),
            )),
            super::PlanFrom::Table(table) => {
                let table = std::sync::Arc::clone(table);
                Some((
                    plans.plans.clone(),
                    PlanSource::by_key(move |key| table.plan_of(key).cloned()),
                ))
            }
            // No HTTP request has descriptors: the limit's own numbers.
            super::PlanFrom::Descriptor(_) => None,
        });
        let rule = match plans {
            Some((plans, source)) => Rule::with_plans(plans, key, source),
            None => Rule::new(self.limit.clone(), key),
        };
        let mut rule = rule
            .shadow(self.shadow)
            .methods(self.matcher.methods.iter().cloned());
        if let Some(prefix) = &self.matcher.path_prefix {
            rule = rule.path_prefix(prefix.clone());
        }
        if let Some(wait) = self.max_wait {
            rule = rule.max_wait(wait);
        }
        rule
    }

    /// The rate as the file writes it: `0/minute` for a ban.
    pub(crate) fn rate_text(&self) -> String {
        let text = self.rate.to_string();
        match (self.ban, text.split_once('/')) {
            (true, Some((_, period))) => format!("0/{period}"),
            _ => text,
        }
    }

    /// Whether the limit applies to HTTP requests at all: its `match`
    /// names no Envoy domain or descriptors.
    pub(crate) fn applies_to_http(&self) -> bool {
        self.matcher.reach() == super::Reach::Http
    }
}

impl KeyPart {
    /// This part of a key, read from an HTTP request by the tower layer:
    /// the same text as the service's own doors make of it.
    pub(super) fn http_key(&self) -> Key {
        let network =
            |strategy: ClientIp, prefixes: &Prefixes| match *prefixes == Prefixes::default() {
                true => Key::client_ip(strategy),
                false => Key::client_network(strategy, prefixes.ipv4, prefixes.ipv6),
            };
        match self {
            KeyPart::Peer(prefixes) => network(ClientIp::Peer, prefixes),
            KeyPart::ClientIp(strategy, prefixes) => network(strategy.clone(), prefixes),
            KeyPart::Route => Key::route(),
            KeyPart::Global => Key::global(),
            KeyPart::Header(name) => Key::header(name.clone()),
            KeyPart::Descriptor(_) | KeyPart::Entry(_) => Key::from_fn(|_| None),
        }
    }
}

/// What a limit answers a request whose key is new while the in-memory
/// table (the store, or the fallback) already holds `max_keys` keys: the
/// key cannot be counted, so the limit cannot decide it.
///
/// Every door tells such an answer apart: the JSON API's `saturated: true`,
/// and an `X-RateKeeper-Saturated` header naming the limits (HTTP, the
/// nginx endpoint, the proxy, and gRPC's `response_headers_to_add`); and
/// `/metrics` counts them in `ratekeeper_saturated_total{limit}`. Either
/// way it lasts only until known keys are fresh again: a full table sweeps
/// for a new key on demand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnSaturated {
    /// Refuse the request (the default), as over the limit, with a
    /// `Retry-After` of when room can return. An attacker who fills the
    /// table with made-up keys then cannot switch the limit off for new
    /// keys, and it shuts newcomers out only until the flood's keys are
    /// idle.
    #[default]
    Deny,
    /// Let the request through uncounted: a newcomer is never refused for
    /// saturation, but while the table is full every new key is
    /// unlimited, which someone minting keys can arrange.
    Allow,
}

/// One part of a limit's key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPart {
    /// The socket peer's address (`peer`), keyed by its network
    /// (`ipv4_prefix`, `ipv6_prefix`).
    Peer(Prefixes),
    /// The client's address (`client_ip`): how it is found (from which
    /// header, behind which proxies), and the network it is keyed by.
    ClientIp(ClientIp, Prefixes),
    /// The request's route or path (`route`).
    Route,
    /// One key for every request (`global`).
    Global,
    /// A request header's value (`header:NAME`).
    Header(HeaderName),
    /// An Envoy descriptor entry's value (`descriptor:KEY`).
    Descriptor(String),
    /// The value of the descriptor's entry at this position, from 0. Never
    /// written in a file: the matching adds it for an entry matched by a
    /// wildcard (the engine's `matching::key_parts`), by position
    /// because `descriptor:KEY` takes the first entry with that key, and a
    /// descriptor may have a key twice.
    Entry(usize),
}

impl std::fmt::Display for KeyPart {
    /// The part as written in the file (`client_ip`, `header:x-api-key`);
    /// `ratekeeper check` explains the trust of `client_ip` on a line of
    /// its own.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyPart::Peer(_) => f.write_str("peer"),
            KeyPart::ClientIp(..) => f.write_str("client_ip"),
            KeyPart::Route => f.write_str("route"),
            KeyPart::Global => f.write_str("global"),
            KeyPart::Header(name) => write!(f, "header:{name}"),
            KeyPart::Descriptor(key) => write!(f, "descriptor:{key}"),
            KeyPart::Entry(index) => write!(f, "descriptor entry #{index}"),
        }
    }
}

/// Which requests a limit applies to; every condition given must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Match {
    /// Envoy's domain.
    pub domain: Option<String>,
    /// Envoy descriptor entries, in order.
    pub descriptors: Vec<DescriptorMatch>,
    /// HTTP methods (upper case); empty means any.
    pub methods: Vec<Method>,
    /// The start of the request's path.
    pub path_prefix: Option<String>,
}

impl Match {
    /// Whether nothing is required: the limit applies to every request.
    pub fn is_any(&self) -> bool {
        *self == Match::default()
    }
}

/// One descriptor entry a limit requires.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DescriptorMatch {
    /// The entry's key.
    pub key: String,
    /// What its value must be.
    pub value: ValueMatch,
    /// Values the entry does not match even when [`value`](Self::value)
    /// does (`except = ["v", "w*"]`): how a limit steps aside for more
    /// specific ones, as envoyproxy/ratelimit's exact values win over its
    /// wildcards and its wildcards over a bare key.
    pub except: Vec<ValueMatch>,
    /// Every value the entry matches shares one counter
    /// (`share_threshold = true`, envoyproxy/ratelimit's field of that
    /// name): the matching adds no part to the key for it. A part the
    /// limit's `key` names itself (`descriptor:KEY`, `peer`) still holds
    /// the value: the key is what the file says.
    pub share_threshold: bool,
}

impl DescriptorMatch {
    /// Whether an entry's `value` is matched: by [`value`](Self::value)
    /// and by none of [`except`](Self::except).
    pub fn matches(&self, value: &str) -> bool {
        self.value.matches(value) && !self.except.iter().any(|except| except.matches(value))
    }

    /// Whether the entry matches more than one value, so that each value is
    /// counted on its own unless [`share_threshold`](Self::share_threshold).
    pub(crate) fn is_wildcard(&self) -> bool {
        !matches!(self.value, ValueMatch::Exact(_))
    }
}

/// What a descriptor entry's value must be.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueMatch {
    /// Anything (no `value` given, or `"*"`): each value counts
    /// separately.
    Any,
    /// Exactly this.
    Exact(String),
    /// A pattern whose `*`s each stand for any run of characters (a
    /// `value` with a `*`), as envoyproxy/ratelimit's wildcards.
    Glob(Glob),
}

impl ValueMatch {
    /// The match a configuration's `value` text means: `*` alone any
    /// value, a text with a `*` a [`Glob`], any other text itself.
    pub fn parse(text: &str) -> ValueMatch {
        if !text.contains('*') {
            ValueMatch::Exact(text.to_owned())
        } else if text.chars().all(|c| c == '*') {
            ValueMatch::Any
        } else {
            ValueMatch::Glob(Glob::new(text))
        }
    }

    /// Whether `value` matches.
    pub fn matches(&self, value: &str) -> bool {
        match self {
            ValueMatch::Any => true,
            ValueMatch::Exact(exact) => value == exact,
            ValueMatch::Glob(glob) => glob.matches(value),
        }
    }
}

impl std::fmt::Display for ValueMatch {
    /// The value as the file writes it (`*` for any value).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueMatch::Any => f.write_str("*"),
            ValueMatch::Exact(value) => f.write_str(value),
            ValueMatch::Glob(glob) => f.write_str(glob.pattern()),
        }
    }
}

/// `after_response`: what the proxy charges a limit, read from each
/// response ([`ratekeeper_tower::response_cost`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AfterResponse {
    /// Where the cost is read.
    pub cost: CostSource,
    /// The units held before each request, as a reservation (1 by
    /// default).
    pub estimate: u64,
    /// How long the reservation stays open (60 s by default, at most an
    /// hour).
    pub ttl: std::time::Duration,
}

/// `after_response.cost`: where a response says what it cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CostSource {
    /// `"header:NAME"`: a response header holding a whole number.
    Header(http::HeaderName),
    /// `"trailer:NAME"`: a trailer, read when the body ends.
    Trailer(http::HeaderName),
    /// `"failures"`: one unit per response with a status of 400 and above.
    Failures,
    /// `"successes"`: one unit per response with a status below 400.
    Successes,
}

impl CostSource {
    /// The tower layer's [`Cost`](ratekeeper_tower::Cost) of it.
    pub fn to_cost(&self) -> ratekeeper_tower::Cost {
        match self {
            CostSource::Header(name) => ratekeeper_tower::Cost::header(name.clone()),
            CostSource::Trailer(name) => ratekeeper_tower::Cost::trailer(name.clone()),
            CostSource::Failures => ratekeeper_tower::Cost::failures(),
            CostSource::Successes => ratekeeper_tower::Cost::successes(),
        }
    }
}
