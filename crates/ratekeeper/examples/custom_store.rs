//! A rate limiter on a database of your own, with the least it must offer:
//! an atomic "add to this key's count in window N".
//!
//! Run with `cargo run -p ratekeeper --example custom_store`.
//!
//! The "database" here is a map behind a mutex that forgets counts once
//! their window is over, as a table with an expiry column or a cache with a
//! TTL would. Anything that can add to a number atomically and return the
//! result (`UPDATE ... SET count = count + $1 RETURNING count`, `INCRBY`, a
//! conditional write) fits the same trait.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{
    clock::UnixClock,
    store::{CounterStore, StoreError, WindowCounter},
    Clock, FixedWindow, Limit, Store, Timestamp,
};

/// Counts per (key, window), each with the time it may be forgotten.
/// (Crate-visible: the store conformance suite runs on it, in the tests.)
#[derive(Default)]
pub(crate) struct ExpiringCounts {
    rows: Mutex<HashMap<(String, u64), (u64, Timestamp)>>,
}

impl WindowCounter for ExpiringCounts {
    async fn increment(
        &self,
        key: &str,
        window: u64,
        cost: u64,
        expires_at: Timestamp,
    ) -> Result<u64, StoreError> {
        let mut rows = self
            .rows
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // What a database's TTL would do: drop rows whose window is over.
        let now = UnixClock.now();
        rows.retain(|_, (_, expiry)| *expiry > now);
        let (count, _) = rows
            .entry((key.to_owned(), window))
            .or_insert((0, expires_at));
        *count += cost;
        Ok(*count)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = CounterStore::new(ExpiringCounts::default());
    let per_client = Limit::new("per-client", FixedWindow::new(3, Duration::from_secs(60))?)?;

    block_on(async {
        for attempt in 1..=5 {
            let outcome = store.check(&per_client, b"203.0.113.7", 1).await?;
            let decision = outcome.decision().expect("a counter store never saturates");
            println!(
                "request {attempt}: {} ({} left, retry after {:?})",
                if decision.is_allowed() {
                    "allowed"
                } else {
                    "denied"
                },
                decision.remaining(),
                decision.retry_after().duration().unwrap_or_default(),
            );
        }
        // Another client has its own count.
        let other = store.check(&per_client, b"198.51.100.2", 1).await?;
        println!("another client: allowed = {}", other.is_allowed());
        Ok::<(), Box<dyn std::error::Error>>(())
    })
}
