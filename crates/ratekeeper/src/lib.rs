//! Exact, fast rate limiting.
//!
//! `ratekeeper` decides whether a request may proceed under a rate limit:
//! in this process with [`MemoryLimiter`], or through a [`Store`] that
//! several processes share. Its five policies are pure state transitions,
//! `(policy, state, now, cost) -> (decision, next state)`: deterministic,
//! with time passed in, so they are easy to test and any store can keep
//! their states.
//!
//! # Example
//!
//! ```
//! use ratekeeper::{MemoryLimiter, Rate, TokenBucket};
//!
//! // 2 requests per second per client, at most 2 at once.
//! let per_client = MemoryLimiter::new(TokenBucket::from_rate(&Rate::per_second(2)?)?)?;
//!
//! assert!(per_client.check("203.0.113.7", 1).is_allowed());
//! assert!(per_client.check("203.0.113.7", 1).is_allowed());
//! let third = per_client.check("203.0.113.7", 1);
//! assert!(!third.is_allowed());
//! println!("retry after {:?}", third.retry_after());
//! // Another client has its own quota.
//! assert!(per_client.check("198.51.100.20", 1).is_allowed());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The policies
//!
//! | policy | state | good for |
//! |---|---|---|
//! | [`TokenBucket`] | level and time | smooth rate with bursts (x/time/rate's model), reservations |
//! | [`Gcra`] | theoretical arrival time | the token bucket in one word (redis-cell's model) |
//! | [`FixedWindow`] | window start and count | cheapest; up to 2x the limit across a boundary |
//! | [`SlidingLog`] | the allowed hits in the window | exact sliding windows; memory grows with the limit |
//! | [`SlidingWindow`] | window start, previous and current count | Cloudflare's weighted approximation in two numbers |
//!
//! [`Policy`] picks one at run time (configuration files, stores); a
//! [`Rate`] such as `"100/minute"` makes any of them.
//!
//! # Where to go next
//!
//! - [`memory`]: [`MemoryLimiter`], many keys in this process, lock-free
//!   and exact, bounded to `max_keys` keys; the sharded window for one key
//!   hit from every core; several limits for one request, all or nothing;
//!   waiting for units reserved ahead instead of refusing
//!   ([`MemoryLimiter::reserve`], and `until_ready` with the `wait`
//!   feature).
//! - [`store`]: the [`Store`] trait every front end decides through,
//!   [`MemoryStore`], a store on any database that can count
//!   ([`store::WindowCounter`]), and failing open or closed
//!   ([`store::Resilient`]). The SQLite and Redis stores are the crates
//!   `ratekeeper-sqlite` and `ratekeeper-redis`; `ratekeeper-tower` is the
//!   HTTP middleware, `ratekeeper-server` the rate-limit service.
//! - [`policy`]: the policies, their states and their limits.
//! - [`plan`]: one limit whose numbers depend on the key's plan (free,
//!   pro, unlimited, denied), a key's use carried when its plan changes.
//! - [`clock`]: [`Clock`], and [`clock::ManualClock`] for tests.
//! - [`actions`] (named limits from configuration), [`stats`] (what each
//!   limit allowed and denied), [`key`] (long keys), and with the
//!   `concurrency` feature, `concurrency` (a cap on requests in flight).
//!
//! # Time and precision
//!
//! Times are [`Timestamp`]s, nanoseconds since a clock's epoch, and all
//! decisions use integer arithmetic that saturates: no input panics or
//! overflows, and no float takes part in a decision.

pub mod actions;
pub mod clock;
#[cfg(feature = "concurrency")]
pub mod concurrency;
mod decision;
pub mod duration;
pub mod key;
pub mod memory;
mod outcome;
pub mod plan;
pub mod policy;
pub mod stats;
pub mod store;

// The names of a first program; the rest live in the modules above.
pub use clock::{Clock, Timestamp};
pub use decision::{Decision, RetryAfter};
pub use memory::MemoryLimiter;
pub use outcome::Outcome;
pub use policy::{FixedWindow, Gcra, Policy, Rate, SlidingLog, SlidingWindow, TokenBucket};
pub use store::{Limit, MemoryStore, Store};
