//! The store conformance suite on the in-memory store, and on a
//! `WindowCounter` store: the custom store of `examples/custom_store.rs`.

use ratekeeper::{store::CounterStore, MemoryStore};
use ratekeeper_test_support::conformance::Supports;

#[path = "../../examples/custom_store.rs"]
#[allow(dead_code)]
mod custom_store;

mod memory {
    use super::*;

    async fn memory() -> Option<((), MemoryStore)> {
        Some(((), MemoryStore::new()))
    }

    ratekeeper_test_support::store_conformance!(memory, Supports::EVERYTHING);
}

mod window_counter {
    use super::*;

    async fn counter() -> Option<((), CounterStore<custom_store::ExpiringCounts>)> {
        Some((
            (),
            CounterStore::new(custom_store::ExpiringCounts::default()),
        ))
    }

    ratekeeper_test_support::store_conformance!(counter, Supports::COUNTING_WINDOWS);
}
