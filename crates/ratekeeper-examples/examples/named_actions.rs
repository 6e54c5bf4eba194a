//! An application's named, configurable rate-limited actions, and its two
//! doors (reproduces seed 003, an application's actions).
//!
//! Five actions, configured from environment variables with the seed's
//! defaults:
//!
//! | action | keyed by | default | variables |
//! |---|---|---|---|
//! | `auth` | client address | 10 per 60 s | `AUTH_RATE_LIMIT`, `AUTH_RATE_WINDOW_MS` |
//! | `dashboard_auth` | client address | as `auth` | `DASHBOARD_AUTH_RATE_LIMIT`, `DASHBOARD_AUTH_RATE_WINDOW_MS` |
//! | `dashboard_api` | session, as a digest of its token | 300 per 60 s | `DASHBOARD_API_RATE_LIMIT`, `DASHBOARD_API_RATE_WINDOW_MS` |
//! | `publish` | user | off (0) per 1 s | `PUBLISH_RATE_LIMIT`, `PUBLISH_RATE_WINDOW_MS` |
//! | `subscribe` | user | off (0) per 60 s | `SUBSCRIBE_RATE_LIMIT`, `SUBSCRIBE_RATE_WINDOW_MS` |
//!
//! `RATE_LIMIT_ENABLED=false` switches every action off and
//! `RATE_LIMIT_CLEANUP_INTERVAL_MS` (default 300,000) is how often
//! [`RateLimits::cleanup`] should run. A limit of 0 switches an action off.
//! The seed names no variables for `dashboard_auth`; here it follows `auth`
//! unless its own are set.
//!
//! Two doors, as in the seed:
//!
//! - the **exact door** for `auth`, `dashboard_auth` and `dashboard_api`:
//!   token buckets in ratekeeper's [`Actions`], one atomic word per key, exact
//!   in count and in shape; these are cold, security-relevant paths;
//! - the **sharded door** for `publish` and `subscribe`, the hot paths keyed
//!   by user, where all of one client's connections hit one key: a
//!   [`ShardedWindow`] per user, whose count is split over per-core shards
//!   so the check scales with cores. It is exact in count (a limit of n
//!   admits exactly n per window) but, as a fixed window, can pass 2x the
//!   limit across a window boundary.
//!
//! Denials are counted per action and key ("blocked counters", the core's
//! [`LimitStats`]); the cleanup sweeps fresh buckets out of the exact door,
//! drops idle sharded doors and reaps the blocked counters of keys idle for
//! a window, so a session id outlives its session only until then.
//!
//! ```sh
//! cargo run -p ratekeeper-examples --example named_actions
//! PUBLISH_RATE_LIMIT=1000 cargo run -p ratekeeper-examples --example named_actions
//! ```

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ratekeeper::{
    actions::{Actions, ActionsError},
    clock::{ManualClock, MonotonicClock},
    memory::ShardedWindow,
    policy::PolicyError,
    stats::{LimitStats, StatsConfig},
    Clock, RetryAfter, Timestamp,
};
use ratekeeper_examples::{var_or, EnvError};
use sha2::{Digest, Sha256};

/// The application's rate-limited actions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// TCP authentication attempts, by client address.
    Auth,
    /// Dashboard logins and dashboard tokens that do not validate, by
    /// client address.
    DashboardAuth,
    /// Authenticated dashboard requests, by session.
    DashboardApi,
    /// Produce requests, by user (one unit per request, not per record).
    Publish,
    /// Subscribe requests, by user.
    Subscribe,
}

impl Action {
    /// Every action.
    pub(crate) const ALL: [Action; 5] = [
        Action::Auth,
        Action::DashboardAuth,
        Action::DashboardApi,
        Action::Publish,
        Action::Subscribe,
    ];

    /// The action's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::Auth => "auth",
            Action::DashboardAuth => "dashboard_auth",
            Action::DashboardApi => "dashboard_api",
            Action::Publish => "publish",
            Action::Subscribe => "subscribe",
        }
    }

    /// Whether the action goes through the sharded door.
    pub(crate) fn is_hot(self) -> bool {
        matches!(self, Action::Publish | Action::Subscribe)
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One action's numbers: `limit` per `window` (0: off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ActionLimit {
    /// Requests per window; 0 switches the action off.
    pub(crate) limit: u64,
    /// The window.
    pub(crate) window: Duration,
}

/// The configuration, with the seed's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// Whether any action is limited.
    pub(crate) enabled: bool,
    /// Each action's numbers, in [`Action::ALL`] order.
    pub(crate) actions: [ActionLimit; 5],
    /// How often the cleanup should run.
    pub(crate) cleanup_interval: Duration,
}

impl Default for Config {
    fn default() -> Self {
        let per = |limit, ms| ActionLimit {
            limit,
            window: Duration::from_millis(ms),
        };
        Config {
            enabled: true,
            actions: [
                per(10, 60_000),
                per(10, 60_000),
                per(300, 60_000),
                per(0, 1_000),
                per(0, 60_000),
            ],
            cleanup_interval: Duration::from_millis(300_000),
        }
    }
}

/// A window in milliseconds from a variable: at least 1.
fn window_ms(
    lookup: &impl Fn(&str) -> Option<String>,
    name: &str,
    default: Duration,
) -> Result<Duration, EnvError> {
    let ms: u64 = var_or(lookup, name, default.as_millis() as u64)?;
    if ms == 0 {
        return Err(EnvError::new(name, "0", "a window must be at least 1 ms"));
    }
    Ok(Duration::from_millis(ms))
}

impl Config {
    /// The configuration from the process's environment.
    pub(crate) fn from_env() -> Result<Config, EnvError> {
        Config::from_lookup(|name| std::env::var(name).ok())
    }

    /// The configuration from variables that `lookup` finds by name;
    /// unset ones keep their defaults.
    pub(crate) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, EnvError> {
        let defaults = Config::default();
        let mut config = Config {
            enabled: var_or(&lookup, "RATE_LIMIT_ENABLED", true)?,
            cleanup_interval: window_ms(
                &lookup,
                "RATE_LIMIT_CLEANUP_INTERVAL_MS",
                defaults.cleanup_interval,
            )?,
            ..defaults.clone()
        };
        for action in Action::ALL {
            let prefix = action.name().to_uppercase();
            // dashboard_auth has no variables in the seed: it follows auth.
            let default = match action {
                Action::DashboardAuth => config.actions[Action::Auth.index()],
                _ => defaults.actions[action.index()],
            };
            config.actions[action.index()] = ActionLimit {
                limit: var_or(&lookup, &format!("{prefix}_RATE_LIMIT"), default.limit)?,
                window: window_ms(&lookup, &format!("{prefix}_RATE_WINDOW_MS"), default.window)?,
            };
        }
        Ok(config)
    }

    /// One action's numbers.
    pub(crate) fn limit(&self, action: Action) -> ActionLimit {
        self.actions[action.index()]
    }
}

/// Why the limits could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LimitsError {
    /// The configuration was wrong.
    #[error(transparent)]
    Config(#[from] EnvError),
    /// An exact-door action could not be built.
    #[error(transparent)]
    Actions(#[from] ActionsError),
    /// A sharded-door action's numbers make no window.
    #[error("action {action}: {source}")]
    Hot {
        /// The action.
        action: &'static str,
        /// What was wrong.
        #[source]
        source: PolicyError,
    },
}

/// What a check decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The action is not limited (switched off, or limiting disabled).
    Unlimited,
    /// Allowed.
    Allowed,
    /// Refused; try again after `retry_after`.
    Denied {
        /// When to try again.
        retry_after: RetryAfter,
    },
}

impl Verdict {
    /// Whether the request may proceed.
    pub(crate) fn is_allowed(self) -> bool {
        !matches!(self, Verdict::Denied { .. })
    }
}

/// A user's sharded door for a hot action: hold it (per connection) and
/// call [`admit`](HotDoor::admit) for each request.
#[derive(Clone)]
pub(crate) struct HotDoor<C: Clock> {
    window: ShardedWindow<C>,
    key: Arc<str>,
    blocked: LimitStats,
    clock: C,
}

impl<C: Clock> HotDoor<C> {
    /// One request: whether it may proceed. A denial is counted in the
    /// action's blocked counters.
    #[inline]
    pub(crate) fn admit(&self) -> bool {
        let allowed = self.window.admit(1);
        if !allowed {
            self.blocked.record_denied(self.clock.now(), &*self.key);
        }
        allowed
    }

    /// One request, with the wait when it is refused: slower than
    /// [`admit`](HotDoor::admit), as it reads every shard.
    pub(crate) fn check(&self) -> Verdict {
        let decision = self.window.check(1);
        if decision.is_allowed() {
            return Verdict::Allowed;
        }
        self.blocked.record_denied(self.clock.now(), &*self.key);
        Verdict::Denied {
            retry_after: decision.retry_after(),
        }
    }

    /// The window underneath.
    pub(crate) fn window(&self) -> &ShardedWindow<C> {
        &self.window
    }
}

/// One hot action: the numbers and a sharded window per user.
struct Hot<C: Clock> {
    limit: u64,
    window: Duration,
    doors: RwLock<HashMap<Arc<str>, ShardedWindow<C>>>,
}

/// What a cleanup removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cleaned {
    /// Buckets of the exact door that were full again.
    pub(crate) buckets: usize,
    /// Sharded doors whose window had passed unused.
    pub(crate) doors: usize,
    /// Blocked counters of keys idle for a window.
    pub(crate) blocked: usize,
}

/// The application's limits: the exact door, the sharded door and the
/// blocked counters.
pub(crate) struct RateLimits<C: Clock = MonotonicClock> {
    exact: Actions<C>,
    hot: [Option<Hot<C>>; 2],
    blocked: [LimitStats; 5],
    clock: C,
}

/// The key of a dashboard session: a digest of its token, so the token
/// itself is never kept (nor shown in stats).
pub(crate) fn session_key(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut key = String::with_capacity(32);
    for byte in &digest[..16] {
        let _ = write!(key, "{byte:02x}");
    }
    key
}

impl<C: Clock + Clone + 'static> RateLimits<C> {
    /// The limits of `config`, reading `clock`.
    pub(crate) fn with_clock(config: Config, clock: C) -> Result<Self, LimitsError> {
        let mut exact = Actions::builder()
            .clock(clock.clone())
            .background_sweep(false);
        let mut hot: [Option<Hot<C>>; 2] = [None, None];
        for action in Action::ALL {
            let ActionLimit { limit, window } = config.limit(action);
            let limit = if config.enabled { limit } else { 0 };
            if !action.is_hot() {
                exact = exact.action(action.name(), limit, window);
            } else if limit > 0 {
                // Made once to validate the numbers; doors are made per user.
                ShardedWindow::new(limit, window).map_err(|source| LimitsError::Hot {
                    action: action.name(),
                    source,
                })?;
                hot[action.index() - Action::Publish.index()] = Some(Hot {
                    limit,
                    window,
                    doors: RwLock::new(HashMap::new()),
                });
            }
        }
        let blocked = Action::ALL.map(|action| {
            let mut stats = StatsConfig::default();
            // A key's count goes when its bucket or window could: a window
            // after its last denial.
            stats.key_retention = config.limit(action).window;
            LimitStats::with_config(stats)
        });
        Ok(RateLimits {
            exact: exact.build()?,
            hot,
            blocked,
            clock,
        })
    }

    fn hot(&self, action: Action) -> Option<&Hot<C>> {
        if !action.is_hot() {
            return None;
        }
        self.hot[action.index() - Action::Publish.index()].as_ref()
    }

    /// Decides one request of `action` for `key` (a client address, a
    /// session key, a user). Hot actions look the user's door up each time;
    /// a connection should hold its [`door`](RateLimits::door) instead.
    pub(crate) fn check(&self, action: Action, key: &str) -> Verdict {
        if action.is_hot() {
            return self
                .door(action, key)
                .map_or(Verdict::Unlimited, |door| door.check());
        }
        match self.exact.check(action.name(), key, 1) {
            None => Verdict::Unlimited,
            Some(outcome) if outcome.is_allowed() => Verdict::Allowed,
            Some(outcome) => {
                self.blocked[action.index()].record_denied(self.clock.now(), key);
                Verdict::Denied {
                    retry_after: outcome.retry_after(),
                }
            }
        }
    }

    /// The sharded door of `user` for a hot `action`, made on first use;
    /// `None` when the action is not limited (or not hot).
    pub(crate) fn door(&self, action: Action, user: &str) -> Option<HotDoor<C>> {
        let hot = self.hot(action)?;
        let found = hot
            .doors
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get_key_value(user)
            .map(|(key, window)| (key.clone(), window.clone()));
        let (key, window) = match found {
            Some(found) => found,
            None => {
                let mut doors = hot
                    .doors
                    .write()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                let key: Arc<str> = Arc::from(user);
                let window = doors
                    .entry(key.clone())
                    .or_insert_with(|| {
                        // The numbers were validated when the limits were built.
                        ShardedWindow::new(hot.limit, hot.window)
                            .expect("validated numbers")
                            .with_clock(self.clock.clone())
                    })
                    .clone();
                (key, window)
            }
        };
        Some(HotDoor {
            window,
            key,
            blocked: self.blocked[action.index()].clone(),
            clock: self.clock.clone(),
        })
    }

    /// Denials of `key` under `action` still counted.
    pub(crate) fn blocked(&self, action: Action, key: &str) -> Option<u64> {
        self.blocked[action.index()].denied_for(key)
    }

    /// Keys of the exact door's `action` in its table.
    pub(crate) fn tracked(&self, action: Action) -> usize {
        if let Some(hot) = self.hot(action) {
            return hot.doors.read().map_or(0, |doors| doors.len());
        }
        self.exact.limiter(action.name()).map_or(0, |l| l.len())
    }

    /// The periodic cleanup (run it every
    /// [`cleanup_interval`](Config::cleanup_interval)): evicts full buckets,
    /// drops sharded doors unused in the current window and reaps the
    /// blocked counters of keys not denied for a window.
    pub(crate) fn cleanup(&self) -> Cleaned {
        let now = self.clock.now();
        let buckets = self.exact.sweep();
        let mut doors = 0;
        for hot in self.hot.iter().flatten() {
            let mut map = hot
                .doors
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let before = map.len();
            // A door nobody holds and whose window is whole is the same as
            // no door.
            map.retain(|_, window| window.remaining() < window.limit());
            doors += before - map.len();
        }
        let blocked = self.blocked.iter().map(|stats| stats.reap(now)).sum();
        Cleaned {
            buckets,
            doors,
            blocked,
        }
    }
}

fn main() -> Result<(), LimitsError> {
    let config = Config::from_env()?;
    println!(
        "rate limiting {}; cleanup every {:?}",
        if config.enabled { "on" } else { "off" },
        config.cleanup_interval
    );
    for action in Action::ALL {
        let ActionLimit { limit, window } = config.limit(action);
        let door = if action.is_hot() { "sharded" } else { "exact" };
        match limit {
            0 => println!("  {:<14} off", action.name()),
            _ => println!(
                "  {:<14} {limit} per {window:?} ({door} door)",
                action.name()
            ),
        }
    }

    // A simulated run on a clock this program moves.
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let limits = RateLimits::with_clock(config.clone(), clock.clone())?;
    let attempts = 12;
    let auth = (0..attempts)
        .filter(|_| limits.check(Action::Auth, "203.0.113.9").is_allowed())
        .count();
    println!("auth from 203.0.113.9: {auth} of {attempts} attempts allowed");

    let session = session_key("token-of-operator-1");
    let dashboard = (0..310)
        .filter(|_| limits.check(Action::DashboardApi, &session).is_allowed())
        .count();
    println!(
        "dashboard_api for one session: {dashboard} of 310 allowed, {} blocked counted",
        limits.blocked(Action::DashboardApi, &session).unwrap_or(0)
    );

    let publish = match limits.door(Action::Publish, "alice") {
        None => "publish is off: every produce passes without touching a table".to_owned(),
        Some(door) => {
            let admitted = std::sync::atomic::AtomicU64::new(0);
            std::thread::scope(|s| {
                for _ in 0..4 {
                    s.spawn(|| {
                        for _ in 0..1_000 {
                            if door.admit() {
                                admitted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            format!(
                "publish for alice from 4 threads: {} of 4000 admitted (limit {})",
                admitted.into_inner(),
                door.window().limit()
            )
        }
    };
    println!("{publish}");

    let tracked = |limits: &RateLimits<ManualClock>| {
        Action::ALL
            .iter()
            .map(|&action| limits.tracked(action))
            .sum::<usize>()
    };
    println!("keys tracked: {}", tracked(&limits));
    let longest = Action::ALL
        .iter()
        .map(|&action| config.limit(action).window)
        .max()
        .unwrap_or_default();
    clock.advance(longest + Duration::from_secs(1));
    let cleaned = limits.cleanup();
    println!(
        "cleanup a window later: {} buckets, {} doors and {} blocked counters removed; keys tracked: {}",
        cleaned.buckets,
        cleaned.doors,
        cleaned.blocked,
        tracked(&limits)
    );
    Ok(())
}
