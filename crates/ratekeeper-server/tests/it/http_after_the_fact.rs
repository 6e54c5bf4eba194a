//! Costs known after the request, over the HTTP decision API: `/v1/report`,
//! `/v1/reserve`, `/v1/commit`, `/v1/cancel`, and Limitador's `/report`.

use crate::common;

use std::time::Duration;

use common::{TestService, LISTEN_ANY};
use serde_json::{json, Value};

const TOKENS: &str = r#"
[[limits]]
name = "llm-tokens"
rate = "10000/minute"
key = ["header:x-api-key"]

[[limits]]
name = "sealed"
rate = "100/minute"
key = ["header:x-api-key"]
allow_reports = false
"#;

fn tokens(cost: u64) -> Value {
    json!({"limits": ["llm-tokens"], "key": {"header:x-api-key": "k-1"}, "cost": cost})
}

#[tokio::test]
async fn a_report_charges_past_the_limit_and_the_key_waits_for_the_debt() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    let (status, _, answer) = service.post("/v1/report", tokens(4_000)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["limits"][0]["remaining"], 6_000);
    // 9,000 more than the 6,000 left: 3,000 in debt.
    let (status, headers, answer) = service.post("/v1/report", tokens(9_000)).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], false);
    assert_eq!(answer["denied_by"], "llm-tokens");
    assert_eq!(answer["limits"][0]["remaining"], 0);
    // The debt and one token: 3,001 tokens at 10,000 a minute, 18.006 s.
    assert_eq!(answer["limits"][0]["retry_after_ms"], 18_006);
    assert_eq!(headers["retry-after"], "19");
    let (_, _, answer) = service.post("/v1/check", tokens(1)).await;
    assert_eq!(answer["allowed"], false);
    service.clock.advance(Duration::from_millis(18_006));
    let (_, _, answer) = service.post("/v1/check", tokens(1)).await;
    assert_eq!(answer["allowed"], true);
    service.stop().await;
}

#[tokio::test]
async fn a_limit_without_reports_refuses_them_with_403() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    let body =
        json!({"limits": ["llm-tokens", "sealed"], "key": {"header:x-api-key": "k-1"}, "cost": 5});
    let (status, _, answer) = service.post("/v1/report", body).await;
    assert_eq!(status, 403);
    assert!(
        answer["detail"].as_str().unwrap().contains("sealed"),
        "{answer}"
    );
    // Nothing was charged, not even to the limit that takes reports.
    let (_, _, answer) = service.post("/v1/peek", tokens(1)).await;
    assert_eq!(answer["limits"][0]["remaining"], 10_000);
    service.stop().await;
}

#[tokio::test]
async fn a_reservation_holds_its_estimate_until_it_is_settled_once() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    let mut reserve = tokens(1_000);
    reserve["ttl"] = json!("2m");
    let (status, _, answer) = service.post("/v1/reserve", reserve.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["limits"][0]["remaining"], 9_000);
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    assert!(reservation.starts_with("rk1_"), "{reservation}");

    // The answer cost 1,843 tokens: 843 more are charged.
    let commit = json!({"reservation": reservation, "cost": 1_843});
    let (status, _, answer) = service.post("/v1/commit", commit.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["limits"][0]["remaining"], 10_000 - 1_843);
    // Once only.
    let (status, _, answer) = service.post("/v1/commit", commit).await;
    assert_eq!(status, 404, "{answer}");

    // Cancelled: all back.
    let (_, _, answer) = service.post("/v1/reserve", reserve.clone()).await;
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    let cancel = json!({"reservation": reservation});
    let (status, _, answer) = service.post("/v1/cancel", cancel).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["limits"][0]["remaining"], 10_000 - 1_843);

    // Past its ttl: settled at its estimate, and unknown.
    let (_, _, answer) = service.post("/v1/reserve", reserve.clone()).await;
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    service.clock.advance(Duration::from_secs(120));
    let (status, _, _) = service
        .post("/v1/commit", json!({"reservation": reservation, "cost": 0}))
        .await;
    assert_eq!(status, 404);
    service.stop().await;
}

#[tokio::test]
async fn a_refused_estimate_holds_nothing_and_bad_reservations_are_400() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    let (_, _, answer) = service.post("/v1/reserve", tokens(10_001)).await;
    assert_eq!(answer["allowed"], false);
    assert!(answer.get("reservation").is_none(), "{answer}");
    let (_, _, answer) = service.post("/v1/peek", tokens(1)).await;
    assert_eq!(answer["limits"][0]["remaining"], 10_000);

    let mut zero = tokens(1);
    zero["ttl"] = json!("0s");
    let mut long = tokens(1);
    long["ttl"] = json!("2h");
    for body in [zero, long] {
        let (status, _, answer) = service.post("/v1/reserve", body).await;
        assert_eq!(status, 400, "{answer}");
        assert!(
            answer["detail"].as_str().unwrap().contains("ttl"),
            "{answer}"
        );
    }
    for body in [
        json!({"reservation": "not-a-token", "cost": 1}),
        json!({"reservation": "rk1_AAAA", "cost": 1}),
    ] {
        let (status, _, answer) = service.post("/v1/commit", body).await;
        assert_eq!(status, 400, "{answer}");
    }
    // A commit needs its cost; a cancel takes none.
    let (_, _, answer) = service.post("/v1/reserve", tokens(1)).await;
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    let (status, _, _) = service
        .post("/v1/commit", json!({"reservation": reservation}))
        .await;
    assert_eq!(status, 400);
    let (status, _, _) = service
        .post("/v1/cancel", json!({"reservation": reservation, "cost": 1}))
        .await;
    assert_eq!(status, 400);
    service.stop().await;
}

#[tokio::test]
async fn concurrent_reservations_cannot_pass_the_budget_together() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    // Twenty requests at once, each estimated at 1,000 tokens: ten pass.
    let mut asks = Vec::new();
    for _ in 0..20 {
        asks.push(service.post("/v1/reserve", tokens(1_000)));
    }
    let answers = futures_util::future::join_all(asks).await;
    let held: Vec<String> = answers
        .iter()
        .filter_map(|(_, _, answer)| answer["reservation"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(held.len(), 10);
    // They end, each having cost 1,100: the budget is overdrawn by one
    // request's excess at most.
    for reservation in held {
        service
            .post(
                "/v1/commit",
                json!({"reservation": reservation, "cost": 1_100}),
            )
            .await;
    }
    let (_, _, answer) = service.post("/v1/check", tokens(1)).await;
    assert_eq!(answer["allowed"], false);
    // 11,000 charged of 10,000: 1,000 in debt, 6 s and one token.
    assert_eq!(answer["limits"][0]["retry_after_ms"], 6_006);
    service.stop().await;
}

#[tokio::test]
async fn reports_and_reservations_are_counted_in_the_metrics() {
    let service = TestService::start(&format!("{LISTEN_ANY}{TOKENS}")).await;
    service.post("/v1/report", tokens(4_000)).await;
    service.post("/v1/report", tokens(9_000)).await;
    let (_, _, answer) = service.post("/v1/reserve", tokens(1)).await;
    // The key is in debt: refused, nothing held.
    assert_eq!(answer["allowed"], false);
    service.clock.advance(Duration::from_secs(60));
    let (_, _, answer) = service.post("/v1/reserve", tokens(10)).await;
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    let metrics = common::metrics(&service).await;
    assert_eq!(
        common::sample(&metrics, "ratekeeper_reservations_open"),
        Some(1)
    );
    let commit = json!({"reservation": reservation, "cost": 5});
    service.post("/v1/commit", commit.clone()).await;
    service.post("/v1/commit", commit).await;

    // One more, left to expire at its ttl (60 s by default).
    service.post("/v1/reserve", tokens(10)).await;
    service.clock.advance(Duration::from_secs(60));

    let metrics = common::metrics(&service).await;
    let sample = |series: &str| common::sample(&metrics, series);
    assert_eq!(sample("ratekeeper_reservations_open"), Some(0));
    assert_eq!(sample("ratekeeper_reservations_expired_total"), Some(1));
    assert_eq!(
        sample("ratekeeper_reports_total{limit=\"llm-tokens\"}"),
        Some(2)
    );
    assert_eq!(
        sample("ratekeeper_report_units_total{limit=\"llm-tokens\"}"),
        Some(13_000)
    );
    assert_eq!(
        sample("ratekeeper_overdrafts_total{limit=\"llm-tokens\"}"),
        Some(1)
    );
    let reservations = |outcome: &str| {
        sample(&format!(
            "ratekeeper_reservations_total{{limit=\"llm-tokens\",outcome=\"{outcome}\"}}"
        ))
    };
    assert_eq!(reservations("held"), Some(2));
    assert_eq!(reservations("committed"), Some(1));
    assert_eq!(reservations("cancelled"), Some(0));
    assert_eq!(reservations("unknown"), Some(1));
    service.stop().await;
}

#[tokio::test]
async fn open_reservations_are_a_gauge_on_sqlite_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let service = TestService::start(&format!(
        "[store]\nkind = \"sqlite\"\npath = {path:?}\n{LISTEN_ANY}{TOKENS}"
    ))
    .await;
    // SQLite keeps time by the wall clock: an hour's ttl outlasts any
    // slow machine.
    let mut reserve = tokens(10);
    reserve["ttl"] = json!("1h");
    for _ in 0..3 {
        let (status, _, answer) = service.post("/v1/reserve", reserve.clone()).await;
        assert_eq!(status, 200, "{answer}");
    }
    let (_, _, answer) = service.post("/v1/reserve", reserve).await;
    let reservation = answer["reservation"].as_str().unwrap().to_owned();
    service
        .post("/v1/cancel", json!({"reservation": reservation}))
        .await;
    let metrics = common::metrics(&service).await;
    assert_eq!(
        common::sample(&metrics, "ratekeeper_reservations_open"),
        Some(3),
        "{metrics}"
    );
    service.stop().await;
}
