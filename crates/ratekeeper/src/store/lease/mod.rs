//! Leasing: a shared store's units taken in chunks and decided on this
//! node, exact across every node by construction.
//!
//! Without it, every decision on a shared store (Redis, SQLite) is one
//! round trip. [`Leased`] wraps such a store: when a key is busy on this
//! node, one atomic [`Store::take`](crate::Store::take) takes a chunk of its units, counting
//! them as used in the store, and the node answers the key's next requests
//! from them without asking anyone. Because leased units are already
//! counted, the nodes together never admit more than the limit: what the
//! store has committed plus what the nodes hold never exceeds it. Leasing
//! may only *under*-admit: units a node held and did not spend.
//!
//! # How it stays exact
//!
//! A unit counted in the store at one moment and spent on a node later is
//! only safe for as long as the policy would still remember it: until the
//! window it was counted in ends (fixed window, sliding window counter), or
//! while the bucket's refill has not reached it (token bucket, GCRA: held
//! units *drain*). [`Hold`] works that out from the store's own answer to
//! the take, erring towards holding less; units past it expire unspent.
//! The sliding log cannot hold units at all (it would forget them while a
//! node still holds them), so with it each request takes only its own
//! cost, at the store, as without leasing. The property tests run several
//! nodes on one store and replay what they admitted, at the moments they
//! admitted it, through the policy alone: it admits all of it.
//!
//! # How much
//!
//! A key's first request on a node is one round trip of its own cost: a
//! cold key never leases. A key asked for often takes chunks that last
//! [`LeaseSettings::chunk_for`] at its rate on this node, at most
//! [`LeaseSettings::max_chunk`], and at most half of what the store last
//! said was left, so that near the limit takes shrink to the request's
//! cost and each decision is again one exact round trip. A token bucket's
//! takes are at least its refill over `chunk_for` (its held units drain),
//! but no more than this node's share of half of what is left, over the
//! nodes it sees taking from the key. With a spawner
//! ([`LeasedBuilder::spawn_with`]) the next chunk is taken in the
//! background before the one held runs out.
//!
//! # What it may leave unused
//!
//! At most two chunks per key per node (the one being spent and the next,
//! prefetched): units held when a key goes quiet are given back ([`Leased::sweep`], [`Leased::give_back_all`]) where
//! the store can take them back while they are still safe
//! ([`Store::refund_before`](crate::Store::refund_before)), and expire otherwise; a node that crashes
//! leaves its units counted until they would have expired anyway, at
//! most [`LeaseSettings::lifetime`].
//!
//! # New numbers, and a store that fails
//!
//! Units held under a limit's old numbers (the same name with another
//! policy: a reload) are never spent under the new ones; they go back at
//! the next sweep, or at once with [`Leased::give_back_limit`]. While the
//! store fails, units already held are spent, as they were counted when
//! taken ([`LeaseSettings::spend_while_down`] turns that off).
//!
//! # Answers
//!
//! An answer decided here says what this node sees: the store's remaining
//! count at its last take, plus the units it still holds, and the store's
//! reset less the time since. Other nodes' spending since is not in it.
//!
//! ```
//! use ratekeeper::store::lease::Leased;
//! use ratekeeper::{FixedWindow, Limit, MemoryStore, Store};
//! use std::time::Duration;
//!
//! # futures_executor::block_on(async {
//! // Two nodes sharing one store (here one in memory; Redis in a cluster).
//! let shared = MemoryStore::new();
//! let node_a = Leased::new(shared.clone());
//! let node_b = Leased::new(shared.clone());
//! let limit = Limit::new("api", FixedWindow::new(100, Duration::from_secs(3600))?)?;
//!
//! let mut allowed = 0;
//! for _ in 0..150 {
//!     for node in [&node_a, &node_b] {
//!         allowed += node.check(&limit, b"tenant-1", 1).await?.is_allowed() as u32;
//!     }
//! }
//! // Never more than the limit, and most decisions stayed on their node.
//! assert!(allowed <= 100);
//! let calls = node_a.stats().store_calls + node_b.stats().store_calls;
//! assert!(calls < 300, "{calls} store calls for 300 decisions");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

mod allotment;
mod demand;
mod hold;
mod leased;
mod stats;
mod table;

pub use hold::Hold;
pub use leased::{Background, LeaseSettings, Leased, LeasedBuilder, Spawner};
pub use stats::LeaseStats;

#[cfg(test)]
mod tests;
