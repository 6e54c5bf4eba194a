//! From the parsed document to a checked [`Config`]: environment overrides,
//! deserialization, then every rule a value must follow, each failure
//! located by its span.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::time::Duration;

use http::{HeaderName, Method};
use ipnet::IpNet;
use ratekeeper::{
    memory::MAX_KEYS,
    policy::PolicyKind,
    store::in_flight::{InFlight, InFlightError},
    store::lease::LeaseSettings,
    store::reservation::MAX_RESERVATION_TTL,
    store::FailureMode,
    Limit, Policy, Rate,
};
use ratekeeper_tower::client::{private_networks, ClientIp};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{ConfigError, Locator};
use super::file::{
    FileAfterResponse, FileConfig, FileDescriptor, FileLimit, FileListen, FileMatch, FileRequests,
    FileStore, FileTrust,
};
use super::tls;
use super::{env, store_tls};
use super::{
    redact_url, AfterResponse, Backend, Config, CostSource, DescriptorMatch, DoorTls,
    InFlightConfig, KeyPart, LimitConfig, ListenConfig, Match, OnSaturated, Penalty, Prefixes,
    RequestCaps, StoreConfig, ValueMatch, DEFAULT_IN_FLIGHT_LEASE, DEFAULT_IPV4_PREFIX,
    DEFAULT_IPV6_PREFIX,
};

/// The default per-call timeout of the Redis stores, in milliseconds.
mod limit;
mod listen;
mod plans;
mod store;

const DEFAULT_TIMEOUT_MS: u64 = 100;
/// The longest per-call timeout accepted, in milliseconds.
const MAX_TIMEOUT_MS: u64 = 60_000;

/// `store.lease_max_chunk`'s default: the most units one take asks for.
pub(crate) const LEASE_MAX_CHUNK: u64 = 10_000;
/// `store.lease_chunk_ms`'s default: how long a chunk should last.
pub(crate) const LEASE_CHUNK_MS: u64 = 100;
/// `store.lease_lifetime_ms`'s default: the longest a lease lives.
pub(crate) const LEASE_LIFETIME_MS: u64 = 1_000;
/// The largest `store.lease_max_chunk`.
const MAX_LEASE_CHUNK: usize = 1_000_000_000;
/// The largest `store.lease_chunk_ms` and `store.lease_lifetime_ms`: an hour.
const MAX_LEASE_MS: usize = 3_600_000;
/// The longest `store.start_wait_ms`: an hour.
const MAX_START_WAIT_MS: u64 = 3_600_000;
/// How deep [`find_path`] looks.
const MAX_PATH_DEPTH: usize = 16;
/// The most scripts a Redis store's batching may run at once.
const MAX_BATCH_IN_FLIGHT: usize = 1_024;

/// The most decisions one batched script may take (the store's own bound).
const MAX_BATCH_CALLS: usize = 1_000;

/// The most proxies `trusted_hops` may count.
const MAX_TRUSTED_HOPS: usize = 16;

/// The word of `trusted_proxies` for [`private_networks`].
const PRIVATE: &str = "private";

/// What an unwritten `requests.max_body_bytes` leaves around one value at
/// `max_value_bytes`: the rest of the request's JSON.
const BODY_ROOM: usize = 4 * 1024;

/// The default key prefix of the Redis stores.
const DEFAULT_PREFIX: &str = "ratekeeper:";

/// Parses `text`, applies the overrides among `vars`, deserializes and
/// validates.
///
/// `base` is the folder of the file `text` was read from: relative paths
/// written in it are read from there (see [`Locator::path`]).
pub(crate) fn load<I, K, V>(
    text: &str,
    source: &str,
    base: Option<&std::path::Path>,
    vars: I,
) -> Result<Config, ConfigError>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    // All of them: `token_env` may name any variable, the overrides are
    // those with the prefix.
    let vars: Vec<(String, String)> = vars
        .into_iter()
        .map(|(name, value)| (name.into(), value.into()))
        .collect();
    let overrides = env::overrides(vars.iter().cloned());
    let mut locator = Locator {
        source,
        text,
        vars: Vec::new(),
        base,
    };
    let parsed = DeTable::parse(text).map_err(|error| ConfigError::Syntax {
        location: locator.locate(error.span()),
        message: error.message().trim().to_owned(),
    })?;
    let span = parsed.span();
    let mut table = parsed.into_inner();
    for (index, (name, value, segments)) in overrides.iter().enumerate() {
        let offset = locator.env_offset(index);
        let path = env::apply(&mut table, name, value, segments, offset..offset + 1)?;
        locator.vars.push((name.clone(), path));
    }
    let snapshot = table.clone();
    let deserializer = toml::de::Deserializer::from(Spanned::new(span, table));
    let file = FileConfig::deserialize(deserializer).map_err(|error| {
        let span = error.span();
        let location = locator.locate(span.clone());
        let message = error.message().trim().to_owned();
        let field = span
            .and_then(|span| {
                find_path(&snapshot, &span, "")
                    .map(|(_, path)| path)
                    .or_else(|| locator.var(&span).map(|(_, path)| path.clone()))
            })
            .unwrap_or_default();
        if field.is_empty() {
            ConfigError::Syntax { location, message }
        } else {
            ConfigError::Invalid {
                location,
                field,
                message,
            }
        }
    })?;
    Checker {
        at: &locator,
        vars: &vars,
    }
    .config(file)
}

/// Whether `outer` holds `inner`.
fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// The deepest field of `table` whose key or value holds `span`, with its
/// depth. Looks no deeper than [`MAX_PATH_DEPTH`]: no field of the
/// configuration is that deep, and the search stays bounded.
fn find_path(table: &DeTable<'_>, span: &Range<usize>, prefix: &str) -> Option<(usize, String)> {
    if prefix.matches(['.', '[']).count() > MAX_PATH_DEPTH {
        return None;
    }
    let mut best: Option<(usize, String)> = None;
    let mut consider = |candidate: Option<(usize, String)>| {
        if let Some(found) = candidate {
            if !matches!(&best, Some((depth, _)) if *depth >= found.0) {
                best = Some(found);
            }
        }
    };
    for (key, value) in table.iter() {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        let depth = path.matches(['.', '[']).count();
        if contains(&key.span(), span) || contains(&value.span(), span) {
            consider(Some((depth, path.clone())));
        }
        match value.get_ref() {
            DeValue::Table(inner) => consider(find_path(inner, span, &path)),
            DeValue::Array(array) => {
                for (index, element) in array.iter().enumerate() {
                    let path = format!("{path}[{index}]");
                    if contains(&element.span(), span) {
                        consider(Some((depth + 1, path.clone())));
                    }
                    if let DeValue::Table(inner) = element.get_ref() {
                        consider(find_path(inner, span, &path));
                    }
                }
            }
            _ => {}
        }
    }
    best
}

/// The span of a field that does not apply where it is written, unless it
/// holds its default value: one file for several deployments may spell the
/// defaults out, and a field at its default is never an error.
fn unless_default(span: Option<Range<usize>>, at_default: bool) -> Option<Range<usize>> {
    span.filter(|_| !at_default)
}

/// Validation, with the locator for errors.
pub(super) struct Checker<'a> {
    at: &'a Locator<'a>,
    /// The environment, for `token_env`.
    vars: &'a [(String, String)],
}

impl Checker<'_> {
    pub(super) fn fail<T>(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Result<T, ConfigError> {
        Err(self.at.invalid(span, field, message))
    }

    /// The path `value` names (see [`Locator::path`]).
    pub(super) fn path(&self, value: &Spanned<String>) -> std::path::PathBuf {
        self.at.path(value.get_ref(), &value.span())
    }

    /// `value` if it is a whole number from 1 to `max`; otherwise an error
    /// at its place, "`name` is N, outside 1 to `max`" followed by `why`.
    fn one_to(
        &self,
        value: &Spanned<u64>,
        field: impl Into<String>,
        name: &str,
        max: u64,
        why: &str,
    ) -> Result<u64, ConfigError> {
        let n = *value.get_ref();
        if (1..=max).contains(&n) {
            return Ok(n);
        }
        self.fail(
            value.span(),
            field,
            format!("{name} is {n}, outside 1 to {max}{why}"),
        )
    }

    fn config(&self, file: FileConfig) -> Result<Config, ConfigError> {
        let store = self.store(file.store)?;
        let listen = self.listen(file.listen)?;
        let requests = self.requests(file.requests)?;
        let runtime = self.runtime(file.runtime)?;
        let (mut envoy, envoy_dir) = self.envoy(file.envoy)?;
        // A file of settings only (`[listen]`, `[limitador]`, `[envoy]`)
        // is a configuration too: where no limit applies anywhere, it
        // loads with a warning (`ConfigWarning::NoLimits`), not an error.
        let limits = file.limits.map(Spanned::into_inner).unwrap_or_default();
        let mut names: HashMap<String, Range<usize>> = HashMap::new();
        let mut checked = Vec::with_capacity(limits.len());
        let mut in_flight = Vec::new();
        for (index, limit) in limits.into_iter().enumerate() {
            let span = limit.span();
            let limit = limit.into_inner();
            let name_span = limit.name.span();
            let name = limit.name.get_ref().clone();
            if let Some(first) = names.get(&name) {
                let first = self.at.locate(Some(first.clone()));
                return self.fail(
                    name_span,
                    format!("limits[{index}].name"),
                    format!("duplicate limit name {name:?}; the first is at {first}"),
                );
            }
            names.insert(name, name_span);
            match self.limit_or_cap(index, span, limit)? {
                limit::Checked::Rate(limit) => checked.push(*limit),
                limit::Checked::InFlight(cap) => in_flight.push(cap),
            }
        }
        // A penalty keeps its offences in the store under NAME~offences:
        // a limit of that name would share its counts.
        for limit in checked.iter().filter(|limit| limit.penalty.is_some()) {
            let offences = format!("{}{}", limit.limit.name(), Penalty::OFFENCES_SUFFIX);
            if let Some(span) = names.get(&offences) {
                return self.fail(
                    span.clone(),
                    "limits",
                    format!("limit name {offences:?} is where limit {:?}'s penalty counts offences; rename it", limit.limit.name()),
                );
            }
        }
        // Last: they read files, and a file's error is best told about a
        // configuration otherwise right.
        self.envoy_files(&mut envoy, envoy_dir, &checked)?;
        let access = super::access::check(self.at, file.access, self.vars)?;
        let mut limitador = self.limitador(file.limitador)?;
        let shadow_mode = super::enforcement::shadow_mode(file.enforcement);
        if shadow_mode {
            // One switch, applied where each door already looks: the
            // limits' own flags and the gRPC door's global mode.
            for limit in &mut checked {
                limit.shadow = true;
            }
            envoy.shadow_mode = true;
            if let Some(limitador) = &mut limitador {
                limitador.shadow = true;
            }
        }
        Ok(Config {
            store,
            listen,
            requests,
            limits: checked,
            in_flight,
            access,
            runtime,
            envoy,
            limitador,
            shadow_mode,
        })
    }

    /// A whole number of `store.{field}` from 1 to `max`, or `default`.
    fn bounded(
        &self,
        value: &Option<Spanned<u64>>,
        field: &str,
        default: usize,
        max: usize,
    ) -> Result<usize, ConfigError> {
        let Some(value) = value else {
            return Ok(default);
        };
        match usize::try_from(*value.get_ref()) {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => self.fail(
                value.span(),
                format!("store.{field}"),
                format!("{field} is {}, outside 1 to {max}", value.get_ref()),
            ),
        }
    }
}
