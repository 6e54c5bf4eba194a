//! Leasing (`[store] lease = true`) over real processes on one real Redis:
//! together they admit the limit and no more, most decisions stay in the
//! process that made them, and a process killed while it holds units
//! takes at most two chunks with it (the one it spends and the next).

use std::time::Instant;

use std::time::Duration;

use ratekeeper_test_support::redis::{RedisCluster, RedisServer, UNHURRIED};
use serde_json::{json, Value};

use crate::common::ServeProcess;

/// A service on `url` leasing, with one limit `shared` of `rate` keyed by
/// nothing (one hot key). Leases live a minute: no unit expires because
/// the machine is slow.
fn config(url: &str, policy: &str, rate: &str, max_chunk: u64) -> String {
    format!(
        "[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = {}\nlease = true\n\
         lease_max_chunk = {max_chunk}\nlease_lifetime_ms = 60000\n\n\
         [[limits]]\nname = \"shared\"\nrate = \"{rate}\"\npolicy = \"{policy}\"\nkey = [\"global\"]\n",
        UNHURRIED.as_millis()
    )
}

/// `requests` checks of `shared` through `service`'s JSON API, from
/// `clients` concurrent clients; the number allowed.
async fn ask(service: &ServeProcess, clients: usize, requests: usize) -> u64 {
    ask_all(service, clients, requests, &["shared"]).await
}

/// `requests` checks of every limit of `limits` at once (all or
/// nothing) through `service`'s JSON API, from `clients` concurrent
/// clients; the number allowed.
async fn ask_all(service: &ServeProcess, clients: usize, requests: usize, limits: &[&str]) -> u64 {
    let body = json!({ "limits": limits });
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/check", service.http);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        let share = requests / clients + usize::from(c < requests % clients);
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..share {
                let answer: Value = client
                    .post(&url)
                    .json(&body)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert!(answer.get("allowed").is_some(), "{answer}");
                allowed += u64::from(answer["allowed"] == true);
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap();
    }
    allowed
}

/// `service`'s `/v1/stats`.
async fn stats(service: &ServeProcess) -> Value {
    let admin = service.admin.expect("an admin door");
    reqwest::get(format!("http://{admin}/v1/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// What leasing did in `service`, over every limit.
async fn leasing_stats(service: &ServeProcess) -> Value {
    stats(service).await["store"]["leasing"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_leasing_from_one_redis_admit_the_limit_and_no_more() {
    for policy in ["fixed_window", "gcra", "token_bucket", "sliding_window"] {
        let Some(redis) = RedisServer::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ratekeeper.toml");
        // 2,000 a day: the buckets refill one unit every 43 s, and the
        // window policies' day does not end during the test (unless it
        // starts within seconds of midnight UTC; then the bound below
        // allows a second window).
        let limit = 2_000;
        std::fs::write(&path, config(&redis.url(), policy, "2000/day", 10_000)).unwrap();
        let services: Vec<ServeProcess> = (0..4)
            .map(|_| ServeProcess::start(&["--config", path.to_str().unwrap()], &[]))
            .collect();
        let started = Instant::now();
        // Three times the limit, spread over the four.
        let asks = services
            .iter()
            .map(|service| ask(service, 4, 3 * limit / 4));
        let allowed: u64 = futures_util::future::join_all(asks).await.into_iter().sum();
        let elapsed = started.elapsed().as_secs();
        let refilled = match policy {
            "gcra" | "token_bucket" => elapsed / 43 + 1,
            _ => 0,
        };
        let crossed_midnight = {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            now % 86_400 <= elapsed + 1
        };
        let most = if crossed_midnight {
            2 * limit as u64
        } else {
            limit as u64 + refilled
        };
        assert!(
            allowed <= most,
            "{policy}: {allowed} allowed, at most {most}"
        );
        assert!(
            allowed >= limit as u64 * 98 / 100,
            "{policy}: {allowed} allowed of {limit}"
        );
        let (mut here, mut refused_here, mut calls) = (0, 0, 0);
        for service in &services {
            let leasing = leasing_stats(service).await;
            here += leasing["decided_here"].as_u64().unwrap();
            refused_here += leasing["refused_here"].as_u64().unwrap();
            calls += leasing["store_calls"].as_u64().unwrap();
        }
        // Each decision was made in its process (from units held, or a
        // refusal the store had just made) or asked the store (and
        // prefetches asked too): most of what was admitted was decided
        // where it was asked.
        assert!(
            here + refused_here + calls >= 3 * limit as u64,
            "{policy}: {here} + {refused_here} + {calls}"
        );
        assert!(
            here >= limit as u64 / 2,
            "{policy}: {here} decided here, {calls} store calls"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_while_it_holds_units_takes_at_most_two_chunks() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    let limit = 1_000u64;
    let max_chunk = 50;
    std::fs::write(
        &path,
        config(&redis.url(), "fixed_window", "1000/day", max_chunk),
    )
    .unwrap();
    let mut doomed = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let survivor = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let before = ask(&doomed, 2, 300).await;
    assert_eq!(before, 300);
    let leased = leasing_stats(&doomed).await;
    assert!(leased["leases"].as_u64().unwrap() > 0, "{leased}");
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    let after = ask(&survivor, 4, 2 * limit as usize).await;
    let allowed = before + after;
    assert!(allowed <= limit, "{allowed} allowed of {limit}");
    // It held at most the chunk it was spending and the next, prefetched.
    assert!(
        allowed + 2 * max_chunk >= limit,
        "{allowed} allowed of {limit}: the killed process held more than two chunks"
    );
}

/// What `shared` has left by a read through `service` (cost 0).
async fn remaining(service: &ServeProcess) -> u64 {
    remaining_of(service, "shared").await
}

/// What `limit` has left by a read through `service` (cost 0).
async fn remaining_of(service: &ServeProcess, limit: &str) -> u64 {
    let answer: Value = reqwest::Client::new()
        .post(format!("http://{}/v1/check", service.http))
        .json(&json!({"limits": [limit], "cost": 0}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["limits"][0]["remaining"]
        .as_u64()
        .unwrap_or_else(|| panic!("{answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_gives_back_what_changed_limits_hold_and_can_turn_leasing_off() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    let write = |toml: String| std::fs::write(&path, toml).unwrap();
    write(config(&redis.url(), "fixed_window", "2000/day", 10_000));
    // One process beside it, on a file of its own that keeps the first
    // numbers: what it reads is the count in the store, the units the
    // other process holds included.
    let other_path = dir.path().join("other.toml");
    std::fs::copy(&path, &other_path).unwrap();
    let other = ServeProcess::start(&["--config", other_path.to_str().unwrap()], &[]);
    let service = ServeProcess::start_logged(&["--config", path.to_str().unwrap()], &[]);
    assert_eq!(ask(&service, 4, 500).await, 500);
    let stats = stats(&service).await;
    let shared = &stats["limits"][0]["leasing"];
    assert!(shared["leases"].as_u64().unwrap() > 0, "{shared}");
    assert_eq!(shared["decisions"], 500, "{shared}");
    let saved = shared["calls_saved"].as_u64().unwrap();
    assert!(saved > 250, "{shared}");
    let metrics = reqwest::get(format!("http://{}/metrics", service.admin.unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        crate::common::sample(
            &metrics,
            r#"ratekeeper_lease_store_calls_saved_total{limit="shared"}"#
        ),
        Some(saved)
    );
    // Other processes see what this one holds as used.
    let held = 2_000 - 500 - remaining(&other).await;
    assert!(held > 0, "the process holds no units");

    // New numbers: the units held under the old ones go back.
    write(config(&redis.url(), "fixed_window", "3000/day", 10_000));
    service.signal("HUP");
    service.wait_stderr("leased units given back");
    assert_eq!(remaining(&other).await, 2_000 - 500);

    // Leasing off: what the process took since goes back, and it asks the
    // store for each decision.
    assert_eq!(ask(&service, 4, 300).await, 300);
    write(
        config(&redis.url(), "fixed_window", "3000/day", 10_000)
            .replace("lease = true", "lease = false"),
    );
    service.signal("HUP");
    service.wait_stderr("the store's leasing settings changed");
    assert_eq!(remaining(&other).await, 2_000 - 800);
    assert_eq!(ask(&service, 2, 100).await, 100);
    assert_eq!(remaining(&other).await, 2_000 - 900);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_leasing_from_a_redis_cluster_or_one_sqlite_file_admit_the_limit_all_or_nothing(
) {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "kind = \"sqlite\"\npath = \"{}\"\n",
        dir.path().join("counts.db").display()
    );
    let cluster = RedisCluster::start();
    let mut stores = vec![("sqlite", sqlite)];
    if let Some(cluster) = &cluster {
        let urls: Vec<String> = cluster.urls().iter().map(|u| format!("{u:?}")).collect();
        stores.push((
            "redis-cluster",
            format!(
                "kind = \"redis-cluster\"\nurls = [{}]\ntimeout_ms = {}\n",
                urls.join(", "),
                UNHURRIED.as_millis()
            ),
        ));
    }
    for (name, store) in stores {
        // Two limits on every request: `shared` refuses past 2,000, and
        // `wide`, which would allow 5,000, must count only what both
        // allowed. Leases live an hour: none expires because the machine
        // is slow.
        let toml = format!(
            "[store]\n{store}lease = true\nlease_lifetime_ms = 3600000\n\n\
             [[limits]]\nname = \"shared\"\nrate = \"2000/day\"\npolicy = \"fixed_window\"\nkey = [\"global\"]\n\n\
             [[limits]]\nname = \"wide\"\nrate = \"5000/day\"\npolicy = \"fixed_window\"\nkey = [\"global\"]\n"
        );
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, toml).unwrap();
        let mut services: Vec<ServeProcess> = (0..4)
            .map(|_| ServeProcess::start(&["--config", path.to_str().unwrap()], &[]))
            .collect();
        let asks = services
            .iter()
            .map(|service| ask_all(service, 4, 1_500, &["shared", "wide"]));
        let allowed: u64 = futures_util::future::join_all(asks).await.into_iter().sum();
        assert!(
            allowed <= 2_000 || crossed_midnight(),
            "{name}: {allowed} allowed of 2,000"
        );
        assert!(allowed >= 1_960, "{name}: {allowed} allowed of 2,000");
        let mut here = 0;
        for service in &services {
            here += leasing_stats(service).await["decided_here"]
                .as_u64()
                .unwrap();
        }
        assert!(here >= 1_000, "{name}: {here} decided in the processes");
        // Stopped, they give back what they hold: the store counts what
        // was allowed, in both limits.
        for service in &mut services {
            service.signal("TERM");
            assert!(service.wait_exit(Duration::from_secs(60)).success());
        }
        let reader = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
        if !crossed_midnight() {
            assert_eq!(
                remaining_of(&reader, "wide").await,
                5_000 - allowed,
                "{name}"
            );
            assert_eq!(
                remaining_of(&reader, "shared").await,
                2_000 - allowed,
                "{name}"
            );
        }
    }
}

/// Whether the UTC day may have changed during the test (the day's
/// windows then started again): up to ten minutes after midnight, or a
/// minute before.
fn crossed_midnight() -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    now % 86_400 < 600 || now % 86_400 > 86_400 - 60
}
