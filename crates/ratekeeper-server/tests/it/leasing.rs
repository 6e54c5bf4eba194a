//! Leasing (`[store] lease = true`) over real processes on one real Redis:
//! together they admit the limit and no more, most decisions stay in the
//! process that made them, and a process killed while it holds units
//! takes at most two chunks with it (the one it spends and the next).

use std::time::Instant;

use ratekeeper_test_support::redis::{RedisServer, UNHURRIED};
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
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/check", service.http);
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, url) = (client.clone(), url.clone());
        let share = requests / clients + usize::from(c < requests % clients);
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..share {
                let answer: Value = client
                    .post(&url)
                    .json(&json!({"limits": ["shared"]}))
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

async fn leasing_stats(service: &ServeProcess) -> Value {
    let admin = service.admin.expect("an admin door");
    let stats: Value = reqwest::get(format!("http://{admin}/v1/stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    stats["store"]["leasing"].clone()
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
        let mut here = 0;
        let mut calls = 0;
        for service in &services {
            let leasing = leasing_stats(service).await;
            here += leasing["decided_here"].as_u64().unwrap();
            calls += leasing["store_calls"].as_u64().unwrap();
        }
        // Each decision either stayed in its process or asked the store
        // (and prefetches asked too). Refusals ask the store (nothing can
        // be held for them): most of what was admitted was decided where
        // it was asked.
        assert!(
            here + calls >= 3 * limit as u64,
            "{policy}: {here} + {calls}"
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
