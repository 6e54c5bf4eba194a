//! The socket-peer key (`Key::peer()`), which the layer decides on its
//! shortest path when it is the only limit: every kind of peer address and
//! every way around that path (skips, allow lists, IPv6) keyed as the
//! general path keys it. The service is called in process so that each
//! request can carry any peer address, as axum's `ConnectInfo` or hyper's
//! `PeerAddr`; the loopback tests in `axum.rs` and `hyper.rs` cover the
//! same layer over real HTTP.

use std::convert::Infallible;
use std::net::SocketAddr;

use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use ratekeeper::{Gcra, Limit, MemoryStore, Store};
use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer, RateLimitLayerBuilder};
use tower::{service_fn, Layer, Service, ServiceExt};

/// How a test attaches the peer to a request.
#[derive(Clone, Copy)]
enum Peer {
    /// axum's `ConnectInfo<SocketAddr>`.
    Axum(&'static str),
    /// hyper's `PeerAddr`, as a plain hyper server inserts it.
    Hyper(&'static str),
}

/// The layer's service over a hello-world inner service.
struct Limited<S>(S);

impl<S> Limited<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    async fn send(&mut self, method: Method, path: &str, peer: Peer) -> StatusCode {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(Bytes::new()))
            .unwrap();
        match peer {
            Peer::Axum(addr) => {
                let addr: SocketAddr = addr.parse().unwrap();
                request.extensions_mut().insert(ConnectInfo(addr));
            }
            Peer::Hyper(addr) => {
                request
                    .extensions_mut()
                    .insert(PeerAddr(addr.parse().unwrap()));
            }
        }
        let service = self.0.ready().await.unwrap_or_else(|never| match never {});
        let response = service
            .call(request)
            .await
            .unwrap_or_else(|never| match never {});
        response.status()
    }

    async fn get(&mut self, peer: Peer) -> StatusCode {
        self.send(Method::GET, "/", peer).await
    }

    /// A request from a proxy on the private network for `client`.
    async fn via_proxy(&mut self, client: &str) -> StatusCode {
        let mut request = Request::builder()
            .header("x-forwarded-for", client)
            .body(Full::new(Bytes::new()))
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr("10.0.0.2:40000".parse().unwrap()));
        let service = self.0.ready().await.unwrap_or_else(|never| match never {});
        let response = service
            .call(request)
            .await
            .unwrap_or_else(|never| match never {});
        response.status()
    }
}

/// One request per minute per peer, built by `configure` from the builder.
fn limited(
    configure: impl FnOnce(RateLimitLayerBuilder<MemoryStore>) -> RateLimitLayerBuilder<MemoryStore>,
) -> Limited<impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>>
{
    limited_on(MemoryStore::new(), configure)
}

/// As [`limited`], on `store`.
fn limited_on(
    store: MemoryStore,
    configure: impl FnOnce(RateLimitLayerBuilder<MemoryStore>) -> RateLimitLayerBuilder<MemoryStore>,
) -> Limited<impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>>
{
    let builder = RateLimitLayer::builder(store).limit(
        Limit::new("per-ip", Gcra::per_minute(1).unwrap()).unwrap(),
        Key::peer(),
    );
    let layer = configure(builder).build().unwrap();
    Limited(layer.layer(service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
    })))
}

#[tokio::test]
async fn an_ipv4_mapped_peer_is_its_ipv4_address() {
    let mut service = limited(|builder| builder);
    assert_eq!(
        service.get(Peer::Axum("192.0.2.1:40000")).await,
        StatusCode::OK
    );
    // The same client through a dual-stack socket, on another connection
    // and from the other kind of server: the same key, so refused.
    assert_eq!(
        service.get(Peer::Hyper("[::ffff:192.0.2.1]:40001")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        service.get(Peer::Hyper("192.0.2.1:40002")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Its neighbour is another client.
    assert_eq!(
        service.get(Peer::Hyper("[::ffff:192.0.2.2]:40000")).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn ipv6_peers_are_keyed_by_their_64() {
    let store = MemoryStore::new();
    let mut service = limited_on(store.clone(), |builder| builder);
    let first = Peer::Axum("[2001:db8:1:2::1]:40000");
    assert_eq!(service.get(first).await, StatusCode::OK);
    assert_eq!(service.get(first).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        service.get(Peer::Hyper("[2001:db8:1:2::1]:50000")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "the port is not part of the key"
    );
    // Another address of the same /64 is the same subscriber.
    assert_eq!(
        service
            .get(Peer::Axum("[2001:db8:1:2:ffff:ffff:ffff:fffe]:40000"))
            .await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // The next /64 is another.
    assert_eq!(
        service.get(Peer::Axum("[2001:db8:1:3::1]:40000")).await,
        StatusCode::OK
    );
    // The key is the network as ipnet writes it.
    let limit = Limit::new("per-ip", Gcra::per_minute(1).unwrap()).unwrap();
    let spent = store.peek(&limit, b"2001:db8:1:2::/64").await.unwrap();
    assert_eq!(spent.remaining(), 0);
    // An IPv6 address is not confused with an IPv4 one of the same bits.
    assert_eq!(service.get(Peer::Axum("[::1]:40000")).await, StatusCode::OK);
    assert_eq!(
        service.get(Peer::Axum("0.0.0.1:40000")).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_ipv6_prefix_of_128_keys_each_address_alone() {
    let store = MemoryStore::new();
    let whole = Key::client_network(ratekeeper_tower::client::ClientIp::Peer, 32, 128);
    let limit = Limit::new("per-ip", Gcra::per_minute(1).unwrap()).unwrap();
    let layer = RateLimitLayer::builder(store.clone())
        .limit(limit.clone(), whole)
        .build()
        .unwrap();
    let mut service = Limited(layer.layer(service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
    })));
    let first = Peer::Axum("[2001:db8:1:2::1]:1");
    assert_eq!(service.get(first).await, StatusCode::OK);
    assert_eq!(service.get(first).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        service.get(Peer::Hyper("[2001:db8:1:2::2]:1")).await,
        StatusCode::OK,
        "another address of the /64 is another key"
    );
    // At the whole length the key is the bare address, as the service's.
    let spent = store.peek(&limit, b"2001:db8:1:2::1").await.unwrap();
    assert_eq!(spent.remaining(), 0);
    assert_eq!(
        ratekeeper_tower::client::address_key("2001:db8:1:2::1".parse().unwrap(), 32, 128),
        "2001:db8:1:2::1"
    );
}

#[tokio::test]
async fn skipped_and_allow_listed_requests_take_nothing() {
    let mut service = limited(|builder| {
        builder
            .skip_paths(["/healthz"])
            .allow_keys(["192.0.2.9", "2001:db8:0:9::/64"])
    });
    let client = Peer::Axum("192.0.2.1:40000");
    for _ in 0..3 {
        assert_eq!(
            service.send(Method::GET, "/healthz", client).await,
            StatusCode::OK
        );
        assert_eq!(
            service.send(Method::OPTIONS, "/", client).await,
            StatusCode::OK
        );
        assert_eq!(
            service.get(Peer::Hyper("192.0.2.9:1")).await,
            StatusCode::OK
        );
        assert_eq!(
            service.get(Peer::Hyper("[::ffff:192.0.2.9]:1")).await,
            StatusCode::OK,
            "an allow-listed IPv4 client arriving IPv4-mapped"
        );
        assert_eq!(
            service.get(Peer::Axum("[2001:db8:0:9::1]:1")).await,
            StatusCode::OK,
            "an allow-listed IPv6 /64"
        );
    }
    // None of that counted against the client, whose one request is
    // still there, and is then spent.
    assert_eq!(service.get(client).await, StatusCode::OK);
    assert_eq!(service.get(client).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        service.send(Method::GET, "/healthz", client).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn shadow_mode_passes_every_peer_over_its_limit() {
    let mut service = limited(|builder| builder.shadow(true));
    for peer in [
        Peer::Axum("192.0.2.1:1"),
        Peer::Hyper("[::ffff:192.0.2.1]:2"),
        Peer::Axum("[2001:db8::1]:3"),
    ] {
        for _ in 0..3 {
            assert_eq!(service.get(peer).await, StatusCode::OK);
        }
    }
}

#[tokio::test]
async fn both_paths_key_a_client_alike() {
    // Two layers on one store and one limit: the first takes the
    // per-address path; the second, with an allow list, the general one.
    // A client's requests through either take from the same quota.
    let store = MemoryStore::new();
    let mut shortest = limited_on(store.clone(), |builder| builder);
    let mut general = limited_on(store, |builder| builder.allow_keys(["192.0.2.200"]));
    for (shortest_first, peer) in [
        (true, Peer::Axum("192.0.2.1:1")),
        (false, Peer::Hyper("192.0.2.2:1")),
        (true, Peer::Hyper("[::ffff:198.51.100.7]:1")),
        (false, Peer::Axum("[::ffff:198.51.100.8]:1")),
        (true, Peer::Axum("[2001:db8::7]:1")),
        (false, Peer::Hyper("[2001:db8:0:1::7]:1")),
    ] {
        let (first, second) = if shortest_first {
            (shortest.get(peer).await, general.get(peer).await)
        } else {
            (general.get(peer).await, shortest.get(peer).await)
        };
        assert_eq!(
            (first, second),
            (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS)
        );
    }
    // Another address of an IPv6 client's /64, through either path, is
    // the same client.
    assert_eq!(
        shortest.get(Peer::Axum("[2001:db8::8]:1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        general.get(Peer::Hyper("[2001:db8:0:1::8]:1")).await,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// `Key::client_ip` behind a proxy keys as `Key::peer` does: an IPv6
/// client by its /64, an IPv4-mapped one as IPv4; `client_network` takes
/// other prefixes.
#[tokio::test]
async fn clients_behind_a_proxy_are_keyed_by_their_64_or_the_prefix_given() {
    use ratekeeper_tower::client::{private_networks, ClientIp};
    let xff = || ClientIp::XForwardedFor {
        trusted: private_networks(),
    };
    let store = MemoryStore::new();
    let layer = RateLimitLayer::builder(store.clone())
        .limit(
            Limit::new("per-client", Gcra::per_minute(1).unwrap()).unwrap(),
            Key::client_ip(xff()),
        )
        .limit(
            Limit::new("per-site", Gcra::per_minute(2).unwrap()).unwrap(),
            Key::client_network(xff(), 24, 56),
        )
        .build()
        .unwrap();
    let mut service = Limited(layer.layer(service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
    })));
    // Two addresses of one /64: one client.
    assert_eq!(service.via_proxy("2001:db8:1:2::1").await, StatusCode::OK);
    assert_eq!(
        service.via_proxy("2001:db8:1:2::99").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // Another /64 of the same /56: its own client, the site's second.
    assert_eq!(
        service.via_proxy("[2001:db8:1:3::1]:4711").await,
        StatusCode::OK
    );
    // A third /64 of the /56: the site is spent.
    assert_eq!(
        service.via_proxy("2001:db8:1:4::1").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A /64 of another /56.
    assert_eq!(service.via_proxy("2001:db8:1:100::1").await, StatusCode::OK);
    // IPv4-mapped and plain IPv4: one client.
    assert_eq!(
        service.via_proxy("::ffff:203.0.113.7").await,
        StatusCode::OK
    );
    assert_eq!(
        service.via_proxy("203.0.113.7").await,
        StatusCode::TOO_MANY_REQUESTS
    );
    let per_client = Limit::new("per-client", Gcra::per_minute(1).unwrap()).unwrap();
    for key in ["2001:db8:1:2::/64", "2001:db8:1:3::/64", "203.0.113.7"] {
        let decision = store.peek(&per_client, key.as_bytes()).await.unwrap();
        assert_eq!(decision.remaining(), 0, "{key}");
    }
}

/// An allow key written as one IPv6 address never matches a client key
/// (an IPv6 client's /64): the layer says which key would.
#[test]
fn an_ipv6_address_allow_key_is_reported_with_its_64() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            Limit::new("per-ip", Gcra::per_minute(1).unwrap()).unwrap(),
            Key::peer(),
        )
        .allow_keys([
            "2001:db8:0:9::1",
            "2001:db8:0:9::/64",
            "::ffff:192.0.2.9",
            "192.0.2.9",
        ])
        .build()
        .unwrap();
    assert_eq!(
        layer.warnings(),
        [ratekeeper_tower::LayerWarning::Ipv6AllowKey {
            key: "2001:db8:0:9::1".to_owned(),
            network: "2001:db8:0:9::/64".to_owned(),
        }]
    );
    // Not for keys that are not client addresses.
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            Limit::new("per-key", Gcra::per_minute(1).unwrap()).unwrap(),
            Key::header(http::HeaderName::from_static("x-api-key")),
        )
        .allow_keys(["2001:db8:0:9::1"])
        .build()
        .unwrap();
    assert!(layer.warnings().is_empty());
}
