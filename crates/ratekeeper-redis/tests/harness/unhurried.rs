//! Redis stores for tests that are not about timeouts: every call may take
//! [`UNHURRIED`], so a loaded machine's stall fails none of them. A test
//! includes it beside the harness, as
//! `#[path = "harness/unhurried.rs"] mod unhurried;`.

#![allow(dead_code, unreachable_pub)]

use ratekeeper_redis::{RedisStore, RedisStoreBuilder};

use super::harness::UNHURRIED;

/// A store builder with the [`UNHURRIED`] timeout.
pub fn builder() -> RedisStoreBuilder {
    RedisStore::builder().timeout(UNHURRIED)
}

/// A store on `url` with the [`UNHURRIED`] timeout.
pub async fn connect(url: &str) -> RedisStore {
    builder()
        .connect(url)
        .await
        .expect("connect to the test server")
}
