//! `ShouldRateLimit`: Envoy's request turned into the engine's checks, and
//! the engine's verdict into Envoy's response.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{store::AnsweredBy, Decision, FixedWindow, Limit, Rate};
use ratekeeper_tower::headers::{self};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use tower::Layer;

use super::error::EnvoyError;
use super::overrides::OverrideLimits;
use super::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use super::proto::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use super::proto::rate_limit_service_server::RateLimitService;
use super::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit};
use super::response::{
    add_envoy_ratelimit_headers, add_headers, by_descriptor, descriptor_status, header, zero_status,
};
use super::unary::EnvoyServer;
use super::units;
use crate::access::{self, RequireTokenService};
use crate::config::envoy::{CounterKey, Matched, RateLimit as FileLimit};
use crate::config::{ConnectionConfig, Counting, KeyPart, LimitConfig, Match, OnSaturated};
use crate::engine::explain::describe_descriptors;
use crate::engine::matching::{self, DescriptorSource};
use crate::engine::{
    compose, ActiveLimit, Check, DecisionDoor, Engine, LimitResult, LimitSet, OrUnknown,
    SATURATED_HEADER, STORE_HEADER,
};
use crate::listen::{Door, Protocol};

/// Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`)
/// deciding through an [`Engine`].
///
/// Serve it with [`EnvoyService::into_server`] on a tonic server; or call
/// [`EnvoyService::decide`] directly. See the [module](super) for what it
/// answers.
#[derive(Clone, Debug)]
pub struct EnvoyService {
    engine: Engine,
    /// Shared by every clone: the cap on override rates is the service's.
    overrides: Arc<OverrideLimits>,
}

/// One check of the request, and what it belongs to.
pub(super) struct Planned {
    /// The request descriptor it comes from.
    pub(super) descriptor: usize,
    /// Whether its hits are given back (`is_negative_hits`).
    pub(super) refund: bool,
    /// The limit as Envoy's `current_limit` shows it.
    pub(super) shown: RateLimit,
    /// A limit of envoyproxy/ratelimit's files in quota mode: decided as
    /// a shadow limit is, and over its limit only refusing the request
    /// when every quota of the request is.
    pub(super) quota: bool,
}

/// What envoyproxy/ratelimit's files say of a descriptor that no limit
/// counts.
#[derive(Clone)]
enum Uncounted {
    /// `unlimited`: OK with the largest remaining count.
    Unlimited,
    /// Zero requests per unit (a file's or an override's): over the limit,
    /// unless in shadow or quota mode.
    Zero {
        shown: RateLimit,
        window: Duration,
        shadow: bool,
        quota: bool,
    },
}

/// What a descriptor's override asks for.
enum Override {
    /// A limit of its own.
    Limit(Arc<ActiveLimit>, RateLimit),
    /// Zero requests per unit: every hit is over the limit.
    Zero(RateLimit, Duration),
}

impl EnvoyService {
    /// The service deciding through `engine`.
    pub fn new(engine: Engine) -> EnvoyService {
        EnvoyService {
            engine,
            overrides: Arc::default(),
        }
    }

    /// The gRPC server of this service (`ShouldRateLimit` decoded and
    /// answered by [`EnvoyServer`] itself, other methods by tonic's
    /// generated server), to serve with hyper or add to a
    /// `tonic::transport::Server`; it takes messages up to the engine's
    /// `requests.max_body_bytes` (read now: a reload does not change it),
    /// and is behind the engine's `[access.decisions]` tokens when it has
    /// some: a call without one is answered `UNAUTHENTICATED` (see
    /// [`crate::access`]). Other services on the same server (gRPC health)
    /// are not behind it.
    pub fn into_server(self) -> RequireTokenService<EnvoyServer> {
        let max = self.engine.request_caps().max_body_bytes;
        let access = self.engine.access().layer(access::Door::Grpc);
        access.layer(EnvoyServer::new(self, max))
    }

    /// Serves this service over gRPC (HTTP/2) on `listener` until
    /// `shutdown` completes, then lets the calls in flight finish, with the
    /// default [`ConnectionConfig`](crate::config::ConnectionConfig)'s
    /// timeouts and caps (what `ratekeeper serve` does with its own).
    ///
    /// ```no_run
    /// # async fn run(engine: ratekeeper_server::engine::Engine) -> Result<(), Box<dyn std::error::Error>> {
    /// use ratekeeper_server::envoy::EnvoyService;
    ///
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
    /// EnvoyService::new(engine)
    ///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
    ///     .await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()> + Send) {
        let door = Door::new(
            "grpc",
            Protocol::Http2,
            &ConnectionConfig::default(),
            &crate::listen::ConnectionStats::default(),
        );
        crate::listen::serve(listener, door, self.into_server(), shutdown).await;
    }

    /// The engine it decides through.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Answers one `ShouldRateLimit` request.
    ///
    /// Errors are a failed store ([`EnvoyError::Store`]), malformed
    /// requests (no domain, no descriptors, an override with an unknown
    /// unit) and requests over the engine's
    /// [`RequestCaps`](crate::config::RequestCaps) ([`EnvoyError::OverCap`]);
    /// whatever the request holds, this never panics, and its work is
    /// linear in the request's size.
    pub async fn decide(
        &self,
        request: &RateLimitRequest,
    ) -> Result<RateLimitResponse, EnvoyError> {
        Ok(self.decide_answered(request).await?.0)
    }

    /// [`EnvoyService::decide`], and who answered: the store, or the
    /// failure policy while it failed (then `response_headers_to_add`
    /// carries `x-ratekeeper-store` too, and the gRPC door sends it as
    /// response metadata).
    pub async fn decide_answered(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RateLimitResponse, AnsweredBy), EnvoyError> {
        if request.domain.is_empty() {
            return Err(EnvoyError::EmptyDomain);
        }
        if request.descriptors.is_empty() {
            return Err(EnvoyError::NoDescriptors);
        }
        // Before any work: a request over a cap costs no more than one at it.
        let caps = self.engine.request_caps();
        caps.check_descriptors(request.descriptors.iter().map(|descriptor| {
            descriptor
                .entries
                .iter()
                .map(|entry| (entry.key.as_str(), entry.value.as_str()))
        }))?;
        caps.value(&request.domain, || "domain".to_owned())?;
        let domain = request.domain.as_str();
        let limits = self.engine.limits();
        let request_hits = match request.hits_addend {
            0 => 1,
            hits => u64::from(hits),
        };
        let door = self.engine.envoy_door();
        let envoy = limits.envoy();
        let tree = envoy.and_then(|envoy| envoy.domain(domain));
        let knows_domain = tree.is_some() || matching::knows_domain(&limits, domain);

        // Envoy's service: an override replaces the configured limits, in
        // a domain it knows, unless one of them forbids it.
        let honoured: Vec<Option<&RateLimitOverride>> = request
            .descriptors
            .iter()
            .map(|descriptor| match &descriptor.limit {
                Some(limit_override) if knows_domain => self
                    .overrides_allowed(&limits, domain, descriptor)
                    .then_some(limit_override),
                _ => None,
            })
            .collect();
        // The files' limit of each descriptor, then those another's
        // `replaces` drops (an unlimited one's `replaces` counts too).
        let mut matched: Vec<Option<Matched<'_>>> = match tree {
            Some(tree) => request
                .descriptors
                .iter()
                .zip(&honoured)
                .map(|(descriptor, honoured)| match honoured {
                    Some(_) => None,
                    None => tree.get_limit(&descriptor.entries),
                })
                .collect(),
            None => Vec::new(),
        };
        drop_replaced(&mut matched);

        let mut takes = Vec::new();
        let mut take_plans = Vec::new();
        let mut refunds = Vec::new();
        let mut refund_plans = Vec::new();
        let mut uncounted: Vec<Option<Uncounted>> = vec![None; request.descriptors.len()];
        let mut blocked = false;

        for (index, descriptor) in request.descriptors.iter().enumerate() {
            let hits = descriptor.hits_addend.unwrap_or(request_hits);
            let refund = descriptor.is_negative_hits;
            let mut push = |limit: Arc<ActiveLimit>, key: Vec<u8>, shown: RateLimit, quota| {
                let plan = Planned {
                    descriptor: index,
                    refund,
                    shown,
                    quota,
                };
                let check = Check::new(limit, key, hits);
                if refund {
                    refunds.push(check);
                    refund_plans.push(plan);
                } else {
                    takes.push(check);
                    take_plans.push(plan);
                }
            };
            if let Some(limit_override) = honoured[index] {
                match override_limit(
                    index,
                    limit_override,
                    &self.overrides,
                    caps.max_override_rates,
                )? {
                    Override::Limit(limit, shown) => {
                        push(
                            limit,
                            override_key(domain, &descriptor.entries),
                            shown,
                            false,
                        );
                    }
                    Override::Zero(shown, window) => {
                        blocked |= hits > 0 && !refund;
                        uncounted[index] = Some(Uncounted::Zero {
                            shown,
                            window,
                            shadow: false,
                            quota: false,
                        });
                    }
                }
                continue;
            }
            if let (Some(envoy), Some(found)) = (envoy, matched.get(index).and_then(Option::as_ref))
            {
                let limit = found.limit;
                let quota = limit.quota_mode || door.quota_mode;
                match envoy.limit(limit) {
                    Some(active) => {
                        let key = counter_key(&found.counter_key);
                        push(Arc::clone(active), key, file_rate(limit), quota);
                    }
                    None if limit.unlimited => uncounted[index] = Some(Uncounted::Unlimited),
                    None => {
                        let window = limit.unit.map_or(Duration::ZERO, |unit| unit.duration());
                        blocked |= hits > 0 && !refund && !limit.shadow_mode && !quota;
                        uncounted[index] = Some(Uncounted::Zero {
                            shown: file_rate(limit),
                            window,
                            shadow: limit.shadow_mode,
                            quota,
                        });
                    }
                }
            }
            let source = OrUnknown(DescriptorSource(&descriptor.entries));
            for limit in matching::applicable(&limits, domain, &descriptor.entries) {
                if refund && !limit.config().allow_refunds {
                    return Err(EnvoyError::RefundForbidden {
                        index,
                        limit: limit.name().to_owned(),
                    });
                }
                let parts = matching::key_parts(limit.config());
                // OrUnknown gives every part, so this cannot fail;
                // a limit without a key would simply not apply.
                let Ok(key) = compose(&parts, &source) else {
                    continue;
                };
                push(Arc::clone(limit), key, configured_rate(limit), false);
            }
        }

        // Limitador's limits, when the domain is one of its namespaces.
        super::limitador::plan(
            &limits,
            request,
            request_hits,
            super::limitador::Plan {
                takes: &mut takes,
                plans: &mut take_plans,
                zero: &mut |index, shown, window| {
                    uncounted[index] = Some(Uncounted::Zero {
                        shown,
                        window,
                        shadow: false,
                        quota: false,
                    });
                },
                blocked: &mut blocked,
            },
        );

        if takes.is_empty() && refunds.is_empty() && uncounted.iter().all(Option::is_none) {
            self.engine
                .record_unmatched(DecisionDoor::Grpc, &limits, domain, || {
                    describe_descriptors(
                        domain,
                        request.descriptors.iter().map(|d| d.entries.as_slice()),
                    )
                });
        }

        // Refunds first: they never depend on the rest of the request.
        if !refunds.is_empty() {
            self.engine.refund(&refunds).await?;
        }
        let asked = takes.len();
        // Global shadow mode counts each limit that allows, as enforcing
        // would, whatever the others say: the request goes on either way.
        let counting = match door.shadow_mode {
            true => Counting::EachDescriptor,
            false => door.counting,
        };
        // A zero limit refuses the request: the others only report (in
        // global shadow mode, where nothing refuses, they count).
        let taken = if blocked && !door.shadow_mode {
            self.engine.peek(takes).await?
        } else {
            self.engine.check_counting(takes, counting).await?
        };
        let retry_after = taken.retry_after();
        let refunded = if refund_plans.is_empty() {
            Vec::new()
        } else {
            self.engine.peek(refunds).await?.results
        };
        if taken.results.len() != asked || refunded.len() != refund_plans.len() {
            return Err(EnvoyError::Mismatch {
                asked: asked + refund_plans.len(),
                got: taken.results.len() + refunded.len(),
            });
        }
        let results: Vec<(&LimitResult, &Planned, Decision)> = taken
            .results
            .iter()
            .zip(&take_plans)
            .chain(refunded.iter().zip(&refund_plans))
            .map(|(result, plan)| (result, plan, result.decision()))
            .collect();

        let mine = by_descriptor(
            request.descriptors.len(),
            results.iter().map(|(_, plan, _)| plan.descriptor),
        );
        // envoyproxy/ratelimit's rule: the request is over its limit when
        // a descriptor not in quota mode is, or when every one in quota
        // mode is.
        let (mut over, mut quotas, mut quotas_over) = (false, 0usize, 0usize);
        let statuses: Vec<DescriptorStatus> = uncounted
            .into_iter()
            .enumerate()
            .map(|(index, uncounted)| {
                let results = || mine.of(index).iter().map(|&at| &results[at]);
                let (status, quota) = match uncounted {
                    Some(Uncounted::Zero {
                        shown,
                        window,
                        shadow,
                        quota,
                    }) => {
                        let mut status = zero_status(shown, window);
                        if shadow {
                            status.code = Code::Ok as i32;
                        }
                        (status, quota && !shadow)
                    }
                    Some(Uncounted::Unlimited) if mine.of(index).is_empty() => (
                        DescriptorStatus {
                            code: Code::Ok as i32,
                            limit_remaining: u32::MAX,
                            ..DescriptorStatus::default()
                        },
                        false,
                    ),
                    _ => (
                        descriptor_status(results(), door.shadow_mode),
                        results().any(|(_, plan, _)| plan.quota),
                    ),
                };
                let mut status = status;
                if quota {
                    quotas += 1;
                    let refused = results()
                        .any(|(result, plan, _)| plan.quota && !plan.refund && result.refused())
                        || status.code == Code::OverLimit as i32;
                    if refused {
                        quotas_over += 1;
                        status.code = Code::OverLimit as i32;
                        status.limit_remaining = 0;
                    }
                } else {
                    over |= status.code == Code::OverLimit as i32;
                }
                status
            })
            .collect();
        over |= quotas > 0 && quotas == quotas_over;
        if over && door.shadow_mode {
            over = false;
            self.engine.decision_metrics().record_global_shadow();
        }
        let mut response = RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            ..RateLimitResponse::default()
        };
        if door.response_headers.draft() {
            add_headers(&mut response.response_headers_to_add, &results);
        }
        if door.response_headers.envoy_ratelimit() {
            add_envoy_ratelimit_headers(
                &mut response.response_headers_to_add,
                &response.statuses,
                &door,
            );
        }
        if let Some(names) = taken.saturated_header() {
            response
                .response_headers_to_add
                .push(header(SATURATED_HEADER, names));
        }
        let answered_by = results
            .iter()
            .fold(AnsweredBy::Store, |by, (result, _, _)| {
                by.or(result.answered_by)
            });
        if answered_by.is_failover() {
            response
                .response_headers_to_add
                .push(header(STORE_HEADER, answered_by.as_str().to_owned()));
        }
        if over {
            if let Some(secs) = headers::retry_after_secs(retry_after) {
                response
                    .response_headers_to_add
                    .push(header("retry-after", secs.to_string()));
            }
        }
        Ok((response, answered_by))
    }
}

impl EnvoyService {
    /// Whether `descriptor`'s override may replace the limits it matches:
    /// not when one of them says `allow_overrides = false`. Each such limit
    /// counts the refusal, and logs its first with the fix.
    fn overrides_allowed(
        &self,
        limits: &LimitSet,
        domain: &str,
        descriptor: &RateLimitDescriptor,
    ) -> bool {
        let mut allowed = true;
        for limit in matching::applicable(limits, domain, &descriptor.entries) {
            if limit.config().allow_overrides {
                continue;
            }
            allowed = false;
            if self
                .engine
                .decision_metrics()
                .record_override_refused(limit.name())
            {
                tracing::warn!(
                    limit = limit.name(),
                    "limit {name} has allow_overrides = false: a descriptor's limit override \
                     was ignored and {name} decided. If your Envoy sets overrides on purpose \
                     (a rate limit action's `limit` from metadata), set allow_overrides = true \
                     on {name}; otherwise a caller is trying to raise its own limit. Said once \
                     per limit; ratekeeper_overrides_refused_total counts every one",
                    name = limit.name(),
                );
            }
        }
        allowed
    }
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let (answer, answered_by) = self
            .decide_answered(request.get_ref())
            .await
            .map_err(Status::from)?;
        let mut response = Response::new(answer);
        if answered_by.is_failover() {
            response.metadata_mut().insert(
                STORE_HEADER,
                tonic::metadata::MetadataValue::from_static(answered_by.as_str()),
            );
        }
        Ok(response)
    }
}

/// Drops the limits whose name a matched limit's `replaces` names, as
/// envoyproxy/ratelimit does across one request's descriptors.
fn drop_replaced(matched: &mut [Option<Matched<'_>>]) {
    let replaced = |name: &str| {
        matched
            .iter()
            .flatten()
            .any(|found| found.limit.replaces.iter().any(|r| r == name))
    };
    // Most configurations replace nothing: no work for them.
    if !matched
        .iter()
        .flatten()
        .any(|found| !found.limit.replaces.is_empty())
    {
        return;
    }
    let drop: Vec<bool> = matched
        .iter()
        .map(|found| {
            found
                .as_ref()
                .and_then(|found| found.limit.name.as_deref())
                .is_some_and(replaced)
        })
        .collect();
    for (found, drop) in matched.iter_mut().zip(drop) {
        if drop {
            *found = None;
        }
    }
}

/// A limit of envoyproxy/ratelimit's files as Envoy's `current_limit`:
/// its name (empty when it has none) and rate, as that service shows it.
fn file_rate(limit: &FileLimit) -> RateLimit {
    use super::proto::rate_limit_response::rate_limit::Unit;
    use crate::config::envoy::Unit as FileUnit;
    let unit = match limit.unit {
        None => Unit::Unknown,
        Some(FileUnit::Second) => Unit::Second,
        Some(FileUnit::Minute) => Unit::Minute,
        Some(FileUnit::Hour) => Unit::Hour,
        Some(FileUnit::Day) => Unit::Day,
        Some(FileUnit::Week) => Unit::Week,
        Some(FileUnit::Month) => Unit::Month,
        Some(FileUnit::Year) => Unit::Year,
    };
    RateLimit {
        name: limit.name.clone().unwrap_or_default(),
        requests_per_unit: limit.requests_per_unit,
        unit: unit as i32,
    }
}

/// The key of a counter of envoyproxy/ratelimit's files within its limit:
/// every entry, escaped as [`override_key`] escapes (a `share_threshold`
/// wildcard's entries carry its pattern, so they share it).
fn counter_key(key: &CounterKey<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.parts.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (name, value) in &key.parts {
        out.push(b'|');
        escape_into(&mut out, name);
        out.push(b'=');
        escape_into(&mut out, value);
    }
    out
}

/// `text` with `|`, `=` and `\` escaped, so that keys joined by them
/// never meet.
fn escape_into(key: &mut Vec<u8>, text: &str) {
    for byte in text.bytes() {
        if matches!(byte, b'|' | b'=' | b'\\') {
            key.push(b'\\');
        }
        key.push(byte);
    }
}

/// A configured limit as Envoy's `current_limit`.
fn configured_rate(limit: &ActiveLimit) -> RateLimit {
    let config = limit.config();
    let rate = &config.rate;
    let (requests_per_unit, unit) = match config.ban {
        true => (0, units::ban_unit(rate.period())),
        false => units::envoy_rate(rate.amount(), rate.period()),
    };
    RateLimit {
        name: limit.name().to_owned(),
        requests_per_unit,
        unit: unit as i32,
    }
}

/// The limit a descriptor's override asks for: a fixed window of
/// `requests_per_unit` per unit, as Envoy's own service counts, named
/// `envoy-override-N-per-UNIT` so that different overrides never share a
/// count. Made once per rate and kept in `made`, at most `max` rates.
fn override_limit(
    index: usize,
    limit_override: &RateLimitOverride,
    made: &OverrideLimits,
    max: usize,
) -> Result<Override, EnvoyError> {
    let invalid = |reason: String| EnvoyError::InvalidOverride { index, reason };
    let unit = RateLimitUnit::try_from(limit_override.unit)
        .map_err(|_| invalid(format!("unknown unit {}", limit_override.unit)))?;
    let window =
        units::unit_duration(unit).ok_or_else(|| invalid("the unit is UNKNOWN".to_owned()))?;
    let requests = limit_override.requests_per_unit;
    let unit_name = unit.as_str_name().to_ascii_lowercase();
    let shown = RateLimit {
        name: format!("envoy-override-{requests}-per-{unit_name}"),
        requests_per_unit: requests,
        unit: units::response_unit(unit) as i32,
    };
    if requests == 0 {
        return Ok(Override::Zero(shown, window));
    }
    let active = made.get_or_make(index, (requests, unit), max, || {
        let rate = Rate::new(u64::from(requests), window).map_err(|e| invalid(e.to_string()))?;
        let policy = FixedWindow::from_rate(&rate).map_err(|e| invalid(e.to_string()))?;
        let limit = Limit::new(shown.name.clone(), policy).map_err(|e| invalid(e.to_string()))?;
        Ok::<_, EnvoyError>(Arc::new(ActiveLimit::new(LimitConfig {
            limit,
            rate,
            ban: false,
            key: vec![KeyPart::Global],
            shadow: false,
            on_saturated: OnSaturated::default(),
            allow_overrides: true,
            allow_refunds: true,
            matcher: Match::default(),
        })))
    })?;
    Ok(Override::Limit(active, shown))
}

/// The key of an override: the domain and every entry, as Envoy's service
/// keys it, with `|`, `=` and `\` escaped so different descriptors never
/// share a key.
fn override_key(domain: &str, entries: &[Entry]) -> Vec<u8> {
    let mut key = Vec::with_capacity(domain.len() + 16 * entries.len());
    escape_into(&mut key, domain);
    for entry in entries {
        key.push(b'|');
        escape_into(&mut key, &entry.key);
        key.push(b'=');
        escape_into(&mut key, &entry.value);
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CapError;
    use crate::envoy::proto::RateLimitDescriptor;
    use crate::Config;
    use ratekeeper::{clock::ManualClock, Timestamp};

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn override_keys_never_mix_domains_or_entries() {
        let a = override_key("d", &[entry("k", "a|b=c")]);
        assert_eq!(a, b"d|k=a\\|b\\=c");
        assert_ne!(a, override_key("d", &[entry("k", "a"), entry("b", "c")]));
        assert_ne!(
            override_key("d|k=v", &[]),
            override_key("d", &[entry("k", "v")])
        );
    }

    #[test]
    fn overrides_are_checked() {
        let made = OverrideLimits::default();
        let check = |at, o: &RateLimitOverride| override_limit(at, o, &made, 8);
        let unknown = RateLimitOverride {
            requests_per_unit: 1,
            unit: 0,
        };
        assert!(matches!(
            check(2, &unknown),
            Err(EnvoyError::InvalidOverride { index: 2, .. })
        ));
        let bogus = RateLimitOverride {
            requests_per_unit: 1,
            unit: 99,
        };
        assert!(check(0, &bogus).is_err());
        let month = RateLimitOverride {
            requests_per_unit: 100,
            unit: RateLimitUnit::Month as i32,
        };
        let Ok(Override::Limit(limit, shown)) = check(0, &month) else {
            panic!("a valid override");
        };
        assert_eq!(limit.name(), "envoy-override-100-per-month");
        assert_eq!(limit.window(), Duration::from_secs(30 * 86_400));
        assert_eq!((shown.requests_per_unit, shown.unit), (100, 5));
        assert!(!limit.is_shadow());
        // Nothing invalid was kept.
        assert_eq!(made.len(), 1);
    }

    #[test]
    fn override_rates_are_made_once_and_capped() {
        let made = OverrideLimits::default();
        let per_minute = |requests_per_unit| RateLimitOverride {
            requests_per_unit,
            unit: RateLimitUnit::Minute as i32,
        };
        let limit_of = |o: Result<Override, EnvoyError>| match o {
            Ok(Override::Limit(limit, _)) => limit,
            _ => panic!("a limit"),
        };
        let first = limit_of(override_limit(0, &per_minute(5), &made, 3));
        let again = limit_of(override_limit(1, &per_minute(5), &made, 3));
        assert!(Arc::ptr_eq(&first, &again), "one limit per rate");
        for requests in [6, 7] {
            limit_of(override_limit(0, &per_minute(requests), &made, 3));
        }
        // A fourth rate is refused, naming the cap; the three known still work.
        let refused = override_limit(4, &per_minute(8), &made, 3);
        let Err(
            error @ EnvoyError::OverCap(CapError::OverrideRates {
                index: 4, max: 3, ..
            }),
        ) = refused
        else {
            panic!("the cap refuses a fourth rate");
        };
        assert!(
            error.to_string().contains("requests.max_override_rates"),
            "{error}"
        );
        assert_eq!(
            tonic::Status::from(error).code(),
            tonic::Code::ResourceExhausted
        );
        limit_of(override_limit(0, &per_minute(6), &made, 3));
        // Zero overrides are not limits and take no room.
        assert!(matches!(
            override_limit(0, &per_minute(0), &made, 3),
            Ok(Override::Zero(..))
        ));
        assert_eq!(made.len(), 3);
    }

    #[test]
    fn positions_group_by_descriptor_in_order() {
        let groups = by_descriptor(4, [2, 0, 2, 3, 0, 9].into_iter());
        assert_eq!(groups.of(0), [1, 4]);
        assert!(groups.of(1).is_empty());
        assert_eq!(groups.of(2), [0, 2]);
        assert_eq!(groups.of(3), [3]);
        // Out of range: nothing, never a panic.
        assert!(groups.of(4).is_empty());
        assert!(groups.of(usize::MAX).is_empty());
    }

    /// The results the answer looks at for a request of `count`
    /// descriptors, each matched by a configured limit and each with an
    /// override of its own rate (a limit name of its own).
    fn steps_for(count: usize) -> u64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let config = Config::from_toml_str(
                // Room for every override rate.
                "[requests]\nmax_override_rates = 256\n\
                 [[limits]]\nname = \"per-user\"\nrate = \"1000/minute\"\nkey = [\"global\"]\n\
                 match = { domain = \"d\", descriptors = [{ key = \"user\" }] }\n",
                "test.toml",
            )
            .unwrap();
            let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
            let service = EnvoyService::new(Engine::start(&config, clock).await.unwrap());
            let configured = (0..count).map(|i| RateLimitDescriptor {
                entries: vec![entry("user", &format!("u{i}"))],
                ..RateLimitDescriptor::default()
            });
            let overridden = (0..count).map(|i| RateLimitDescriptor {
                entries: vec![entry("other", &format!("o{i}"))],
                limit: Some(RateLimitOverride {
                    requests_per_unit: 1_000 + i as u32,
                    unit: RateLimitUnit::Minute as i32,
                }),
                ..RateLimitDescriptor::default()
            });
            let request = RateLimitRequest {
                domain: "d".into(),
                descriptors: configured.chain(overridden).collect(),
                hits_addend: 0,
            };
            crate::envoy::response::work::take();
            let response = service.decide(&request).await.unwrap();
            assert_eq!(response.statuses.len(), 2 * count);
            assert!(response
                .statuses
                .iter()
                .all(|status| status.code == Code::Ok as i32));
            crate::envoy::response::work::take()
        })
    }

    #[test]
    fn the_work_of_an_answer_is_linear_in_the_descriptors() {
        let (small, large) = (steps_for(32), steps_for(128));
        // Every result is looked at, a bounded number of times each.
        assert!(small >= 2 * 32, "{small}");
        assert!(
            large <= 4 * small,
            "32 descriptors: {small} steps, 128: {large}"
        );
    }
}
