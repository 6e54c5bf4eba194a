//! From the parsed document to a checked [`Config`]: environment overrides,
//! deserialization, then every rule a value must follow, each failure
//! located by its span.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use http::{HeaderName, Method};
use ipnet::IpNet;
use ratekeeper::{memory::MAX_KEYS, policy::PolicyKind, store::FailureMode, Limit, Policy, Rate};
use ratekeeper_tower::client::{private_networks, ClientIp};
use serde::Deserialize;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{ConfigError, Locator};
use super::file::{
    FileConfig, FileDescriptor, FileLimit, FileListen, FileMatch, FileRequests, FileStore,
    FileTrust,
};
use super::tls;
use super::{env, store_tls};
use super::{
    redact_url, Backend, Config, DescriptorMatch, DoorTls, KeyPart, LimitConfig, ListenConfig,
    Match, OnSaturated, Prefixes, RequestCaps, StoreConfig, ValueMatch, DEFAULT_IPV4_PREFIX,
    DEFAULT_IPV6_PREFIX,
};

/// The default per-call timeout of the Redis stores, in milliseconds.
const DEFAULT_TIMEOUT_MS: u64 = 100;
/// The longest per-call timeout accepted, in milliseconds.
const MAX_TIMEOUT_MS: u64 = 60_000;
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
pub(crate) fn load<I, K, V>(text: &str, source: &str, vars: I) -> Result<Config, ConfigError>
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
        let limits = match file.limits {
            Some(limits) if !limits.get_ref().is_empty() => limits.into_inner(),
            other => {
                let location = match other {
                    Some(limits) => self.at.locate(Some(limits.span())),
                    None => self.at.locate(None),
                };
                return Err(ConfigError::Invalid {
                    location,
                    field: "limits".to_owned(),
                    message: "no limits are defined; add a [[limits]] table with a name, a rate and a key".to_owned(),
                });
            }
        };
        let mut names: HashMap<String, Range<usize>> = HashMap::new();
        let mut checked = Vec::with_capacity(limits.len());
        for (index, limit) in limits.into_iter().enumerate() {
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
            checked.push(self.limit(index, limit)?);
        }
        // Last: it reads files, and a file's error is best told about a
        // configuration otherwise right.
        let access = super::access::check(self.at, file.access, self.vars)?;
        Ok(Config {
            store,
            listen,
            requests,
            limits: checked,
            access,
            runtime,
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

    fn store(&self, store: Option<Spanned<FileStore>>) -> Result<StoreConfig, ConfigError> {
        let Some(store) = store else {
            return Ok(StoreConfig {
                backend: Backend::Memory,
                max_keys: ratekeeper::memory::DEFAULT_MAX_KEYS,
                on_failure: FailureMode::Closed,
                fallback: false,
                tls: None,
            });
        };
        let table_span = store.span();
        let store = store.into_inner();
        let (kind, kind_span) = match &store.kind {
            Some(kind) => (kind.get_ref().as_str(), kind.span()),
            None => ("memory", table_span),
        };
        let kind = match kind {
            "memory" | "sqlite" | "redis" | "redis-cluster" => kind,
            other => {
                return self.fail(
                    kind_span,
                    "store.kind",
                    format!(
                    "unknown store kind {other:?}; expected memory, sqlite, redis or redis-cluster"
                ),
                )
            }
        };
        let remote = kind != "memory";
        let redis = kind == "redis" || kind == "redis-cluster";
        let batching = ratekeeper_redis::Batching::DEFAULT;
        // A field that does not apply to this kind is refused, unless it
        // holds its default value: one file for several deployments may
        // spell the defaults out (`on_failure = "closed"` on a memory store).
        let set = |value: Option<Range<usize>>, at_default: bool| value.filter(|_| !at_default);
        let applies: [(&str, Option<Range<usize>>, bool, &str); 9] = [
            (
                "batch_in_flight",
                set(
                    store.batch_in_flight.as_ref().map(Spanned::span),
                    store.batch_in_flight.as_ref().map(|n| *n.get_ref())
                        == Some(batching.in_flight() as u64),
                ),
                kind == "redis",
                "the redis store (a cluster does not batch)",
            ),
            (
                "batch_max_calls",
                set(
                    store.batch_max_calls.as_ref().map(Spanned::span),
                    store.batch_max_calls.as_ref().map(|n| *n.get_ref())
                        == Some(batching.max_calls() as u64),
                ),
                kind == "redis",
                "the redis store (a cluster does not batch)",
            ),
            (
                "path",
                store.path.as_ref().map(Spanned::span),
                kind == "sqlite",
                "the sqlite store",
            ),
            (
                "url",
                store.url.as_ref().map(Spanned::span),
                kind == "redis",
                "the redis store",
            ),
            (
                "urls",
                store.urls.as_ref().map(Spanned::span),
                kind == "redis-cluster",
                "the redis-cluster store",
            ),
            (
                "prefix",
                set(
                    store.prefix.as_ref().map(Spanned::span),
                    store.prefix.as_ref().map(|p| p.get_ref().as_str()) == Some(DEFAULT_PREFIX),
                ),
                redis,
                "the redis stores",
            ),
            (
                "timeout_ms",
                set(
                    store.timeout_ms.as_ref().map(Spanned::span),
                    store.timeout_ms.as_ref().map(|n| *n.get_ref()) == Some(DEFAULT_TIMEOUT_MS),
                ),
                redis,
                "the redis stores",
            ),
            (
                "on_failure",
                set(
                    store.on_failure.as_ref().map(Spanned::span),
                    store.on_failure.as_ref().map(|m| m.get_ref().as_str()) == Some("closed"),
                ),
                remote,
                "the sqlite and redis stores",
            ),
            (
                "fallback",
                set(
                    store.fallback.as_ref().map(Spanned::span),
                    store.fallback.as_ref().map(|f| *f.get_ref()) == Some(false),
                ),
                remote,
                "the sqlite and redis stores",
            ),
        ];
        for (field, span, ok, which) in applies {
            if let (Some(span), false) = (span, ok) {
                return self.fail(
                    span,
                    format!("store.{field}"),
                    format!("{field} applies only to {which}, not to a {kind} store"),
                );
            }
        }
        let max_keys = match &store.max_keys {
            None => ratekeeper::memory::DEFAULT_MAX_KEYS,
            Some(value) => {
                let n = *value.get_ref();
                if n == 0 {
                    return self.fail(
                        value.span(),
                        "store.max_keys",
                        "max_keys must be greater than zero",
                    );
                }
                match usize::try_from(n) {
                    Ok(n) if n <= MAX_KEYS => n,
                    _ => {
                        return self.fail(
                            value.span(),
                            "store.max_keys",
                            format!(
                                "max_keys is {n}, above the largest supported value {MAX_KEYS}"
                            ),
                        )
                    }
                }
            }
        };
        let on_failure = match &store.on_failure {
            None => FailureMode::Closed,
            Some(mode) => match mode.get_ref().as_str() {
                "closed" => FailureMode::Closed,
                "open" => FailureMode::Open,
                other => {
                    return self.fail(
                        mode.span(),
                        "store.on_failure",
                        format!("unknown failure mode {other:?}; expected \"closed\" (refuse requests) or \"open\" (allow them)"),
                    )
                }
            },
        };
        let fallback = store.fallback.as_ref().is_some_and(|f| *f.get_ref());
        let prefix = match &store.prefix {
            None => DEFAULT_PREFIX.to_owned(),
            Some(prefix) => {
                if prefix.get_ref().contains(['{', '}']) {
                    return self.fail(
                        prefix.span(),
                        "store.prefix",
                        format!("the prefix {:?} contains a brace; braces would change Redis Cluster's hash slots", prefix.get_ref()),
                    );
                }
                prefix.get_ref().clone()
            }
        };
        let timeout = match &store.timeout_ms {
            None => Duration::from_millis(DEFAULT_TIMEOUT_MS),
            Some(ms) => {
                let n = *ms.get_ref();
                if n == 0 {
                    return self.fail(
                        ms.span(),
                        "store.timeout_ms",
                        "timeout_ms must be greater than zero",
                    );
                }
                if n > MAX_TIMEOUT_MS {
                    return self.fail(
                        ms.span(),
                        "store.timeout_ms",
                        format!(
                            "timeout_ms is {n}, above the largest supported value {MAX_TIMEOUT_MS}"
                        ),
                    );
                }
                Duration::from_millis(n)
            }
        };
        let in_flight = self.bounded(
            &store.batch_in_flight,
            "batch_in_flight",
            batching.in_flight(),
            MAX_BATCH_IN_FLIGHT,
        )?;
        let max_calls = self.bounded(
            &store.batch_max_calls,
            "batch_max_calls",
            batching.max_calls(),
            MAX_BATCH_CALLS,
        )?;
        let batching = ratekeeper_redis::Batching::new(in_flight, max_calls);
        let backend = match kind {
            "sqlite" => match &store.path {
                Some(path) if !path.get_ref().trim().is_empty() => Backend::Sqlite {
                    path: PathBuf::from(path.get_ref()),
                },
                Some(path) => {
                    return self.fail(path.span(), "store.path", "the path must not be empty")
                }
                None => {
                    return self.fail(
                        kind_span,
                        "store.path",
                        "a sqlite store needs a path to its database file",
                    )
                }
            },
            "redis" => match &store.url {
                Some(url) => Backend::Redis {
                    url: self.redis_url(url, "store.url")?,
                    prefix,
                    timeout,
                    batching,
                },
                None => {
                    return self.fail(
                        kind_span,
                        "store.url",
                        "a redis store needs a url, such as \"redis://127.0.0.1:6379\"",
                    )
                }
            },
            "redis-cluster" => match &store.urls {
                Some(urls) if !urls.get_ref().is_empty() => {
                    let mut checked = Vec::with_capacity(urls.get_ref().len());
                    for (index, url) in urls.get_ref().iter().enumerate() {
                        checked.push(self.redis_url(url, &format!("store.urls[{index}]"))?);
                    }
                    Backend::RedisCluster {
                        urls: checked,
                        prefix,
                        timeout,
                    }
                }
                Some(urls) => {
                    return self.fail(
                        urls.span(),
                        "store.urls",
                        "the list of urls must not be empty",
                    )
                }
                None => {
                    return self.fail(
                        kind_span,
                        "store.urls",
                        "a redis-cluster store needs urls, such as [\"redis://10.0.0.1:6379\"]",
                    )
                }
            },
            _ => Backend::Memory,
        };
        let tls = store_tls::check(self.at, &store, kind)?;
        Ok(StoreConfig {
            backend,
            max_keys,
            on_failure,
            fallback,
            tls,
        })
    }

    fn redis_url(&self, url: &Spanned<String>, field: &str) -> Result<String, ConfigError> {
        let text = url.get_ref();
        let known = ["redis://", "rediss://", "redis+unix://", "unix://"];
        let rest = known.iter().find_map(|scheme| text.strip_prefix(scheme));
        match rest {
            Some(rest) if !rest.is_empty() => Ok(text.clone()),
            _ => self.fail(
                url.span(),
                field,
                format!(
                    "invalid Redis url {:?}; expected redis://HOST:PORT, rediss://HOST:PORT or redis+unix:///PATH",
                    redact_url(text)
                ),
            ),
        }
    }

    fn listen(&self, listen: Option<Spanned<FileListen>>) -> Result<ListenConfig, ConfigError> {
        let defaults = ListenConfig::default();
        let Some(listen) = listen else {
            return Ok(defaults);
        };
        let listen = listen.into_inner();
        let one = |name: &str,
                   value: &Option<Spanned<String>>,
                   default: Option<SocketAddr>|
         -> Result<(Option<SocketAddr>, Option<Range<usize>>), ConfigError> {
            let Some(value) = value else {
                return Ok((default, None));
            };
            let text = value.get_ref().trim();
            if text == "off" {
                return Ok((None, Some(value.span())));
            }
            match text.parse::<SocketAddr>() {
                Ok(addr) => Ok((Some(addr), Some(value.span()))),
                Err(_) => self.fail(
                    value.span(),
                    format!("listen.{name}"),
                    format!("invalid address {text:?}; expected IP:PORT such as \"127.0.0.1:8080\" or \"[::1]:8080\", or \"off\""),
                ),
            }
        };
        let all = [
            ("http", one("http", &listen.http, defaults.http)?),
            ("grpc", one("grpc", &listen.grpc, defaults.grpc)?),
            ("admin", one("admin", &listen.admin, defaults.admin)?),
        ];
        for (j, (name, (addr, span))) in all.iter().enumerate() {
            let Some(addr) = addr.filter(|a| a.port() != 0) else {
                continue;
            };
            for (other, (other_addr, other_span)) in &all[..j] {
                if *other_addr != Some(addr) {
                    continue;
                }
                // Blame the later field if it was written, else the earlier.
                let (field, against, span, default) = match (span, other_span) {
                    (Some(span), _) => (name, other, span.clone(), other_span.is_none()),
                    (None, Some(span)) => (other, name, span.clone(), true),
                    (None, None) => continue,
                };
                let default = if default { " (by default)" } else { "" };
                return self.fail(
                    span,
                    format!("listen.{field}"),
                    format!("{addr} is already the {against} address{default}"),
                );
            }
        }
        let [(_, (http, _)), (_, (grpc, _)), (_, (admin, _))] = all;
        let connections = self.connections(listen.connections, listen.http2)?;
        let mut checked = ListenConfig {
            http,
            grpc,
            admin,
            connections,
            tls: DoorTls::default(),
        };
        checked.tls = tls::check(self.at, listen.tls, &checked)?;
        Ok(checked)
    }

    fn requests(
        &self,
        requests: Option<Spanned<FileRequests>>,
    ) -> Result<RequestCaps, ConfigError> {
        let defaults = RequestCaps::default();
        let Some(requests) = requests else {
            return Ok(defaults);
        };
        let requests = requests.into_inner();
        // Every maximum is far below `usize::MAX`, so the casts are exact.
        let cap = |value: &Option<Spanned<u64>>, field: &str, default: usize, max: usize| {
            value.as_ref().map_or(Ok(default), |value| {
                self.one_to(value, format!("requests.{field}"), field, max as u64, "")
                    .map(|n| n as usize)
            })
        };
        let mut caps = RequestCaps {
            max_descriptors: cap(
                &requests.max_descriptors,
                "max_descriptors",
                defaults.max_descriptors,
                RequestCaps::LIMIT_MAX_DESCRIPTORS,
            )?,
            max_entries: cap(
                &requests.max_entries,
                "max_entries",
                defaults.max_entries,
                RequestCaps::LIMIT_MAX_ENTRIES,
            )?,
            max_value_bytes: cap(
                &requests.max_value_bytes,
                "max_value_bytes",
                defaults.max_value_bytes,
                RequestCaps::LIMIT_MAX_VALUE_BYTES,
            )?,
            max_override_rates: cap(
                &requests.max_override_rates,
                "max_override_rates",
                defaults.max_override_rates,
                RequestCaps::LIMIT_MAX_OVERRIDE_RATES,
            )?,
            max_body_bytes: cap(
                &requests.max_body_bytes,
                "max_body_bytes",
                defaults.max_body_bytes,
                RequestCaps::LIMIT_MAX_BODY_BYTES,
            )?,
        };
        if requests.max_body_bytes.is_none() {
            // Unwritten, the body cap follows a raised value cap: one value
            // at its cap, and the JSON around it, always fit.
            caps.max_body_bytes = caps.max_body_bytes.max(caps.max_value_bytes + BODY_ROOM);
        } else if caps.max_body_bytes < caps.max_value_bytes {
            let span = requests
                .max_body_bytes
                .as_ref()
                .map(Spanned::span)
                .unwrap_or_default();
            return self.fail(
                span,
                "requests.max_body_bytes",
                format!(
                    "max_body_bytes ({}) is below max_value_bytes ({}): a request could not hold one value at its cap",
                    caps.max_body_bytes, caps.max_value_bytes
                ),
            );
        }
        Ok(caps)
    }

    fn limit(&self, index: usize, limit: FileLimit) -> Result<LimitConfig, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let rate: Rate = match limit.rate.get_ref().parse() {
            Ok(rate) => rate,
            Err(error) => return self.fail(limit.rate.span(), field("rate"), error.to_string()),
        };
        let kind = match &limit.policy {
            None => PolicyKind::DEFAULT,
            Some(policy) => match policy.get_ref().parse::<PolicyKind>() {
                Ok(kind) => kind,
                Err(error) => return self.fail(policy.span(), field("policy"), error.to_string()),
            },
        };
        let policy = match Policy::new(kind, &rate) {
            Ok(policy) => policy,
            Err(error) => return self.fail(limit.rate.span(), field("rate"), error.to_string()),
        };
        let named = match Limit::new(limit.name.get_ref().clone(), policy) {
            Ok(named) => named,
            Err(error) => return self.fail(limit.name.span(), field("name"), error.to_string()),
        };
        let key = self.key(index, &limit)?;
        let matcher = match limit.matcher {
            None => Match::default(),
            Some(matcher) => self.matcher(index, matcher.into_inner())?,
        };
        let on_saturated = match &limit.on_saturated {
            None => OnSaturated::Deny,
            Some(mode) => match mode.get_ref().as_str() {
                "deny" => OnSaturated::Deny,
                "allow" => OnSaturated::Allow,
                other => {
                    return self.fail(
                        mode.span(),
                        field("on_saturated"),
                        format!("unknown value {other:?}; expected \"deny\" (refuse new keys while the store is full) or \"allow\" (let them through uncounted)"),
                    )
                }
            },
        };
        Ok(LimitConfig {
            limit: named,
            rate,
            key,
            shadow: limit.shadow.is_some_and(|s| *s.get_ref()),
            on_saturated,
            allow_overrides: limit.allow_overrides.as_ref().is_none_or(|a| *a.get_ref()),
            allow_refunds: limit.allow_refunds.as_ref().is_none_or(|a| *a.get_ref()),
            matcher,
        })
    }

    fn key(&self, index: usize, limit: &FileLimit) -> Result<Vec<KeyPart>, ConfigError> {
        let key = &limit.key;
        let field = format!("limits[{index}].key");
        if key.get_ref().is_empty() {
            return self.fail(
                key.span(),
                field,
                "the key must have at least one part, such as [\"client_ip\"] or [\"global\"]",
            );
        }
        let prefixes = self.prefixes(index, limit)?;
        let mut parts = Vec::with_capacity(key.get_ref().len());
        let mut texts: Vec<&str> = Vec::new();
        for (j, part) in key.get_ref().iter().enumerate() {
            let text = part.get_ref().trim();
            let part_field = format!("{field}[{j}]");
            let parsed = match text {
                "peer" => KeyPart::Peer(prefixes),
                "client_ip" => KeyPart::ClientIp(self.client_ip(index, limit)?, prefixes),
                "route" => KeyPart::Route,
                "global" => KeyPart::Global,
                _ => {
                    if let Some(name) = text.strip_prefix("header:") {
                        match HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes()) {
                            Ok(name) => KeyPart::Header(name),
                            Err(_) => {
                                return self.fail(
                                    part.span(),
                                    part_field,
                                    format!("invalid header name {name:?} in key part {text:?}"),
                                )
                            }
                        }
                    } else if let Some(name) = text.strip_prefix("descriptor:") {
                        let name = name.trim();
                        if name.is_empty() {
                            return self.fail(
                                part.span(),
                                part_field,
                                "the descriptor key after \"descriptor:\" must not be empty",
                            );
                        }
                        KeyPart::Descriptor(name.to_owned())
                    } else {
                        return self.fail(
                            part.span(),
                            part_field,
                            format!("unknown key part {text:?}; expected peer, client_ip, route, global, header:NAME or descriptor:KEY"),
                        );
                    }
                }
            };
            if texts.contains(&text) {
                return self.fail(
                    part.span(),
                    part_field,
                    format!("the key part {text:?} is given twice"),
                );
            }
            texts.push(text);
            parts.push(parsed);
        }
        if parts.len() > 1 && parts.contains(&KeyPart::Global) {
            return self.fail(
                key.span(),
                field,
                "\"global\" is one key for every request and cannot be combined with other parts",
            );
        }
        let client_ip = texts.contains(&"client_ip");
        let address = client_ip || texts.contains(&"peer");
        // As for the store's fields: refused where they cannot apply, unless
        // at their default value (no trusted proxies, X-Forwarded-For, the
        // default prefixes).
        let set = |value: Option<Range<usize>>, at_default: bool| value.filter(|_| !at_default);
        let no_proxies = matches!(
            limit.trusted_proxies.as_ref().map(Spanned::get_ref),
            Some(FileTrust::List(list)) if list.is_empty()
        );
        let only_with = [
            (
                "trusted_proxies",
                set(
                    limit.trusted_proxies.as_ref().map(Spanned::span),
                    no_proxies,
                ),
                client_ip,
                "\"client_ip\"",
            ),
            (
                "trusted_hops",
                limit.trusted_hops.as_ref().map(Spanned::span),
                client_ip,
                "\"client_ip\"",
            ),
            (
                "client_ip_from",
                set(
                    limit.client_ip_from.as_ref().map(Spanned::span),
                    limit
                        .client_ip_from
                        .as_ref()
                        .map(|from| from.get_ref().as_str())
                        == Some("x-forwarded-for"),
                ),
                client_ip,
                "\"client_ip\"",
            ),
            (
                "ipv4_prefix",
                set(
                    limit.ipv4_prefix.as_ref().map(Spanned::span),
                    limit.ipv4_prefix.as_ref().map(|n| *n.get_ref())
                        == Some(u64::from(DEFAULT_IPV4_PREFIX)),
                ),
                address,
                "\"client_ip\" or \"peer\"",
            ),
            (
                "ipv6_prefix",
                set(
                    limit.ipv6_prefix.as_ref().map(Spanned::span),
                    limit.ipv6_prefix.as_ref().map(|n| *n.get_ref())
                        == Some(u64::from(DEFAULT_IPV6_PREFIX)),
                ),
                address,
                "\"client_ip\" or \"peer\"",
            ),
        ];
        for (name, span, ok, parts) in only_with {
            if let (Some(span), false) = (span, ok) {
                return self.fail(
                    span,
                    format!("limits[{index}].{name}"),
                    format!("{name} applies only to a key with {parts}"),
                );
            }
        }
        Ok(parts)
    }

    /// The network lengths addresses are keyed by: `ipv4_prefix` (1 to 32,
    /// default 32) and `ipv6_prefix` (1 to 128, default 64).
    fn prefixes(&self, index: usize, limit: &FileLimit) -> Result<Prefixes, ConfigError> {
        // At most 128, so the cast is exact.
        let one = |value: &Option<Spanned<u64>>, name: &str, default: u8, max: u8| {
            value.as_ref().map_or(Ok(default), |value| {
                self.one_to(
                    value,
                    format!("limits[{index}].{name}"),
                    name,
                    u64::from(max),
                    " (the bits of an address that make one key)",
                )
                .map(|bits| bits as u8)
            })
        };
        Ok(Prefixes {
            ipv4: one(&limit.ipv4_prefix, "ipv4_prefix", DEFAULT_IPV4_PREFIX, 32)?,
            ipv6: one(&limit.ipv6_prefix, "ipv6_prefix", DEFAULT_IPV6_PREFIX, 128)?,
        })
    }

    /// How `client_ip` is found: `client_ip_from` (the header), with
    /// `trusted_proxies` (whose peers are believed; none by default, so the
    /// peer is the client) or `trusted_hops` (X-Forwarded-For only).
    fn client_ip(&self, index: usize, limit: &FileLimit) -> Result<ClientIp, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let trusted = match &limit.trusted_proxies {
            None => None,
            Some(trusted) => Some(self.trusted(index, trusted)?),
        };
        let hops = match &limit.trusted_hops {
            None => None,
            Some(hops) => {
                let n = self.one_to(
                    hops,
                    field("trusted_hops"),
                    "trusted_hops",
                    MAX_TRUSTED_HOPS as u64,
                    "",
                )?;
                // At most MAX_TRUSTED_HOPS, so the cast is exact.
                Some((n as usize, hops.span()))
            }
        };
        let from = limit
            .client_ip_from
            .as_ref()
            .map(|from| (from.get_ref().trim().to_ascii_lowercase(), from.span()));
        let from_text = from.as_ref().map_or("x-forwarded-for", |(text, _)| text);
        if let (Some((_, span)), Some(_)) = (&hops, &trusted) {
            return self.fail(
                span.clone(),
                field("trusted_hops"),
                "trusted_hops and trusted_proxies are two ways to say which proxies to believe; give one",
            );
        }
        if let (Some((_, span)), false) = (&hops, from_text == "x-forwarded-for") {
            return self.fail(
                span.clone(),
                field("trusted_hops"),
                format!("trusted_hops counts X-Forwarded-For entries and does not apply to client_ip_from = {from_text:?}; use trusted_proxies"),
            );
        }
        let trusted = trusted.unwrap_or_default();
        if from_text == "x-forwarded-for" {
            return Ok(match hops {
                Some((n, _)) => ClientIp::Hops(n),
                None => ClientIp::XForwardedFor { trusted },
            });
        }
        if from_text == "forwarded" {
            return Ok(ClientIp::Forwarded { trusted });
        }
        let span = from
            .as_ref()
            .map(|(_, span)| span.clone())
            .unwrap_or_default();
        let Some(name) = from_text.strip_prefix("header:") else {
            return self.fail(
                span,
                field("client_ip_from"),
                format!("unknown client_ip source {from_text:?}; expected \"x-forwarded-for\" (the default), \"forwarded\" or \"header:NAME\" such as \"header:x-real-ip\""),
            );
        };
        match HeaderName::from_bytes(name.trim().as_bytes()) {
            Ok(name) => Ok(ClientIp::Header { name, trusted }),
            Err(_) => self.fail(
                span,
                field("client_ip_from"),
                format!("invalid header name {name:?} in client_ip_from"),
            ),
        }
    }

    /// `trusted_proxies`: `"private"` (the usual private, loopback,
    /// link-local and carrier-grade NAT networks) or a list of CIDRs,
    /// addresses and `"private"`.
    fn trusted(
        &self,
        index: usize,
        trusted: &Spanned<FileTrust>,
    ) -> Result<Vec<IpNet>, ConfigError> {
        let field = format!("limits[{index}].trusted_proxies");
        let entries: Vec<(&str, Range<usize>, String)> = match trusted.get_ref() {
            FileTrust::Word(word) => vec![(word.as_str(), trusted.span(), field)],
            FileTrust::List(list) => list
                .iter()
                .enumerate()
                .map(|(j, net)| (net.get_ref().as_str(), net.span(), format!("{field}[{j}]")))
                .collect(),
        };
        let mut nets = Vec::with_capacity(entries.len());
        for (text, span, field) in entries {
            let text = text.trim();
            if text.eq_ignore_ascii_case(PRIVATE) {
                nets.extend(private_networks());
                continue;
            }
            let parsed = text
                .parse::<IpNet>()
                .ok()
                .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from));
            match parsed {
                Some(parsed) => nets.push(parsed.trunc()),
                None => {
                    return self.fail(
                        span,
                        field,
                        format!("invalid network {text:?}; expected \"private\", a CIDR such as \"10.0.0.0/8\" or an IP address"),
                    )
                }
            }
        }
        Ok(nets)
    }

    fn matcher(&self, index: usize, matcher: FileMatch) -> Result<Match, ConfigError> {
        let field = |name: &str| format!("limits[{index}].match.{name}");
        let domain = match matcher.domain {
            None => None,
            Some(domain) if domain.get_ref().is_empty() => {
                return self.fail(
                    domain.span(),
                    field("domain"),
                    "the domain must not be empty",
                )
            }
            Some(domain) => Some(domain.into_inner()),
        };
        let mut descriptors = Vec::new();
        if let Some(list) = matcher.descriptors {
            for (j, entry) in list.into_inner().into_iter().enumerate() {
                descriptors.push(self.descriptor(&field(&format!("descriptors[{j}]")), entry)?);
            }
        }
        let mut methods = Vec::new();
        if let Some(list) = matcher.methods {
            for (j, method) in list.get_ref().iter().enumerate() {
                let text = method.get_ref().trim().to_ascii_uppercase();
                match Method::from_bytes(text.as_bytes()) {
                    Ok(parsed) if !text.is_empty() => methods.push(parsed),
                    _ => {
                        return self.fail(
                            method.span(),
                            field(&format!("methods[{j}]")),
                            format!("invalid HTTP method {:?}", method.get_ref()),
                        )
                    }
                }
            }
        }
        let path_prefix = match matcher.path_prefix {
            None => None,
            Some(prefix) if !prefix.get_ref().starts_with('/') => {
                return self.fail(
                    prefix.span(),
                    field("path_prefix"),
                    format!(
                        "the path prefix {:?} must start with \"/\"",
                        prefix.get_ref()
                    ),
                )
            }
            Some(prefix) => Some(prefix.into_inner()),
        };
        Ok(Match {
            domain,
            descriptors,
            methods,
            path_prefix,
        })
    }

    fn descriptor(
        &self,
        field: &str,
        entry: Spanned<FileDescriptor>,
    ) -> Result<DescriptorMatch, ConfigError> {
        let entry = entry.into_inner();
        if entry.key.get_ref().is_empty() {
            return self.fail(
                entry.key.span(),
                format!("{field}.key"),
                "the descriptor key must not be empty",
            );
        }
        let value = match entry.value {
            None => ValueMatch::Any,
            Some(value) => {
                let text = value.get_ref();
                if text.is_empty() {
                    return self.fail(
                        value.span(),
                        format!("{field}.value"),
                        "the value must not be empty; leave it out to match any value",
                    );
                }
                match text.strip_suffix('*') {
                    Some("") => ValueMatch::Any,
                    Some(prefix) => ValueMatch::Prefix(prefix.to_owned()),
                    None => ValueMatch::Exact(text.clone()),
                }
            }
        };
        Ok(DescriptorMatch {
            key: entry.key.into_inner(),
            value,
        })
    }
}
