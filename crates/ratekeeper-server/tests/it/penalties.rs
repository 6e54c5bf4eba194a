//! Penalties (`block_for`, `block_max`, `block_forget`) over real
//! sockets: a key a limit refuses is blocked, longer each time it offends
//! again, answered from memory while blocked, and seen by a second
//! service on the same SQLite file without a second offence counted.

use crate::common;

use std::time::Duration;

use common::{TestService, LISTEN_ANY};
use ratekeeper_server::Config;
use serde_json::{json, Value};

/// 3 logins a minute per user (one back every 20 s); a user refused is
/// blocked 15 minutes, then 30, then an hour at most.
const LOGINS: &str = r#"
[[limits]]
name = "logins"
rate = "3/minute"
key = ["header:x-user"]
block_for = "15m"
block_max = "1h"
block_forget = "1d"
"#;

fn login(user: &str) -> Value {
    json!({"limits": ["logins"], "key": {"header:x-user": user}})
}

/// Asks `/v1/check` for `user`: allowed, and the Retry-After when not.
async fn ask(service: &TestService, user: &str) -> (bool, Option<u64>) {
    let (status, headers, answer) = service.post("/v1/check", login(user)).await;
    assert_eq!(status, 200, "{answer}");
    let retry = headers
        .get("retry-after")
        .map(|value| value.to_str().unwrap().parse().unwrap());
    (answer["allowed"] == true, retry)
}

#[tokio::test]
async fn a_refused_key_is_blocked_and_longer_each_time_it_offends() {
    let service = TestService::start(&format!("{LISTEN_ANY}{LOGINS}")).await;
    for _ in 0..3 {
        assert_eq!(ask(&service, "mallory").await, (true, None));
    }
    // The fourth is an offence: blocked 15 minutes, not 20 seconds.
    assert_eq!(ask(&service, "mallory").await, (false, Some(900)));
    // Blocked: refused from memory, the block's end unchanged.
    service.clock.advance(Duration::from_secs(60));
    assert_eq!(ask(&service, "mallory").await, (false, Some(840)));
    // Others are not.
    assert_eq!(ask(&service, "alice").await, (true, None));
    // The block ends; a login passes; the next offence blocks 30 minutes,
    // then an hour, and never longer.
    service.clock.advance(Duration::from_secs(840));
    assert_eq!(ask(&service, "mallory").await, (true, None));
    assert_eq!(ask(&service, "mallory").await, (false, Some(1_800)));
    service.clock.advance(Duration::from_secs(1_800));
    assert!(ask(&service, "mallory").await.0);
    assert_eq!(ask(&service, "mallory").await, (false, Some(3_600)));
    service.clock.advance(Duration::from_secs(3_600));
    assert!(ask(&service, "mallory").await.0);
    assert_eq!(ask(&service, "mallory").await, (false, Some(3_600)));

    let metrics = service.service.engine().decision_metrics();
    assert_eq!(metrics.blocks("logins"), 4);
    assert_eq!(metrics.block_refusals("logins"), 1);
    // The stats list the blocked key, and /metrics counts.
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let blocks = &stats["limits"][0]["blocks"];
    assert_eq!(blocks["started"], 4, "{stats}");
    assert_eq!(blocks["keys"][0]["key"], "mallory", "{stats}");
    assert_eq!(blocks["keys"][0]["ends_in_ms"], 3_600_000, "{stats}");
    let metrics = common::metrics(&service).await;
    assert!(
        metrics.contains(r#"ratekeeper_penalty_blocks_total{limit="logins"} 4"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"ratekeeper_blocked_keys{limit="logins"} 1"#),
        "{metrics}"
    );
    service.stop().await;
}

#[tokio::test]
async fn offences_are_forgotten_one_per_quiet_period() {
    let service = TestService::start(&format!("{LISTEN_ANY}{LOGINS}")).await;
    for _ in 0..3 {
        ask(&service, "eve").await;
    }
    assert_eq!(ask(&service, "eve").await, (false, Some(900)));
    service.clock.advance(Duration::from_secs(900));
    ask(&service, "eve").await;
    assert_eq!(ask(&service, "eve").await, (false, Some(1_800)));
    // Two days quiet: both offences forgotten, a first block again.
    service.clock.advance(Duration::from_secs(2 * 86_400));
    for _ in 0..3 {
        assert!(ask(&service, "eve").await.0);
    }
    assert_eq!(ask(&service, "eve").await, (false, Some(900)));
    service.stop().await;
}

#[tokio::test]
async fn a_second_service_on_the_same_store_sees_the_block_without_a_new_offence() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let toml = format!("[store]\nkind = \"sqlite\"\npath = {path:?}\n{LISTEN_ANY}{LOGINS}");
    let first = TestService::start(&toml).await;
    let second = TestService::start(&toml).await;
    for _ in 0..3 {
        assert!(ask(&first, "mallory").await.0);
    }
    assert_eq!(ask(&first, "mallory").await, (false, Some(900)));
    // The store refuses it to the other service for as long.
    assert_eq!(ask(&second, "mallory").await, (false, Some(900)));
    assert_eq!(ask(&second, "mallory").await, (false, Some(900)));
    let (one, two) = (
        first.service.engine().decision_metrics(),
        second.service.engine().decision_metrics(),
    );
    assert_eq!((one.blocks("logins"), two.blocks("logins")), (1, 0));
    // Its second answer came from memory.
    assert_eq!(two.block_refusals("logins"), 1);
    first.stop().await;
    second.stop().await;
}

fn error(toml: &str) -> String {
    Config::from_toml_str(toml, "ratekeeper.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn a_penalty_needs_a_bucket_that_refuses() {
    let limit = "[[limits]]\nname = \"l\"\nkey = [\"global\"]\n";
    let window =
        format!("{limit}rate = \"5/minute\"\npolicy = \"fixed_window\"\nblock_for = \"15m\"\n");
    assert!(
        error(&window).contains("limits[0].block_for: a block is the key's debt"),
        "{}",
        error(&window)
    );
    let shadow = format!("{limit}rate = \"5/minute\"\nshadow = true\nblock_for = \"15m\"\n");
    assert!(error(&shadow).contains("a shadow limit or a ban blocks nobody"));
    let short = format!("{limit}rate = \"5/minute\"\nblock_for = \"1h\"\nblock_max = \"15m\"\n");
    assert!(error(&short).contains("block_max (15m) is shorter than block_for (1h)"));
    let alone = format!("{limit}rate = \"5/minute\"\nblock_max = \"1h\"\n");
    assert!(error(&alone).contains("limits[0].block_max: block_max needs block_for"));
    let long = format!("{limit}rate = \"5/minute\"\nblock_for = \"90d\"\n");
    assert!(
        error(&long).contains("outside 1s to 30d"),
        "{}",
        error(&long)
    );
    let cap = "[[limits]]\nname = \"c\"\npolicy = \"concurrency\"\nmax_in_flight = 2\nkey = [\"global\"]\nblock_for = \"1m\"\n";
    assert!(error(cap).contains("limits[0].block_for: block_for is for rate limits"));
    let taken = format!(
        "{LOGINS}[[limits]]\nname = \"logins~offences\"\nrate = \"1/s\"\nkey = [\"global\"]\n"
    );
    assert!(
        error(&taken).contains("is where limit \"logins\"'s penalty counts offences"),
        "{}",
        error(&taken)
    );
    let config = Config::from_toml_str(LOGINS, "ratekeeper.toml").unwrap();
    let penalty = config.limits[0].penalty.unwrap();
    assert_eq!(penalty.block(1), Duration::from_secs(900));
    assert_eq!(penalty.block(5), Duration::from_secs(3_600));
}

#[tokio::test]
async fn on_redis_two_services_refuse_a_blocked_key_until_its_block_ends() {
    let Some(redis) = ratekeeper_test_support::redis::RedisServer::start() else {
        return;
    };
    let timeout = ratekeeper_test_support::redis::UNHURRIED.as_millis();
    let toml = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = {timeout}\n{LISTEN_ANY}{LOGINS}",
        redis.url()
    );
    let first = TestService::start(&toml).await;
    let second = TestService::start(&toml).await;
    for _ in 0..3 {
        assert!(ask(&first, "mallory").await.0);
    }
    // On Redis's clock: the block's end, give or take the seconds this
    // test takes on a loaded machine.
    let (allowed, retry) = ask(&first, "mallory").await;
    assert!(!allowed);
    assert!((880..=900).contains(&retry.unwrap()), "{retry:?}");
    for _ in 0..2 {
        let (allowed, retry) = ask(&second, "mallory").await;
        assert!(!allowed);
        assert!((880..=900).contains(&retry.unwrap()), "{retry:?}");
    }
    let (one, two) = (
        first.service.engine().decision_metrics(),
        second.service.engine().decision_metrics(),
    );
    assert_eq!((one.blocks("logins"), two.blocks("logins")), (1, 0));
    assert_eq!(two.block_refusals("logins"), 1);
    assert!(ask(&second, "alice").await.0);
    first.stop().await;
    second.stop().await;
}

#[tokio::test]
async fn envoy_is_told_when_the_block_ends() {
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    use ratekeeper_server::envoy::proto::RateLimitRequest;

    let toml = "[[limits]]\nname = \"logins\"\nrate = \"3/minute\"\nkey = [\"descriptor:user\"]\n\
                block_for = \"15m\"\nmatch = { domain = \"auth\", descriptors = [{ key = \"user\" }] }\n";
    let (engine, _clock) = common::engine_at(toml).await;
    let (mut client, _stop) = common::serve_rls(engine).await;
    let request = RateLimitRequest {
        domain: "auth".to_owned(),
        descriptors: vec![common::descriptor(&[("user", "mallory")])],
        hits_addend: 0,
    };
    let mut answers = Vec::new();
    for _ in 0..5 {
        let answer = client.should_rate_limit(request.clone()).await.unwrap();
        answers.push(answer.into_inner());
    }
    let codes: Vec<i32> = answers.iter().map(|answer| answer.overall_code).collect();
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(codes, [ok, ok, ok, over, over]);
    for answer in &answers[3..] {
        let reset = answer.statuses[0].duration_until_reset.as_ref().unwrap();
        assert_eq!(reset.seconds, 900, "{answer:?}");
        let retry = answer
            .response_headers_to_add
            .iter()
            .find(|header| header.key == "retry-after");
        assert_eq!(retry.map(|header| header.value.as_str()), Some("900"));
    }
}
