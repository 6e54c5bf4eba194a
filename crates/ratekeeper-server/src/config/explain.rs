//! `ratekeeper check --explain`: the configuration in words.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use ratekeeper::store::FailureMode;
use ratekeeper_tower::client::ClientIp;

use crate::plural::{count, count_as};

use super::{
    available_cpus, redact_url, redact_urls, tls, AccessConfig, Backend, Config, ConnectionConfig,
    KeyPart, Match, OnSaturated, RequestCaps, ValueMatch, WorkerThreads,
};

impl Config {
    /// A description for `ratekeeper check`: the store, the addresses, the
    /// request caps when not the defaults, which doors need a token (when
    /// any does; how many tokens from where, never a token), then one line
    /// per limit with its name, policy, rate, key and match, and the
    /// permissions it refuses.
    ///
    /// ```
    /// use ratekeeper_server::Config;
    ///
    /// let text = Config::default().explain();
    /// assert!(text.contains("limit per-client: gcra 100/minute, key client_ip"));
    /// assert!(text.contains("  applies to HTTP requests: the JSON API by method and path"));
    /// ```
    pub fn explain(&self) -> String {
        self.explain_with(None)
    }

    /// [`Config::explain`] for `ratekeeper proxy`: its proxy on `listen`
    /// before `upstream` and its admin door, not the decision doors it
    /// does not serve.
    pub(crate) fn explain_proxy(&self, listen: SocketAddr, upstream: &str) -> String {
        self.explain_with(Some((listen, upstream)))
    }

    fn explain_with(&self, proxy: Option<(SocketAddr, &str)>) -> String {
        let mut out = String::new();
        let store = &self.store;
        let backend = match &store.backend {
            Backend::Memory => "memory".to_owned(),
            Backend::Sqlite { path } => format!("sqlite {}", path.display()),
            Backend::Redis {
                url,
                prefix,
                timeout,
                batching,
            } => {
                let batching = if batching.is_on() {
                    format!(
                        "{} in flight, up to {} each",
                        count(batching.in_flight(), "script"),
                        count(batching.max_calls(), "decision")
                    )
                } else {
                    "no batching".to_owned()
                };
                format!(
                    "redis {} (prefix {prefix:?}, timeout {}ms, {batching})",
                    redact_url(url),
                    timeout.as_millis()
                )
            }
            Backend::RedisSentinel {
                sentinels,
                master_name,
                prefix,
                timeout,
                ..
            } => format!(
                "redis primary {master_name:?} through sentinels {} (prefix {prefix:?}, timeout {}ms)",
                redact_urls(sentinels),
                timeout.as_millis()
            ),
            Backend::RedisCluster {
                urls,
                prefix,
                timeout,
            } => format!(
                "redis-cluster {} (prefix {prefix:?}, timeout {}ms)",
                redact_urls(urls),
                timeout.as_millis()
            ),
        };
        let _ = write!(out, "store: {backend}, max_keys {}", store.max_keys);
        if !matches!(store.backend, Backend::Memory) {
            let mode = match store.on_failure {
                FailureMode::Open => "open",
                _ => "closed",
            };
            let fallback = if store.fallback { "on" } else { "off" };
            let _ = write!(out, ", on failure {mode}, fallback {fallback}");
        }
        if let Some(tls) = &store.tls {
            let _ = write!(out, ", {tls}");
        }
        out.push('\n');
        if let Some(lease) = &store.lease {
            let _ = writeln!(
                out,
                "leasing: busy keys take chunks of up to {} units lasting {}ms at their rate here, held at most {}ms; \
                 decided in this process until spent, exact across processes; {} (docs/leasing.md)",
                lease.max_chunk,
                lease.chunk_for.as_millis(),
                lease.lifetime.as_millis(),
                if lease.spend_while_down {
                    "units held are spent while the store fails"
                } else {
                    "while the store fails, units held are not spent"
                }
            );
        }
        let addr = |a: &Option<SocketAddr>| a.map_or_else(|| "off".to_owned(), |a| a.to_string());
        let _ = match proxy {
            None => writeln!(
                out,
                "listen: http {}, grpc {}, admin {}",
                addr(&self.listen.http),
                addr(&self.listen.grpc),
                addr(&self.listen.admin)
            ),
            Some((listen, upstream)) => writeln!(
                out,
                "listen: proxy {listen} -> {upstream}, admin {}",
                addr(&self.listen.admin)
            ),
        };
        if let Some(line) = tls::explain(&self.listen) {
            let _ = writeln!(out, "{line}");
        }
        let conns = &self.listen.connections;
        if *conns != ConnectionConfig::default() {
            let h2 = &conns.http2;
            let every =
                |d: Option<Duration>| d.map_or_else(|| "off".to_owned(), |d| format!("{d:?}"));
            let _ = writeln!(
                out,
                "connections: at most {} per door and {} on admin; handshake within {:?}, head \
                 within {:?}, body bytes {:?} apart, answers read within {:?}, idle {:?}, \
                 requests {:?}, heads up to {} bytes, {} bytes of requests arriving, {:?} to \
                 finish at shutdown, {} queued; \
                 http2: {} streams per connection and {} per door, ping every {} within {:?}, \
                 max age {}",
                conns.max_connections,
                conns.max_admin_connections,
                conns.handshake_timeout,
                conns.header_timeout,
                conns.body_timeout,
                conns.send_timeout,
                conns.idle_timeout,
                conns.request_timeout,
                conns.max_header_bytes,
                conns.max_request_bytes_total,
                conns.shutdown_grace,
                conns.backlog,
                h2.max_concurrent_streams,
                h2.max_streams_total,
                every(h2.keepalive_interval),
                h2.keepalive_timeout,
                every(h2.max_connection_age),
            );
        }
        let caps = &self.requests;
        if *caps != RequestCaps::default() {
            let _ = writeln!(
                out,
                "requests: at most {} of {}, values up to {}, {}, bodies up to {}, {} held waiting ({} per key)",
                count(caps.max_descriptors, "descriptor"),
                count_as(caps.max_entries, "entry", "entries"),
                count(caps.max_value_bytes, "byte"),
                count(caps.max_override_rates, "override rate"),
                count(caps.max_body_bytes, "byte"),
                caps.max_waiting,
                caps.max_waiting_per_key
            );
        }
        if self.shadow_mode {
            let _ = writeln!(
                out,
                "shadow mode: every limit below decides and reports, but none refuses ([enforcement])"
            );
        }
        if let WorkerThreads::Fixed(n) = self.runtime.worker_threads {
            let _ = writeln!(
                out,
                "runtime: {} ({} available)",
                count(n, "worker thread"),
                count(available_cpus(), "CPU")
            );
        }
        if self.envoy != super::EnvoyDoorConfig::default() {
            let envoy = &self.envoy;
            let _ = write!(
                out,
                "envoy: response headers {}",
                envoy.response_headers.as_str()
            );
            if envoy.response_headers.envoy_ratelimit() {
                let _ = write!(
                    out,
                    " ({}, {}, {})",
                    envoy.limit_header, envoy.remaining_header, envoy.reset_header
                );
            }
            if envoy.counting == super::Counting::EachDescriptor {
                let _ = write!(out, ", each descriptor counted on its own");
            }
            if envoy.shadow_mode {
                let _ = write!(out, ", shadow mode (every answer OK)");
            }
            if envoy.quota_mode {
                let _ = write!(out, ", quota mode");
            }
            let _ = writeln!(out);
            if let (Some(dir), Some(files)) = (&envoy.config_dir, &envoy.files) {
                let config = files.config();
                let mut domains: Vec<&str> = config.domains().map(|d| d.name()).collect();
                domains.sort_unstable();
                let _ = writeln!(
                    out,
                    "envoy files: {} ({}: {}; {}{}{})",
                    dir.display(),
                    count(domains.len(), "domain"),
                    domains.join(", "),
                    count(config.limit_count(), "limit"),
                    if envoy.ignore_dot_files {
                        ""
                    } else {
                        ", dot files read"
                    },
                    if envoy.merge_domains {
                        ", domains merged"
                    } else {
                        ""
                    },
                );
                config.for_each_limit(|path, limit| {
                    let what = match (limit.unlimited, files.limit(limit)) {
                        (true, _) => "unlimited".to_owned(),
                        (false, None) => "refuses every request (0 per unit)".to_owned(),
                        (false, Some(made)) => {
                            // Named by its path unless that is not a valid
                            // name: then the name metrics show is told.
                            let name = match made.limit.name() == path {
                                true => String::new(),
                                false => format!("limit {}: ", made.limit.name()),
                            };
                            format!(
                                "{name}{} {}{}",
                                made.limit.policy().kind(),
                                made.rate,
                                if limit.shadow_mode { ", shadow" } else { "" }
                            )
                        }
                    };
                    let _ = writeln!(out, "  {path}: {what}");
                });
                for warning in config.warnings() {
                    let _ = writeln!(out, "  warning: {warning}");
                }
            }
        }
        if let Some(line) = explain_access(&self.access) {
            let _ = writeln!(out, "{line}");
        }
        for limit in &self.limits {
            let key: Vec<String> = limit.key.iter().map(ToString::to_string).collect();
            let _ = write!(
                out,
                "limit {}: {} {}, key {}",
                limit.limit.name(),
                limit.limit.policy().kind(),
                limit.rate_text(),
                key.join(" + ")
            );
            let _ = write!(out, ", match {}", explain_match(&limit.matcher));
            if limit.shadow {
                out.push_str(" (shadow)");
            }
            if limit.on_saturated == OnSaturated::Allow {
                out.push_str(" (allows new keys while the store is full)");
            }
            if !limit.allow_overrides {
                out.push_str(" (Envoy overrides ignored)");
            }
            if !limit.allow_refunds {
                out.push_str(" (refunds refused)");
            }
            if !limit.allow_reports {
                out.push_str(" (reports refused)");
            }
            if limit.count_refused {
                out.push_str(" (refused hits counted)");
            }
            out.push('\n');
            match limit.matcher.reach() {
                super::Reach::Nowhere(why) => {
                    let _ = writeln!(out, "  applies to no door: {why}");
                }
                reach => {
                    let _ = writeln!(out, "  applies to {}", reach.doors());
                }
            }
            for line in limit.key.iter().filter_map(explain_address) {
                let _ = writeln!(out, "  {line}");
            }
            if let Some(plans) = &limit.plans {
                let _ = writeln!(out, "  {}", explain_plans(plans, &limit.rate_text()));
            }
        }
        if let Some(source) = &self.limitador {
            explain_limitador(&mut out, source);
        }
        out
    }
}

/// A limit's plans in a line: where a request names its plan, who is
/// believed, and each plan's numbers; the limit's own (`own`) for the
/// rest.
fn explain_plans(plans: &super::PlanConfig, own: &str) -> String {
    let from = match &plans.from {
        super::PlanFrom::Header { name, peers } if peers.is_empty() => {
            format!("the {name} header, named only by the JSON API's callers")
        }
        super::PlanFrom::Header { name, peers } => {
            let peers: Vec<String> = peers.iter().map(ToString::to_string).collect();
            format!("the {name} header, believed from {}", peers.join(", "))
        }
        super::PlanFrom::Descriptor(key) => format!("the descriptor entry {key:?}"),
        super::PlanFrom::Table(table) => {
            format!("the table {} ({} keys)", table.path.display(), table.len())
        }
    };
    let each: Vec<String> = plans
        .written
        .iter()
        .map(|(name, written)| format!("{name} {written}"))
        .collect();
    format!(
        "plans from {from}: {}; any other key {own}",
        each.join(", ")
    )
}

/// The Limitador limits file: where, and each limit in a line.
fn explain_limitador(out: &mut String, source: &super::LimitadorSource) {
    let limits = source.limits.limits();
    let _ = writeln!(
        out,
        "limitador: {}, {}",
        source.path.display(),
        count(limits.len(), "limit")
    );
    for limit in limits {
        let _ = write!(
            out,
            "  namespace {}: {} per {}s, fixed window",
            limit.namespace(),
            limit.max_value(),
            limit.seconds()
        );
        if let Some(name) = limit.name() {
            let _ = write!(out, " ({name})");
        }
        let conditions: Vec<&str> = limit.conditions().iter().map(|c| c.source()).collect();
        if !conditions.is_empty() {
            let _ = write!(out, ", when {}", conditions.join(" and "));
        }
        let variables: Vec<&str> = limit.variables().iter().map(|v| v.source()).collect();
        if !variables.is_empty() {
            let _ = write!(out, ", a counter per {}", variables.join(" + "));
        }
        out.push('\n');
    }
}

/// Who may ask, when any door needs a token: which doors, and how many
/// tokens from where (never the tokens).
fn explain_access(access: &AccessConfig) -> Option<String> {
    if access.decisions.is_none() && access.admin.is_none() {
        return None;
    }
    let door = |doors: &str, need: &str, set: &Option<super::access::TokenSet>| match set {
        None => format!("{doors} open to anyone who reaches them"),
        Some(set) => {
            let tokens = if set.len() == 1 { "token" } else { "tokens" };
            format!(
                "{doors} {need} a bearer token ({} {tokens} from {})",
                set.len(),
                set.source()
            )
        }
    };
    Some(format!(
        "access: {}; {}",
        door("http and grpc", "need", &access.decisions),
        door("admin (but /healthz, /readyz)", "needs", &access.admin)
    ))
}

/// Where an address part of a key comes from and what it is keyed by, in
/// words: the trust `ratekeeper check` shows for `client_ip` and `peer`.
fn explain_address(part: &KeyPart) -> Option<String> {
    let (source, prefixes) = match part {
        KeyPart::Peer(prefixes) => ("the socket peer".to_owned(), prefixes),
        KeyPart::ClientIp(rule, prefixes) => (explain_client_ip(rule), prefixes),
        _ => return None,
    };
    Some(format!("{part}: {source}; {prefixes}"))
}

/// How `rule` finds the client.
fn explain_client_ip(rule: &ClientIp) -> String {
    let untrusted = |header: &str| {
        format!("the socket peer (no trusted proxies: {header} is ignored, set trusted_proxies to believe it)")
    };
    let nets = |trusted: &[ipnet::IpNet]| {
        if trusted == ratekeeper_tower::client::private_networks().as_slice() {
            "private networks".to_owned()
        } else {
            let nets: Vec<String> = trusted.iter().map(ToString::to_string).collect();
            nets.join(", ")
        }
    };
    match rule {
        ClientIp::XForwardedFor { trusted } if trusted.is_empty() => untrusted("X-Forwarded-For"),
        ClientIp::XForwardedFor { trusted } => format!(
            "from X-Forwarded-For behind {} (the rightmost address not among them); any other peer is the client",
            nets(trusted)
        ),
        ClientIp::Forwarded { trusted } if trusted.is_empty() => untrusted("Forwarded"),
        ClientIp::Forwarded { trusted } => format!(
            "from Forwarded (RFC 7239) behind {} (the rightmost for= not among them); any other peer is the client",
            nets(trusted)
        ),
        ClientIp::Hops(hops) => format!(
            "from X-Forwarded-For, entry {hops} from the right, from any peer (every request must pass {hops} proxies of yours)"
        ),
        ClientIp::Header { name, trusted } if trusted.is_empty() => untrusted(name.as_str()),
        ClientIp::Header { name, trusted } => format!(
            "from {name} when the peer is in {}; any other peer is the client",
            nets(trusted)
        ),
        _ => "the socket peer".to_owned(),
    }
}

/// `match` in words.
fn explain_match(matcher: &Match) -> String {
    if matcher.is_any() {
        return "every HTTP request".to_owned();
    }
    let mut parts = Vec::new();
    if let Some(domain) = &matcher.domain {
        parts.push(format!("domain {domain}"));
    }
    if !matcher.descriptors.is_empty() {
        let entries: Vec<String> = matcher
            .descriptors
            .iter()
            .map(|d| {
                let mut entry = match &d.value {
                    ValueMatch::Any => d.key.clone(),
                    value => format!("{}={value}", d.key),
                };
                if !d.except.is_empty() {
                    let except: Vec<String> = d.except.iter().map(ToString::to_string).collect();
                    let _ = write!(entry, " except {}", except.join(" "));
                }
                if d.share_threshold {
                    entry.push_str(" (one counter for all values)");
                }
                entry
            })
            .collect();
        parts.push(format!("descriptors [{}]", entries.join(", ")));
    }
    if !matcher.methods.is_empty() {
        let methods: Vec<&str> = matcher.methods.iter().map(Method::as_str).collect();
        parts.push(format!("methods {}", methods.join(" ")));
    }
    if let Some(prefix) = &matcher.path_prefix {
        parts.push(format!("path {prefix}*"));
    }
    parts.join(", ")
}
