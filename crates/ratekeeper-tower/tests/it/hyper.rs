//! The layer on a plain hyper service, over real loopback HTTP: the peer
//! address comes from a `PeerAddr` the server inserts per connection.

use crate::common;

use std::convert::Infallible;

use bytes::Bytes;
use common::Http;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use ratekeeper::{Gcra, Limit, MemoryStore};
use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer};
use tower::{service_fn, Layer, ServiceBuilder};

#[tokio::test]
async fn limits_a_plain_hyper_service() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            Limit::new("per-ip", Gcra::per_minute(2).unwrap()).unwrap(),
            Key::peer(),
        )
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            // One service per connection; the layer's state is shared by all.
            let service = ServiceBuilder::new()
                .map_request(move |mut request: Request<Incoming>| {
                    request.extensions_mut().insert(PeerAddr(peer));
                    request
                })
                .service(layer.layer(service_fn(|_: Request<Incoming>| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
                })));
            tokio::spawn(async move {
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
                    .await;
            });
        }
    });
    // Each request on a new connection: the limit still holds across them.
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(Http::new(addr).get("/", &[]).await.status);
        }
        statuses
    };
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
