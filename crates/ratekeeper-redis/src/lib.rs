//! A [`ratekeeper`] store on Redis and Redis Cluster.
//!
//! [`RedisStore`] implements [`ratekeeper::Store`] for every policy: each
//! decision is **one round trip running one Lua script**, atomic, on
//! **Redis's own clock** (`TIME` inside the script), so two requests can
//! never both take a key's last unit, from any host, and hosts whose clocks
//! disagree still get the same decisions. Every call is bounded by a
//! timeout ([`StoreError::Timeout`](ratekeeper::store::StoreError::Timeout)); wrap
//! the store in [`ratekeeper::store::Resilient`] to fail open, closed, or to a local
//! fallback while Redis is away.
//!
//! ```no_run
//! use std::time::Duration;
//! use ratekeeper::{Gcra, Limit, Store};
//! use ratekeeper_redis::RedisStore;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let store = RedisStore::builder()
//!     .prefix("myapp:")
//!     .timeout(Duration::from_millis(50))
//!     .connect("redis://127.0.0.1:6379")
//!     .await?;
//! let per_user = Limit::new("per-user", Gcra::per_second(10)?)?;
//! let outcome = store.check(&per_user, b"alice", 1).await?;
//! if !outcome.is_allowed() {
//!     // 429, Retry-After: outcome.retry_after()
//! }
//! # Ok(()) }
//! ```
//!
//! # Keys and state
//!
//! A limit keeps `key`'s state at `{prefix}{length of the name}:{name}:{key}`
//! (prefix `ratekeeper:` by default; for example
//! `ratekeeper:6:per-ip:203.0.113.7`; see [`RedisStore::key`]): a key over
//! 64 bytes is kept as a readable prefix and a digest
//! ([`ratekeeper::key::bounded`]), and the key's `%`, `:`, `{` and `}` are
//! percent-encoded, so whatever a client sends, its Redis key is at most
//! 260 bytes past the prefix, chooses no Redis Cluster slot, and no two
//! (prefix, limit, key) share one (nested prefixes included). The state is one
//! small string: a tag byte and the state's doubles packed with Lua's
//! `struct`, then the numbers it was made under (GCRA's interval, a token
//! bucket's unit, full bucket and gain, a window's length; 25 to 41
//! bytes); the sliding log keeps 16 bytes per instant with allowed hits and
//! its window last. When a limit's numbers change (a reload), the script
//! carries each key's state to the new ones as
//! [`Policy::carry`](ratekeeper::Policy::carry) does, on the key's next
//! request, and writes it then even if the request is refused; a value
//! that records no numbers is read as made under the numbers given.
//! Each write sets the
//! key's TTL to the moment its state equals a fresh one (rounded up to the
//! next millisecond, plus one), so idle keys disappear on their own, and
//! never before their state is fresh. Two exceptions keep the TTL a key
//! already has, since rewriting it is the costliest part of a write: a
//! window's key keeps the end of its window, and a GCRA key outlives its
//! state by up to a quarter of the state's lifetime (as of when its expiry
//! was last set) and 2 ms: its value records the expiry set, and writes
//! keep it while the new state is fresh again by then. The value still
//! reads as before (the same theoretical arrival time); a value of an
//! earlier version records no expiry, and gets a new one.
//!
//! # Exactness and precision
//!
//! Lua numbers are doubles, exact for integers up to 2^53. The script keeps
//! times in **microseconds** since the Unix epoch (what `TIME` gives) and
//! runs the core's integer arithmetic on numbers that stay below 2^53: the
//! token bucket in the core's units of 1/P token, GCRA with the core's
//! emission interval in whole nanoseconds (its state is the time of the last
//! write in µs and the theoretical arrival time's distance from it in ns),
//! the window policies with windows in µs. (One rounding differs: a state
//! carried to other numbers is rescaled exactly while the product fits
//! 2^53, else rounded one unit toward refusing.) So every decision equals
//! [`Algorithm::decide`](ratekeeper::policy::Algorithm::decide) of the pure policy at
//! the server's time in whole microseconds, field for field (the tests
//! replay each policy through the core). Policies whose numbers would not
//! stay exact are refused with
//! [`StoreError::Unsupported`](ratekeeper::store::StoreError::Unsupported);
//! [`check_policy`] says which bound they miss (windows must be whole
//! microseconds, tolerances and buckets at most 2^53 ns, a sliding window's
//! `limit × window` at most 2^53 µs).
//!
//! # Several limits at once
//!
//! [`check_all`](ratekeeper::Store::check_all) decides every limit in one
//! script, all or nothing: on one server always. On Redis Cluster one script
//! can only touch one hash slot, and a key's slot is its whole Redis key's:
//! a `{...}` in a key is escaped, since a client that chose its keys' slot
//! could put them all on one master. Keys in different slots are decided
//! one script per slot, each atomic, with the earlier slots refunded when a
//! later one denies ([`CrossSlot::Compensate`], the default), or refused
//! ([`CrossSlot::Refuse`]). When no client chooses the part of a key in
//! braces (the application writes `{user42}` from an authenticated account),
//! [`RedisStoreBuilder::hash_tags_in_keys`] keeps the tags, and a request's
//! limits on one tag share a slot and stay one atomic script.
//!
//! # Cost
//!
//! A decision is one round trip: one call of a Redis function (`FCALL`,
//! Redis 7+) or of the same script by `EVALSHA` on servers without
//! functions, which reads `TIME`, reads the key and, when allowed, writes it
//! with its expiry (a GCRA key hit near its rate skips most of those
//! writes). BENCHMARKS.md has the figures: decisions per second, and what
//! each costs inside `redis-server`.
//!
//! On Redis 7 the function is loaded with `FUNCTION LOAD REPLACE` when a
//! server answers `Function not found` (a new or restarted server, or
//! `FUNCTION FLUSH`), then called again in the same decision. One difference
//! from `EVAL` scripts: a server over `maxmemory` with no eviction refuses a
//! function that may write before it runs, so denied decisions fail there
//! too, where the script would only have failed when writing.
//!
//! # Calls made at once
//!
//! On one server, concurrent calls share scripts ([`Batching`], on by
//! default): up to [`Batching::in_flight`] scripts run at once, each call
//! sent as soon as it is made; calls made while that many run wait in a
//! queue, and the next script to go takes all of them (up to
//! [`Batching::max_calls`]). The script decides them one after another,
//! each exactly as if it ran alone (it sees the states the calls before it
//! left; a multi-limit call stays all or nothing), reads `TIME` once, reads
//! each key once and writes each key it changed once, at the end, with the
//! expiry its last state needs. So under load a decision costs Redis about
//! a quarter less, and decisions on one hot key more than half less; at low
//! load nothing waits. A key holding a value of another type fails only
//! the call that reads it. Each call keeps its own timeout, its wait in
//! the queue included, and a call whose caller stopped waiting before its
//! script was sent is dropped undecided. Redis Cluster connections do not
//! coalesce.
//!
//! # TLS
//!
//! `rediss://` URLs connect over TLS (rustls, ring provider), verifying the
//! server with the system's roots, or with a CA bundle and presenting a
//! client certificate as [`Tls`] says
//! ([`RedisStoreBuilder::tls`]; Redis Cluster too):
//!
//! ```no_run
//! use ratekeeper_redis::{RedisStore, Tls};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let tls = Tls::new()
//!     .with_ca_pem(std::fs::read("/etc/redis/ca.pem")?)?
//!     .with_client_pem(
//!         std::fs::read("/etc/ratekeeper/client.pem")?,
//!         std::fs::read("/etc/ratekeeper/client.key")?,
//!     )?;
//! let store = RedisStore::builder()
//!     .tls(tls)
//!     .connect("rediss://redis.internal:6380")
//!     .await?;
//! # Ok(()) }
//! ```
//!
//! A server whose certificate the CA does not vouch for, or that refuses
//! the client's, fails [`RedisStoreBuilder::connect`] with the handshake's
//! reason in the error's sources.
//!
//! # Runtime
//!
//! The store runs on Tokio (the redis crate's `tokio-comp`), with the time
//! driver enabled for the timeouts. Connecting to one server with batching
//! on spawns the task that sends queued calls, on the runtime that
//! connects; it ends when the last clone of the store is dropped.

mod batch;
mod builder;
mod key;
mod params;
mod reply;
mod script;
mod sentinel;
mod slot;
mod store;
mod tls;

pub use batch::{BatchStats, Batching};
pub use builder::{
    ConnectError, CrossSlot, RedisStoreBuilder, DEFAULT_CONNECT_TIMEOUT, DEFAULT_PREFIX,
    DEFAULT_TIMEOUT,
};
pub use params::{check_policy, UnsupportedPolicy, MAX_EXACT};
pub use reply::ReplyError;
pub use store::{Pinned, RedisStore};

/// The store's script and Redis Cluster's slot function, for this crate's
/// own tests, benches and examples (the `internals` feature): not an API,
/// and not kept stable.
#[cfg(feature = "internals")]
pub mod internals {
    /// The Lua source of the decision script, as `EVAL` runs it.
    pub const SCRIPT: &str = crate::script::SCRIPT;

    /// The name of the Redis function (and library) that runs [`SCRIPT`].
    pub fn function_name() -> &'static str {
        crate::script::function_name()
    }

    /// The Redis function library the store loads on Redis 7 and later.
    pub fn library() -> &'static str {
        crate::script::library()
    }

    /// The hash slot of `key`, as Redis Cluster computes it.
    pub fn hash_slot(key: &[u8]) -> u16 {
        crate::slot::hash_slot(key)
    }
}
pub use tls::{is_tls_url, PemInput, Tls, TlsError};
