//! `InFlightLayer`: a key's requests in flight capped, over real loopback
//! HTTP (axum) and as a tower service: slots given back when the body
//! ends, when it is dropped, when the inner service fails or the request
//! is abandoned, and all or none over several caps.

use crate::common;
use common::Remote;

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use common::serve;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use ratekeeper::store::in_flight::InFlight;
use ratekeeper::MemoryStore;
use ratekeeper_tower::in_flight::{CapRule, InFlightLayer};
use ratekeeper_tower::Key;
use tower::{service_fn, Layer, Service, ServiceExt};

fn team() -> Key {
    Key::header(HeaderName::from_static("x-team"))
}

fn exports(max: u64) -> InFlight {
    InFlight::new("exports", max, Duration::from_secs(600)).unwrap()
}

fn request(team: &str) -> Request<()> {
    Request::builder().header("x-team", team).body(()).unwrap()
}

#[tokio::test]
async fn over_http_a_teams_exports_run_two_at_a_time() {
    let store = MemoryStore::new();
    // Each export answers once all the ones let through are running.
    let gate = Arc::new(tokio::sync::Barrier::new(3));
    let export = {
        let gate = gate.clone();
        move || {
            let gate = gate.clone();
            async move {
                gate.wait().await;
                "an export"
            }
        }
    };
    let layer = InFlightLayer::builder(store.clone())
        .cap(exports(2), team())
        .build()
        .unwrap();
    let http = Arc::new(serve(Router::new().route("/export", get(export)).layer(layer)).await);
    let mut asks = tokio::task::JoinSet::new();
    for _ in 0..6 {
        let http = http.clone();
        asks.spawn(async move {
            http.send(http::Method::GET, "/export", &[("x-team", "a")])
                .await
                .status
        });
    }
    // Two run; the other four are refused while they do.
    for _ in 0..4 {
        let status = asks.join_next().await.unwrap().unwrap();
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(store.slots_taken(), 2);
    gate.wait().await;
    assert_eq!(asks.join_all().await, vec![StatusCode::OK; 2]);
    // Both answers were read whole: their slots are free.
    assert_eq!(store.slots_taken(), 0);
}

async fn done(_: Request<()>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from("done"))))
}

#[tokio::test]
async fn a_body_dropped_before_its_end_gives_its_slot_back() {
    let store = MemoryStore::new();
    let layer = InFlightLayer::builder(store.clone())
        .cap(exports(1), team())
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(done));
    let first = service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .unwrap();
    assert_eq!(store.slots_taken(), 1);
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    drop(first);
    assert_eq!(store.slots_taken(), 0);
    let again = service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    again.into_body().collect().await.unwrap();
    assert_eq!(store.slots_taken(), 0);
}

#[tokio::test]
async fn a_failed_or_abandoned_request_gives_its_slot_back() {
    let store = MemoryStore::new();
    let layer = InFlightLayer::builder(store.clone())
        .cap(exports(1), team())
        .build()
        .unwrap();
    let failing = service_fn(|_: Request<()>| async { Err::<Response<Full<Bytes>>, _>("broken") });
    let mut service = layer.layer(failing);
    assert!(service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .is_err());
    assert_eq!(store.slots_taken(), 0);
    // A request whose answer never comes, abandoned by its caller.
    let never = service_fn(|_: Request<()>| {
        std::future::pending::<Result<Response<Full<Bytes>>, Infallible>>()
    });
    let mut service = layer.layer(never);
    let call = service.ready().await.unwrap().call(request("a"));
    let abandoned = tokio::time::timeout(Duration::ZERO, call).await;
    assert!(abandoned.is_err(), "the answer never comes");
    assert_eq!(store.slots_taken(), 0);
}

#[tokio::test]
async fn several_caps_take_a_slot_of_each_or_none() {
    let store = MemoryStore::new();
    let per_team = exports(5);
    let overall = InFlight::new("overall", 2, Duration::from_secs(600)).unwrap();
    let layer = InFlightLayer::builder(store.clone())
        .cap(per_team, team())
        .cap(overall, Key::global())
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(done));
    let mut running = Vec::new();
    for team in ["a", "b"] {
        running.push(
            service
                .ready()
                .await
                .unwrap()
                .call(request(team))
                .await
                .unwrap(),
        );
    }
    // The overall cap is full: refused, and team c's slot given back.
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(request("c"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(store.slots_taken(), 4);
    drop(running);
    assert_eq!(store.slots_taken(), 0);
}

#[tokio::test]
async fn a_release_that_must_wait_is_made_before_the_next_request() {
    let memory = MemoryStore::new();
    let layer = InFlightLayer::builder(Remote(memory.clone()))
        .cap(exports(1), team())
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(done));
    let first = service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .unwrap();
    // Dropped: the release cannot finish at once, so it waits in the layer.
    drop(first);
    assert_eq!(memory.slots_taken(), 1);
    // The next request gives it back first, and is let through.
    let next = service
        .ready()
        .await
        .unwrap()
        .call(request("a"))
        .await
        .unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    // Read to its end: released then, waiting as long as it takes.
    next.into_body().collect().await.unwrap();
    assert_eq!(memory.slots_taken(), 0);
}

#[tokio::test]
async fn a_cap_applies_only_to_its_methods_and_path() {
    let store = MemoryStore::new();
    let rule = CapRule::new(exports(1), team())
        .methods([http::Method::POST])
        .path_prefix("/export");
    let layer = InFlightLayer::builder(store.clone())
        .rule(rule)
        .build()
        .unwrap();
    let mut service = layer.layer(service_fn(done));
    let to = |method: http::Method, path: &str| {
        Request::builder()
            .method(method)
            .uri(path)
            .header("x-team", "a")
            .body(())
            .unwrap()
    };
    let running = service
        .ready()
        .await
        .unwrap()
        .call(to(http::Method::POST, "/export/csv"))
        .await
        .unwrap();
    assert_eq!(store.slots_taken(), 1);
    // Out of the cap's scope: let through, taking nothing.
    for (method, path) in [
        (http::Method::GET, "/export/csv"),
        (http::Method::POST, "/import"),
    ] {
        let other = service
            .ready()
            .await
            .unwrap()
            .call(to(method, path))
            .await
            .unwrap();
        assert_eq!(other.status(), StatusCode::OK);
        assert_eq!(store.slots_taken(), 1);
    }
    let refused = service
        .ready()
        .await
        .unwrap()
        .call(to(http::Method::POST, "/export/pdf"))
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    drop(running);
    assert_eq!(store.slots_taken(), 0);
}
