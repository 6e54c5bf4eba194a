//! Exact, fast rate limiting.
//!
//! `ratekeeper` decides whether a request may proceed under a rate limit.
//! Its five policies are pure state transitions, `(policy, state, now, cost)
//! -> (decision, next state)`: deterministic, with time passed in, so they are
//! easy to test and any store can keep their states.
//!
//! | policy | state | good for |
//! |---|---|---|
//! | [`TokenBucket`] | level and time | smooth rate with bursts (x/time/rate's model), reservations |
//! | [`Gcra`] | theoretical arrival time | the token bucket in one word (redis-cell's model) |
//! | [`FixedWindow`] | window start and count | cheapest; up to 2x the limit across a boundary |
//! | [`SlidingLog`] | the allowed hits in the window | exact sliding windows; memory grows with the limit |
//! | [`SlidingWindow`] | window start, previous and current count | Cloudflare's weighted approximation in two numbers |
//!
//! [`Policy`] and [`State`] wrap the five for code that picks one at run time
//! (configuration files, stores). Clocks live behind the [`Clock`] trait, with
//! a [`ManualClock`] for tests; [`ConcurrencyLimiter`] caps requests in flight.
//!
//! Around the policies:
//!
//! - [`MemoryLimiter`]: one policy over many keys in this process's memory,
//!   lock-free and exact under contention, bounded to `max_keys` keys
//!   ([`Outcome::Saturated`] past it, until known keys are fresh again),
//!   swept in the background and, when full, on demand;
//! - [`ShardedWindow`]: a fixed window for one key hit from every core, with
//!   per-core shards that stay exact;
//! - [`check_all`]: several limits for one request, all or nothing;
//! - [`Actions`]: named limits from configuration, where 0 switches one off;
//! - [`LimitStats`] and [`Stats`]: what each limit allowed and denied, per
//!   UTC calendar window, and the keys it denied most.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//! use ratekeeper::{Algorithm, Gcra, RetryAfter, Timestamp};
//!
//! // 2 requests per second, at most 2 at once.
//! let policy = Gcra::per_second(2).unwrap();
//! let mut state = policy.fresh();
//! let t = Timestamp::from_millis;
//!
//! for (now, allowed, remaining) in [(0, true, 1), (10, true, 0), (20, false, 0), (600, true, 0)] {
//!     let (decision, next) = policy.decide(&state, t(now), 1);
//!     assert_eq!(decision.is_allowed(), allowed);
//!     assert_eq!(decision.remaining(), remaining);
//!     state = next;
//!     if now == 20 {
//!         assert_eq!(decision.retry_after(), RetryAfter::After(Duration::from_millis(480)));
//!     }
//! }
//! ```
//!
//! # Time and precision
//!
//! Times are [`Timestamp`]s, nanoseconds since a clock's epoch, and all
//! decisions use integer arithmetic that saturates: no input panics or
//! overflows, and no float takes part in a decision.

mod actions;
mod clock;
mod concurrency;
mod decision;
mod error;
pub mod key;
mod memory;
mod multi;
mod outcome;
mod policy;
mod rate;
mod sharded;
mod stats;
mod store;
mod time;

pub use actions::{Actions, ActionsBuilder, ActionsError};
pub use clock::{Clock, CoarseClock, ManualClock, MonotonicClock, UnixClock};
pub use concurrency::{AcquireError, ConcurrencyLimiter, Permit};
pub use decision::{Decision, RetryAfter};
pub use error::PolicyError;
pub use memory::{
    BuildError, ForgetHook, MemoryLimiter, MemoryLimiterBuilder, DEFAULT_MAX_KEYS, MAX_KEYS,
    MAX_SWEEP_INTERVAL, MIN_DEMAND_SWEEP_GAP, MIN_SWEEP_INTERVAL,
};
pub use multi::{check_all, MultiOutcome};
pub use outcome::Outcome;
pub use policy::fixed_window::{FixedWindow, FixedWindowState};
pub use policy::gcra::{Gcra, GcraState};
pub use policy::sliding_log::{Hit, SlidingLog, SlidingLogState};
pub use policy::sliding_window::{SlidingWindow, SlidingWindowState};
pub use policy::token_bucket::{Reservation, ReserveError, TokenBucket, TokenBucketState};
pub use policy::{Algorithm, Policy, PolicyKind, State, UnknownPolicyKind, MAX_PERIOD, MAX_QUOTA};
pub use rate::{ParseRateError, Rate};
pub use sharded::ShardedWindow;
pub use stats::{
    LimitSnapshot, LimitStats, Period, PeriodTraffic, Stats, StatsConfig, StatsSnapshot, TopKey,
    TrafficWindows, WindowTraffic,
};
pub use store::{
    BackendError, CounterStore, FailureMode, FailurePolicy, Limit, LimitNameError, MemoryStore,
    PreparedLimit, Resilient, ResilientStats, Store, StoreError, WindowCounter, MAX_LIMIT_NAME,
};
pub use time::Timestamp;

/// Compiles and runs the examples in README.md as doctests.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
