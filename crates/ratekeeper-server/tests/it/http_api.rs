//! The HTTP decision API end to end over loopback, with reqwest.

use crate::common;

use std::time::Duration;

use common::{TestService, LISTEN_ANY};
use serde_json::{json, Value};

fn config(limits: &str) -> String {
    format!("{LISTEN_ANY}{limits}")
}

const PER_USER: &str = r#"
[[limits]]
name = "per-user"
rate = "3/minute"
policy = "gcra"
key = ["header:x-user"]
"#;

#[tokio::test]
async fn check_admits_exactly_the_quota_then_refuses_with_the_fields() {
    let service = TestService::start(&config(PER_USER)).await;
    let body = json!({"limits": ["per-user"], "key": {"header:x-user": "alice"}});
    for remaining in [2, 1, 0] {
        let (status, headers, answer) = service.post("/v1/check", body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(answer["allowed"], true);
        assert_eq!(answer["retry_after"], 0);
        assert_eq!(answer["denied_by"], Value::Null);
        let limit = &answer["limits"][0];
        assert_eq!(limit["name"], "per-user");
        assert_eq!(limit["key"], "alice");
        assert_eq!(limit["limit"], 3);
        assert_eq!(limit["remaining"], remaining);
        assert_eq!(headers["ratelimit-policy"], "\"per-user\";q=3;w=60");
        assert!(headers.get("retry-after").is_none());
        assert_eq!(
            answer["headers"]["ratelimit"],
            headers["ratelimit"].to_str().unwrap()
        );
    }
    let (status, headers, answer) = service.post("/v1/check", body.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(answer["allowed"], false);
    assert_eq!(answer["denied_by"], "per-user");
    // One unit comes back every 20 s.
    assert_eq!(answer["retry_after"], 20);
    assert_eq!(answer["limits"][0]["retry_after_ms"], 20_000);
    assert_eq!(headers["retry-after"], "20");
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(answer["headers"]["retry-after"], "20");
    assert_eq!(headers["ratelimit"], "\"per-user\";r=0;t=20");

    // Another user has a quota of their own.
    let bob = json!({"limits": ["per-user"], "key": {"header:x-user": "bob"}});
    assert_eq!(service.post("/v1/check", bob).await.2["allowed"], true);

    service.clock.advance(Duration::from_secs(20));
    assert_eq!(
        service.post("/v1/check", body.clone()).await.2["allowed"],
        true
    );
    assert_eq!(service.post("/v1/check", body).await.2["allowed"], false);
    service.stop().await;
}

#[tokio::test]
async fn peek_takes_nothing_and_refund_gives_back() {
    let service = TestService::start(&config(PER_USER)).await;
    let body = json!({"limits": ["per-user"], "key": {"header:x-user": "carol"}, "cost": 3});
    let (_, _, answer) = service.post("/v1/check", body.clone()).await;
    assert_eq!(answer["limits"][0]["remaining"], 0);

    for _ in 0..3 {
        let (status, _, answer) = service.post("/v1/peek", body.clone()).await;
        assert_eq!(status, 200);
        assert_eq!(answer["limits"][0]["remaining"], 0);
    }
    let refund = json!({"limits": ["per-user"], "key": {"header:x-user": "carol"}, "cost": 2});
    let (status, _, answer) = service.post("/v1/refund", refund).await;
    assert_eq!(status, 200);
    assert_eq!(
        answer["refunded"][0],
        json!({"name": "per-user", "key": "carol", "units": 2})
    );
    let (_, _, answer) = service.post("/v1/peek", body).await;
    assert_eq!(answer["limits"][0]["remaining"], 2);
    service.stop().await;
}

#[tokio::test]
async fn limits_are_chosen_by_method_and_path_and_keyed_by_route() {
    let toml = config(
        r#"
[[limits]]
name = "login"
rate = "1/minute"
key = ["client_ip", "route"]
[limits.match]
methods = ["POST"]
path_prefix = "/login"

[[limits]]
name = "everything"
rate = "100/minute"
key = ["global"]
"#,
    );
    let service = TestService::start(&toml).await;
    let login =
        json!({"method": "post", "path": "/login/form", "key": {"client_ip": "203.0.113.7"}});
    let (_, _, answer) = service.post("/v1/check", login.clone()).await;
    let names: Vec<&Value> = answer["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["name"])
        .collect();
    assert_eq!(names, ["login", "everything"]);
    assert_eq!(answer["limits"][0]["key"], "203.0.113.7|POST /login/form");
    assert_eq!(answer["limits"][1]["key"], "*");
    let (_, _, answer) = service.post("/v1/check", login).await;
    assert_eq!(answer["allowed"], false);
    assert_eq!(answer["denied_by"], "login");
    // All or nothing: the refused request took nothing from "everything".
    assert_eq!(answer["limits"][1]["remaining"], 99);

    // A GET is under "everything" alone.
    let get = json!({"method": "GET", "path": "/login/form"});
    let (_, _, answer) = service.post("/v1/check", get).await;
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["limits"].as_array().unwrap().len(), 1);
    assert_eq!(answer["limits"][0]["remaining"], 98);
    service.stop().await;
}

#[tokio::test]
async fn several_limits_are_all_or_nothing() {
    let toml = config(
        r#"
[[limits]]
name = "per-user"
rate = "5/minute"
key = ["header:x-user"]

[[limits]]
name = "per-team"
rate = "2/minute"
key = ["header:x-team"]
"#,
    );
    let service = TestService::start(&toml).await;
    let request = |user: &str| json!({"limits": ["per-user", "per-team"], "key": {"header:x-user": user, "header:x-team": "red"}});
    assert_eq!(
        service.post("/v1/check", request("a")).await.2["allowed"],
        true
    );
    assert_eq!(
        service.post("/v1/check", request("a")).await.2["allowed"],
        true
    );
    for _ in 0..3 {
        let (_, headers, answer) = service.post("/v1/check", request("a")).await;
        assert_eq!(answer["allowed"], false);
        assert_eq!(answer["denied_by"], "per-team");
        assert_eq!(
            answer["limits"][0]["remaining"], 3,
            "per-user was not charged"
        );
        // RateLimit reports the tightest; the policy field lists both.
        assert_eq!(headers["ratelimit"], "\"per-team\";r=0;t=30");
        assert_eq!(
            headers["ratelimit-policy"],
            "\"per-user\";q=5;w=60, \"per-team\";q=2;w=60"
        );
    }
    service.stop().await;
}

#[tokio::test]
async fn a_shadow_limit_reports_but_never_refuses() {
    let toml = config(
        r#"
[[limits]]
name = "trial"
rate = "1/minute"
key = ["header:x-user"]
shadow = true
"#,
    );
    let service = TestService::start(&toml).await;
    let body = json!({"key": {"header:x-user": "dave"}});
    assert_eq!(
        service.post("/v1/check", body.clone()).await.2["allowed"],
        true
    );
    let (_, headers, answer) = service.post("/v1/check", body).await;
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["denied_by"], Value::Null);
    assert_eq!(answer["limits"][0]["allowed"], false);
    assert_eq!(answer["limits"][0]["shadow"], true);
    assert!(headers.get("retry-after").is_none());
    service.stop().await;
}

#[tokio::test]
async fn bad_requests_get_problem_details() {
    let service = TestService::start(&config(PER_USER)).await;
    let cases = [
        (
            json!({"limits": ["nope"]}),
            404,
            "no limit is named \"nope\"",
        ),
        (
            json!({"limits": ["per-user"]}),
            400,
            "limit \"per-user\" needs the key part \"header:x-user\" in \"key\"",
        ),
        (
            json!({"limits": ["per-user"], "cost": -1}),
            400,
            "invalid request body",
        ),
        (json!({"limit": ["per-user"]}), 400, "unknown field `limit`"),
        (json!({"method": "GE T"}), 400, "invalid method"),
    ];
    for (body, status, detail) in cases {
        let response = service
            .client
            .post(service.http("/v1/check"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{body}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json"
        );
        let problem: Value = response.json().await.unwrap();
        assert_eq!(problem["status"], status);
        let text = problem["detail"].as_str().unwrap();
        assert!(text.contains(detail), "{text:?} should contain {detail:?}");
    }
    let response = service
        .client
        .post(service.http("/v1/check"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    service.stop().await;
}

#[tokio::test]
async fn limits_lists_every_limit_as_configured() {
    let toml = config(
        r#"
[[limits]]
name = "edge-ip"
rate = "10/s burst 20"
policy = "token_bucket"
key = ["descriptor:remote_address"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }, { key = "path", value = "/api*" }]
"#,
    );
    let service = TestService::start(&toml).await;
    let answer = service.get_json(service.http("/v1/limits")).await;
    assert_eq!(
        answer,
        json!({"limits": [{
            "name": "edge-ip",
            "policy": "token_bucket",
            "rate": "10/second burst 20",
            "quota": 20,
            "window_ms": 2000,
            "key": ["descriptor:remote_address"],
            "shadow": false,
            "allow_overrides": true,
            "allow_refunds": true,
            "allow_reports": true,
            "count_refused": false,
            "match": {
                "domain": "edge",
                "descriptors": [{"key": "remote_address"}, {"key": "path", "value": "/api*"}],
                "methods": [],
                "path_prefix": null
            }
        }], "in_flight": []})
    );
    service.stop().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let service = TestService::start(&config(PER_USER)).await;
    let health = service
        .client
        .get(service.admin("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
    let ready = service
        .client
        .get(service.admin("/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    assert_eq!(ready.text().await.unwrap(), "ready (memory store)\n");
    service.stop().await;
}

#[tokio::test]
async fn descriptors_choose_limits_as_envoy_does() {
    let toml = config(
        r#"
[[limits]]
name = "edge-ip"
rate = "2/minute"
key = ["descriptor:remote_address"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }]

[[limits]]
name = "edge-login"
rate = "1/minute"
key = ["descriptor:remote_address"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }]
"#,
    );
    let service = TestService::start(&toml).await;
    let body = |ip: &str| {
        json!({"domain": "edge", "descriptors": [
            [{"key": "remote_address", "value": ip}],
            [{"key": "remote_address", "value": ip}, {"key": "path", "value": "/login"}]
        ]})
    };
    let (_, _, answer) = service.post("/v1/check", body("192.0.2.9")).await;
    assert_eq!(answer["allowed"], true);
    let names: Vec<&Value> = answer["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| &l["name"])
        .collect();
    assert_eq!(names, ["edge-ip", "edge-login"]);
    assert_eq!(answer["limits"][0]["key"], "192.0.2.9");
    let (_, _, answer) = service.post("/v1/check", body("192.0.2.9")).await;
    assert_eq!(answer["denied_by"], "edge-login");
    // Another domain matches nothing.
    let other =
        json!({"domain": "other", "descriptors": [[{"key": "remote_address", "value": "x"}]]});
    let (status, _, answer) = service.post("/v1/check", other).await;
    assert_eq!(
        (status, answer["limits"].as_array().unwrap().len()),
        (200, 0)
    );
    // Descriptors need a domain.
    let (status, _, _) = service
        .post(
            "/v1/check",
            json!({"descriptors": [[{"key": "a", "value": "b"}]]}),
        )
        .await;
    assert_eq!(status, 400);
    service.stop().await;
}

#[tokio::test]
async fn ipv6_clients_are_keyed_by_their_network() {
    let limits = r#"
[[limits]]
name = "per-64"
rate = "1/minute"
key = ["client_ip"]

[[limits]]
name = "per-56"
rate = "1/minute"
key = ["client_ip"]
ipv6_prefix = 56
"#;
    let service = TestService::start(&config(limits)).await;
    let check =
        |limit: &str, client: &str| json!({"limits": [limit], "key": {"client_ip": client}});
    // Another address of the same /64 is the same client.
    let first = service
        .post("/v1/check", check("per-64", "2001:db8:1:2::1"))
        .await
        .2;
    assert_eq!(first["allowed"], true);
    assert_eq!(first["limits"][0]["key"], "2001:db8:1:2::/64");
    let rotated = service
        .post("/v1/check", check("per-64", "2001:db8:1:2:ffff::9"))
        .await
        .2;
    assert_eq!(rotated["allowed"], false);
    // The next /64 is another client; an IPv4-mapped address is IPv4.
    for (client, key) in [
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),
        ("::ffff:192.0.2.1", "192.0.2.1"),
    ] {
        let answer = service.post("/v1/check", check("per-64", client)).await.2;
        assert_eq!(answer["allowed"], true, "{client}");
        assert_eq!(answer["limits"][0]["key"], key, "{client}");
    }
    // By /56, the next /64 is the same client.
    let answer = service
        .post("/v1/check", check("per-56", "2001:db8:1:2::1"))
        .await
        .2;
    assert_eq!(answer["limits"][0]["key"], "2001:db8:1::/56");
    let answer = service
        .post("/v1/check", check("per-56", "2001:db8:1:3::1"))
        .await
        .2;
    assert_eq!(answer["allowed"], false);
    service.stop().await;
}

#[tokio::test]
async fn bodies_over_the_request_caps_get_413_naming_the_cap() {
    let toml = config(
        r#"
[requests]
max_descriptors = 2
max_entries = 2
max_value_bytes = 16

[[limits]]
name = "per-k"
rate = "100/minute"
key = ["descriptor:k"]
match = { domain = "edge", descriptors = [{ key = "k" }] }

[[limits]]
name = "per-user"
rate = "100/minute"
key = ["header:x-user"]
"#,
    );
    let service = TestService::start(&toml).await;
    let entry = |value: &str| json!([{"key": "k", "value": value}]);
    let user = |value: &str| json!({"header:x-user": value});
    // At every cap: answered.
    let at_caps = [
        json!({"domain": "edge", "descriptors": [entry("1234567890123456"), [{"key": "k", "value": "v"}, {"key": "x", "value": "y"}]]}),
        json!({"limits": ["per-user", "per-user"], "key": {"header:x-user": "1234567890123456", "b": "c"}}),
    ];
    for body in at_caps {
        let (status, _, answer) = service.post("/v1/check", body.clone()).await;
        assert_eq!(status, 200, "{body} {answer}");
        assert_eq!(answer["allowed"], true, "{answer}");
    }
    let over = [
        (
            json!({"domain": "edge", "descriptors": [entry("a"), entry("b"), entry("c")]}),
            "the request has 3 descriptors, more than requests.max_descriptors (2)",
        ),
        (
            json!({"domain": "edge", "descriptors": [[{"key": "k", "value": "v"}, {"key": "a", "value": "b"}, {"key": "c", "value": "d"}]]}),
            "descriptors[0] has 3 entries, more than requests.max_entries (2)",
        ),
        (
            json!({"domain": "edge", "descriptors": [entry("12345678901234567")]}),
            "descriptors[0].entries[0].value is 17 bytes, more than requests.max_value_bytes (16)",
        ),
        (
            json!({"limits": ["per-user", "per-user", "per-user"], "key": user("a")}),
            "\"limits\" names 3 limits, more than requests.max_descriptors (2)",
        ),
        (
            json!({"limits": ["per-user"], "key": {"header:x-user": "a", "b": "c", "d": "e"}}),
            "\"key\" has 3 parts, more than requests.max_entries (2)",
        ),
        (
            json!({"limits": ["per-user"], "key": user("12345678901234567")}),
            "key[\"header:x-user\"] is 17 bytes, more than requests.max_value_bytes (16)",
        ),
        (
            json!({"path": "/1234567890123456", "key": user("a")}),
            "path is 17 bytes, more than requests.max_value_bytes (16)",
        ),
    ];
    for (body, detail) in over {
        for endpoint in ["/v1/check", "/v1/peek", "/v1/refund"] {
            let response = service
                .client
                .post(service.http(endpoint))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 413, "{endpoint} {body}");
            assert_eq!(
                response.headers()["content-type"],
                "application/problem+json"
            );
            let problem: Value = response.json().await.unwrap();
            assert_eq!(problem["status"], 413);
            assert_eq!(problem["detail"], detail, "{endpoint} {body}");
        }
    }
    service.stop().await;
}

/// The service's in-memory store runs on a clock that counts from the Unix
/// epoch, so a fixed minute window resets on the wall clock's minute, as
/// on Redis (whose clock is its server's), not a minute after the process
/// started.
#[tokio::test]
async fn fixed_windows_start_on_the_wall_clocks_minutes() {
    use ratekeeper::{clock::UnixClock, Clock};
    use ratekeeper_server::engine::{LimitCheck, NamedParts, OrUnknown};
    let config = ratekeeper_server::Config::from_toml_str(
        &format!(
            "{LISTEN_ANY}[[limits]]\nname = \"minute\"\nrate = \"5/minute\"\n\
             policy = \"fixed_window\"\nkey = [\"global\"]\n"
        ),
        "minute.toml",
    )
    .unwrap();
    // The service as `serve` starts it: its default clocks.
    let service = ratekeeper_server::serve::Service::builder(config)
        .start()
        .await
        .unwrap();
    let engine = service.engine();
    let limits = engine.limits();
    let limit = limits.get("minute").unwrap();
    let key = limit
        .key(&OrUnknown(NamedParts(&Default::default())))
        .unwrap();
    let verdict = engine
        .check(vec![LimitCheck::new(std::sync::Arc::clone(limit), key, 1)])
        .await
        .unwrap();
    let after = UnixClock.now().as_duration();
    let reset = verdict.results[0].decision().reset();
    // The window ends on the next minute of the wall clock: from the time
    // read after the decision, at most the time the decision took earlier.
    let into_the_minute = Duration::from_nanos((after.as_nanos() % 60_000_000_000) as u64);
    let to_the_minute = Duration::from_secs(60) - into_the_minute;
    // On a circle of a minute: a decision just before the minute and a
    // read just after it are close too.
    let gap = to_the_minute.abs_diff(reset);
    assert!(
        gap < Duration::from_secs(2) || gap > Duration::from_secs(58),
        "reset {reset:?}, the wall clock's minute in {to_the_minute:?}"
    );
    service.shutdown();
    service.wait().await.expect("a clean shutdown");
}
