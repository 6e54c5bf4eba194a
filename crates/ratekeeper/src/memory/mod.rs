//! The in-memory store: many keys, one process.
//!
//! [`MemoryLimiter`] applies one policy to many keys, with the states in
//! this process's memory. Its design and guarantees are on the type; the
//! pieces live here:
//!
//! - `slot_table`: the lock-free table for one-word states and its protocol;
//! - `one_word`: how GCRA and fixed-window states pack into a word;
//! - `locked_table`: the sharded, locked maps for the sliding policies;
//! - `key`: keys as keyed 64-bit fingerprints;
//! - `demand`: the sweeps a full table runs for a new key, and their bound;
//! - `limiter`: the limiter, its builder and its sweeper thread;
//! - `plan_tables`: the tables of one limit's plans, which move a key
//!   between them when its plan changes;
//! - `check_all`: [`check_all`], several limiters at once, all or nothing
//!   (the algorithm is the store's, with the rest of the multi-limit
//!   family in `store/multi.rs`);
//! - `sharded`: [`ShardedWindow`], one hot key's fixed window sharded
//!   across cores.

mod check_all;
mod demand;
mod key;
mod limiter;
mod locked_table;
mod one_word;
mod plan_tables;
mod sharded;
mod slot_table;
mod sync;
mod wait;

pub use check_all::check_all;
pub use demand::MIN_DEMAND_SWEEP_GAP;
pub(crate) use limiter::check_max_keys;
pub use limiter::{
    BuildError, ForgetHook, MemoryLimiter, MemoryLimiterBuilder, DEFAULT_MAX_KEYS, MAX_KEYS,
    MAX_SWEEP_INTERVAL, MIN_SWEEP_INTERVAL,
};
pub use sharded::ShardedWindow;
pub use wait::{Reserved, WaitError};
