//! `[[limits]]`: a limit's rate and policy, its key, whom it trusts and
//! which requests it matches.

use super::*;
use crate::config::Reach;

/// The longest `max_wait`: a held request keeps its connection.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// The longest `block_for`, `block_max` and `block_forget`.
const MAX_BLOCK: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long an offence counts towards a longer block, unless
/// `block_forget` says: a day.
const DEFAULT_BLOCK_FORGET: Duration = Duration::from_secs(24 * 3600);

/// One checked `[[limits]]` entry.
pub(super) enum Checked {
    /// A rate limit.
    Rate(Box<LimitConfig>),
    /// A cap on requests in flight.
    InFlight(InFlightConfig),
}

impl Checker<'_> {
    /// `limits[index]`, found at `span`: a rate limit, or for `policy =
    /// "concurrency"` a cap on requests in flight.
    pub(super) fn limit_or_cap(
        &self,
        index: usize,
        span: Range<usize>,
        limit: FileLimit,
    ) -> Result<Checked, ConfigError> {
        let concurrency = limit
            .policy
            .as_ref()
            .is_some_and(|policy| policy.get_ref().trim() == "concurrency");
        if concurrency {
            return Ok(Checked::InFlight(self.in_flight(index, limit)?));
        }
        let field = |name: &str| format!("limits[{index}].{name}");
        for (given, name) in [
            (
                limit.max_in_flight.as_ref().map(Spanned::span),
                "max_in_flight",
            ),
            (limit.lease.as_ref().map(Spanned::span), "lease"),
        ] {
            if let Some(span) = given {
                return self.fail(
                    span,
                    field(name),
                    format!("{name} is for policy = \"concurrency\" (a cap on requests in flight); a rate limit has a rate"),
                );
            }
        }
        let Some(rate) = &limit.rate else {
            return self.fail(
                span,
                format!("limits[{index}]"),
                "missing field `rate` (such as \"100/minute\"); only policy = \"concurrency\" has none",
            );
        };
        let rate = rate.clone();
        Ok(Checked::Rate(Box::new(self.limit(index, &rate, limit)?)))
    }

    fn limit(
        &self,
        index: usize,
        rate_text: &Spanned<String>,
        limit: FileLimit,
    ) -> Result<LimitConfig, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let (rate, ban) = match parse_rate(rate_text.get_ref()) {
            Ok(parsed) => parsed,
            Err(error) => return self.fail(rate_text.span(), field("rate"), error.to_string()),
        };
        let kind = match &limit.policy {
            None => PolicyKind::DEFAULT,
            Some(policy) => match policy.get_ref().parse::<PolicyKind>() {
                Ok(kind) => kind,
                Err(error) => {
                    let message = format!("{error}; or concurrency, a cap on requests in flight");
                    return self.fail(policy.span(), field("policy"), message);
                }
            },
        };
        let policy = match Policy::new(kind, &rate) {
            Ok(policy) => policy,
            Err(error) => return self.fail(rate_text.span(), field("rate"), error.to_string()),
        };
        let named = match Limit::new(limit.name.get_ref().clone(), policy) {
            Ok(named) => named,
            Err(error) => return self.fail(limit.name.span(), field("name"), error.to_string()),
        };
        let plans = self.plans(index, &limit, &named, ban)?;
        // With plans, the limit's own numbers are the default plan's.
        let named = match &plans {
            Some(plans) => plans.plans.limit().clone(),
            None => named,
        };
        let shadow = limit.shadow.as_ref().is_some_and(|s| *s.get_ref());
        let penalty = self.penalty(index, &limit, &named, shadow || ban)?;
        let key = self.key(index, &limit)?;
        let matcher = match limit.matcher {
            None => Match::default(),
            Some(matcher) => self.matcher(index, matcher.into_inner())?,
        };
        if let (Some(plans), Some(from)) = (&plans, &limit.plan_from) {
            self.plan_reach(index, from, &plans.from, &matcher)?;
        }
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
        let allow_reports = limit.allow_reports.as_ref().is_none_or(|a| *a.get_ref());
        let after_response = match &limit.after_response {
            None => None,
            Some(after) => Some(self.after_response(index, after.get_ref())?),
        };
        if let Some(count) = limit.count_refused.as_ref().filter(|c| *c.get_ref()) {
            if !allow_reports {
                return self.fail(
                    count.span(),
                    field("count_refused"),
                    "count_refused = true charges refused hits as reports, which allow_reports = false forbids; drop one of them",
                );
            }
        }
        let max_wait = match &limit.max_wait {
            None => None,
            Some(wait) => Some(self.max_wait(index, wait, &named, &matcher, &after_response)?),
        };
        Ok(LimitConfig {
            limit: named,
            rate,
            ban,
            key,
            shadow,
            on_saturated,
            allow_overrides: limit.allow_overrides.as_ref().is_none_or(|a| *a.get_ref()),
            allow_refunds: limit.allow_refunds.as_ref().is_none_or(|a| *a.get_ref()),
            allow_reports,
            count_refused: limit.count_refused.as_ref().is_some_and(|c| *c.get_ref()),
            after_response,
            max_wait,
            penalty,
            plans: plans.map(std::sync::Arc::new),
            matcher,
        })
    }

    /// `limits[index]`'s `block_for`, `block_max` and `block_forget`, for
    /// `limit` (which never refuses when `refuses_nothing`: a shadow limit
    /// or a ban).
    fn penalty(
        &self,
        index: usize,
        file: &FileLimit,
        limit: &Limit,
        refuses_nothing: bool,
    ) -> Result<Option<Penalty>, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let duration = |given: &Spanned<String>, name: &str| {
            let parsed = ratekeeper::duration::parse(given.get_ref())
                .map_err(|error| error.to_string())
                .and_then(|parsed| match parsed {
                    d if d < Duration::from_secs(1) || d > MAX_BLOCK => {
                        Err(format!("{name} is {}, outside 1s to 30d", given.get_ref()))
                    }
                    d => Ok(d),
                });
            match parsed {
                Ok(parsed) => Ok(parsed),
                Err(message) => self.fail(given.span(), field(name), message),
            }
        };
        let Some(block_for) = &file.block_for else {
            for (given, name) in [
                (&file.block_max, "block_max"),
                (&file.block_forget, "block_forget"),
            ] {
                if let Some(given) = given {
                    return self.fail(
                        given.span(),
                        field(name),
                        format!("{name} needs block_for, the first block's length"),
                    );
                }
            }
            return Ok(None);
        };
        let first = duration(block_for, "block_for")?;
        let max = match &file.block_max {
            Some(given) => duration(given, "block_max")?,
            None => first,
        };
        let forget = match &file.block_forget {
            Some(given) => duration(given, "block_forget")?,
            None => DEFAULT_BLOCK_FORGET,
        };
        let why = if !limit.policy().reserves_ahead() {
            Some(format!(
                "a block is the key's debt, which only a token bucket or GCRA carries; a {} forgets what it counted when its window moves on",
                limit.policy().kind()
            ))
        } else if refuses_nothing {
            Some(
                "a shadow limit or a ban blocks nobody: it refuses nothing, or everything"
                    .to_owned(),
            )
        } else if max < first {
            Some(format!(
                "block_max ({}) is shorter than block_for ({})",
                file.block_max.as_ref().map_or("", |m| m.get_ref()),
                block_for.get_ref()
            ))
        } else {
            None
        };
        match why {
            Some(why) => self.fail(block_for.span(), field("block_for"), why),
            None => Ok(Some(Penalty::new(first, max, forget))),
        }
    }

    /// `limits[index].max_wait`, for `limit` matching `matcher`.
    fn max_wait(
        &self,
        index: usize,
        wait: &Spanned<String>,
        limit: &Limit,
        matcher: &Match,
        after_response: &Option<AfterResponse>,
    ) -> Result<Duration, ConfigError> {
        let field = format!("limits[{index}].max_wait");
        let parsed = match ratekeeper::duration::parse(wait.get_ref()) {
            Ok(parsed) => parsed,
            Err(error) => return self.fail(wait.span(), field, error.to_string()),
        };
        let why = if parsed > MAX_WAIT {
            Some("max_wait is at most \"1m\": each held request keeps its connection".to_owned())
        } else if !limit.policy().reserves_ahead() {
            Some(format!(
                "max_wait holds a request until a token bucket's or GCRA's units are due; a {} forgets what it counted when its window moves on, so it cannot",
                limit.policy().kind()
            ))
        } else if matcher.reach() != Reach::Http {
            Some("max_wait holds HTTP requests in the proxy; a limit on Envoy descriptors is answered at once".to_owned())
        } else if after_response.is_some() {
            Some("max_wait holds a request before it runs, and after_response charges it after: give the limit one of them".to_owned())
        } else {
            None
        };
        match why {
            Some(why) => self.fail(wait.span(), field, why),
            None => Ok(parsed),
        }
    }

    /// `limits[index]` with `policy = "concurrency"`.
    fn in_flight(&self, index: usize, limit: FileLimit) -> Result<InFlightConfig, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let rate_only = [
            (limit.rate.as_ref().map(Spanned::span), "rate"),
            (limit.shadow.as_ref().map(Spanned::span), "shadow"),
            (
                limit.on_saturated.as_ref().map(Spanned::span),
                "on_saturated",
            ),
            (
                limit.allow_overrides.as_ref().map(Spanned::span),
                "allow_overrides",
            ),
            (
                limit.allow_refunds.as_ref().map(Spanned::span),
                "allow_refunds",
            ),
            (
                limit.allow_reports.as_ref().map(Spanned::span),
                "allow_reports",
            ),
            (
                limit.count_refused.as_ref().map(Spanned::span),
                "count_refused",
            ),
            (
                limit.after_response.as_ref().map(Spanned::span),
                "after_response",
            ),
            (limit.max_wait.as_ref().map(Spanned::span), "max_wait"),
            (limit.block_for.as_ref().map(Spanned::span), "block_for"),
            (limit.block_max.as_ref().map(Spanned::span), "block_max"),
            (
                limit.block_forget.as_ref().map(Spanned::span),
                "block_forget",
            ),
        ];
        for (given, name) in rate_only {
            if let Some(span) = given {
                return self.fail(
                    span,
                    field(name),
                    format!("{name} is for rate limits; policy = \"concurrency\" caps requests in flight with max_in_flight and lease"),
                );
            }
        }
        let Some(max) = &limit.max_in_flight else {
            return self.fail(
                limit.name.span(),
                format!("limits[{index}]"),
                "policy = \"concurrency\" needs max_in_flight, the most requests of a key at once",
            );
        };
        let lease = match &limit.lease {
            None => DEFAULT_IN_FLIGHT_LEASE,
            Some(lease) => match ratekeeper::duration::parse(lease.get_ref()) {
                Ok(lease) => lease,
                Err(error) => return self.fail(lease.span(), field("lease"), error.to_string()),
            },
        };
        let cap = match InFlight::new(limit.name.get_ref().clone(), *max.get_ref(), lease) {
            Ok(cap) => cap,
            Err(error @ InFlightError::Max { .. }) => {
                return self.fail(max.span(), field("max_in_flight"), error.to_string())
            }
            Err(error @ InFlightError::Lease { .. }) => {
                let span = limit
                    .lease
                    .as_ref()
                    .map_or(limit.name.span(), Spanned::span);
                return self.fail(span, field("lease"), error.to_string());
            }
            Err(error) => return self.fail(limit.name.span(), field("name"), error.to_string()),
        };
        let key = self.key(index, &limit)?;
        let key_span = limit.key.span();
        let (matcher, span) = match limit.matcher {
            None => (Match::default(), limit.name.span()),
            Some(matcher) => {
                let span = matcher.span();
                (self.matcher(index, matcher.into_inner())?, span)
            }
        };
        // A cap whose key part its requests never have would hold every
        // request under one key: refused, where a rate limit is warned of.
        match matcher.reach() {
            Reach::Http => {
                if let Some(part) = key
                    .iter()
                    .find(|part| matches!(part, KeyPart::Descriptor(_)))
                {
                    return self.fail(
                        key_span,
                        field("key"),
                        format!("{part} is read from Envoy descriptors, and this cap applies to HTTP requests (the proxy, /v1/acquire): match a domain and descriptors, or key it by what an HTTP request has"),
                    );
                }
            }
            Reach::Descriptors => {
                if let Some(part) = key
                    .iter()
                    .find(|part| matches!(part, KeyPart::Route | KeyPart::Header(_)))
                {
                    return self.fail(
                        key_span,
                        field("key"),
                        format!("{part} is read from HTTP requests, and this cap applies to Envoy descriptors: key it by descriptor:KEY, peer or client_ip (from remote_address) or global"),
                    );
                }
            }
            Reach::Nowhere(why) => {
                return self.fail(
                    span,
                    field("match"),
                    format!("no request can meet this cap: {why}"),
                );
            }
        }
        Ok(InFlightConfig { cap, key, matcher })
    }

    /// `limits[index].after_response`.
    fn after_response(
        &self,
        index: usize,
        after: &FileAfterResponse,
    ) -> Result<AfterResponse, ConfigError> {
        let field = |name: &str| format!("limits[{index}].after_response.{name}");
        let text = after.cost.get_ref().trim();
        let header = |name: &str| {
            http::HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                self.at.invalid(
                    after.cost.span(),
                    field("cost"),
                    format!("{name:?} is not a header name"),
                )
            })
        };
        let cost = if let Some(name) = text.strip_prefix("header:") {
            CostSource::Header(header(name)?)
        } else if let Some(name) = text.strip_prefix("trailer:") {
            CostSource::Trailer(header(name)?)
        } else if text == "failures" {
            CostSource::Failures
        } else if text == "successes" {
            CostSource::Successes
        } else {
            return self.fail(
                after.cost.span(),
                field("cost"),
                format!("unknown cost {text:?}; expected \"header:NAME\", \"trailer:NAME\", \"failures\" or \"successes\""),
            );
        };
        let ttl = match &after.ttl {
            None => std::time::Duration::from_secs(60),
            Some(ttl) => match ratekeeper::duration::parse(ttl.get_ref()) {
                Ok(ttl) if !ttl.is_zero() && ttl <= MAX_RESERVATION_TTL => ttl,
                Ok(_) => {
                    return self.fail(
                        ttl.span(),
                        field("ttl"),
                        "a ttl is more than 0 and at most an hour",
                    )
                }
                Err(error) => return self.fail(ttl.span(), field("ttl"), error.to_string()),
            },
        };
        Ok(AfterResponse {
            cost,
            estimate: after
                .estimate
                .as_ref()
                .map_or(1, |estimate| *estimate.get_ref()),
            ttl,
        })
    }

    pub(super) fn key(&self, index: usize, limit: &FileLimit) -> Result<Vec<KeyPart>, ConfigError> {
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
        let no_proxies = matches!(
            limit.trusted_proxies.as_ref().map(Spanned::get_ref),
            Some(FileTrust::List(list)) if list.is_empty()
        );
        let only_with = [
            (
                "trusted_proxies",
                unless_default(
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
                unless_default(
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
                unless_default(
                    limit.ipv4_prefix.as_ref().map(Spanned::span),
                    limit.ipv4_prefix.as_ref().map(|n| *n.get_ref())
                        == Some(u64::from(DEFAULT_IPV4_PREFIX)),
                ),
                address,
                "\"client_ip\" or \"peer\"",
            ),
            (
                "ipv6_prefix",
                unless_default(
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
    pub(super) fn prefixes(
        &self,
        index: usize,
        limit: &FileLimit,
    ) -> Result<Prefixes, ConfigError> {
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
    pub(super) fn client_ip(
        &self,
        index: usize,
        limit: &FileLimit,
    ) -> Result<ClientIp, ConfigError> {
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
    pub(super) fn trusted(
        &self,
        index: usize,
        trusted: &Spanned<FileTrust>,
    ) -> Result<Vec<IpNet>, ConfigError> {
        self.networks(format!("limits[{index}].trusted_proxies"), trusted)
    }

    /// A list of networks as `trusted_proxies` takes it, at `field`.
    pub(super) fn networks(
        &self,
        field: String,
        trusted: &Spanned<FileTrust>,
    ) -> Result<Vec<IpNet>, ConfigError> {
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

    pub(super) fn matcher(&self, index: usize, matcher: FileMatch) -> Result<Match, ConfigError> {
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

    pub(super) fn descriptor(
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
        let value = match &entry.value {
            None => ValueMatch::Any,
            Some(value) => {
                if value.get_ref().is_empty() {
                    return self.fail(
                        value.span(),
                        format!("{field}.value"),
                        "the value must not be empty; leave it out to match any value",
                    );
                }
                ValueMatch::parse(value.get_ref())
            }
        };
        let mut except = Vec::new();
        if let Some(list) = &entry.except {
            if let ValueMatch::Exact(exact) = &value {
                return self.fail(
                    list.span(),
                    format!("{field}.except"),
                    format!("the value {exact:?} matches only itself: `except` applies to an entry without a value or with a `*`"),
                );
            }
            for (j, text) in list.get_ref().iter().enumerate() {
                if text.get_ref().is_empty() {
                    return self.fail(
                        text.span(),
                        format!("{field}.except[{j}]"),
                        "an `except` value must not be empty",
                    );
                }
                except.push(ValueMatch::parse(text.get_ref()));
            }
        }
        let share_threshold = entry.share_threshold.as_ref().is_some_and(|s| *s.get_ref());
        if let (true, ValueMatch::Exact(exact)) = (share_threshold, &value) {
            let span = entry
                .share_threshold
                .as_ref()
                .map_or_else(|| entry.key.span(), Spanned::span);
            return self.fail(
                span,
                format!("{field}.share_threshold"),
                format!("the value {exact:?} matches only itself, so it has one counter already: `share_threshold` applies to an entry without a value or with a `*`"),
            );
        }
        Ok(DescriptorMatch {
            key: entry.key.into_inner(),
            value,
            except,
            share_threshold,
        })
    }
}

/// A limit's `rate`, and whether it is a ban: an amount of 0 (`0/minute`,
/// `0 per hour`) refuses every request, and is kept as one per the same
/// period for the window it reports.
pub(super) fn parse_rate(text: &str) -> Result<(Rate, bool), ratekeeper::policy::ParseRateError> {
    let trimmed = text.trim();
    let amount_end = trimmed
        .find(|c: char| c.is_whitespace() || c == '/')
        .unwrap_or(trimmed.len());
    let (amount, rest) = trimmed.split_at(amount_end);
    if !amount.is_empty() && amount.bytes().all(|b| b == b'0') {
        let rate: Rate = format!("1{rest}").parse()?;
        if rate.explicit_burst().is_none() {
            return Ok((rate, true));
        }
    }
    Ok((text.parse()?, false))
}

#[cfg(test)]
mod tests {
    use super::parse_rate;

    #[test]
    fn a_rate_of_zero_is_a_ban_with_its_window() {
        let (rate, ban) = parse_rate("0/minute").unwrap();
        assert!(ban);
        assert_eq!(rate.period(), std::time::Duration::from_secs(60));
        let (rate, ban) = parse_rate(" 00 per 30 days").unwrap();
        assert!(ban);
        assert_eq!(rate.period().as_secs(), 30 * 86_400);
        assert!(!parse_rate("10/minute").unwrap().1);
        // A burst means nothing to a ban: the rate's own error.
        assert!(parse_rate("0/minute burst 5").is_err());
        assert!(parse_rate("0/fortnight").is_err());
    }
}
