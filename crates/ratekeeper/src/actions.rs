//! Named limits: an application's actions, each with its own limit.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::{
    clock::MonotonicClock,
    memory::{BuildError, DEFAULT_MAX_KEYS},
    policy::{PolicyError, PolicyKind},
    Clock, MemoryLimiter, Outcome, Policy, Rate,
};

/// Why a set of [`Actions`] could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ActionsError {
    /// An action's numbers make no policy (a zero window, a limit past the
    /// bounds).
    #[error("action {action:?}: {source}")]
    Policy {
        /// The action's name.
        action: String,
        /// What was wrong.
        #[source]
        source: PolicyError,
    },
    /// An action's limiter could not be built.
    #[error("action {action:?}: {source}")]
    Build {
        /// The action's name.
        action: String,
        /// What went wrong.
        #[source]
        source: BuildError,
    },
    /// The same name was configured twice.
    #[error("action {0:?} is configured twice")]
    Duplicate(String),
}

/// Named limits, one per action of an application: logins, dashboard
/// requests, publishes. Each action limits its own keys (an address, a
/// user, a session) with its own policy.
///
/// A limit of 0 switches an action off; checking an unknown or switched-off
/// action finds no limiter and costs a hash lookup, so an application can
/// check every action unconditionally and let configuration decide.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::actions::Actions;
///
/// let actions = Actions::builder()
///     .action("auth", 10, Duration::from_secs(60))
///     .action("publish", 0, Duration::from_secs(1)) // off
///     .build()?;
///
/// let outcome = actions.check("auth", "203.0.113.9", 1).expect("auth is limited");
/// assert!(outcome.is_allowed());
/// assert!(actions.check("publish", "alice", 1).is_none());
/// assert!(actions.check("no such action", "alice", 1).is_none());
/// # Ok::<(), ratekeeper::actions::ActionsError>(())
/// ```
pub struct Actions<C = MonotonicClock> {
    limiters: HashMap<Box<str>, MemoryLimiter<C>, ahash::RandomState>,
}

impl<C> fmt::Debug for Actions<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.limiters.iter()).finish()
    }
}

impl<C> Clone for Actions<C> {
    fn clone(&self) -> Self {
        Actions {
            limiters: self.limiters.clone(),
        }
    }
}

impl Actions<MonotonicClock> {
    /// A builder with no actions.
    pub fn builder() -> ActionsBuilder<MonotonicClock> {
        ActionsBuilder {
            actions: Vec::new(),
            max_keys: DEFAULT_MAX_KEYS,
            clock: MonotonicClock::new(),
            background_sweep: true,
        }
    }
}

impl<C: Clock> Actions<C> {
    /// Decides a request of `cost` for `key` under `action`; `None` when the
    /// action is unknown or switched off, so no limit applies.
    #[inline]
    pub fn check(&self, action: &str, key: impl AsRef<[u8]>, cost: u64) -> Option<Outcome> {
        if self.limiters.is_empty() {
            return None;
        }
        self.limiters
            .get(action)
            .map(|limiter| limiter.check(key, cost))
    }

    /// Sweeps every action's table now: the keys evicted.
    pub fn sweep(&self) -> usize {
        self.limiters.values().map(MemoryLimiter::sweep).sum()
    }
}

impl<C> Actions<C> {
    /// The limiter of `action`, if it is limited.
    pub fn limiter(&self, action: &str) -> Option<&MemoryLimiter<C>> {
        self.limiters.get(action)
    }

    /// Whether `action` is limited.
    pub fn is_limited(&self, action: &str) -> bool {
        self.limiters.contains_key(action)
    }

    /// The names of the limited actions, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.limiters.keys().map(|name| &**name)
    }
}

/// One configured action.
#[derive(Debug)]
struct ActionConfig {
    name: String,
    kind: PolicyKind,
    limit: u64,
    window: Duration,
}

/// Builds [`Actions`]; made by [`Actions::builder`].
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct ActionsBuilder<C = MonotonicClock> {
    actions: Vec<ActionConfig>,
    max_keys: usize,
    clock: C,
    background_sweep: bool,
}

impl<C> ActionsBuilder<C> {
    /// Limits `name` to `limit` per `window` for each key, as a token bucket
    /// (a steady rate, bursts up to `limit`); a limit of 0 switches it off.
    pub fn action(self, name: impl Into<String>, limit: u64, window: Duration) -> Self {
        self.action_with(name, PolicyKind::TokenBucket, limit, window)
    }

    /// Limits `name` to `limit` per `window` for each key with the policy
    /// `kind`; a limit of 0 switches it off.
    pub fn action_with(
        mut self,
        name: impl Into<String>,
        kind: PolicyKind,
        limit: u64,
        window: Duration,
    ) -> Self {
        self.actions.push(ActionConfig {
            name: name.into(),
            kind,
            limit,
            window,
        });
        self
    }

    /// The most keys each action tracks (default [`DEFAULT_MAX_KEYS`]).
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Reads time from `clock`, shared by every action.
    pub fn clock<C2>(self, clock: C2) -> ActionsBuilder<C2> {
        ActionsBuilder {
            actions: self.actions,
            max_keys: self.max_keys,
            clock,
            background_sweep: self.background_sweep,
        }
    }

    /// Whether each action's table is swept by a background thread (default:
    /// yes).
    pub fn background_sweep(mut self, enabled: bool) -> Self {
        self.background_sweep = enabled;
        self
    }

    /// Builds the actions; switched-off ones get no limiter at all.
    pub fn build(self) -> Result<Actions<C>, ActionsError>
    where
        C: Clock + Clone + 'static,
    {
        let mut limiters = HashMap::with_hasher(ahash::RandomState::new());
        let mut seen = std::collections::HashSet::new();
        for action in self.actions {
            if !seen.insert(action.name.clone()) {
                return Err(ActionsError::Duplicate(action.name));
            }
            if action.limit == 0 {
                continue;
            }
            let policy = Rate::new(action.limit, action.window)
                .and_then(|rate| Policy::new(action.kind, &rate))
                .map_err(|source| ActionsError::Policy {
                    action: action.name.clone(),
                    source,
                })?;
            let limiter = MemoryLimiter::builder(policy)
                .max_keys(self.max_keys)
                .clock(self.clock.clone())
                .background_sweep(self.background_sweep)
                .build()
                .map_err(|source| ActionsError::Build {
                    action: action.name.clone(),
                    source,
                })?;
            limiters.insert(action.name.into_boxed_str(), limiter);
        }
        Ok(Actions { limiters })
    }
}
