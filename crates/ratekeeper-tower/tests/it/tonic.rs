//! The layer on a tonic (gRPC) service: a refused call ends with the gRPC
//! status RESOURCE_EXHAUSTED (8), as gRPC clients expect, not an HTTP 429.

use std::time::Duration;

use ratekeeper::{Gcra, Limit, MemoryStore};
use ratekeeper_tower::{Key, RateLimitLayer};
use tonic::transport::{Channel, Server};
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[tokio::test]
async fn refused_grpc_calls_are_resource_exhausted() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            Limit::new("per-client", Gcra::per_minute(2).unwrap()).unwrap(),
            Key::global(),
        )
        .build()
        .unwrap();
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .layer(layer)
            .add_service(health)
            .serve_with_incoming(tokio_stream_from(listener))
            .await
            .unwrap();
    });
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    for _ in 0..2 {
        let reply = client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await;
        assert!(reply.is_ok(), "{reply:?}");
    }
    let refused = client
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted);
    assert_eq!(refused.message(), "rate limit exceeded");
}

/// The listener as tonic's incoming stream.
fn tokio_stream_from(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = Result<tokio::net::TcpStream, std::io::Error>> {
    tokio_stream::wrappers::TcpListenerStream::new(listener)
}
