//! Plans (`plan_from`, `[limits.plans]`) over real sockets: each key
//! checked against its plan's numbers on the JSON API, nginx's
//! `auth_request` and Envoy's gRPC door; a plan change carries the key's
//! use; unknown plans and untrusted headers get the limit's own numbers.

use crate::common;

use common::{TestService, LISTEN_ANY};
use serde_json::{json, Value};

/// 2 requests a minute per API key by default, 5 on pro, none on
/// suspended, no limit on internal; the plan from a header the local
/// edge (127.0.0.1) sets.
const API: &str = r#"
[[limits]]
name = "api"
rate = "2/minute"
key = ["header:x-api-key"]
plan_from = "header:x-plan"
plan_from_peers = ["127.0.0.1"]
[limits.plans]
pro = "5/minute"
internal = "unlimited"
suspended = "deny"
"#;

fn ask(key: &str, plan: Option<&str>) -> Value {
    let mut parts = json!({"header:x-api-key": key});
    if let Some(plan) = plan {
        parts["header:x-plan"] = plan.into();
    }
    json!({"limits": ["api"], "key": parts})
}

/// How many of `n` requests of `key` on `plan` the JSON API allows.
async fn allowed(service: &TestService, key: &str, plan: Option<&str>, n: usize) -> usize {
    let mut allowed = 0;
    for _ in 0..n {
        let (status, _, answer) = service.post("/v1/check", ask(key, plan)).await;
        assert_eq!(status, 200, "{answer}");
        allowed += usize::from(answer["allowed"] == true);
    }
    allowed
}

#[tokio::test]
async fn each_key_gets_its_plans_numbers_and_keeps_its_use_when_it_changes() {
    let service = TestService::start(&format!("{LISTEN_ANY}{API}")).await;
    assert_eq!(allowed(&service, "free-key", None, 4).await, 2);
    assert_eq!(allowed(&service, "pro-key", Some("pro"), 7).await, 5);
    assert_eq!(allowed(&service, "in-key", Some("internal"), 50).await, 50);
    assert_eq!(allowed(&service, "bad-key", Some("suspended"), 3).await, 0);
    // free-key upgrades: its 2 used count against pro's 5.
    assert_eq!(allowed(&service, "free-key", Some("pro"), 5).await, 3);
    // And downgrades: over free's 2 already.
    assert_eq!(allowed(&service, "free-key", None, 1).await, 0);
    // A plan the limit does not have is the default, never unlimited.
    assert_eq!(allowed(&service, "odd-key", Some("platinum"), 3).await, 2);
    let metrics = common::metrics(&service).await;
    assert!(
        metrics.contains(r#"ratekeeper_plan_unknown_total{limit="api"} 3"#),
        "{metrics}"
    );
    // /v1/limits shows the plans.
    let limits = service.get_json(service.http("/v1/limits")).await;
    let plans = &limits["limits"][0]["plans"];
    assert_eq!(plans["from"], "header:x-plan", "{limits}");
    assert_eq!(plans["from_peers"], json!(["127.0.0.1/32"]), "{limits}");
    assert_eq!(plans["plans"]["pro"], "5/minute", "{limits}");
    assert_eq!(plans["plans"]["suspended"], "deny", "{limits}");
    assert_eq!(limits["limits"][0]["rate"], "2/minute", "{limits}");
    service.stop().await;
}

async fn auth(service: &TestService, key: &str, plan: &str) -> u16 {
    service
        .client
        .get(service.http("/v1/auth"))
        .header("x-original-uri", "/")
        .header("x-api-key", key)
        .header("x-plan", plan)
        .send()
        .await
        .expect("/v1/auth answers")
        .status()
        .as_u16()
}

#[tokio::test]
async fn nginx_sets_the_plan_only_from_a_peer_it_trusts() {
    let trusted = TestService::start(&format!("{LISTEN_ANY}{API}")).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(auth(&trusted, "k", "pro").await);
    }
    assert_eq!(statuses, [204, 204, 204, 204, 204, 429]);
    trusted.stop().await;

    // The same request from a peer plan_from_peers does not list: the
    // header is ignored, and counted.
    let elsewhere = API.replace(r#"["127.0.0.1"]"#, r#"["10.0.0.0/8"]"#);
    let untrusted = TestService::start(&format!("{LISTEN_ANY}{elsewhere}")).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(auth(&untrusted, "k", "internal").await);
    }
    assert_eq!(statuses, [204, 204, 429]);
    let metrics = common::metrics(&untrusted).await;
    assert!(
        metrics.contains(r#"ratekeeper_plan_untrusted_total{limit="api"} 3"#),
        "{metrics}"
    );
    untrusted.stop().await;
}

#[tokio::test]
async fn envoy_names_the_plan_in_a_descriptor_entry() {
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    use ratekeeper_server::envoy::proto::RateLimitRequest;

    let toml = r#"
[[limits]]
name = "api"
rate = "1/minute"
key = ["descriptor:api_key"]
plan_from = "descriptor:plan"
match = { domain = "edge", descriptors = [{ key = "api_key" }, { key = "plan" }] }
[limits.plans]
pro = "3/minute"
internal = "unlimited"
"#;
    let (engine, _clock) = common::engine_at(toml).await;
    let (client, _stop) = common::serve_rls(engine).await;
    // One descriptor: the key's API key and the plan its edge named.
    let request = |key: &str, plan: &str| RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![common::descriptor(&[("api_key", key), ("plan", plan)])],
        hits_addend: 0,
    };
    let codes = |key: &'static str, plan: &'static str, n: usize| {
        let request = request(key, plan);
        let mut client = client.clone();
        async move {
            let mut codes = Vec::new();
            for _ in 0..n {
                let answer = client.should_rate_limit(request.clone()).await.unwrap();
                codes.push(answer.into_inner().overall_code);
            }
            codes
        }
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes("a", "free", 2).await, [ok, over]);
    assert_eq!(codes("b", "pro", 4).await, [ok, ok, ok, over]);
    assert_eq!(codes("c", "internal", 5).await, [ok; 5]);
    // a upgrades: 1 used of pro's 3.
    assert_eq!(codes("a", "pro", 3).await, [ok, ok, over]);

    // Each answer shows the numbers of the key's plan, not the limit's own.
    let shown = |key: &str, plan: &str| {
        let request = request(key, plan);
        let mut client = client.clone();
        async move {
            let answer = client
                .should_rate_limit(request)
                .await
                .unwrap()
                .into_inner();
            let limit = answer.statuses[0].current_limit.clone().expect("a limit");
            (limit.requests_per_unit, answer.statuses[0].limit_remaining)
        }
    };
    assert_eq!(shown("d", "pro").await, (3, 2));
    assert_eq!(shown("e", "free").await, (1, 0));
}

#[tokio::test]
async fn plans_share_a_key_across_services_on_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let toml = format!("[store]\nkind = \"sqlite\"\npath = {path:?}\n{LISTEN_ANY}{API}");
    let first = TestService::start(&toml).await;
    let second = TestService::start(&toml).await;
    assert_eq!(allowed(&first, "k", None, 2).await, 2);
    // Upgraded, on the other service: 2 of pro's 5 already used.
    assert_eq!(allowed(&second, "k", Some("pro"), 5).await, 3);
    assert_eq!(allowed(&first, "k", Some("pro"), 1).await, 0);
    first.stop().await;
    second.stop().await;
}

#[test]
fn plans_that_cannot_be_used_are_refused_where_they_are_written() {
    use ratekeeper_server::Config;
    let cases = [
        (
            API.replace("plan_from_peers = [\"127.0.0.1\"]\n", ""),
            "any client can send x-plan",
        ),
        (
            API.replace("plan_from = \"header:x-plan\"\n", "")
                .replace("plan_from_peers = [\"127.0.0.1\"]\n", ""),
            "plans need plan_from",
        ),
        (
            API.replace("pro = \"5/minute\"", "default = \"5/minute\""),
            "may not be called \"default\"",
        ),
        (
            API.replace("pro = \"5/minute\"", "pro = \"lots\""),
            "limits[0].plans.pro",
        ),
        (
            API.replace("rate = \"2/minute\"", "rate = \"0/minute\""),
            "a rate of 0 refuses every request",
        ),
        (
            API.replace("header:x-plan", "descriptor:plan"),
            "plan_from_peers is for a header",
        ),
        (
            format!(
                "{}match = {{ domain = \"edge\", descriptors = [{{ key = \"k\" }}] }}\n",
                API.replace("key = [\"header:x-api-key\"]", "key = [\"descriptor:k\"]")
                    .replace("[limits.plans]\npro = \"5/minute\"\ninternal = \"unlimited\"\nsuspended = \"deny\"\n", "")
            ) + "[limits.plans]\npro = \"5/minute\"\n",
            "Envoy descriptors, which have no headers",
        ),
    ];
    for (toml, expected) in cases {
        let error = Config::from_toml_str(&toml, "plans.toml").unwrap_err();
        assert!(
            error.to_string().contains(expected),
            "{expected}: {error}\n{toml}"
        );
    }
    // A plan from a descriptor is warned about.
    let toml = "[[limits]]\nname = \"api\"\nrate = \"1/minute\"\nkey = [\"descriptor:k\"]\n\
                plan_from = \"descriptor:plan\"\n\
                match = { domain = \"edge\", descriptors = [{ key = \"k\" }, { key = \"plan\" }] }\n\
                [limits.plans]\npro = \"3/minute\"\n";
    let config = Config::from_toml_str(toml, "plans.toml").unwrap();
    let warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    // And a plan entry the descriptors never have is refused.
    let error =
        Config::from_toml_str(&toml.replace(", { key = \"plan\" }", ""), "plans.toml").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no entry of match.descriptors has the key \"plan\""),
        "{error}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("takes its plan from the descriptor entry \"plan\"")),
        "{warnings:?}"
    );
}

/// An upstream answering "upstream" to `GET /`, with `x-cost: 4`.
async fn upstream() -> std::net::SocketAddr {
    common::serve_app(axum::Router::new().route(
        "/",
        axum::routing::get(|| async { ([("x-cost", "4")], "upstream") }),
    ))
    .await
}

/// How the proxy at `addr` answered `n` requests of `key` with the plan
/// header `plan`, each body read to its end (where a response's cost is
/// charged).
async fn proxied(addr: std::net::SocketAddr, key: &str, plan: Option<&str>, n: usize) -> Vec<u16> {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut statuses = Vec::new();
    for _ in 0..n {
        let mut request = client
            .get(format!("http://{addr}/"))
            .header("x-api-key", key);
        if let Some(plan) = plan {
            request = request.header("x-plan", plan);
        }
        let response = request.send().await.unwrap();
        statuses.push(response.status().as_u16());
        let _ = response.bytes().await;
    }
    statuses
}

#[tokio::test]
async fn the_proxy_charges_what_a_response_cost_at_the_keys_plans_numbers() {
    let upstream = upstream().await;
    let toml = API
        .replace("2/minute", "10/minute")
        .replace("5/minute", "20/minute")
        .replace(
            "plan_from = ",
            "after_response = { cost = \"header:x-cost\" }\nplan_from = ",
        );
    let config = ratekeeper_server::Config::from_toml_str(&toml, "plans.toml").unwrap();
    let said: Vec<String> = config
        .warnings_when_serving(true)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(said.is_empty(), "{said:?}");
    let (addr, _engine, _stop) = common::start_proxy(&toml, upstream).await;
    let statuses = |key, plan, n| proxied(addr, key, plan, n);
    // 4 units a response: free's 10 take three (the third overdraws),
    // pro's 20 five.
    assert_eq!(statuses("free", None, 4).await, [200, 200, 200, 429]);
    assert_eq!(
        statuses("paid", Some("pro"), 6).await,
        [200, 200, 200, 200, 200, 429]
    );
    assert_eq!(statuses("ops", Some("internal"), 8).await, [200; 8]);
    assert_eq!(statuses("bad", Some("suspended"), 1).await, [429]);
}

#[tokio::test]
async fn the_proxy_checks_each_key_against_its_plan() {
    let upstream = upstream().await;
    let (addr, engine, _stop) = common::start_proxy(API, upstream).await;
    let statuses = |key, plan, n| proxied(addr, key, plan, n);
    assert_eq!(statuses("free", None, 3).await, [200, 200, 429]);
    assert_eq!(
        statuses("paid", Some("pro"), 6).await,
        [200, 200, 200, 200, 200, 429]
    );
    assert_eq!(statuses("ops", Some("internal"), 10).await, [200; 10]);
    assert_eq!(statuses("bad", Some("suspended"), 2).await, [429, 429]);
    // free upgrades: its 2 used count against pro's 5.
    assert_eq!(statuses("free", Some("pro"), 4).await, [200, 200, 200, 429]);
    // An unknown plan is the default, and counted.
    assert_eq!(statuses("odd", Some("gold"), 3).await, [200, 200, 429]);
    let metrics = ratekeeper_server::admin::render_metrics(&engine, &Default::default())
        .await
        .expect("the metrics");
    assert!(
        metrics.contains(r#"ratekeeper_plan_unknown_total{limit="api"} 3"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_proxy_ignores_a_plan_header_from_a_peer_it_does_not_trust() {
    let upstream = upstream().await;
    let elsewhere = API.replace(r#"["127.0.0.1"]"#, r#"["10.0.0.0/8"]"#);
    let (addr, engine, _stop) = common::start_proxy(&elsewhere, upstream).await;
    assert_eq!(
        proxied(addr, "k", Some("internal"), 3).await,
        [200, 200, 429]
    );
    let metrics = ratekeeper_server::admin::render_metrics(&engine, &Default::default())
        .await
        .expect("the metrics");
    assert!(
        metrics.contains(r#"ratekeeper_plan_untrusted_total{limit="api"} 3"#),
        "{metrics}"
    );
}

/// 2 a minute per API key by default, 5 on pro, none on suspended, no
/// limit on internal; each key's plan from the table at `path`.
fn by_table(path: &std::path::Path) -> String {
    format!(
        "{LISTEN_ANY}\n[[limits]]\nname = \"api\"\nrate = \"2/minute\"\nkey = [\"header:x-api-key\"]\n\
         plan_from = \"table:{}\"\n[limits.plans]\npro = \"5/minute\"\ninternal = \"unlimited\"\n\
         suspended = \"deny\"\n",
        path.display()
    )
}

#[tokio::test]
async fn a_table_names_each_keys_plan_and_a_reload_reads_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("keys.toml");
    std::fs::write(&table, "\"alice\" = \"pro\"\n\"mallory\" = \"suspended\"\n").unwrap();
    let config = dir.path().join("ratekeeper.toml");
    std::fs::write(&config, by_table(&table)).unwrap();
    let service = TestService::start_with(&by_table(&table), Some(config), None).await;
    // A plan header is not the source: the table is.
    assert_eq!(allowed(&service, "alice", Some("internal"), 7).await, 5);
    assert_eq!(allowed(&service, "mallory", None, 2).await, 0);
    assert_eq!(allowed(&service, "bob", None, 3).await, 2);

    // bob is moved to internal; the file alone changes, and a reload
    // reads it (the poller's detection: serve::reload's unit tests).
    std::fs::write(
        &table,
        "\"alice\" = \"pro\"\n\"mallory\" = \"suspended\"\n\"bob\" = \"internal\"\n",
    )
    .unwrap();
    service
        .service
        .reload()
        .await
        .expect("the edited table loads");
    assert_eq!(allowed(&service, "bob", None, 20).await, 20);
    let metrics = common::metrics(&service).await;
    for line in [
        r#"ratekeeper_plan_table_keys{limit="api"} 3"#,
        r#"ratekeeper_plans{limit="api"} 3"#,
    ] {
        assert!(metrics.contains(line), "{line}: {metrics}");
    }
    let limits = service.get_json(service.http("/v1/limits")).await;
    let from = limits["limits"][0]["plans"]["from"].as_str().unwrap();
    assert!(
        from.starts_with("table:") && from.ends_with("keys.toml"),
        "{limits}"
    );
    service.stop().await;
}

#[tokio::test]
async fn the_proxy_reads_each_keys_plan_from_a_table() {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("keys.toml");
    std::fs::write(&table, "\"alice\" = \"pro\"\n\"mallory\" = \"suspended\"\n").unwrap();
    let upstream = upstream().await;
    let (addr, _engine, _stop) = common::start_proxy(&by_table(&table), upstream).await;
    let statuses = |key, n| proxied(addr, key, None, n);
    assert_eq!(statuses("alice", 6).await, [200, 200, 200, 200, 200, 429]);
    assert_eq!(statuses("mallory", 1).await, [429]);
    assert_eq!(statuses("bob", 3).await, [200, 200, 429]);
}

#[test]
fn a_plan_table_that_cannot_be_used_is_refused() {
    use ratekeeper_server::Config;
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("keys.toml");
    let cases = [
        (
            "\"alice\" = \"gold\"\n",
            "\"alice\" is on the plan \"gold\", which [limits.plans] does not list",
        ),
        ("\"alice\" = 3\n", "must be a plan's name in quotes"),
        ("alice = \n", "is not a TOML table"),
    ];
    for (text, expected) in cases {
        std::fs::write(&table, text).unwrap();
        let error = Config::from_toml_str(&by_table(&table), "plans.toml").unwrap_err();
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    let missing = dir.path().join("none.toml");
    let error = Config::from_toml_str(&by_table(&missing), "plans.toml").unwrap_err();
    assert!(error.to_string().contains("cannot read"), "{error}");
    let peers = by_table(&table).replace("[limits.plans]", "plan_from_peers = []\n[limits.plans]");
    std::fs::write(&table, "").unwrap();
    let error = Config::from_toml_str(&peers, "plans.toml").unwrap_err();
    assert!(
        error
            .to_string()
            .contains("plan_from_peers is for a header"),
        "{error}"
    );
}

#[test]
fn explain_says_which_plan_a_request_is_on() {
    use ratekeeper_server::engine::explain::{explain, Probe};
    use ratekeeper_server::engine::LimitSet;
    use ratekeeper_server::Config;

    let config = Config::from_toml_str(API, "plans.toml").unwrap();
    let limits = LimitSet::new(&config.limits);
    let probe = |plan: &str, peer: &str| {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-api-key", "k".parse().unwrap());
        headers.insert("x-plan", plan.parse().unwrap());
        Probe::Http {
            method: http::Method::GET,
            path: "/".to_owned(),
            headers,
            peer: Some(peer.parse().unwrap()),
        }
    };
    let plan_of = |plan: &str, peer: &str| {
        let explanation = explain(&limits, &probe(plan, peer));
        let verdict = explanation.applied().next().expect("api applies").clone();
        (verdict.plan.unwrap_or_default(), explanation.to_string())
    };
    let (plan, text) = plan_of("pro", "127.0.0.1");
    assert_eq!(plan, "pro");
    assert!(text.contains("limit api, key \"k\", plan pro"), "{text}");
    assert_eq!(
        plan_of("gold", "127.0.0.1").0,
        "default (the limit has no plan \"gold\")"
    );
    assert_eq!(
        plan_of("pro", "192.0.2.1").0,
        "default (192.0.2.1 is not in plan_from_peers: its header is ignored)"
    );
}

#[tokio::test]
async fn a_reservation_under_a_plan_settles_at_that_plans_numbers() {
    let service = TestService::start(&format!("{LISTEN_ANY}{API}")).await;
    let mut body = ask("r-key", Some("pro"));
    body["cost"] = 5.into();
    let (status, _, held) = service.post("/v1/reserve", body).await;
    assert_eq!(status, 200, "{held}");
    assert_eq!(held["allowed"], true, "{held}");
    let token = held["reservation"]
        .as_str()
        .expect("a reservation")
        .to_owned();
    // 5 held of pro's 5; 2 of them were used.
    let (status, _, settled) = service
        .post("/v1/commit", json!({"reservation": token, "cost": 2}))
        .await;
    assert_eq!(status, 200, "{settled}");
    assert_eq!(allowed(&service, "r-key", Some("pro"), 4).await, 3);
    service.stop().await;
}

#[test]
fn check_prints_each_limits_plans() {
    let config = ratekeeper_server::Config::from_toml_str(API, "plans.toml").unwrap();
    let text = config.explain();
    assert!(
        text.contains(
            "  plans from the x-plan header, believed from 127.0.0.1/32: internal unlimited, \
             pro 5/minute, suspended deny; any other key 2/minute"
        ),
        "{text}"
    );
}
