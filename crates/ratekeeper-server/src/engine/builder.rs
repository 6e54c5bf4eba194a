//! How an engine starts: [`Engine::builder`], then its clocks and store.

use std::sync::Arc;

use ratekeeper::clock::{MonotonicClock, UnixClock};

use super::{AnyStore, Engine, SharedClock, StartError};
use crate::config::Config;

/// An engine to start on a configuration: [`Engine::builder`].
///
/// By default the in-memory store runs on a monotonic clock, the
/// statistics' calendar windows follow the system's Unix time, and the
/// store is the one the configuration's `[store]` names.
#[must_use = "an engine starts when `start` is awaited"]
pub struct EngineBuilder<'a> {
    config: &'a Config,
    clock: Option<SharedClock>,
    wall_clock: Option<SharedClock>,
    store: Option<AnyStore>,
}

impl std::fmt::Debug for EngineBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineBuilder")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<'a> EngineBuilder<'a> {
    pub(super) fn new(config: &'a Config) -> EngineBuilder<'a> {
        EngineBuilder {
            config,
            clock: None,
            wall_clock: None,
            store: None,
        }
    }

    /// The clock the in-memory store decides by (a test's manual clock).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The clock (Unix time) the statistics' calendar windows follow, in
    /// UTC.
    pub fn wall_clock(mut self, wall_clock: SharedClock) -> Self {
        self.wall_clock = Some(wall_clock);
        self
    }

    /// A store opened elsewhere (a test's, a failing one), instead of the
    /// one `[store]` names.
    pub fn store(mut self, store: AnyStore) -> Self {
        self.store = Some(store);
        self
    }

    /// Opens the store (unless one was given) and puts the
    /// configuration's limits in force.
    pub async fn start(self) -> Result<Engine, StartError> {
        let clock = self
            .clock
            .unwrap_or_else(|| Arc::new(MonotonicClock::new()));
        let store = match self.store {
            Some(store) => store,
            None => AnyStore::open(&self.config.store, Arc::clone(&clock)).await?,
        };
        let wall_clock = self.wall_clock.unwrap_or_else(|| Arc::new(UnixClock));
        Ok(Engine::assemble(self.config, store, clock, wall_clock))
    }
}
