//! Requests that carry no socket peer: a server that does not say who
//! connected (axum served without `into_make_service_with_connect_info`,
//! hyper without a `PeerAddr`). No forwarding header is believed then,
//! every key needing the client resolves to the shared unknown key, and the
//! layer says so once and counts the requests; only the explicit opt-in
//! (`trust_headers_without_peer`) reads the headers instead.
//!
//! The first tests serve the crate README's layer over real loopback HTTP;
//! the rest call the service in process, to reach each path of the layer
//! (one limit, several, composed keys, allow lists, function keys, a store
//! that waits) without a peer.

use crate::common;

use std::convert::Infallible;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::{Http, Waiting};
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use ratekeeper::{clock::ManualClock, Gcra, Limit, MemoryStore, Store, Timestamp};
use ratekeeper_tower::client::{private_networks, ClientIp, X_REAL_IP};
use ratekeeper_tower::{Key, LayerWarning, RateLimitLayer, RateLimitLayerBuilder};
use tower::{service_fn, Layer, Service, ServiceExt};

/// A store on a clock that stands still, so a quota never refills during
/// a test however slowly the machine runs it.
fn still_store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .max_keys(1_000)
        .clock(ManualClock::new(Timestamp::from_secs(1_000)))
        .background_sweep(false)
        .build()
        .expect("a valid store")
}

/// The layer of the crate README: 100 a minute per client behind our
/// proxies on the private network, `/healthz` skipped.
fn readme_layer(
    configure: impl FnOnce(
        RateLimitLayerBuilder<MemoryStore<ManualClock>>,
    ) -> RateLimitLayerBuilder<MemoryStore<ManualClock>>,
) -> RateLimitLayer<MemoryStore<ManualClock>> {
    let per_client = Key::client_ip(ClientIp::XForwardedFor {
        trusted: private_networks(),
    });
    let builder = RateLimitLayer::builder(still_store())
        .limit(
            Limit::new("per-ip", Gcra::per_minute(100).unwrap()).unwrap(),
            per_client,
        )
        .skip_paths(["/healthz"]);
    configure(builder).build().unwrap()
}

fn app() -> Router {
    Router::new().route("/", get(|| async { "hello" }))
}

/// Serves `app` as `axum::serve(listener, app)` does: no connect info, so
/// no request carries its peer.
async fn serve_without_peer(app: Router) -> Http {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Http::new(addr)
}

/// What the layer logged while a test ran. The tests run on tokio's
/// current-thread runtime, so the server's tasks log on the thread whose
/// default subscriber this sets.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::WARN)
            .with_writer(move || writer.clone())
            .finish();
        (logs, tracing::subscriber::set_default(subscriber))
    }

    /// The error lines.
    fn errors(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|line| line.contains("ERROR"))
            .map(str::to_owned)
            .collect()
    }
}

/// Sends `count` requests, the n-th with `X-Forwarded-For: 203.0.113.n`
/// (or `198.51.100.n` past 256): (allowed, refused).
async fn one_address_each(http: &Http, count: usize) -> (usize, usize) {
    let (mut allowed, mut refused) = (0, 0);
    for n in 0..count {
        let address = if n < 256 {
            format!("203.0.113.{n}")
        } else {
            format!("198.51.100.{}", n - 256)
        };
        match http.get("/", &[("x-forwarded-for", &address)]).await.status {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => refused += 1,
            other => panic!("unexpected {other}"),
        }
    }
    (allowed, refused)
}

#[tokio::test]
async fn the_readme_layer_served_without_the_peer_believes_no_forwarded_for() {
    let (logs, _guard) = Logs::capture();
    let layer = readme_layer(|builder| builder);
    let http = serve_without_peer(app().layer(layer.clone())).await;

    // One client changing its X-Forwarded-For on every request: without a
    // peer nobody can tell whether a proxy wrote it, so it names nothing,
    // and the 150 requests share one quota of 100.
    assert_eq!(one_address_each(&http, 150).await, (100, 50));
    assert_eq!(layer.missing_peer_requests(), 150);

    // Said once, with what happened and the fix.
    let errors = logs.errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    for needle in [
        "without a socket peer",
        "\"unknown\" key",
        "into_make_service_with_connect_info::<SocketAddr>()",
        "PeerAddr",
        "trust_headers_without_peer()",
    ] {
        assert!(errors[0].contains(needle), "{needle:?} in {:?}", errors[0]);
    }
    assert!(layer.warnings().is_empty());
}

#[tokio::test]
async fn the_readme_layer_served_with_the_peer_keys_each_client_behind_the_proxy() {
    let (logs, _guard) = Logs::capture();
    let layer = readme_layer(|builder| builder);
    let http = common::serve(app().layer(layer.clone())).await;
    // The loopback peer is one of the proxies the README trusts, so each
    // address it forwards is a client of its own.
    assert_eq!(one_address_each(&http, 150).await, (150, 0));
    assert_eq!(layer.missing_peer_requests(), 0);
    assert_eq!(logs.errors(), Vec::<String>::new());
}

#[tokio::test]
async fn with_the_opt_in_the_forwarding_headers_key_requests_without_a_peer() {
    let (logs, _guard) = Logs::capture();
    let layer = readme_layer(|builder| builder.trust_headers_without_peer());
    assert_eq!(
        layer.warnings(),
        [LayerWarning::TrustsHeadersWithoutPeer {
            limit: "per-ip".to_owned()
        }]
    );
    let http = serve_without_peer(app().layer(layer.clone())).await;

    assert_eq!(one_address_each(&http, 150).await, (150, 0));
    // The headers are the key: one client's quota runs out alone.
    let client = [("x-forwarded-for", "192.0.2.1")];
    for _ in 0..100 {
        assert_eq!(http.get("/", &client).await.status, StatusCode::OK);
    }
    assert_eq!(
        http.get("/", &client).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        http.get("/", &[("x-forwarded-for", "192.0.2.2")])
            .await
            .status,
        StatusCode::OK
    );
    // Still the rightmost untrusted entry: a client-written leftmost one
    // changes nothing.
    assert_eq!(
        http.get("/", &[("x-forwarded-for", "1.1.1.1, 192.0.2.1")])
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(layer.missing_peer_requests(), 0);
    assert_eq!(logs.errors(), Vec::<String>::new());
}

fn one_a_minute(name: &str) -> Limit {
    Limit::new(name, Gcra::per_minute(1).unwrap()).unwrap()
}

/// Calls the layer in process with requests that carry no peer.
struct NoPeer<S>(S);

impl<S> NoPeer<S>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    async fn get(&mut self, headers: &[(&str, &str)]) -> StatusCode {
        let mut request = Request::builder().uri("/");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(Full::new(Bytes::new())).unwrap();
        let service = self.0.ready().await.unwrap_or_else(|never| match never {});
        let response = service
            .call(request)
            .await
            .unwrap_or_else(|never| match never {});
        response.status()
    }
}

fn no_peer<St: Store + 'static>(
    layer: &RateLimitLayer<St>,
) -> NoPeer<impl Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>>
{
    NoPeer(layer.layer(service_fn(|_: Request<Full<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("hello"))))
    })))
}

/// Two requests naming two different clients in every forwarding header
/// there is.
const FIRST: &[(&str, &str)] = &[
    ("x-forwarded-for", "203.0.113.1"),
    ("forwarded", "for=203.0.113.1"),
    ("x-real-ip", "203.0.113.1"),
];
const SECOND: &[(&str, &str)] = &[
    ("x-forwarded-for", "203.0.113.2"),
    ("forwarded", "for=203.0.113.2"),
    ("x-real-ip", "203.0.113.2"),
];

/// Every client strategy, alone and composed with the route, on a store
/// that decides at once and on one that waits: without a peer the two
/// clients share the unknown key, so the second is refused.
#[tokio::test]
async fn every_client_key_is_unknown_without_a_peer() {
    let strategies = [
        ClientIp::Peer,
        ClientIp::XForwardedFor {
            trusted: private_networks(),
        },
        ClientIp::Forwarded {
            trusted: private_networks(),
        },
        ClientIp::Hops(1),
        ClientIp::Header {
            name: X_REAL_IP,
            trusted: private_networks(),
        },
    ];
    for strategy in strategies {
        let keys = [
            Key::client_ip(strategy.clone()),
            Key::client_network(strategy.clone(), 24, 56),
            Key::compose([Key::client_ip(strategy.clone()), Key::route()]),
            Key::compose([
                Key::client_ip(strategy.clone()),
                Key::from_fn(|_| Some(b"tenant".to_vec())),
            ]),
        ];
        for key in keys {
            let immediate = RateLimitLayer::builder(still_store())
                .limit(one_a_minute("per-client"), key.clone())
                .build()
                .unwrap();
            let waiting = RateLimitLayer::builder(Waiting(still_store()))
                .limit(one_a_minute("per-client"), key.clone())
                .build()
                .unwrap();
            let mut service = no_peer(&immediate);
            assert_eq!(service.get(FIRST).await, StatusCode::OK, "{key:?}");
            assert_eq!(
                service.get(SECOND).await,
                StatusCode::TOO_MANY_REQUESTS,
                "{key:?}"
            );
            assert_eq!(immediate.missing_peer_requests(), 2, "{key:?}");
            let mut service = no_peer(&waiting);
            assert_eq!(service.get(FIRST).await, StatusCode::OK, "{key:?}");
            assert_eq!(
                service.get(SECOND).await,
                StatusCode::TOO_MANY_REQUESTS,
                "{key:?} on a store that waits"
            );
            assert_eq!(waiting.missing_peer_requests(), 2, "{key:?}");
        }
    }
}

/// Several limits, on both kinds of store: each request is counted once,
/// however many of its keys wanted the peer.
#[tokio::test]
async fn several_limits_count_a_request_once() {
    let xff = || {
        Key::client_ip(ClientIp::XForwardedFor {
            trusted: private_networks(),
        })
    };
    let immediate = RateLimitLayer::builder(still_store())
        .limit(one_a_minute("per-client"), xff())
        .limit(one_a_minute("per-peer"), Key::peer())
        .limit(
            Limit::new("global", Gcra::per_minute(100).unwrap()).unwrap(),
            Key::global(),
        )
        .build()
        .unwrap();
    let waiting = RateLimitLayer::builder(Waiting(still_store()))
        .limit(one_a_minute("per-client"), xff())
        .limit(one_a_minute("per-peer"), Key::peer())
        .build()
        .unwrap();
    let mut service = no_peer(&immediate);
    assert_eq!(service.get(FIRST).await, StatusCode::OK);
    assert_eq!(service.get(SECOND).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(immediate.missing_peer_requests(), 2);
    let mut service = no_peer(&waiting);
    assert_eq!(service.get(FIRST).await, StatusCode::OK);
    assert_eq!(service.get(SECOND).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(waiting.missing_peer_requests(), 2);
}

/// A client cannot name an allow-listed address in a header and pass.
#[tokio::test]
async fn a_forwarded_allow_listed_address_is_not_believed_without_a_peer() {
    let layer = RateLimitLayer::builder(still_store())
        .limit(
            one_a_minute("per-client"),
            Key::client_ip(ClientIp::XForwardedFor {
                trusted: private_networks(),
            }),
        )
        .allow_keys(["203.0.113.9"])
        .build()
        .unwrap();
    let mut service = no_peer(&layer);
    let allowed = [("x-forwarded-for", "203.0.113.9")];
    assert_eq!(service.get(&allowed).await, StatusCode::OK);
    assert_eq!(service.get(&allowed).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(layer.missing_peer_requests(), 2);
}

/// Keys that do not need the client (a header value, the route, the
/// global key) are not about the peer: nothing is counted.
#[tokio::test]
async fn keys_without_a_client_part_do_not_count_missing_peers() {
    let layer = RateLimitLayer::builder(still_store())
        .limit(
            one_a_minute("per-api-key"),
            Key::compose([
                Key::header(HeaderName::from_static("x-api-key")),
                Key::route(),
            ]),
        )
        .build()
        .unwrap();
    let mut service = no_peer(&layer);
    assert_eq!(service.get(&[("x-api-key", "a")]).await, StatusCode::OK);
    assert_eq!(service.get(&[("x-api-key", "b")]).await, StatusCode::OK);
    assert_eq!(layer.missing_peer_requests(), 0);
}

/// The opt-in reads every header strategy, alone and composed; `Key::peer`
/// still has nothing to read, and says so.
#[tokio::test]
async fn the_opt_in_reads_each_strategys_header_but_not_a_missing_peer() {
    for strategy in [
        ClientIp::XForwardedFor {
            trusted: private_networks(),
        },
        ClientIp::Forwarded {
            trusted: private_networks(),
        },
        ClientIp::Hops(1),
        ClientIp::Header {
            name: X_REAL_IP,
            trusted: private_networks(),
        },
    ] {
        for key in [
            Key::client_ip(strategy.clone()),
            Key::compose([Key::client_ip(strategy.clone()), Key::route()]),
        ] {
            let layer = RateLimitLayer::builder(still_store())
                .limit(one_a_minute("per-client"), key.clone())
                .trust_headers_without_peer()
                .build()
                .unwrap();
            let mut service = no_peer(&layer);
            assert_eq!(service.get(FIRST).await, StatusCode::OK, "{key:?}");
            assert_eq!(service.get(SECOND).await, StatusCode::OK, "{key:?}");
            assert_eq!(
                service.get(FIRST).await,
                StatusCode::TOO_MANY_REQUESTS,
                "{key:?}"
            );
            assert_eq!(layer.missing_peer_requests(), 0, "{key:?}");
        }
    }
    let layer = RateLimitLayer::builder(still_store())
        .limit(one_a_minute("per-peer"), Key::peer())
        .trust_headers_without_peer()
        .build()
        .unwrap();
    assert!(layer.warnings().is_empty(), "Key::peer reads no header");
    let mut service = no_peer(&layer);
    assert_eq!(service.get(FIRST).await, StatusCode::OK);
    assert_eq!(service.get(SECOND).await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(layer.missing_peer_requests(), 2);
}
