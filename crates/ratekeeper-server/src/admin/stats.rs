//! `GET /v1/stats`: what every configured limit decided, and the store's
//! health, as JSON.
//!
//! ```text
//! GET /v1/stats
//!
//! 200 OK
//! {"at_unix_secs": 1767225600,
//!  "store": {"kind": "memory", "ready": true, "error": null,
//!            "state": {"up": true, "since_unix_secs": 1767225000, "last_error": null},
//!            "serving": true, "address": null,
//!            "keys_in_memory": 2, "max_keys": 100000, "failures": null, "batching": null,
//!            "leasing": null},
//!  "decisions": 12,
//!  "shadow_mode": false,
//!  "reloads": {"applied": 1, "refused": 1, "last_successful": false,
//!              "last_success_unix_secs": 1767225000,
//!              "last_refusal": {"at_unix_secs": 1767225500,
//!                               "error": "ratekeeper.toml:3:8: limits[0].rate: ..."}},
//!  "near_limit_percent": 10,
//!  "limits": [{"name": "per-user",
//!              "config": {"name": "per-user", "policy": "gcra", "rate": "3/minute", ...},
//!              "near_limit": 2, "keys_in_memory": 2,
//!              "at_unix_secs": 1767225600, "allowed": 6, "denied": 6,
//!              "windows": {"minute": {"current": {"start_unix_secs": 1767225600,
//!                                                 "requests": 12, "denied": 6},
//!                                     "previous": {...}},
//!                          "hour": {...}, "day": {...}, "week": {...}},
//!              "history": [{"start_unix_secs": ..., "requests": 0, "denied": 0}, ...],
//!              "top_denied": [{"key": "alice", "count": 4, "error": 0}, ...],
//!              "top_charged": [{"key": "alice", "count": 10, "error": 0}, ...],
//!              "after_the_fact": {"reports": 2, "units": 13000, "overdrafts": 1,
//!                                 "reservations_held": 1, ...},
//!              "blocks": {"started": 1, "refused_from_memory": 3,
//!                         "keys": [{"key": "203.0.113.7", "ends_in_ms": 899000}]},
//!              "keys_tracked": 2, "untracked_denials": 0}],
//!  "limits_not_shown": 0,
//!  "unmatched": [{"door": "grpc", "requests": 3,
//!                 "last": {"at_unix_secs": 1767225590,
//!                          "request": "domain \"Edge\", descriptors [remote_address=10.0.0.1]"}}]}
//! ```
//!
//! # Size
//!
//! The answer is bounded whatever clients send: at most
//! [`MAX_LIMITS_SHOWN`] limits (the first in the configuration's order;
//! `limits_not_shown` counts the rest, whose counts `/metrics` still has),
//! each with at most [`MAX_KEYS_SHOWN`] top denied keys, and every key is
//! at most 64 bytes (a longer one is kept as a readable prefix and a
//! digest, [`ratekeeper::key::bounded`]). A limit with a full list of keys
//! takes about 8 KB (measured: 7.5 KB with 32 keys of 64 bytes), at most
//! 18 KB if every key is control characters, which JSON escapes in six
//! bytes each; so, with limits of ordinary configuration, the answer stays
//! under 5 MB whatever clients send.
//!
//! The limits are the configuration's, in its order, then those of
//! envoyproxy/ratelimit's files and of the Limitador file. Each limit's counts are
//! those of the core's [`LimitSnapshot`] (flattened into the limit's
//! object): totals since the limit was configured, the current and
//! previous UTC minute, hour, day and week, the last 60 minutes oldest
//! first, the keys denied most, and the keys charged most (`top_charged`:
//! requests allowed or denied, at most
//! [`TOP_CHARGED`](crate::engine::TOP_CHARGED) keys; the heaviest is first). `near_limit` counts the allowed
//! decisions that left at most
//! [`NEAR_LIMIT_PERCENT`](crate::engine::NEAR_LIMIT_PERCENT)% of the quota.
//! `store.failures` is `null` for the in-memory store, which cannot fail.
//! `store.state` says whether the store answers, since when (the start, or
//! its last change between up and down) and the last failure's message,
//! kept after a recovery; `store.serving` whether decisions are answered
//! as configured (what `/readyz` says); `store.address` where the store
//! is (Redis URLs without passwords, the SQLite path).

use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;
use ratekeeper::{stats::LimitSnapshot, store::lease::LeaseStats, store::ResilientStats};
use ratekeeper_redis::BatchStats;
use serde::Serialize;

use crate::engine::{DecisionDoor, Engine, StoreState, UnmatchedSample};
use crate::engine::{LimitDescription, ReloadRefusal};

/// The most limits `/v1/stats` shows.
pub const MAX_LIMITS_SHOWN: usize = 256;

/// The most top denied keys `/v1/stats` shows per limit.
pub const MAX_KEYS_SHOWN: usize = 32;

/// How long `/v1/stats` and `/metrics` wait for the store to answer before
/// calling it not ready.
pub const READY_TIMEOUT: Duration = crate::engine::PROBE_TIMEOUT;

/// The answer of `GET /v1/stats`.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ServiceStats {
    /// When the stats were taken, in seconds since the Unix epoch (the
    /// statistics' wall clock).
    pub at_unix_secs: u64,
    /// The store's health.
    pub store: StoreHealth,
    /// Decisions made since the service started (calls of the decision
    /// API, the gRPC service, nginx's `auth_request` and the proxy, however
    /// many limits each checked).
    pub decisions: u64,
    /// `[enforcement] shadow_mode`: every limit decides and reports, none
    /// refuses.
    pub shadow_mode: bool,
    /// The configuration reloads so far.
    pub reloads: ReloadReport,
    /// What `near_limit` counts: allowed decisions that left at most this
    /// percentage of the quota.
    pub near_limit_percent: u64,
    /// The limits in force, the configuration's in its order, then those
    /// of envoyproxy/ratelimit's files and of the Limitador file: the
    /// first [`MAX_LIMITS_SHOWN`].
    pub limits: Vec<LimitReport>,
    /// Configured limits past the first [`MAX_LIMITS_SHOWN`], not shown.
    pub limits_not_shown: usize,
    /// Per door that had any: the requests no limit applied to (allowed,
    /// counted nowhere) and the last one logged.
    pub unmatched: Vec<UnmatchedReport>,
}

/// The requests of one door that no limit applied to.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct UnmatchedReport {
    /// The door.
    pub door: DecisionDoor,
    /// How many since the service started.
    pub requests: u64,
    /// The last one logged (at most one per 10 s).
    pub last: Option<UnmatchedSample>,
}

/// What the configuration reloads did: with `last_successful` false, the
/// file on disk is not what runs, and `last_refusal` says why.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct ReloadReport {
    /// Reloads put in force.
    pub applied: u64,
    /// Reloads refused, the running configuration kept.
    pub refused: u64,
    /// Whether the last reload (or the start) was applied.
    pub last_successful: bool,
    /// When the configuration in force was loaded, in seconds since the
    /// Unix epoch.
    pub last_success_unix_secs: u64,
    /// The last refused reload: when, and the error.
    pub last_refusal: Option<ReloadRefusal>,
}

impl ReloadReport {
    fn of(engine: &Engine) -> ReloadReport {
        let stats = engine.reload_stats();
        let now = stats.snapshot();
        ReloadReport {
            applied: now.applied,
            refused: now.refused,
            last_successful: now.last_successful,
            // Whole seconds of a time the reloader took in milliseconds.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            last_success_unix_secs: now.last_success_seconds as u64,
            last_refusal: stats.last_refusal(),
        }
    }
}

/// The store's health.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct StoreHealth {
    /// `memory`, `sqlite` or `redis`.
    pub kind: &'static str,
    /// Whether the store itself answers now (the failure policy aside).
    pub ready: bool,
    /// Why it is not ready.
    pub error: Option<String>,
    /// Up or down, since when, and the last failure.
    pub state: StoreState,
    /// Whether decisions are answered as configured: the store answers,
    /// or its failure policy answers for it (what `/readyz` says).
    pub serving: bool,
    /// Where the store is: Redis URLs without passwords, the SQLite
    /// path; `None` for the in-memory store.
    pub address: Option<String>,
    /// Keys the in-memory store tracks, over all limits; `None` for the
    /// others.
    pub keys_in_memory: Option<usize>,
    /// The most keys the in-memory store (or a remote store's fallback)
    /// tracks per limit (`store.max_keys`).
    pub max_keys: usize,
    /// What the failure policy has done; `None` for the in-memory store.
    pub failures: Option<FailureCounts>,
    /// How the Redis store's concurrent calls went together; `None` for
    /// the other stores and when that is off.
    pub batching: Option<BatchCounts>,
    /// What leasing did (`store.lease`); `None` when it is off.
    pub leasing: Option<LeaseCounts>,
}

/// What leasing has done so far (see `ratekeeper::store::lease`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LeaseCounts {
    /// Decisions made: here, or by a call to the store.
    pub decisions: u64,
    /// Decisions made from units this process held, without the store.
    pub decided_here: u64,
    /// Requests refused in this process because the store had just
    /// refused the same cost (for as long as it said, at most a lease's
    /// lifetime).
    pub refused_here: u64,
    /// Calls to the store (plain checks, takes and prefetches).
    pub store_calls: u64,
    /// Of those, the calls made in the background ahead of the requests.
    pub prefetches: u64,
    /// Store calls saved: the decisions made here less the prefetches
    /// made for them (each decision would have been one call).
    pub calls_saved: u64,
    /// Takes of more than a request's cost.
    pub leases: u64,
    /// Units those takes held beyond the requests that asked.
    pub units_leased: u64,
    /// Units given back to the store unspent.
    pub units_returned: u64,
    /// Units that stopped being safe to spend before they were (the
    /// store counted them as used: leasing's under-admission).
    pub units_expired: u64,
}

impl From<LeaseStats> for LeaseCounts {
    fn from(stats: LeaseStats) -> Self {
        LeaseCounts {
            decisions: stats.decisions(),
            decided_here: stats.decided_here,
            refused_here: stats.refused_here,
            store_calls: stats.store_calls,
            prefetches: stats.prefetches,
            calls_saved: stats.calls_saved(),
            leases: stats.leases,
            units_leased: stats.units_leased,
            units_returned: stats.units_returned,
            units_expired: stats.units_expired,
        }
    }
}

/// What a Redis store's coalescing has done so far (see
/// [`ratekeeper_redis::Batching`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BatchCounts {
    /// Calls sent as a script of their own as soon as they were made.
    pub sent_at_once: u64,
    /// Calls that waited for a script already running to end.
    pub queued: u64,
    /// Scripts sent for calls that had waited.
    pub batches: u64,
    /// Calls that had waited, decided by those scripts.
    pub batched_calls: u64,
    /// Calls that had waited and whose caller gave up first (not sent).
    pub abandoned: u64,
}

impl From<BatchStats> for BatchCounts {
    fn from(stats: BatchStats) -> Self {
        BatchCounts {
            sent_at_once: stats.sent_at_once,
            queued: stats.queued,
            batches: stats.batches,
            batched_calls: stats.batched_calls,
            abandoned: stats.abandoned,
        }
    }
}

/// What a remote store's failure policy has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct FailureCounts {
    /// Calls the store failed.
    pub failures: u64,
    /// Requests allowed because the store failed open.
    pub failed_open: u64,
    /// Requests refused because the store failed closed.
    pub failed_closed: u64,
    /// Requests decided by the in-memory fallback.
    pub fallback: u64,
}

impl From<ResilientStats> for FailureCounts {
    fn from(stats: ResilientStats) -> Self {
        FailureCounts {
            failures: stats.failures,
            failed_open: stats.failed_open,
            failed_closed: stats.failed_closed,
            fallback: stats.fallback,
        }
    }
}

/// What a limit was charged after the fact, since the service started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AfterTheFact {
    /// Reports (`/v1/report`, Limitador's `/report`, the hits of a limit
    /// with `count_refused`).
    pub reports: u64,
    /// The units they charged.
    pub units: u64,
    /// Reports that charged more than the key had left.
    pub overdrafts: u64,
    /// Reservations held.
    pub reservations_held: u64,
    /// Reservations settled at the request's cost.
    pub reservations_committed: u64,
    /// Reservations given back.
    pub reservations_cancelled: u64,
    /// Settles of reservations no longer open (settled already, or past
    /// their ttl, which settled them at their estimate).
    pub reservations_unknown: u64,
}

impl AfterTheFact {
    /// Limit `name`'s counts in `metrics`; `None` when all are zero.
    fn of(metrics: &crate::engine::DecisionMetrics, name: &str) -> Option<AfterTheFact> {
        use crate::engine::Reservations;
        let (reports, units, overdrafts) = metrics.reports(name);
        let counts = AfterTheFact {
            reports,
            units,
            overdrafts,
            reservations_held: metrics.reservations(name, Reservations::Held),
            reservations_committed: metrics.reservations(name, Reservations::Committed),
            reservations_cancelled: metrics.reservations(name, Reservations::Cancelled),
            reservations_unknown: metrics.reservations(name, Reservations::Unknown),
        };
        (counts != AfterTheFact::default()).then_some(counts)
    }
}

/// A penalty limit's blocks, as this instance knows them.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct BlockReport {
    /// Blocks its penalty started here since the service started.
    pub started: u64,
    /// Requests refused by a block this instance knew, without a call to
    /// the store.
    pub refused_from_memory: u64,
    /// The keys blocked now, the longest blocks first (at most
    /// [`MAX_KEYS_SHOWN`]).
    pub keys: Vec<crate::engine::BlockedKey>,
}

/// One limit's stats.
#[derive(Clone, Debug, Serialize)]
#[non_exhaustive]
pub struct LimitReport {
    /// The limit's name.
    pub name: String,
    /// The limit as configured (as `GET /v1/limits` shows it).
    pub config: LimitDescription,
    /// Allowed decisions that left at most
    /// [`NEAR_LIMIT_PERCENT`](crate::engine::NEAR_LIMIT_PERCENT)% of the quota.
    pub near_limit: u64,
    /// Keys the in-memory store tracks for this limit now, of at most
    /// `store.max_keys`; `None` on the other stores. Not the same as
    /// `keys_tracked`, the keys the statistics keep denials of.
    pub keys_in_memory: Option<usize>,
    /// What leasing did for this limit (`store.lease`); `None` when it
    /// has never been on, or leased nothing for it.
    pub leasing: Option<LeaseCounts>,
    /// Units charged after the fact (reports) and reservations; `None`
    /// when the limit has had none.
    pub after_the_fact: Option<AfterTheFact>,
    /// For a limit with a penalty (`block_for`): the blocks it started
    /// here and the keys this instance knows are blocked; `None` without.
    pub blocks: Option<BlockReport>,
    /// Totals, windows, the last hour and the keys denied most (at most
    /// [`MAX_KEYS_SHOWN`]).
    #[serde(flatten)]
    pub stats: LimitSnapshot,
}

impl StoreHealth {
    /// Asks the store whether it answers (waiting at most
    /// [`READY_TIMEOUT`]) and reads its counters.
    pub async fn check(engine: &Engine) -> StoreHealth {
        let state = engine.probe_store().await;
        let error = if state.up {
            None
        } else {
            state.last_error.clone()
        };
        let store = engine.store();
        StoreHealth {
            kind: store.kind(),
            ready: state.up,
            error,
            serving: engine.serves(&state),
            state,
            address: store.address().map(str::to_owned),
            keys_in_memory: store.keys_in_memory(),
            max_keys: engine.store_config().max_keys,
            failures: store.failure_stats().map(FailureCounts::from),
            batching: store.redis_batching().map(BatchCounts::from),
            leasing: store.lease_stats().map(LeaseCounts::from),
        }
    }
}

impl ServiceStats {
    /// Everything `GET /v1/stats` reports, now.
    pub(crate) async fn gather(engine: &Engine) -> ServiceStats {
        let store = StoreHealth::check(engine).await;
        let now = engine.wall_now();
        let metrics = engine.decision_metrics();
        let configured = engine.limits();
        let leasing = engine.store().lease_stats_by_limit().unwrap_or_default();
        let leased = |name: &str| {
            leasing
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .ok()
                .map(|i| LeaseCounts::from(leasing[i].1))
        };
        let limits = configured
            .every()
            .take(MAX_LIMITS_SHOWN)
            .map(|limit| {
                let mut stats = limit
                    .stats()
                    .map(|stats| stats.snapshot(now))
                    .unwrap_or_default();
                stats.top_denied.truncate(MAX_KEYS_SHOWN);
                LimitReport {
                    name: limit.name().to_owned(),
                    config: LimitDescription::new(limit.config()),
                    near_limit: metrics.near_limit(limit.name()),
                    keys_in_memory: engine.store().keys_in_memory_of(limit.name()),
                    leasing: leased(limit.name()),
                    after_the_fact: AfterTheFact::of(metrics, limit.name()),
                    blocks: limit.config().penalty.map(|_| BlockReport {
                        started: metrics.blocks(limit.name()),
                        refused_from_memory: metrics.block_refusals(limit.name()),
                        keys: engine.blocked_keys(limit.name(), MAX_KEYS_SHOWN),
                    }),
                    stats,
                }
            })
            .collect();
        ServiceStats {
            at_unix_secs: now.as_duration().as_secs(),
            store,
            decisions: metrics.latency().count,
            shadow_mode: engine.shadow_mode(),
            reloads: ReloadReport::of(engine),
            near_limit_percent: crate::engine::NEAR_LIMIT_PERCENT,
            limits,
            limits_not_shown: configured.every().count().saturating_sub(MAX_LIMITS_SHOWN),
            unmatched: DecisionDoor::ALL
                .into_iter()
                .filter_map(|door| {
                    let requests = engine.unmatched().total(door);
                    (requests > 0).then(|| UnmatchedReport {
                        door,
                        requests,
                        last: engine.unmatched().sample(door),
                    })
                })
                .collect(),
        }
    }
}

/// `GET /v1/stats`; never cached.
pub(super) async fn stats(State(engine): State<Engine>) -> impl IntoResponse {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(ServiceStats::gather(&engine).await),
    )
}
