//! Rules: limits that apply to some methods and paths, and shadow limits
//! that report without refusing, on a store that decides at once and on
//! one that waits (the layer's two paths).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use ratekeeper::{clock::ManualClock, Gcra, Limit, MemoryStore, Store, Timestamp};
use ratekeeper_tower::{Key, PeerAddr, RateLimitLayer, Rule};
use tower::{service_fn, Layer, Service, ServiceExt};

use crate::common::Waiting;

fn per_minute(name: &str, n: u64) -> Limit {
    Limit::new(name, Gcra::per_minute(n).unwrap()).unwrap()
}

fn still_store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(ManualClock::new(Timestamp::from_secs(1)))
        .background_sweep(false)
        .build()
        .expect("a valid store")
}

/// Sends one request from one client; the status and the response.
async fn send<S>(service: &mut S, method: Method, path: &str) -> Response<Full<Bytes>>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    let service = service.ready().await.unwrap_or_else(|never| match never {});
    service
        .call(request)
        .await
        .unwrap_or_else(|never| match never {})
}

async fn hello(_: Request<Full<Bytes>>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from("hello"))))
}

/// What `key` has left under `limit`.
async fn left(store: &impl Store, limit: &Limit, key: &[u8]) -> u64 {
    store.peek(limit, key).await.unwrap().remaining()
}

async fn scoped_rules_apply_only_to_their_requests<S: Store + Clone + 'static>(store: S) {
    let uploads = per_minute("uploads", 1);
    let global = per_minute("global", 100);
    let layer = RateLimitLayer::builder(store.clone())
        .rule(
            Rule::new(uploads.clone(), Key::peer())
                .methods([Method::POST])
                .path_prefix("/upload"),
        )
        .rule(Rule::new(global.clone(), Key::global()))
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(hello));

    let first = send(&mut service, Method::POST, "/upload/a").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.headers()["ratelimit-policy"],
        "\"uploads\";q=1;w=60, \"global\";q=100;w=60"
    );
    let refused = send(&mut service, Method::POST, "/upload/b").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another method, another path: the upload limit does not apply.
    let get = send(&mut service, Method::GET, "/upload/a").await;
    assert_eq!(get.status(), StatusCode::OK);
    assert_eq!(get.headers()["ratelimit-policy"], "\"global\";q=100;w=60");
    let elsewhere = send(&mut service, Method::POST, "/other").await;
    assert_eq!(elsewhere.status(), StatusCode::OK);
    // The refused upload took nothing from the global limit.
    assert_eq!(left(&store, &global, b"*").await, 97);
    assert_eq!(left(&store, &uploads, b"192.0.2.1").await, 0);
}

#[tokio::test]
async fn scoped_rules_apply_only_to_their_methods_and_paths() {
    scoped_rules_apply_only_to_their_requests(still_store()).await;
    scoped_rules_apply_only_to_their_requests(Waiting(still_store())).await;
}

async fn shadow_rules_report_without_refusing<S: Store + Clone + 'static>(store: S) {
    let enforced = per_minute("enforced", 2);
    let loose = per_minute("trial-loose", 5);
    let strict = per_minute("trial-strict", 1);
    let layer = RateLimitLayer::builder(store.clone())
        .limit(enforced.clone(), Key::peer())
        .rule(Rule::new(loose.clone(), Key::peer()).shadow(true))
        .rule(Rule::new(strict.clone(), Key::peer()).shadow(true))
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(hello));

    assert_eq!(
        send(&mut service, Method::GET, "/").await.status(),
        StatusCode::OK
    );
    // The strict trial would refuse this one: it only reports so.
    let second = send(&mut service, Method::GET, "/").await;
    assert_eq!(second.status(), StatusCode::OK);
    let field = second.headers()["ratelimit"].to_str().unwrap().to_owned();
    assert!(field.starts_with("\"enforced\";r=0;"), "{field}");
    // The enforced limit refuses the third; the trials, only read, keep
    // what they had.
    let third = send(&mut service, Method::GET, "/").await;
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    let client = b"192.0.2.1";
    assert_eq!(left(&store, &enforced, client).await, 0);
    assert_eq!(left(&store, &loose, client).await, 3);
    assert_eq!(left(&store, &strict, client).await, 0);
}

#[tokio::test]
async fn shadow_rules_count_only_what_the_enforced_ones_let_through() {
    shadow_rules_report_without_refusing(still_store()).await;
    shadow_rules_report_without_refusing(Waiting(still_store())).await;
}

/// A layer all in shadow mode (the builder's switch) refuses nothing, and
/// counts each limit on its own: a limit that would refuse does not stop
/// the others from counting.
#[tokio::test]
async fn a_layer_in_shadow_mode_counts_each_limit_on_its_own() {
    let store = still_store();
    let wide = per_minute("wide", 10);
    let narrow = per_minute("narrow", 1);
    let layer = RateLimitLayer::builder(store.clone())
        .limit(wide.clone(), Key::peer())
        .limit(narrow.clone(), Key::peer())
        .shadow(true)
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(hello));
    for _ in 0..3 {
        assert_eq!(
            send(&mut service, Method::GET, "/").await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(left(&store, &wide, b"192.0.2.1").await, 7);
    assert_eq!(left(&store, &narrow, b"192.0.2.1").await, 0);
}
