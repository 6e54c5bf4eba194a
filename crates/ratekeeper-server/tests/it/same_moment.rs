//! On a refusal, `RateLimit`'s `t` and `Retry-After` name the same moment
//! (the draft: when a response has both, they should), on every HTTP door:
//! the JSON API and the nginx `auth_request` door of `serve`, and `proxy`;
//! over loopback HTTP, on a manual clock.

use crate::common;

use std::sync::Arc;

use common::upstream::{self, Speaks};
use common::{TestService, LISTEN_ANY};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::{proxy, Config};
use reqwest::header::HeaderMap;
use serde_json::json;

/// A token bucket of 5 a minute: one token back every 12 s, whole after 60.
const FIVE_A_MINUTE: &str = r#"
[[limits]]
name = "per-user"
rate = "5/minute"
policy = "token_bucket"
key = ["header:x-user"]
"#;

/// The `t` of the `RateLimit` field.
fn t(headers: &HeaderMap) -> &str {
    headers["ratelimit"]
        .to_str()
        .expect("an ASCII field")
        .split(';')
        .find_map(|param| param.strip_prefix("t="))
        .expect("a t parameter")
}

/// The fifth request leaves the bucket empty; the sixth is refused, and
/// both fields name the moment one token is back.
fn assert_one_moment(allowed: &HeaderMap, refused: &HeaderMap) {
    assert_eq!(t(allowed), "60", "allowed: until the quota is whole");
    assert_eq!(refused["retry-after"], "12");
    assert_eq!(t(refused), "12");
}

#[tokio::test]
async fn the_json_api_names_one_moment() {
    let service = TestService::start(&format!("{LISTEN_ANY}{FIVE_A_MINUTE}")).await;
    let body = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
    let mut last = HeaderMap::new();
    for _ in 0..5 {
        let (status, headers, answer) = service.post("/v1/check", body.clone()).await;
        assert_eq!((status, &answer["allowed"]), (200, &json!(true)));
        last = headers;
    }
    let (_, refused, answer) = service.post("/v1/check", body).await;
    assert_eq!(answer["allowed"], false);
    assert_one_moment(&last, &refused);
    assert_eq!(answer["headers"]["ratelimit"], "\"per-user\";r=0;t=12");
    service.stop().await;
}

#[tokio::test]
async fn the_auth_door_names_one_moment() {
    let service = TestService::start(&format!("{LISTEN_ANY}{FIVE_A_MINUTE}")).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ask = || {
        client
            .get(service.http("/v1/auth"))
            .header("x-original-uri", "/")
            .header("x-user", "alice")
            .send()
    };
    let mut last = HeaderMap::new();
    for _ in 0..5 {
        let response = ask().await.expect("the door answers");
        assert_eq!(response.status(), 204);
        last = response.headers().clone();
    }
    let refused = ask().await.expect("the door answers");
    assert_eq!(refused.status(), 429);
    assert_one_moment(&last, refused.headers());
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_names_one_moment() {
    let upstream = upstream::start(Speaks::Http1).await;
    let config = Config::from_toml_str(FIVE_A_MINUTE, "proxy.toml").expect("a valid config");
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock)
        .start()
        .await
        .expect("the engine starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let target = format!("http://{}", upstream.addr).parse().unwrap();
    let task = tokio::spawn(async move {
        proxy::serve_proxy_with(
            engine,
            listener,
            target,
            &proxy::ProxyOptions::default(),
            async {
                let _ = stopped.await;
            },
        )
        .await
    });
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ask = || {
        client
            .get(format!("http://{addr}/info"))
            .header("x-user", "alice")
            .send()
    };
    let mut last = HeaderMap::new();
    for _ in 0..5 {
        let response = ask().await.expect("the proxy answers");
        assert!(response.status().is_success(), "{}", response.status());
        last = response.headers().clone();
    }
    let refused = ask().await.expect("the proxy answers");
    assert_eq!(refused.status(), 429);
    assert_one_moment(&last, refused.headers());
    let _ = stop.send(());
    task.await
        .expect("the proxy task")
        .expect("the proxy stops cleanly");
}
