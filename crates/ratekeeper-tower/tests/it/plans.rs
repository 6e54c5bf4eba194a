//! Plans (`Rule::with_plans`): each request checked against its key's
//! plan, named by a header from a trusted peer or by an extension the
//! application set, on a store that decides at once and on one that waits
//! (the layer's two paths).

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use ratekeeper::plan::Plans;
use ratekeeper::{clock::ManualClock, Gcra, Limit, MemoryStore, Store, Timestamp};
use ratekeeper_tower::{Key, KeyPlan, LayerWarning, PeerAddr, PlanSource, RateLimitLayer, Rule};
use tower::service_fn;
use tower::{Layer, Service, ServiceExt};

use crate::common::Waiting;

/// 2 a minute per API key by default, 4 on pro, none on suspended, no
/// limit on internal.
fn plans() -> Plans {
    Plans::new(Limit::new("api", Gcra::per_minute(2).unwrap()).unwrap())
        .limited("pro", Gcra::per_minute(4).unwrap())
        .unwrap()
        .unlimited("internal")
        .unwrap()
        .deny("suspended")
        .unwrap()
}

fn store() -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .clock(ManualClock::new(Timestamp::from_secs(1)))
        .background_sweep(false)
        .build()
        .expect("a valid store")
}

async fn hello(_: Request<()>) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(Response::new(Full::new(Bytes::from("hello"))))
}

/// How request `make` was answered, `n` times in a row.
async fn statuses<S>(service: &mut S, n: usize, make: impl Fn() -> Request<()>) -> Vec<u16>
where
    S: Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible>,
{
    let mut statuses = Vec::new();
    for _ in 0..n {
        let ready = service.ready().await.unwrap_or_else(|never| match never {});
        let response = ready
            .call(make())
            .await
            .unwrap_or_else(|never| match never {});
        statuses.push(response.status().as_u16());
    }
    statuses
}

/// A request of `key`, from `peer`, with the plan header `plan`.
fn from_peer(peer: &str, key: &str, plan: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().uri("/").header("x-api-key", key);
    if let Some(plan) = plan {
        builder = builder.header("x-plan", plan);
    }
    let mut request = builder.body(()).unwrap();
    let peer: SocketAddr = format!("{peer}:5000").parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
}

fn header_layer<S: Store>(store: S) -> RateLimitLayer<S> {
    let from = PlanSource::header("x-plan".parse().unwrap(), ["10.0.0.0/8".parse().unwrap()]);
    let rule = Rule::with_plans(plans(), Key::header("x-api-key".parse().unwrap()), from);
    RateLimitLayer::builder(store).rule(rule).build().unwrap()
}

async fn a_header_from_the_edge_names_the_plan<S: Store + 'static>(store: S) {
    let layer = header_layer(store);
    let mut service = layer.layer(service_fn(hello));
    let edge = "10.1.2.3";
    let (ok, over) = (200, 429);
    assert_eq!(
        statuses(&mut service, 3, || from_peer(edge, "free", None)).await,
        [ok, ok, over]
    );
    assert_eq!(
        statuses(&mut service, 5, || from_peer(edge, "paid", Some("pro"))).await,
        [ok, ok, ok, ok, over]
    );
    assert_eq!(
        statuses(&mut service, 20, || from_peer(
            edge,
            "ops",
            Some("internal")
        ))
        .await,
        [ok; 20]
    );
    assert_eq!(
        statuses(&mut service, 2, || from_peer(
            edge,
            "bad",
            Some("suspended")
        ))
        .await,
        [over, over]
    );
    // free upgrades: its 2 used count against pro's 4.
    assert_eq!(
        statuses(&mut service, 3, || from_peer(edge, "free", Some("pro"))).await,
        [ok, ok, over]
    );
    // A plan the rule does not have is the default, never unlimited.
    assert_eq!(
        statuses(&mut service, 3, || from_peer(edge, "odd", Some("gold"))).await,
        [ok, ok, over]
    );
    assert_eq!(layer.unknown_plans(), 3);

    // A client outside the edge's network names its own plan: ignored.
    assert_eq!(
        statuses(&mut service, 3, || from_peer(
            "203.0.113.9",
            "mine",
            Some("internal")
        ))
        .await,
        [ok, ok, over]
    );
    assert_eq!(layer.untrusted_plans(), 3);
    assert!(layer.warnings().is_empty(), "{:?}", layer.warnings());
}

#[tokio::test]
async fn a_header_from_the_edge_names_the_plan_on_a_store_that_decides_at_once() {
    a_header_from_the_edge_names_the_plan(store()).await;
}

#[tokio::test]
async fn a_header_from_the_edge_names_the_plan_on_a_store_that_waits() {
    a_header_from_the_edge_names_the_plan(Waiting(store())).await;
}

#[tokio::test]
async fn answers_show_the_plans_numbers() {
    let layer = header_layer(store());
    let mut service = layer.layer(service_fn(hello));
    let ready = service.ready().await.unwrap_or_else(|never| match never {});
    let response = ready
        .call(from_peer("10.0.0.1", "k", Some("pro")))
        .await
        .unwrap_or_else(|never| match never {});
    assert_eq!(response.headers()["ratelimit-policy"], "\"api\";q=4;w=60");
    assert_eq!(response.headers()["ratelimit"], "\"api\";r=3;t=15");
}

#[tokio::test]
async fn an_extension_the_application_set_names_the_plan() {
    let rule = Rule::with_plans(
        plans(),
        Key::header("x-api-key".parse().unwrap()),
        PlanSource::extension(),
    );
    let layer = RateLimitLayer::builder(store()).rule(rule).build().unwrap();
    let mut service = layer.layer(service_fn(hello));
    let request = |plan: Option<&str>| {
        let mut request = from_peer("203.0.113.9", "k", Some("internal"));
        if let Some(plan) = plan {
            request.extensions_mut().insert(KeyPlan::new(plan));
        }
        request
    };
    // The header is not the source: the extension is.
    assert_eq!(
        statuses(&mut service, 5, || request(Some("pro"))).await,
        [200, 200, 200, 200, 429]
    );
    assert_eq!(
        statuses(&mut service, 1, || request(None)).await,
        [429],
        "without a plan, the default's 2 are long used"
    );
    assert_eq!(layer.untrusted_plans(), 0);
}

#[test]
fn a_plan_header_believed_from_everyone_or_no_one_is_warned_about() {
    let rule = |peers: Vec<ipnet::IpNet>| {
        let from = PlanSource::header("x-plan".parse().unwrap(), peers);
        Rule::with_plans(plans(), Key::global(), from)
    };
    let everyone = rule(vec!["0.0.0.0/0".parse().unwrap()]);
    assert_eq!(
        everyone.warnings(),
        [LayerWarning::PlanFromEveryPeer {
            limit: "api".into(),
            header: "x-plan".into()
        }]
    );
    let no_one = rule(Vec::new());
    assert_eq!(
        no_one.warnings(),
        [LayerWarning::PlanFromNoPeer {
            limit: "api".into(),
            header: "x-plan".into()
        }]
    );
    assert!(rule(vec!["10.0.0.0/8".parse().unwrap()])
        .warnings()
        .is_empty());
}

#[tokio::test]
async fn a_lookup_of_the_key_names_the_plan() {
    let table: std::collections::HashMap<Vec<u8>, std::sync::Arc<str>> = [
        (b"paid".to_vec(), "pro".into()),
        (b"bad".to_vec(), "suspended".into()),
    ]
    .into();
    let source = PlanSource::by_key(move |key| table.get(key).cloned());
    let rule = Rule::with_plans(plans(), Key::header("x-api-key".parse().unwrap()), source);
    let layer = RateLimitLayer::builder(store()).rule(rule).build().unwrap();
    let mut service = layer.layer(service_fn(hello));
    // The header names nothing: the key's entry in the table does.
    let (ok, over) = (200, 429);
    assert_eq!(
        statuses(&mut service, 5, || from_peer(
            "10.0.0.1",
            "paid",
            Some("internal")
        ))
        .await,
        [ok, ok, ok, ok, over]
    );
    assert_eq!(
        statuses(&mut service, 1, || from_peer("10.0.0.1", "bad", None)).await,
        [over]
    );
    assert_eq!(
        statuses(&mut service, 3, || from_peer("10.0.0.1", "new", None)).await,
        [ok, ok, over]
    );
}
