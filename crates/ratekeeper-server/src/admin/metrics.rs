//! `GET /metrics`: the service's metrics in the Prometheus text format
//! (version 0.0.4), encoded by `prometheus-client`.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `ratekeeper_decisions_total` | counter | `limit`, `decision` (`allowed`, `denied`) | what each configured limit decided |
//! | `ratekeeper_near_limit_total` | counter | `limit` | allowed decisions that left at most [`NEAR_LIMIT_PERCENT`]% of the quota |
//! | `ratekeeper_untrusted_forwarding_headers_total` | counter | `limit` | requests whose forwarding header (`X-Forwarded-For`, `Forwarded`, the limit's `client_ip_from` header, nginx's `X-Real-IP`) a limit keyed by `client_ip` ignored because the peer is not one of its `trusted_proxies`: above zero, a proxy in front is probably missing from `trusted_proxies` |
//! | `ratekeeper_saturated_total` | counter | `limit` | decisions on a new key while the in-memory table was full (refused, or let through uncounted with `on_saturated = "allow"`) |
//! | `ratekeeper_overrides_refused_total` | counter | `limit` | Envoy descriptor `limit` overrides ignored because a limit the descriptor matches has `allow_overrides = false` (the limit decided instead) |
//! | `ratekeeper_plans`, `ratekeeper_plan_table_keys` | gauge | `limit` | plans a limit has (at most 64), and the keys its plan table lists (at most 1,000,000) |
//! | `ratekeeper_plan_unknown_total` | counter | `limit` | requests to a limit with plans that named a plan it does not have: the limit's own numbers applied (never no limit) |
//! | `ratekeeper_plan_untrusted_total` | counter | `limit` | requests whose plan header (`plan_from = "header:NAME"`) came from a peer not in the limit's `plan_from_peers`: the header was ignored and the limit's own numbers applied |
//! | `ratekeeper_reports_total` | counter | `limit` | reports: units charged after the fact (`/v1/report`, Limitador's `/report`, the hits of a limit with `count_refused`, a commit's excess is not one) |
//! | `ratekeeper_report_units_total` | counter | `limit` | the units those reports charged |
//! | `ratekeeper_overdrafts_total` | counter | `limit` | reports that charged more than the key had left: it is refused until the debt is paid off |
//! | `ratekeeper_reservations_total` | counter | `limit`, `outcome` (`held`, `committed`, `cancelled`, `unknown`: asked to settle when no longer open, settled already or past its ttl, which settled it at its estimate) | reservations (`/v1/reserve`) and what became of them |
//! | `ratekeeper_penalty_blocks_total` | counter | `limit` | keys a limit's penalty (`block_for`) blocked, by this instance |
//! | `ratekeeper_penalty_refusals_total` | counter | `limit` | requests refused by a block this instance knew, without a call to the store |
//! | `ratekeeper_blocked_keys` | gauge | `limit` | keys this instance knows are blocked by a limit's penalty now (at most 10,000 over every limit) |
//! | `ratekeeper_in_flight_slots_total` | counter | `limit`, `outcome` (`taken`, `refused`: the key's slots were all taken, `released`, `unknown`: released when not taken, released already or freed by its lease) | slots of caps on requests in flight (`policy = "concurrency"`) |
//! | `ratekeeper_reservations_open` | gauge | | reservations open in the store, over every instance: held, not settled, not past their ttl (the in-memory and SQLite stores; Redis keeps them in a hash per key, which only a scan could count) |
//! | `ratekeeper_reservations_expired_total` | counter | | reservations that reached their ttl before anyone settled them, so stay at their estimate (the in-memory store; SQLite's as this process deletes them, on the key's next reservation or a purge) |
//! | `ratekeeper_proxy_upstream_overflow_total` | counter | | proxy requests answered `503` because `max_upstream_requests` (1,024 by default) were at the upstream |
//! | `ratekeeper_proxy_waiting_requests` | gauge | | proxy requests held now for a limit's `max_wait` |
//! | `ratekeeper_proxy_waits_total` | counter | `outcome` (`waited`: held, then sent on; `turned_away`: refused because `[requests] max_waiting` or `max_waiting_per_key` were held) | proxy requests a limit's `max_wait` could hold |
//! | `ratekeeper_envoy_shadow_mode_passes_total` | counter | | Envoy requests over a limit answered `OK` only because `[envoy] shadow_mode` is on |
//! | `ratekeeper_unauthenticated_requests_total` | counter | `door` (`http`, `grpc`, `admin`) | requests refused for want of a valid bearer token (`[access]`): 401, or gRPC `UNAUTHENTICATED` |
//! | `ratekeeper_unmatched_requests_total` | counter | `door` (`grpc`, `http_api`, `auth_request`, `proxy`), `domain` (the request's when a limit, file or namespace names it; `(unknown)` otherwise; empty for HTTP requests) | requests no limit applied to: allowed and counted nowhere. Above zero, a limit is probably not matching as meant: `ratekeeper explain` says why; the requests are logged at debug level, once per 10 s per door |
//! | `ratekeeper_decision_duration_seconds` | histogram | | time to decide one request (all its limits), from 1 µs to 1 s |
//! | `ratekeeper_limits_configured` | gauge | | limits in force (those of `[envoy] config_dir`'s files included) |
//! | `ratekeeper_store_up` | gauge | `store` | 1 when the store answers, 0 when not |
//! | `ratekeeper_store_state_since_seconds` | gauge | `store` | when the store last went up or down (or the service started), in seconds since the Unix epoch |
//! | `ratekeeper_ready` | gauge | | 1 when decisions are answered as configured (what `/readyz` says: the store answers, or its failure policy answers for it), 0 when not |
//! | `ratekeeper_failover_answers_total` | counter | `limit`, `how` (`fail_open`, `fallback`) | a limit's answers made by the failure policy while the store failed: allowed unlimited, or decided by the in-memory fallback |
//! | `ratekeeper_keys_tracked` | gauge | | keys the in-memory store holds (in-memory store only) |
//! | `ratekeeper_limit_keys` | gauge | `limit` | keys the in-memory store holds for each limit (in-memory store only): near `ratekeeper_max_keys`, new keys get `saturated` |
//! | `ratekeeper_max_keys` | gauge | | `store.max_keys`: the most keys the in-memory store (or the fallback) holds per limit |
//! | `ratekeeper_shadow_mode` | gauge | | 1 when `[enforcement] shadow_mode` is on: every limit decides and reports, none refuses |
//! | `ratekeeper_store_failures_total` | counter | `store` | calls the store failed |
//! | `ratekeeper_store_failed_open_total` | counter | `store` | requests allowed because the store failed open |
//! | `ratekeeper_store_failed_closed_total` | counter | `store` | requests refused because the store failed closed |
//! | `ratekeeper_store_fallback_total` | counter | `store` | requests decided by the in-memory fallback |
//! | `ratekeeper_connections_open` | gauge | `door` | connections a front door has open now |
//! | `ratekeeper_connections_accepted_total` | counter | `door` | connections a front door accepted |
//! | `ratekeeper_connections_closed_total` | counter | `door`, `reason` (`idle`, `header_timeout`, `pressure`, `max_age`, `shutdown`, `handshake`, `send_timeout`, `body_timeout`) | connections the service closed, and why |
//! | `ratekeeper_connection_cap_reached_total` | counter | `door` | times a new connection found its door at `max_connections` (a stalled or idle connection then gives way) |
//! | `ratekeeper_connection_errors_total` | counter | `door`, `kind` (`protocol`: the client broke HTTP's rules or HTTP/2's limits, such as too many resets; `io`) | connections that ended with an error (logged at most once per 10 s per door) |
//! | `ratekeeper_request_bytes_held` | gauge | `door` | bytes of requests still arriving (heads and bodies so far) that the door counts against `max_request_bytes_total` |
//! | `ratekeeper_request_bodies_refused_total` | counter | `door` | requests failed because their body would have taken the door past `max_request_bytes_total` |
//! | `ratekeeper_http2_streams_held` | gauge | `door` | HTTP/2 streams the door counts against `max_streams_total`: each connection at the most it has had open at once |
//! | `ratekeeper_http2_streams_refused_total` | counter | `door` | HTTP/2 streams refused (`REFUSED_STREAM`) because the door held `max_streams_total` |
//! | `ratekeeper_requests_timed_out_total` | counter | `door` | requests reset for taking longer than `request_timeout` |
//! | `ratekeeper_accept_errors_total` | counter | `door` | failed accepts (mostly: out of file descriptors) |
//! | `ratekeeper_config_reloads_total` | counter | `result` (`applied`, `refused`) | configuration reloads (SIGHUP, a changed file, `Service::reload`) put in force, or refused with the running configuration kept; an unchanged file is neither, and a file that stays broken or unreadable is one refusal |
//! | `ratekeeper_config_last_reload_successful` | gauge | | 1 when the last reload (or the start, before any) was applied, 0 when it was refused |
//! | `ratekeeper_config_last_reload_success_timestamp_seconds` | gauge | | when the configuration in force was loaded (Unix time): the start, or the last reload applied |
//! | `ratekeeper_store_operation_duration_seconds` | histogram | `store` (`sqlite`, `redis`), `operation` (`check`, `check_all`, `refund`, `peek`, `report`, `hold`, `settle`) | time the store took to answer one call, failed calls included, from 1 µs to 1 s (not for the in-memory store, whose calls take less than the first bucket: see the decision duration) |
//! | `ratekeeper_redis_calls_total` | counter | `path` (`at_once`, `queued`) | Redis store calls sent as soon as made, or after waiting for a running script (Redis with batching on only) |
//! | `ratekeeper_redis_batches_total` | counter | | scripts that decided calls that had waited |
//! | `ratekeeper_redis_batched_calls_total` | counter | | calls those scripts decided (divided by the batches: calls per script) |
//! | `ratekeeper_redis_abandoned_calls_total` | counter | | calls that waited and whose caller gave up (its timeout) before they were sent |
//! | `ratekeeper_lease_decisions_total` | counter | `limit`, `where` (`here`, `refused_here`, `store`) | with `store.lease`: decisions made from units this process held, refusals made here because the store had just refused the same cost (for as long as it said, at most a lease's lifetime), and decisions made by a call to the store |
//! | `ratekeeper_lease_store_calls_total` | counter | `limit` | calls to the store with leasing on (checks, takes, prefetches): per decision, the store calls leasing leaves |
//! | `ratekeeper_lease_store_calls_saved_total` | counter | `limit` | decisions made here less the prefetches made for them: the calls leasing saved |
//! | `ratekeeper_lease_takes_total` | counter | `limit` | takes of more than a request's cost (leases) |
//! | `ratekeeper_lease_units_total` | counter | `limit`, `outcome` (`leased`, `returned`, `expired`) | units leased beyond the requests that asked, given back unspent, and that stopped being safe before they were spent (leasing's under-admission) |
//!
//! The per-limit counters are read from the core's stats at scrape time,
//! so the decision path counts each decision once. A limit's counters
//! start from zero when it is configured, and go when a reload removes it;
//! its near-limit counter is kept by name for the life of the process.
//!
//! A limit that allowed a request that another limit refused counts it as
//! allowed: nothing was taken from it, but it did not refuse.
//!
//! [`NEAR_LIMIT_PERCENT`]: super::NEAR_LIMIT_PERCENT

use std::fmt;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::stats::{LeaseCounts, StoreHealth};
use crate::access::Door;
use crate::engine::{DecisionDoor, Engine};
use crate::engine::{LatencyHistogram, Reservations, Slots};
use crate::listen::{ConnectionStats, DoorSnapshot};

/// The `Content-Type` of `/metrics`.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// One configured limit's counters.
#[derive(Debug)]
struct LimitCounts {
    name: String,
    allowed: u64,
    denied: u64,
    near_limit: u64,
    untrusted_forwarding: u64,
    saturated: u64,
    overrides_refused: u64,
    /// Requests that named a plan it does not have, and whose plan
    /// header came from a peer not in `plan_from_peers`; `None` for a
    /// limit without plans.
    plans: Option<PlanCounts>,
    /// Reports, their units, and those that overdrew.
    reports: (u64, u64, u64),
    /// Reservations, by [`Reservations::ALL`]'s outcomes.
    reservations: [u64; Reservations::ALL.len()],
    /// Keys the in-memory store holds for it; `None` on the others.
    keys_in_memory: Option<usize>,
    /// For a limit with a penalty: blocks started, requests refused by a
    /// known block, keys known blocked now.
    blocks: Option<(u64, u64, usize)>,
}

/// A limit's plans, as `/metrics` counts them.
#[derive(Clone, Copy, Debug)]
struct PlanCounts {
    /// Requests that named a plan the limit does not have.
    unknown: u64,
    /// Requests whose plan header came from an untrusted peer.
    untrusted: u64,
    /// Plans configured, the default not counted.
    plans: usize,
    /// Keys in its plan table, if it reads one.
    table_keys: Option<usize>,
}
/// Everything one scrape reports, read before encoding (the store's
/// health needs an `await`, the encoder cannot).
#[derive(Debug)]
struct Scrape {
    limits: Vec<LimitCounts>,
    latency: LatencyHistogram,
    store: StoreHealth,
    doors: Vec<DoorSnapshot>,
    /// Refused requests per door, in [`Door::ALL`]'s order.
    unauthenticated: [(&'static str, u64); 3],
    /// Envoy requests answered OK by `[envoy] shadow_mode` alone.
    global_shadow: u64,
    /// Proxy requests refused at the upstream cap.
    upstream_overflow: u64,
    /// Proxy requests held now, held then sent on, and turned away.
    waits: (usize, u64, u64),
    /// The store's state and readiness, and the failover answers per limit.
    failover: FailoverScrape,
    /// `[enforcement] shadow_mode`.
    shadow_mode: bool,
    /// Requests no limit applied to: door, domain label, count.
    unmatched: Vec<(DecisionDoor, String, u64)>,
    /// What leasing did, per limit (empty when it has never been on).
    leasing: Vec<(String, LeaseCounts)>,
    /// Reservations open in the store, where it can count them.
    open_reservations: Option<usize>,
    /// Reservations that expired unsettled, where the store tells.
    expired_reservations: Option<u64>,
    /// Each cap on requests in flight: its name and its slots by
    /// [`Slots::ALL`]'s outcomes.
    slots: Vec<(String, [u64; Slots::ALL.len()])>,
}

/// What `/metrics` says of store failures: the store's state, readiness,
/// and the answers the failure policy made per limit.
#[derive(Debug)]
struct FailoverScrape {
    since_unix_secs: u64,
    serving: bool,
    /// Per limit: its name, answers failed open and by the fallback.
    answers: Vec<(String, u64, u64)>,
}

impl FailoverScrape {
    fn read(engine: &Engine, store: &StoreHealth, names: &[LimitCounts]) -> FailoverScrape {
        let metrics = engine.decision_metrics();
        FailoverScrape {
            since_unix_secs: store.state.since_unix_secs,
            serving: store.serving,
            answers: names
                .iter()
                .map(|limit| {
                    let (open, fallback) = metrics.failover_answers(&limit.name);
                    (limit.name.clone(), open, fallback)
                })
                .collect(),
        }
    }

    fn encode(&self, encoder: &mut DescriptorEncoder, store: &'static str) -> fmt::Result {
        let no_labels: [(&str, &str); 0] = [];
        gauge(
            encoder,
            "ratekeeper_store_state_since_seconds",
            "When the store last went up or down (or the service started), in Unix seconds.",
            [(
                [("store", store)],
                i64::try_from(self.since_unix_secs).unwrap_or(i64::MAX),
            )],
        )?;
        gauge(
            encoder,
            "ratekeeper_ready",
            "1 when decisions are answered as configured (the store answers, or its failure policy answers for it).",
            [(no_labels, i64::from(self.serving))],
        )?;
        counter(
            encoder,
            "ratekeeper_failover_answers",
            "A limit's answers made by the failure policy while the store failed.",
            self.answers.iter().flat_map(|(name, open, fallback)| {
                [
                    ([("limit", name.as_str()), ("how", "fail_open")], *open),
                    ([("limit", name.as_str()), ("how", "fallback")], *fallback),
                ]
            }),
        )
    }
}

/// The metrics of `engine` and of the front doors counting into
/// `connections` now, in the Prometheus text format.
///
/// Asks the store whether it answers (for `ratekeeper_store_up`), waiting
/// at most [`READY_TIMEOUT`](super::READY_TIMEOUT).
pub async fn render(engine: &Engine, connections: &ConnectionStats) -> Result<String, fmt::Error> {
    let store = StoreHealth::check(engine).await;
    let open_reservations = match store.ready {
        true => tokio::time::timeout(super::READY_TIMEOUT, engine.store().open_reservations())
            .await
            .ok()
            .flatten(),
        false => None,
    };
    let metrics = engine.decision_metrics();
    let set = engine.limits();
    let limits: Vec<LimitCounts> = set
        .every()
        .map(|limit| LimitCounts {
            name: limit.name().to_owned(),
            allowed: limit.stats().map_or(0, |stats| stats.allowed()),
            denied: limit.stats().map_or(0, |stats| stats.denied()),
            near_limit: metrics.near_limit(limit.name()),
            untrusted_forwarding: metrics.untrusted_forwarding(limit.name()),
            saturated: metrics.saturated(limit.name()),
            overrides_refused: metrics.overrides_refused(limit.name()),
            plans: limit.config().plans.as_ref().map(|plans| PlanCounts {
                unknown: metrics.unknown_plans(limit.name()),
                untrusted: metrics.untrusted_plans(limit.name()),
                plans: plans.plans.len(),
                table_keys: match &plans.from {
                    crate::config::PlanFrom::Table(table) => Some(table.len()),
                    _ => None,
                },
            }),
            reports: metrics.reports(limit.name()),
            reservations: Reservations::ALL.map(|what| metrics.reservations(limit.name(), what)),
            keys_in_memory: engine.store().keys_in_memory_of(limit.name()),
            blocks: limit.config().penalty.map(|_| {
                (
                    metrics.blocks(limit.name()),
                    metrics.block_refusals(limit.name()),
                    engine
                        .blocked_keys(limit.name(), crate::engine::MAX_REMEMBERED_BLOCKS)
                        .len(),
                )
            }),
        })
        .collect();
    let access = engine.access();
    let failover = FailoverScrape::read(engine, &store, &limits);
    let scrape = Scrape {
        limits,
        latency: metrics.latency(),
        store,
        doors: connections.snapshot(),
        unauthenticated: Door::ALL.map(|door| (door.name(), access.refused(door))),
        global_shadow: metrics.global_shadow(),
        upstream_overflow: metrics.upstream_overflow(),
        waits: {
            let queue = engine.wait_queue();
            (queue.waiting(), queue.waited(), queue.turned_away())
        },
        failover,
        shadow_mode: engine.shadow_mode(),
        unmatched: engine.unmatched().counts(),
        leasing: engine
            .store()
            .lease_stats_by_limit()
            .unwrap_or_default()
            .into_iter()
            .map(|(name, stats)| (name, LeaseCounts::from(stats)))
            .collect(),
        open_reservations,
        // After the open count, which expires the in-memory ledger's.
        expired_reservations: engine.store().expired_reservations(),
        slots: set
            .in_flight_caps()
            .iter()
            .map(|cap| {
                let name = cap.name().to_owned();
                let counts = Slots::ALL.map(|what| metrics.slots(&name, what));
                (name, counts)
            })
            .collect(),
    };
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    registry.register_collector(Box::new(super::operations::Operations::read(engine)));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

/// `GET /metrics`.
pub(super) async fn metrics(
    State((engine, connections)): State<(Engine, ConnectionStats)>,
) -> Response {
    match render(&engine, &connections).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(fmt::Error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded\n",
        )
            .into_response(),
    }
}

/// Writes one counter (its name without `_total`, which the encoder adds)
/// with one sample per label set.
fn counter<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, u64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, value) in samples {
        metric
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
    }
    Ok(())
}

/// Writes one gauge with one sample per label set.
fn gauge<L: prometheus_client::encoding::EncodeLabelSet>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    samples: impl IntoIterator<Item = (L, i64)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, value) in samples {
        metric.encode_family(&labels)?.encode_gauge(&value)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        counter(
            &mut encoder,
            "ratekeeper_unmatched_requests",
            "Requests no limit applied to (allowed and counted nowhere), per door and domain.",
            self.unmatched.iter().map(|(door, domain, count)| {
                (
                    [("door", door.as_str()), ("domain", domain.as_str())],
                    *count,
                )
            }),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_decisions",
            "Requests each configured limit allowed or denied.",
            self.limits.iter().flat_map(|limit| {
                [
                    (
                        [("limit", limit.name.as_str()), ("decision", "allowed")],
                        limit.allowed,
                    ),
                    (
                        [("limit", limit.name.as_str()), ("decision", "denied")],
                        limit.denied,
                    ),
                ]
            }),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_near_limit",
            "Allowed requests that left at most 10% of the limit's quota.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.near_limit)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_untrusted_forwarding_headers",
            "Requests whose forwarding header a limit keyed by client_ip ignored, the peer not being one of its trusted_proxies.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.untrusted_forwarding)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_saturated",
            "Decisions on a new key while the in-memory table was full.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.saturated)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_overrides_refused",
            "Envoy limit overrides ignored because a limit the descriptor matches has allow_overrides = false.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.overrides_refused)),
        )?;
        let planned = || {
            self.limits
                .iter()
                .filter_map(|limit| limit.plans.map(|plans| (limit.name.as_str(), plans)))
        };
        let gauge_of = |count: usize| i64::try_from(count).unwrap_or(i64::MAX);
        counter(
            &mut encoder,
            "ratekeeper_plan_unknown",
            "Requests that named a plan the limit does not have: the limit's own numbers applied.",
            planned().map(|(name, plans)| ([("limit", name)], plans.unknown)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_plan_untrusted",
            "Requests whose plan header came from a peer not in the limit's plan_from_peers: ignored, the limit's own numbers applied.",
            planned().map(|(name, plans)| ([("limit", name)], plans.untrusted)),
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_plans",
            "Plans a limit has, its own numbers not counted (at most 64).",
            planned().map(|(name, plans)| ([("limit", name)], gauge_of(plans.plans))),
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_plan_table_keys",
            "Keys a limit's plan table (plan_from = \"table:PATH\") lists (at most 1,000,000).",
            planned()
                .filter_map(|(name, plans)| Some(([("limit", name)], gauge_of(plans.table_keys?)))),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_reports",
            "Reports: units charged after the fact, whatever the limit had left.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.reports.0)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_report_units",
            "Units the reports charged.",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.reports.1)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_overdrafts",
            "Reports that charged more than the key had left (it waits for the debt).",
            self.limits
                .iter()
                .map(|limit| ([("limit", limit.name.as_str())], limit.reports.2)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_reservations",
            "Reservations held, committed, cancelled, and asked to settle when no longer open.",
            self.limits.iter().flat_map(|limit| {
                Reservations::ALL.into_iter().map(move |what| {
                    let labels = [("limit", limit.name.as_str()), ("outcome", what.as_str())];
                    (labels, limit.reservations[what as usize])
                })
            }),
        )?;
        let penalized = || {
            self.limits
                .iter()
                .filter_map(|limit| Some((limit.name.as_str(), limit.blocks?)))
        };
        counter(
            &mut encoder,
            "ratekeeper_penalty_blocks",
            "Keys a limit's penalty (block_for) blocked, by this instance.",
            penalized().map(|(name, blocks)| ([("limit", name)], blocks.0)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_penalty_refusals",
            "Requests refused by a block this instance knew, without a call to the store.",
            penalized().map(|(name, blocks)| ([("limit", name)], blocks.1)),
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_blocked_keys",
            "Keys this instance knows are blocked by a limit's penalty now.",
            penalized().map(|(name, blocks)| {
                (
                    [("limit", name)],
                    i64::try_from(blocks.2).unwrap_or(i64::MAX),
                )
            }),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_in_flight_slots",
            "Slots of caps on requests in flight taken, refused (the key's were all taken), released, and released when not taken (released already, or freed by their lease).",
            self.slots.iter().flat_map(|(name, counts)| {
                Slots::ALL.into_iter().map(move |what| {
                    let labels = [("limit", name.as_str()), ("outcome", what.as_str())];
                    (labels, counts[what as usize])
                })
            }),
        )?;
        let no_labels: [(&str, &str); 0] = [];
        if let Some(open) = self.open_reservations {
            gauge(
                &mut encoder,
                "ratekeeper_reservations_open",
                "Reservations held in the store and not yet settled nor past their ttl.",
                [(no_labels, i64::try_from(open).unwrap_or(i64::MAX))],
            )?;
        }
        if let Some(expired) = self.expired_reservations {
            counter(
                &mut encoder,
                "ratekeeper_reservations_expired",
                "Reservations that reached their ttl unsettled (kept at their estimate).",
                [(no_labels, expired)],
            )?;
        }
        counter(
            &mut encoder,
            "ratekeeper_envoy_shadow_mode_passes",
            "Envoy requests over a limit answered OK because [envoy] shadow_mode is on.",
            [(no_labels, self.global_shadow)],
        )?;
        counter(
            &mut encoder,
            "ratekeeper_proxy_upstream_overflow",
            "Proxy requests answered 503 because max_upstream_requests were at the upstream.",
            [(no_labels, self.upstream_overflow)],
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_proxy_waiting_requests",
            "Proxy requests held now for a limit's max_wait.",
            [(no_labels, i64::try_from(self.waits.0).unwrap_or(i64::MAX))],
        )?;
        counter(
            &mut encoder,
            "ratekeeper_proxy_waits",
            "Proxy requests a limit's max_wait held then sent on (waited), or refused because the queue was full (turned_away).",
            [
                ([("outcome", "waited")], self.waits.1),
                ([("outcome", "turned_away")], self.waits.2),
            ],
        )?;
        counter(
            &mut encoder,
            "ratekeeper_unauthenticated_requests",
            "Requests refused for want of a valid bearer token.",
            self.unauthenticated
                .iter()
                .map(|&(door, refused)| ([("door", door)], refused)),
        )?;

        let latency = &self.latency;
        encoder
            .encode_descriptor(
                "ratekeeper_decision_duration_seconds",
                "Time to decide one request against all its limits.",
                None,
                MetricType::Histogram,
            )?
            .encode_histogram::<NoLabelSet>(
                latency.sum_seconds,
                latency.count,
                &latency.buckets,
                None,
            )?;

        let limits = i64::try_from(self.limits.len()).unwrap_or(i64::MAX);
        gauge(
            &mut encoder,
            "ratekeeper_limits_configured",
            "Limits in force.",
            [(no_labels, limits)],
        )?;
        let store = [("store", self.store.kind)];
        gauge(
            &mut encoder,
            "ratekeeper_store_up",
            "1 when the store answers, 0 when it does not.",
            [(store, i64::from(self.store.ready))],
        )?;
        self.failover.encode(&mut encoder, self.store.kind)?;
        if let Some(keys) = self.store.keys_in_memory {
            gauge(
                &mut encoder,
                "ratekeeper_keys_tracked",
                "Keys the in-memory store holds.",
                [(no_labels, i64::try_from(keys).unwrap_or(i64::MAX))],
            )?;
        }
        if self.store.keys_in_memory.is_some() {
            gauge(
                &mut encoder,
                "ratekeeper_limit_keys",
                "Keys the in-memory store holds for each limit (at most ratekeeper_max_keys each).",
                self.limits.iter().filter_map(|limit| {
                    let keys = i64::try_from(limit.keys_in_memory?).unwrap_or(i64::MAX);
                    Some(([("limit", limit.name.as_str())], keys))
                }),
            )?;
        }
        gauge(
            &mut encoder,
            "ratekeeper_max_keys",
            "The most keys the in-memory store (or the fallback) holds per limit.",
            [(
                no_labels,
                i64::try_from(self.store.max_keys).unwrap_or(i64::MAX),
            )],
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_shadow_mode",
            "1 when [enforcement] shadow_mode is on: no limit refuses.",
            [(no_labels, i64::from(self.shadow_mode))],
        )?;
        let failures = self.store.failures.unwrap_or_default();
        for (name, help, value) in [
            (
                "ratekeeper_store_failures",
                "Calls the store failed.",
                failures.failures,
            ),
            (
                "ratekeeper_store_failed_open",
                "Requests allowed because the store failed open.",
                failures.failed_open,
            ),
            (
                "ratekeeper_store_failed_closed",
                "Requests refused because the store failed closed.",
                failures.failed_closed,
            ),
            (
                "ratekeeper_store_fallback",
                "Requests decided by the in-memory fallback while the store failed.",
                failures.fallback,
            ),
        ] {
            counter(&mut encoder, name, help, [(store, value)])?;
        }
        let doors = &self.doors;
        gauge(
            &mut encoder,
            "ratekeeper_connections_open",
            "Connections a front door has open now.",
            doors.iter().map(|door| {
                (
                    [("door", door.door)],
                    i64::try_from(door.open).unwrap_or(i64::MAX),
                )
            }),
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_http2_streams_held",
            "HTTP/2 streams a door counts against max_streams_total.",
            doors.iter().map(|door| {
                (
                    [("door", door.door)],
                    i64::try_from(door.streams_held).unwrap_or(i64::MAX),
                )
            }),
        )?;
        gauge(
            &mut encoder,
            "ratekeeper_request_bytes_held",
            "Bytes of requests still arriving that a door counts against max_request_bytes_total.",
            doors.iter().map(|door| {
                (
                    [("door", door.door)],
                    i64::try_from(door.request_bytes_held).unwrap_or(i64::MAX),
                )
            }),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_connections_accepted",
            "Connections a front door accepted.",
            doors
                .iter()
                .map(|door| ([("door", door.door)], door.accepted)),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_connections_closed",
            "Connections the service closed, by reason.",
            doors.iter().flat_map(|door| {
                door.closed
                    .iter()
                    .map(|(reason, n)| ([("door", door.door), ("reason", reason.as_str())], *n))
            }),
        )?;
        counter(
            &mut encoder,
            "ratekeeper_connection_errors",
            "Connections that ended with an error, by kind.",
            doors.iter().flat_map(|door| {
                door.errors
                    .iter()
                    .map(|(kind, n)| ([("door", door.door), ("kind", kind.as_str())], *n))
            }),
        )?;
        for (name, help, value) in [
            (
                "ratekeeper_connection_cap_reached",
                "Times a new connection found its door at max_connections.",
                (|door: &DoorSnapshot| door.cap_reached) as fn(&DoorSnapshot) -> u64,
            ),
            (
                "ratekeeper_requests_timed_out",
                "Requests reset for taking longer than request_timeout.",
                |door| door.request_timeouts,
            ),
            (
                "ratekeeper_accept_errors",
                "Connections a front door failed to accept (mostly: out of file descriptors).",
                |door| door.accept_errors,
            ),
            (
                "ratekeeper_request_bodies_refused",
                "Requests failed because their body would have taken the door past max_request_bytes_total.",
                |door| door.bodies_refused,
            ),
            (
                "ratekeeper_http2_streams_refused",
                "HTTP/2 streams refused because the door held max_streams_total.",
                |door| door.streams_refused,
            ),
        ] {
            counter(
                &mut encoder,
                name,
                help,
                doors
                    .iter()
                    .map(|door| ([("door", door.door)], value(door))),
            )?;
        }
        if let Some(batching) = self.store.batching {
            counter(
                &mut encoder,
                "ratekeeper_redis_calls",
                "Redis store calls sent as soon as made, or after waiting for a running script.",
                [
                    ([("path", "at_once")], batching.sent_at_once),
                    ([("path", "queued")], batching.queued),
                ],
            )?;
            for (name, help, value) in [
                (
                    "ratekeeper_redis_batches",
                    "Scripts that decided Redis store calls that had waited.",
                    batching.batches,
                ),
                (
                    "ratekeeper_redis_batched_calls",
                    "Redis store calls that had waited, decided by those scripts.",
                    batching.batched_calls,
                ),
                (
                    "ratekeeper_redis_abandoned_calls",
                    "Redis store calls that waited and whose caller gave up before they were sent.",
                    batching.abandoned,
                ),
            ] {
                counter(&mut encoder, name, help, [(no_labels, value)])?;
            }
        }
        if !self.leasing.is_empty() {
            let each = || self.leasing.iter().map(|(name, c)| (name.as_str(), c));
            counter(
                &mut encoder,
                "ratekeeper_lease_decisions",
                "Decisions made from units this process leased, refused here as the store just refused them, and made by a call to the store.",
                each().flat_map(|(name, c)| {
                    [
                        ([("limit", name), ("where", "here")], c.decided_here),
                        ([("limit", name), ("where", "refused_here")], c.refused_here),
                        (
                            [("limit", name), ("where", "store")],
                            // (Read field by field while they change: a
                            // prefetch may show before its store call.)
                            c.store_calls.saturating_sub(c.prefetches),
                        ),
                    ]
                }),
            )?;
            counter(
                &mut encoder,
                "ratekeeper_lease_store_calls",
                "Calls to the store with leasing on: checks, takes and prefetches.",
                each().map(|(name, c)| ([("limit", name)], c.store_calls)),
            )?;
            counter(
                &mut encoder,
                "ratekeeper_lease_store_calls_saved",
                "Store calls leasing saved: decisions made here less the prefetches made for them.",
                each().map(|(name, c)| ([("limit", name)], c.calls_saved)),
            )?;
            counter(
                &mut encoder,
                "ratekeeper_lease_takes",
                "Takes of more than a request's cost from the store (leases).",
                each().map(|(name, c)| ([("limit", name)], c.leases)),
            )?;
            counter(
                &mut encoder,
                "ratekeeper_lease_units",
                "Units leased beyond the requests that asked, given back unspent, and expired unspent.",
                each().flat_map(|(name, c)| {
                    [
                        ([("limit", name), ("outcome", "leased")], c.units_leased),
                        ([("limit", name), ("outcome", "returned")], c.units_returned),
                        ([("limit", name), ("outcome", "expired")], c.units_expired),
                    ]
                }),
            )?;
        }
        Ok(())
    }
}
