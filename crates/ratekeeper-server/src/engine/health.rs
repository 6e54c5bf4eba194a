//! The store's health as the service last saw it: up or down, since
//! when, and why, shared by `/readyz`, `/v1/stats`, `/metrics` and the
//! gRPC health service.
//!
//! Each of those asks the store when it is asked ([`Engine::probe_store`]);
//! between them, [`Engine::monitor_store`] keeps the state current for
//! watchers (the gRPC health service's `Watch`): once a second it asks the
//! store, unless requests were decided since the last look and none of
//! them failed, which says the store answers without another call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ratekeeper::Timestamp;
use serde::Serialize;
use tokio::sync::watch;

use super::Engine;

/// How long a probe waits for the store before calling it down.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How often [`Engine::monitor_store`] looks at the store.
pub const MONITOR_INTERVAL: Duration = Duration::from_secs(1);

/// The store's state, as last seen.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct StoreState {
    /// Whether the store itself answered (the failure policy aside).
    pub up: bool,
    /// When it went up or down, in seconds since the Unix epoch (the
    /// statistics' wall clock): the start, or the last change.
    pub since_unix_secs: u64,
    /// Why it is down; the last failure's message, naming the store.
    pub last_error: Option<String>,
}

impl StoreState {
    /// `up` (or down with `error`) since `now`.
    pub(crate) fn new(now: Timestamp, error: Option<String>) -> StoreState {
        StoreState {
            up: error.is_none(),
            since_unix_secs: now.as_duration().as_secs(),
            last_error: error,
        }
    }
}

/// Records what the probes see, and tells watchers of changes.
#[derive(Debug)]
pub(crate) struct StoreMonitor {
    state: watch::Sender<StoreState>,
    /// Probes recorded so far.
    probes: AtomicU64,
}

impl StoreMonitor {
    pub(crate) fn new(initial: StoreState) -> StoreMonitor {
        StoreMonitor {
            state: watch::Sender::new(initial),
            probes: AtomicU64::new(0),
        }
    }

    /// Records a probe's result at `now`; watchers hear of it when the
    /// store went up or down.
    pub(crate) fn record(&self, now: Timestamp, error: Option<String>) {
        self.probes.fetch_add(1, Ordering::Relaxed);
        self.state.send_if_modified(|state| {
            let up = error.is_none();
            if state.up == up {
                // Still down: keep the newest reason, quietly.
                if error.is_some() {
                    state.last_error = error;
                }
                return false;
            }
            if up {
                tracing::info!("the rate-limit store answers (it was down)");
            } else {
                tracing::warn!(
                    error = error.as_deref().unwrap_or_default(),
                    "the rate-limit store does not answer"
                );
            }
            // The last error stays after a recovery: what went wrong last.
            let last_error = error.or_else(|| state.last_error.take());
            *state = StoreState {
                up,
                since_unix_secs: now.as_duration().as_secs(),
                last_error,
            };
            true
        });
    }

    pub(crate) fn get(&self) -> StoreState {
        self.state.borrow().clone()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<StoreState> {
        self.state.subscribe()
    }
}

impl Engine {
    /// The store's state as last seen (see [`Engine::probe_store`]).
    pub(crate) fn store_state(&self) -> StoreState {
        self.inner.monitor.get()
    }

    /// The store's state, for a watcher told of every change between up
    /// and down.
    pub(crate) fn watch_store_state(&self) -> watch::Receiver<StoreState> {
        self.inner.monitor.subscribe()
    }

    /// Asks the store whether it answers (waiting at most
    /// [`PROBE_TIMEOUT`]), records it, and returns the state.
    pub(crate) async fn probe_store(&self) -> StoreState {
        let error = match tokio::time::timeout(PROBE_TIMEOUT, self.ready()).await {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_) => Some(match self.store().address() {
                Some(address) => format!(
                    "the rate-limit store did not answer within {PROBE_TIMEOUT:?} (store: {address})"
                ),
                None => format!("the rate-limit store did not answer within {PROBE_TIMEOUT:?}"),
            }),
        };
        self.inner.monitor.record(self.wall_now(), error);
        self.store_state()
    }

    /// Whether the service answers decisions as configured when the store
    /// is in `state`: always while the store is up; while it is down, only
    /// if the failure policy answers without it (fail open, or the
    /// fallback). What `/readyz` and the gRPC health service say.
    pub fn serves(&self, state: &StoreState) -> bool {
        state.up || self.store().answers_while_down()
    }

    /// Keeps the store's state current until `stopped` turns true (see
    /// the module docs).
    pub async fn monitor_store(&self, mut stopped: watch::Receiver<bool>) {
        if !self.store().can_fail() {
            return;
        }
        let start = tokio::time::Instant::now() + MONITOR_INTERVAL;
        let mut ticker = tokio::time::interval_at(start, MONITOR_INTERVAL);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen = self.activity();
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = stopped.wait_for(|stop| *stop) => return,
            }
            let now = self.activity();
            let answered = (now.0 != seen.0 || now.2 != seen.2) && now.1 == seen.1;
            if !(answered && self.store_state().up) {
                self.probe_store().await;
            }
            seen = self.activity();
        }
    }

    /// Decisions made, store calls failed and probes made so far.
    fn activity(&self) -> (u64, u64, u64) {
        let decisions = self.decision_metrics().decisions();
        let failures = self
            .store()
            .failure_stats()
            .map_or(0, |stats| stats.failures);
        let probes = self.inner.monitor.probes.load(Ordering::Relaxed);
        (decisions, failures, probes)
    }
}
