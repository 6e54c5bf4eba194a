//! The loaded configuration's public types: [`Unit`], [`FileRateLimit`] and
//! [`Metadata`].

use std::fmt;
use std::time::Duration;

use ratekeeper::policy::PolicyKind;

use crate::yaml::Position;

/// A rate limit's unit, as Envoy's RLS API has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// Seven days.
    Week,
    /// 30 days (envoyproxy/ratelimit's month, not the calendar's).
    Month,
    /// 365 days (envoyproxy/ratelimit's year, not the calendar's).
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit a configuration names: Envoy's enum names in any case
    /// (`second`, `Minute`, `HOUR`). envoyproxy/ratelimit upper-cases the
    /// text with Unicode's rules before looking it up, and so does this.
    pub fn parse(text: &str) -> Option<Unit> {
        let upper = text.to_uppercase();
        Unit::ALL.into_iter().find(|unit| unit.name() == upper)
    }

    /// The name in Envoy's enum (`SECOND`...).
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "SECOND",
            Unit::Minute => "MINUTE",
            Unit::Hour => "HOUR",
            Unit::Day => "DAY",
            Unit::Week => "WEEK",
            Unit::Month => "MONTH",
            Unit::Year => "YEAR",
        }
    }

    /// The unit's length in seconds: the window envoyproxy/ratelimit
    /// aligns to multiples of, counted from the Unix epoch.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// [`Unit::seconds`] as a [`Duration`].
    pub fn duration(self) -> Duration {
        Duration::from_secs(self.seconds())
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The limit of one descriptor: its `rate_limit` block, and the flags
/// envoyproxy/ratelimit keeps with it though they are written beside it
/// (`shadow_mode`, `quota_mode`, `detailed_metric`, `metadata`).
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct FileRateLimit {
    /// The unit; `None` only when [`unlimited`](Self::unlimited).
    pub unit: Option<Unit>,
    /// Requests allowed per unit. `0` refuses every request (in
    /// envoyproxy/ratelimit a hit is over the limit when the count passes
    /// it, and every count passes 0).
    pub requests_per_unit: u32,
    /// Never limited: envoyproxy/ratelimit answers OK with the largest
    /// remaining count, without touching its cache.
    pub unlimited: bool,
    /// The limit's `name`, which other limits' `replaces` refer to; `None`
    /// when empty or absent.
    pub name: Option<String>,
    /// Names of limits this one replaces: in one request, a limit whose
    /// name appears in a matched limit's `replaces` is not applied.
    pub replaces: Vec<String>,
    /// Counted but never refuses (the descriptor's `shadow_mode`).
    pub shadow_mode: bool,
    /// The descriptor's `quota_mode`: over the limit refuses only when
    /// every quota-mode descriptor of the request is over.
    pub quota_mode: bool,
    /// The descriptor's `detailed_metric`: stats per value.
    pub detailed_metric: bool,
    /// ratekeeper's extension: the policy (`policy:` beside `unit`).
    /// [`PolicyKind::FixedWindow`] when absent, which is what
    /// envoyproxy/ratelimit does.
    pub policy: PolicyKind,
    /// The descriptor's `metadata`, returned in the response's dynamic
    /// metadata; `None` when absent or empty.
    pub metadata: Option<Metadata>,
    /// Where the `rate_limit` block is.
    pub at: Position,
    /// The limit's number in its configuration, from 0: see
    /// [`FileRateLimit::id`].
    pub(crate) id: usize,
}

impl FileRateLimit {
    /// The limit's number in its [`EnvoyConfig`](super::EnvoyConfig),
    /// from 0 up to [`EnvoyConfig::limit_count`](super::EnvoyConfig::limit_count)
    /// (in the order of [`Domain::for_each_limit`](super::Domain::for_each_limit),
    /// domains by name): what a caller indexes its own state for each
    /// limit by.
    pub fn id(&self) -> usize {
        self.id
    }
}

/// A descriptor's `metadata`: any YAML, kept to be returned to Envoy as a
/// `google.protobuf.Struct` (where every number is a double).
#[derive(Clone, Debug, PartialEq)]
pub enum Metadata {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// Any other number, as written (a `Struct` holds it as a double).
    Number(String),
    /// A string.
    String(String),
    /// A list.
    List(Vec<Metadata>),
    /// A map, in the file's order, keys as written.
    Map(Vec<(String, Metadata)>),
}
