//! Caps on requests in flight (`policy = "concurrency"`) over real
//! sockets: `/v1/acquire` and `/v1/release` on the JSON API, all or
//! nothing with the rate limits, leases; and the reverse proxy holding a
//! slot until the response body has been sent.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use common::{TestService, LISTEN_ANY};
use ratekeeper_server::config::ConfigWarning;
use ratekeeper_server::engine::{Engine, Slots};
use ratekeeper_server::Config;
use ratekeeper_tower::LayerWarning;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Semaphore};

const CAPS: &str = r#"
[[limits]]
name = "exports"
policy = "concurrency"
max_in_flight = 2
lease = "10m"
key = ["header:x-team"]
match = { methods = ["POST"], path_prefix = "/export" }

[[limits]]
name = "per-team"
rate = "3/minute"
key = ["header:x-team"]
match = { path_prefix = "/export" }
"#;

fn export(team: &str) -> Value {
    json!({"method": "POST", "path": "/export/csv", "key": {"header:x-team": team}})
}

#[tokio::test]
async fn a_team_runs_two_exports_at_once_and_a_release_frees_one() {
    let service = TestService::start(&format!("{LISTEN_ANY}{CAPS}")).await;
    let mut slots = Vec::new();
    for remaining in [1, 0] {
        let (status, _, answer) = service.post("/v1/acquire", export("a")).await;
        assert_eq!(status, 200);
        assert_eq!(answer["allowed"], true, "{answer}");
        assert_eq!(answer["limits"][0]["name"], "exports");
        assert_eq!(answer["limits"][0]["limit"], 2);
        assert_eq!(answer["limits"][0]["remaining"], remaining);
        assert_eq!(answer["limits"][1]["name"], "per-team");
        slots.push(answer["slot"].as_str().unwrap().to_owned());
    }
    // Both run: the third is refused by the cap, and takes nothing from
    // the rate limit.
    let (status, headers, answer) = service.post("/v1/acquire", export("a")).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["denied_by"], "exports");
    assert_eq!(answer["retry_after"], 1);
    assert_eq!(headers["retry-after"], "1");
    assert!(answer.get("slot").is_none(), "{answer}");
    let peek = json!({"limits": ["per-team"], "key": {"header:x-team": "a"}});
    let (_, _, answer) = service.post("/v1/peek", peek).await;
    assert_eq!(answer["limits"][0]["remaining"], 1);
    // Another team has its own two.
    let (_, _, answer) = service.post("/v1/acquire", export("b")).await;
    assert_eq!(answer["allowed"], true);

    // The first export ends: its slot is free, once.
    let release = json!({"slot": slots[0]});
    let (status, _, answer) = service.post("/v1/release", release.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["released"], 1);
    let (status, _, answer) = service.post("/v1/release", release).await;
    assert_eq!(status, 404, "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("no slot"),
        "{answer}"
    );
    let (_, _, answer) = service.post("/v1/acquire", export("a")).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let metrics = service.service.engine().decision_metrics();
    assert_eq!(metrics.slots("exports", Slots::Taken), 4);
    assert_eq!(metrics.slots("exports", Slots::Refused), 1);
    assert_eq!(metrics.slots("exports", Slots::Released), 1);
    assert_eq!(metrics.slots("exports", Slots::Unknown), 1);
    service.stop().await;
}

#[tokio::test]
async fn a_rate_limits_refusal_gives_the_slot_back() {
    let service = TestService::start(&format!("{LISTEN_ANY}{CAPS}")).await;
    let mut slots = Vec::new();
    // Three exports that end at once use the team's rate.
    for _ in 0..3 {
        let (_, _, answer) = service.post("/v1/acquire", export("a")).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        let slot = answer["slot"].as_str().unwrap().to_owned();
        let (status, _, _) = service.post("/v1/release", json!({"slot": slot})).await;
        assert_eq!(status, 200);
        slots.push(slot);
    }
    // The fourth: the cap lets it in, the rate refuses, and the slot goes
    // back.
    let (_, _, answer) = service.post("/v1/acquire", export("a")).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    assert_eq!(answer["denied_by"], "per-team");
    assert!(answer.get("slot").is_none(), "{answer}");
    let metrics = service.service.engine().decision_metrics();
    assert_eq!(metrics.slots("exports", Slots::Taken), 4);
    assert_eq!(metrics.slots("exports", Slots::Released), 4);
    service.stop().await;
}

#[tokio::test]
async fn a_slot_nobody_releases_is_freed_at_its_lease() {
    let service = TestService::start(&format!("{LISTEN_ANY}{CAPS}")).await;
    let by_name = json!({"limits": ["exports"], "key": {"header:x-team": "a"}});
    let mut first = None;
    for _ in 0..2 {
        let (_, _, answer) = service.post("/v1/acquire", by_name.clone()).await;
        assert_eq!(answer["allowed"], true, "{answer}");
        // Named alone, the cap is the only limit decided.
        assert_eq!(answer["limits"].as_array().unwrap().len(), 1, "{answer}");
        first.get_or_insert(answer["slot"].as_str().unwrap().to_owned());
    }
    let (_, _, answer) = service.post("/v1/acquire", by_name.clone()).await;
    assert_eq!(answer["allowed"], false);
    // Two clients crashed: ten minutes on, their slots are free again.
    service.clock.advance(Duration::from_secs(600));
    let (_, _, answer) = service.post("/v1/acquire", by_name.clone()).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["limits"][0]["remaining"], 1);
    // A late release of a slot past its lease is not found.
    let (status, _, _) = service
        .post("/v1/release", json!({"slot": first.unwrap()}))
        .await;
    assert_eq!(status, 404);
    service.stop().await;
}

#[tokio::test]
async fn bad_acquires_and_releases_are_clear_errors() {
    let service = TestService::start(&format!("{LISTEN_ANY}{CAPS}")).await;
    let (status, _, answer) = service
        .post("/v1/release", json!({"slot": "not-a-token"}))
        .await;
    assert_eq!(status, 400, "{answer}");
    let (status, _, answer) = service
        .post("/v1/acquire", json!({"limits": ["exports"], "key": {}}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer["detail"].as_str().unwrap().contains("header:x-team"),
        "{answer}"
    );
    let both = json!({"limits": ["exports"], "domain": "edge", "descriptors": [[{"key": "a", "value": "b"}]]});
    let (status, _, answer) = service.post("/v1/acquire", both).await;
    assert_eq!(status, 400, "{answer}");
    // Out of the cap's scope: decided as /v1/check would, no slot.
    let get = json!({"method": "GET", "path": "/export/csv", "key": {"header:x-team": "a"}});
    let (status, _, answer) = service.post("/v1/acquire", get).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], true);
    assert!(answer.get("slot").is_none(), "{answer}");
    // The caps are listed beside the limits.
    let listed = service.get_json(service.http("/v1/limits")).await;
    assert_eq!(listed["limits"][0]["name"], "per-team", "{listed}");
    let cap = &listed["in_flight"][0];
    assert_eq!(cap["name"], "exports", "{listed}");
    assert_eq!(cap["max_in_flight"], 2);
    assert_eq!(cap["lease_ms"], 600_000);
    assert_eq!(cap["key"], json!(["header:x-team"]));
    assert_eq!(cap["match"]["methods"], json!(["POST"]));
    assert_eq!(cap["match"]["path_prefix"], "/export");
    service.stop().await;
}

fn config_error(toml: &str) -> String {
    Config::from_toml_str(toml, "ratekeeper.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn a_cap_is_checked_as_a_cap() {
    let config = Config::from_toml_str(CAPS, "ratekeeper.toml").unwrap();
    assert_eq!(config.in_flight.len(), 1);
    assert_eq!(config.in_flight[0].cap.max(), 2);
    assert_eq!(config.in_flight[0].cap.lease(), Duration::from_secs(600));
    assert_eq!(config.limits.len(), 1);
    let cap = "[[limits]]\nname = \"c\"\npolicy = \"concurrency\"\nkey = [\"global\"]\n";
    assert!(
        config_error(cap).contains("needs max_in_flight"),
        "{}",
        config_error(cap)
    );
    let with_rate = format!("{cap}max_in_flight = 2\nrate = \"1/s\"\n");
    assert!(config_error(&with_rate).contains("limits[0].rate: rate is for rate limits"));
    let zero = format!("{cap}max_in_flight = 0\n");
    assert!(config_error(&zero).contains("limits[0].max_in_flight"));
    let long = format!("{cap}max_in_flight = 2\nlease = \"2h\"\n");
    assert!(config_error(&long).contains("limits[0].lease"));
    let descriptors = format!("{cap}max_in_flight = 2\nmatch = {{ domain = \"edge\" }}\n");
    assert!(config_error(&descriptors).contains("limits[0].match"));
    let rate = "[[limits]]\nname = \"r\"\nrate = \"1/s\"\nkey = [\"global\"]\nmax_in_flight = 2\n";
    assert!(config_error(rate).contains("limits[0].max_in_flight: max_in_flight is for policy"));
    // A cap keyed by a header any client sets is warned about as a limit
    // is: each new value is a cap of its own.
    let spoofed = "[[limits]]\nname = \"c\"\npolicy = \"concurrency\"\nmax_in_flight = 2\nkey = [\"header:x-real-ip\"]\n";
    let warnings = Config::from_toml_str(spoofed, "ratekeeper.toml")
        .unwrap()
        .warnings();
    assert!(
        warnings.iter().any(|warning| matches!(
            warning,
            ConfigWarning::Rule(LayerWarning::SpoofableHeader { limit, .. }) if limit == "c"
        )),
        "{warnings:?}"
    );
    assert!(Config::from_toml_str(CAPS, "ratekeeper.toml")
        .unwrap()
        .warnings()
        .is_empty());
    let names = format!(
        "{cap}max_in_flight = 2\n[[limits]]\nname = \"c\"\nrate = \"1/s\"\nkey = [\"global\"]\n"
    );
    assert!(config_error(&names).contains("duplicate limit name"));
}

/// An upstream whose exports (POST) end when the test lets them; a GET
/// answers at once.
async fn upstream(ends: Arc<Semaphore>) -> std::net::SocketAddr {
    let export = move || {
        let ends = Arc::clone(&ends);
        async move {
            ends.acquire().await.unwrap().forget();
            "an export"
        }
    };
    let listing = || async { "the exports" };
    common::serve_app(axum::Router::new().route("/export", get(listing).post(export))).await
}

async fn proxy(
    upstream: std::net::SocketAddr,
) -> (std::net::SocketAddr, Engine, oneshot::Sender<()>) {
    common::start_proxy(CAPS, upstream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_holds_a_slot_until_the_response_has_been_sent() {
    let ends = Arc::new(Semaphore::new(0));
    let (addr, engine, _stop) = proxy(upstream(Arc::clone(&ends)).await).await;
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let post = |team: &'static str| {
        client
            .post(format!("http://{addr}/export"))
            .header("x-team", team)
            .send()
    };
    let metrics = engine.decision_metrics();
    let first = tokio::spawn(post("a"));
    let second = tokio::spawn(post("a"));
    // Both reach the upstream and wait there, holding the team's slots.
    while metrics.slots("exports", Slots::Taken) < 2 {
        tokio::task::yield_now().await;
    }
    let third = post("a").await.unwrap();
    assert_eq!(third.status(), 429);
    assert_eq!(third.headers()["retry-after"], "1");
    // A GET is out of the cap's scope.
    assert_eq!(
        client
            .get(format!("http://{addr}/export"))
            .header("x-team", "a")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    // Both exports end, then another team's.
    ends.add_permits(3);
    for running in [first, second] {
        let response = running.await.unwrap().unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), "an export");
    }
    let other = post("b").await.unwrap();
    assert_eq!(other.status(), 200);
    assert_eq!(other.text().await.unwrap(), "an export");
    // Sent whole: every slot comes back (the proxy gives it back as the
    // body ends, which the client may see first).
    while metrics.slots("exports", Slots::Released) < 3 {
        tokio::task::yield_now().await;
    }
    assert_eq!(metrics.slots("exports", Slots::Taken), 3);
    assert_eq!(metrics.slots("exports", Slots::Refused), 1);
    assert_eq!(
        post("a").await.unwrap().status(),
        429,
        "a's rate: 3 a minute"
    );
}

#[tokio::test]
async fn two_services_on_one_sqlite_file_share_the_caps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let toml = format!("[store]\nkind = \"sqlite\"\npath = {path:?}\n{LISTEN_ANY}{CAPS}");
    let first = TestService::start(&toml).await;
    let second = TestService::start(&toml).await;
    let by_name = json!({"limits": ["exports"], "key": {"header:x-team": "a"}});
    let (_, _, answer) = first.post("/v1/acquire", by_name.clone()).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let slot = answer["slot"].as_str().unwrap().to_owned();
    let (_, _, answer) = second.post("/v1/acquire", by_name.clone()).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    assert_eq!(answer["limits"][0]["remaining"], 0);
    // The team's two slots are taken, whichever service is asked.
    let (_, _, answer) = first.post("/v1/acquire", by_name.clone()).await;
    assert_eq!(answer["allowed"], false, "{answer}");
    // A slot taken through one service is given back through the other.
    let (status, _, answer) = second.post("/v1/release", json!({"slot": slot})).await;
    assert_eq!(status, 200, "{answer}");
    let (_, _, answer) = first.post("/v1/acquire", by_name).await;
    assert_eq!(answer["allowed"], true, "{answer}");
    let metrics = common::metrics(&first).await;
    assert!(
        metrics
            .contains(r#"ratekeeper_in_flight_slots_total{limit="exports",outcome="refused"} 1"#),
        "{metrics}"
    );
    first.stop().await;
    second.stop().await;
}
