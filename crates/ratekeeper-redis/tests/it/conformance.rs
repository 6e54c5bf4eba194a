//! The store conformance suite on one Redis server and on a Redis Cluster.

use ratekeeper_test_support::conformance::Supports;

/// Everything but in-flight caps, which the Redis store does not keep yet:
/// the suite checks that it says so.
const SUPPORTS: Supports = Supports {
    in_flight: false,
    ..Supports::EVERYTHING
};

mod single {
    use ratekeeper_redis::RedisStore;
    use ratekeeper_test_support::redis::RedisServer;

    use crate::unhurried;

    async fn redis() -> Option<(RedisServer, RedisStore)> {
        let server = RedisServer::start()?;
        let store = unhurried::connect(&server.url()).await;
        Some((server, store))
    }

    ratekeeper_test_support::store_conformance!(redis, crate::conformance::SUPPORTS);
}

mod cluster {
    use ratekeeper_redis::RedisStore;
    use ratekeeper_test_support::redis::RedisCluster;

    use crate::unhurried;

    async fn cluster() -> Option<(RedisCluster, RedisStore)> {
        let cluster = RedisCluster::start()?;
        let store = unhurried::builder().cluster(cluster.urls()).await.unwrap();
        Some((cluster, store))
    }

    // Three servers and a cluster join per store: one store for the suite.
    ratekeeper_test_support::store_conformance!(cluster, crate::conformance::SUPPORTS, one store);
}
