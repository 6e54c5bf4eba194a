//! The store conformance suite on one Redis server and on a Redis Cluster.

mod single {
    use ratekeeper_redis::RedisStore;
    use ratekeeper_test_support::conformance::Supports;
    use ratekeeper_test_support::redis::RedisServer;

    use crate::unhurried;

    async fn redis() -> Option<(RedisServer, RedisStore)> {
        let server = RedisServer::start()?;
        let store = unhurried::connect(&server.url()).await;
        Some((server, store))
    }

    ratekeeper_test_support::store_conformance!(redis, Supports::EVERYTHING);
}

mod cluster {
    use ratekeeper_redis::RedisStore;
    use ratekeeper_test_support::conformance::Supports;
    use ratekeeper_test_support::redis::RedisCluster;

    use crate::unhurried;

    async fn cluster() -> Option<(RedisCluster, RedisStore)> {
        let cluster = RedisCluster::start()?;
        let store = unhurried::builder().cluster(cluster.urls()).await.unwrap();
        Some((cluster, store))
    }

    // Three servers and a cluster join per store: one store for the suite.
    ratekeeper_test_support::store_conformance!(cluster, Supports::EVERYTHING, one store);
}
