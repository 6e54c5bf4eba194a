//! The layer on an axum app, over real loopback HTTP.

use crate::common;

use std::time::Duration;

use axum::routing::get;
use axum::Router;
use common::{serve, Http};
use http::{HeaderName, Method, StatusCode};
use ratekeeper::{
    store::{FailureMode, FailurePolicy, Resilient, StoreError},
    Decision, FixedWindow, Gcra, Limit, MemoryStore, Outcome, Store,
};
use ratekeeper_tower::client::{private_networks, ClientIp};
use ratekeeper_tower::headers::HeaderStyle;
use ratekeeper_tower::{Key, LayerWarning, RateLimitLayer, ResponseFormat};

fn app() -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .route("/healthz", get(|| async { "ok" }))
}

fn per_minute(name: &str, n: u64) -> Limit {
    Limit::new(name, Gcra::per_minute(n).unwrap()).unwrap()
}

#[tokio::test]
async fn allows_then_refuses_with_every_header() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(per_minute("per-ip", 2), Key::peer())
        .headers(HeaderStyle::Both)
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;

    let first = http.get("/", &[]).await;
    assert_eq!(
        (first.status, first.body.as_str()),
        (StatusCode::OK, "hello")
    );
    assert_eq!(
        first.header("ratelimit-policy"),
        Some(r#""per-ip";q=2;w=60"#)
    );
    assert_eq!(first.header("ratelimit"), Some(r#""per-ip";r=1;t=30"#));
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert!(
        first
            .header("x-ratelimit-reset")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 1_700_000_000
    );
    assert!(first.header("retry-after").is_none());

    let second = http.get("/", &[]).await;
    assert_eq!(second.header("ratelimit"), Some(r#""per-ip";r=0;t=60"#));

    let third = http.get("/", &[]).await;
    assert_eq!(third.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.header("retry-after"), Some("30"));
    assert_eq!(third.header("cache-control"), Some("no-store"));
    // t names the moment Retry-After names: when one unit is back.
    assert_eq!(third.header("ratelimit"), Some(r#""per-ip";r=0;t=30"#));
    assert_eq!(
        third.header("content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(third.body, "Too Many Requests: retry in 30 s\n");
}

#[tokio::test]
async fn problem_json_names_the_violated_policies() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(per_minute("global", 100), Key::global())
        .limit(per_minute("per-ip", 1), Key::peer())
        .format(ResponseFormat::ProblemJson)
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    assert_eq!(http.get("/", &[]).await.status, StatusCode::OK);
    let refused = http.get("/", &[]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    let body: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
    assert_eq!(
        body["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
    assert_eq!(body["status"], 429);
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["violated-policies"], serde_json::json!(["per-ip"]));
    assert!(body["detail"].as_str().unwrap().contains("retry in 60 s"));
    // Both policies are listed; RateLimit reports the tightest.
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some(r#""global";q=100;w=60, "per-ip";q=1;w=60"#)
    );
    assert_eq!(refused.header("ratelimit"), Some(r#""per-ip";r=0;t=60"#));
}

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let store = MemoryStore::new();
    let global = Limit::new(
        "global",
        FixedWindow::new(3, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let api_key = HeaderName::from_static("x-api-key");
    let layer = RateLimitLayer::builder(store.clone())
        .limit(global.clone(), Key::global())
        .limit(per_minute("per-key", 1), Key::header(api_key))
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    assert_eq!(
        http.get("/", &[("x-api-key", "a")]).await.status,
        StatusCode::OK
    );
    // Denied by the per-key limit: the global limit keeps its units.
    for _ in 0..3 {
        assert_eq!(
            http.get("/", &[("x-api-key", "a")]).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    assert_eq!(
        store
            .peek(&global, ratekeeper::key::GLOBAL)
            .await
            .unwrap()
            .remaining(),
        2
    );
    assert_eq!(
        http.get("/", &[("x-api-key", "b")]).await.status,
        StatusCode::OK
    );
    assert_eq!(
        http.get("/", &[("x-api-key", "c")]).await.status,
        StatusCode::OK
    );
    // Now the global limit is spent for everyone.
    let refused = http.get("/", &[("x-api-key", "d")]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // Requests without the header share one "unknown" key: limited, not free.
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test]
async fn skips_paths_methods_and_allow_listed_keys() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            per_minute("per-ip", 1),
            Key::client_ip(ClientIp::XForwardedFor {
                trusted: private_networks(),
            }),
        )
        .skip_paths(["/healthz"])
        .allow_keys(["203.0.113.99"])
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    let client = [("x-forwarded-for", "203.0.113.7")];
    assert_eq!(http.get("/", &client).await.status, StatusCode::OK);
    assert_eq!(
        http.get("/", &client).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    for _ in 0..3 {
        let health = http.get("/healthz", &client).await;
        assert_eq!(health.status, StatusCode::OK);
        assert!(
            health.header("ratelimit").is_none(),
            "skipped requests are not counted or reported"
        );
        assert_ne!(
            http.send(Method::OPTIONS, "/", &client).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
        assert_eq!(
            http.get("/", &[("x-forwarded-for", "203.0.113.99")])
                .await
                .status,
            StatusCode::OK
        );
    }
    // The client behind the proxy is the key, not the proxy (the loopback peer).
    assert_eq!(
        http.get("/", &[("x-forwarded-for", "203.0.113.8")])
            .await
            .status,
        StatusCode::OK
    );
    // A spoofed leftmost entry changes nothing.
    let spoofed = http
        .get("/", &[("x-forwarded-for", "1.1.1.1, 203.0.113.7")])
        .await;
    assert_eq!(spoofed.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn partition_keys_name_the_quota() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            per_minute("per-key", 5),
            Key::header(HeaderName::from_static("x-api-key")),
        )
        .partition_keys(true)
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    let reply = http.get("/", &[("x-api-key", "abc")]).await;
    // pk is the key's bytes as an sf-binary: "abc" is YWJj.
    assert_eq!(
        reply.header("ratelimit"),
        Some(r#""per-key";r=4;t=12;pk=:YWJj:"#)
    );
    assert_eq!(
        reply.header("ratelimit-policy"),
        Some(r#""per-key";q=5;w=60;pk=:YWJj:"#)
    );
}

#[tokio::test]
async fn shadow_mode_reports_but_never_refuses() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(per_minute("per-ip", 1), Key::peer())
        .shadow(true)
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    for expected_remaining in ["0", "0", "0"] {
        let reply = http.get("/", &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply
                .header("ratelimit")
                .unwrap()
                .split(";r=")
                .nth(1)
                .unwrap()
                .split(';')
                .next(),
            Some(expected_remaining)
        );
    }
}

/// A store that is always down.
struct DownStore;

impl Store for DownStore {
    async fn check(&self, _: &Limit, _: &[u8], _: u64) -> Result<Outcome, StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(10)))
    }
    async fn peek(&self, _: &Limit, _: &[u8]) -> Result<Decision, StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(10)))
    }
    async fn refund(&self, _: &Limit, _: &[u8], _: u64) -> Result<(), StoreError> {
        Err(StoreError::Timeout(Duration::from_millis(10)))
    }
}

#[tokio::test]
async fn a_store_that_fails_closed_gives_503_and_one_that_fails_open_passes() {
    let closed = RateLimitLayer::builder(DownStore)
        .limit(per_minute("per-ip", 5), Key::peer())
        .build()
        .unwrap();
    let http = serve(app().layer(closed)).await;
    let reply = http.get("/", &[]).await;
    assert_eq!(reply.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(reply.header("cache-control"), Some("no-store"));
    assert_eq!(reply.header("retry-after"), Some("1"));

    let open_store = Resilient::new(DownStore, FailurePolicy::new(FailureMode::Open));
    let open = RateLimitLayer::builder(open_store)
        .limit(per_minute("per-ip", 5), Key::peer())
        .build()
        .unwrap();
    let http = serve(app().layer(open)).await;
    let reply = http.get("/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "hello");
    // The answer says the failure policy made it.
    assert_eq!(reply.header("x-ratekeeper-store"), Some("fail-open"));
}

#[tokio::test]
async fn the_fallbacks_answers_say_so_allowed_or_refused() {
    let policy = FailurePolicy::new(FailureMode::Closed).with_fallback(true);
    let layer = RateLimitLayer::builder(Resilient::new(DownStore, policy))
        .limit(per_minute("per-ip", 1), Key::peer())
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    for status in [StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] {
        let reply = http.get("/", &[]).await;
        assert_eq!(reply.status, status);
        assert_eq!(reply.header("x-ratekeeper-store"), Some("fallback"));
    }
    // The store's own answers carry no such header.
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(per_minute("per-ip", 1), Key::peer())
        .build()
        .unwrap();
    let reply = serve(app().layer(layer)).await.get("/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-ratekeeper-store"), None);
}

#[tokio::test]
async fn custom_refusals_and_config_warnings() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            per_minute("per-ip", 1),
            Key::client_ip(ClientIp::XForwardedFor {
                trusted: vec!["0.0.0.0/0".parse().unwrap()],
            }),
        )
        .limit(
            per_minute("per-real-ip", 100),
            Key::header(HeaderName::from_static("x-real-ip")),
        )
        .on_refusal(|_| {
            let mut response =
                http::Response::new(http_body_util::Full::new(bytes::Bytes::from("slow down")));
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            Some(response)
        })
        .build()
        .unwrap();
    assert_eq!(
        layer.warnings(),
        [
            LayerWarning::TrustsEveryProxy {
                limit: "per-ip".into(),
                header: "X-Forwarded-For".into(),
            },
            LayerWarning::SpoofableHeader {
                limit: "per-real-ip".into(),
                header: "x-real-ip".into()
            },
        ]
    );
    let http = serve(app().layer(layer)).await;
    assert_eq!(http.get("/", &[]).await.status, StatusCode::OK);
    let refused = http.get("/", &[]).await;
    assert_eq!(
        (refused.status, refused.body.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "slow down")
    );
    assert!(
        refused.header("ratelimit").is_some(),
        "headers are added to custom refusals too"
    );
}

#[tokio::test]
async fn a_missing_peer_shares_the_unknown_key_instead_of_passing() {
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(per_minute("per-ip", 1), Key::peer())
        .build()
        .unwrap();
    // Served without connect info: no peer in the request.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = app().layer(layer.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = Http::new(addr);
    assert_eq!(http.get("/", &[]).await.status, StatusCode::OK);
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(layer.missing_peer_requests(), 2);
}

/// A key made by a function of the request's `Parts` and a cost function:
/// the layer splits the head off the request only for these, so this path
/// is tested on its own.
#[tokio::test]
async fn function_keys_and_costs_read_the_request() {
    let tenant = |parts: &http::request::Parts| {
        parts
            .uri
            .query()
            .and_then(|query| query.strip_prefix("tenant="))
            .map(|tenant| tenant.as_bytes().to_vec())
    };
    // Each request costs the number in its `x-cost` header (1 without it).
    let cost = |parts: &http::request::Parts| {
        parts
            .headers
            .get("x-cost")
            .and_then(|value| value.to_str().ok()?.parse().ok())
            .unwrap_or(1)
    };
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .limit(
            Limit::new(
                "per-tenant",
                FixedWindow::new(5, Duration::from_secs(60)).unwrap(),
            )
            .unwrap(),
            Key::from_fn(tenant),
        )
        .cost(cost)
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;

    let a = http.get("/?tenant=a", &[("x-cost", "4")]).await;
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.header("ratelimit"), Some(r#""per-tenant";r=1;t=60"#));
    // Tenant a has 1 left: a request costing 2 is refused, one costing 1 is not.
    let refused = http.get("/?tenant=a", &[("x-cost", "2")]).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(http.get("/?tenant=a", &[]).await.status, StatusCode::OK);
    // Tenant b has its own window; no tenant at all shares the unknown key.
    assert_eq!(
        http.get("/?tenant=b", &[("x-cost", "5")]).await.status,
        StatusCode::OK
    );
    let unknown = http.get("/", &[("x-cost", "5")]).await;
    assert_eq!(
        unknown.header("ratelimit"),
        Some(r#""per-tenant";r=0;t=60"#)
    );
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A limit used through the layer and directly through the store is one
/// state: the layer's prepared limit decides on the store's own table.
#[tokio::test]
async fn the_layer_and_its_store_share_one_state() {
    let store = MemoryStore::new();
    let limit = per_minute("shared", 3);
    let layer = RateLimitLayer::builder(store.clone())
        .limit(limit.clone(), Key::global())
        .build()
        .unwrap();
    let http = serve(app().layer(layer)).await;
    assert!(store
        .check(&limit, ratekeeper::key::GLOBAL, 2)
        .await
        .unwrap()
        .is_allowed());
    let reply = http.get("/", &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("ratelimit"), Some(r#""shared";r=0;t=60"#));
    assert_eq!(
        http.get("/", &[]).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}
