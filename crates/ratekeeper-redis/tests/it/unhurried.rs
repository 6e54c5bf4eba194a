//! Redis stores for tests that are not about timeouts: every call may take
//! [`UNHURRIED`], so a loaded machine's stall fails none of them.

use ratekeeper_redis::{RedisStore, RedisStoreBuilder};

use ratekeeper_test_support::redis::UNHURRIED;

/// A store builder with the [`UNHURRIED`] timeout.
pub(crate) fn builder() -> RedisStoreBuilder {
    RedisStore::builder().timeout(UNHURRIED)
}

/// A store on `url` with the [`UNHURRIED`] timeout.
pub(crate) async fn connect(url: &str) -> RedisStore {
    builder()
        .connect(url)
        .await
        .expect("connect to the test server")
}
