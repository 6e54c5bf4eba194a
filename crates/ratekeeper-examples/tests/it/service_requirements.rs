//! Seed 004's promises, over real loopback HTTP on a manual clock: 1000 per
//! minute globally, 400 per address, 200 per session and 60 on the url
//! parser, all sliding windows, checked all or nothing; parsed urls cached
//! (and then free); and the admin stats' week, today, hour and minute
//! counts with the declined ones.

#[path = "../../examples/service_requirements.rs"]
#[allow(dead_code)]
mod example;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use example::{AdminStats, Counts, Service};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_examples::Server;
use reqwest::StatusCode;

/// Monday 2024-01-08 10:58:00 UTC: the start of a minute.
const MONDAY_10_58: u64 = 1_704_711_480;

fn client_from(last: u8) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from([127, 0, 0, last]))
        .build()
        .expect("a client")
}

async fn start() -> (Server, ManualClock, std::sync::Arc<Service<ManualClock>>) {
    let clock = ManualClock::new(Timestamp::from_secs(MONDAY_10_58));
    let service = Service::new(clock.clone(), 10_000).unwrap();
    let server = Server::start(
        example::router(service.clone()),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    (server, clock, service)
}

/// Sends `n` `GET /` from `client` in session `session` (none if empty);
/// returns how many were allowed, and the limits named by the refusals.
async fn send(
    server: &Server,
    client: &reqwest::Client,
    session: &str,
    n: usize,
) -> (usize, Vec<String>) {
    let mut allowed = 0;
    let mut violated = Vec::new();
    for _ in 0..n {
        let mut request = client.get(server.url("/"));
        if !session.is_empty() {
            request = request.header("cookie", format!("theme=dark; session={session}"));
        }
        let response = request.send().await.unwrap();
        match response.status() {
            StatusCode::OK => allowed += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                assert!(response.headers().contains_key("retry-after"));
                let body: serde_json::Value = response.json().await.unwrap();
                for name in body["violated-policies"].as_array().unwrap() {
                    let name = name.as_str().unwrap().to_owned();
                    if !violated.contains(&name) {
                        violated.push(name);
                    }
                }
            }
            other => panic!("unexpected {other}"),
        }
    }
    (allowed, violated)
}

async fn admin(server: &Server) -> AdminStats {
    let response = reqwest::get(server.url("/admin/stats")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

fn counts(requests: u64, declined: u64) -> Counts {
    Counts { requests, declined }
}

#[tokio::test]
async fn four_sliding_limits_all_or_nothing_and_the_admin_stats() {
    let (server, clock, _service) = start().await;
    let first = client_from(1);

    // Session a: 200 per minute per session.
    assert_eq!(
        send(&server, &first, "a", 201).await,
        (200, vec!["per-session".into()])
    );
    // Session b from the same address: the address's 400 runs out with
    // the session's 200, so the 201st is refused by both.
    assert_eq!(
        send(&server, &first, "b", 201).await,
        (200, vec!["per-address".into(), "per-session".into()])
    );
    // Without a session, the address limit still applies.
    assert_eq!(
        send(&server, &first, "", 1).await,
        (0, vec!["per-address".into()])
    );

    // Three refusals so far, and they took nothing from the global limit:
    // two more addresses get exactly 600 more before it runs out.
    let second = client_from(2);
    let third = client_from(3);
    assert_eq!(send(&server, &second, "c", 200).await.0, 200);
    assert_eq!(send(&server, &second, "d", 200).await.0, 200);
    assert_eq!(send(&server, &third, "e", 200).await, (200, vec![]));
    assert_eq!(
        send(&server, &third, "f", 1).await,
        (0, vec!["global".into()])
    );

    let stats = admin(&server).await;
    assert_eq!(stats.at_unix_secs, MONDAY_10_58);
    let all = &stats.limits["requests"];
    for window in [all.week, all.today, all.hour, all.minute] {
        assert_eq!(window, counts(1_004, 4));
    }
    assert_eq!(all.declined_total, 4);
    assert_eq!(stats.limits["global"].minute, counts(1_001, 1));
    assert_eq!(stats.limits["per-address"].minute, counts(1_002, 2));
    assert_eq!(stats.limits["per-session"].minute, counts(1_002, 2));
    assert_eq!(stats.limits["parse-url"].minute, counts(0, 0));

    // 10:59:30, half way through the next minute: each window weighs half
    // of the previous minute's count, so session a gets exactly 100 more.
    clock.advance(Duration::from_secs(90));
    let fourth = client_from(4);
    assert_eq!(
        send(&server, &fourth, "a", 101).await,
        (100, vec!["per-session".into()])
    );

    let stats = admin(&server).await;
    let all = &stats.limits["requests"];
    assert_eq!(all.minute, counts(101, 1));
    assert_eq!(all.hour, counts(1_105, 5));
    assert_eq!(all.today, counts(1_105, 5));
    assert_eq!(all.week, counts(1_105, 5));

    // 11:00:10: a new hour and minute; today and this week go on.
    clock.advance(Duration::from_secs(40));
    assert_eq!(send(&server, &fourth, "g", 3).await.0, 3);
    let stats = admin(&server).await;
    let all = &stats.limits["requests"];
    assert_eq!(all.minute, counts(3, 0));
    assert_eq!(all.hour, counts(3, 0));
    assert_eq!(all.today, counts(1_108, 5));
    assert_eq!(all.week, counts(1_108, 5));
    server.shutdown().await.unwrap();
}

async fn parse(server: &Server, client: &reqwest::Client, url: &str) -> (StatusCode, String) {
    let response = client
        .get(server.url("/parse"))
        .query(&[("url", url)])
        .send()
        .await
        .unwrap();
    let cache = response
        .headers()
        .get("x-cache")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (response.status(), cache)
}

#[tokio::test]
async fn the_url_parser_is_limited_to_60_per_minute_and_its_results_cached() {
    let (server, clock, service) = start().await;
    assert_eq!(service.cache_ttl(), Some(Duration::from_secs(86_400)));
    let client = client_from(1);

    // A bad url is a 400 (and cost a parse).
    assert_eq!(
        parse(&server, &client, "ftp://example.com/").await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        parse(&server, &client, "not a url").await.0,
        StatusCode::BAD_REQUEST
    );
    for i in 0..58 {
        let url = format!("https://example.com/page/{i}?q=1");
        assert_eq!(
            parse(&server, &client, &url).await,
            (StatusCode::OK, "miss".into()),
            "{i}"
        );
    }
    // The 61st parse in the minute is refused...
    let response = client
        .get(server.url("/parse"))
        .query(&[("url", "https://example.org/new")])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["violated-policies"], serde_json::json!(["parse-url"]));
    // ...but a cached url is answered, and costs the parser nothing.
    for _ in 0..5 {
        assert_eq!(
            parse(&server, &client, "https://example.com/page/7?q=1").await,
            (StatusCode::OK, "hit".into())
        );
    }
    // The refusal took nothing from the other limits: 60 + 5 + 0 counted.
    let stats = admin(&server).await;
    assert_eq!(stats.limits["parse-url"].minute, counts(61, 1));
    assert_eq!(stats.limits["global"].minute, counts(65, 0));

    // Two minutes on, the parser is free again; the parsed fields.
    clock.advance(Duration::from_secs(120));
    let parsed: example::ParsedUrl = client
        .get(server.url("/parse"))
        .query(&[("url", "https://example.com:8443/a/b?x=1")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        parsed,
        example::ParsedUrl {
            scheme: "https".into(),
            host: "example.com".into(),
            port: Some(8443),
            path: "/a/b".into(),
            query: Some("x=1".into()),
        }
    );
    server.shutdown().await.unwrap();
}

#[test]
fn urls_that_are_not_http_are_errors_not_panics() {
    for bad in [
        "",
        " ",
        "/relative",
        "mailto:a@b",
        "http://",
        "https://[::1",
        "\u{0}",
    ] {
        assert!(example::parse_url(bad).is_err(), "{bad:?}");
    }
    assert!(example::parse_url("http://[::1]:80/").is_ok());
}
