//! A reload that tightens limits while clients keep asking, on every
//! store: what each key used before the reload still counts, so no key
//! gets a fresh quota from it, and no more pass than the old limit (or,
//! from the reload on, the new one) allows.
//!
//! The memory store runs on the tests' manual clock, which does not move;
//! SQLite and Redis decide on real time, against limits of a day, so that
//! nothing refills while a test runs; a test that would start within two
//! minutes of UTC midnight, where a day's fixed window turns, first waits
//! for it to pass.

use ratekeeper_test_support::redis as harness;

use crate::common;

use std::sync::Arc;

use common::{TestService, LISTEN_ANY};
use harness::RedisServer;
use serde_json::json;

/// Every kind of policy, one limit each, on one global key.
const KINDS: [&str; 5] = [
    "token_bucket",
    "gcra",
    "fixed_window",
    "sliding_log",
    "sliding_window",
];

/// The quota before and after the reload, per day.
const BEFORE: u64 = 30;
const AFTER: u64 = 20;
/// Requests per limit before the reload (all allowed), and after it starts.
const FIRST: u64 = 15;
const CLIENTS: u64 = 5;
const EACH: u64 = 9;

fn config(store: &str, per_day: u64) -> String {
    let mut text = format!("{LISTEN_ANY}{store}");
    for kind in KINDS {
        text.push_str(&format!(
            "\n[[limits]]\nname = \"{kind}\"\nrate = \"{per_day}/day\"\npolicy = \"{kind}\"\nkey = [\"global\"]\n"
        ));
    }
    text
}

/// Sends `count` checks of the limit named `kind`: how many were allowed.
async fn ask(service: &TestService, kind: &str, count: u64) -> u64 {
    let mut allowed = 0;
    for _ in 0..count {
        let (status, _, answer) = service.post("/v1/check", json!({"limits": [kind]})).await;
        assert_eq!(status, 200, "{kind}: {answer}");
        allowed += u64::from(answer["allowed"] == true);
    }
    allowed
}

/// `FIRST` requests per limit, all allowed; then `CLIENTS` clients send
/// `EACH` requests per limit each while the file is rewritten from
/// `BEFORE` to `AFTER` a day and reloaded. Between them the clients'
/// requests and the first ones get at least `AFTER` (the new limit is not
/// cut short: the used units were fewer) and at most `BEFORE` through;
/// a fresh quota at the reload would have let `FIRST + AFTER` and more.
async fn tighten_under_load(store: &str) {
    if !store.is_empty() {
        clear_of_midnight().await;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    let store = store.replace("{dir}", &dir.path().display().to_string());
    std::fs::write(&path, config(&store, BEFORE)).unwrap();
    let service =
        Arc::new(TestService::start_with(&config(&store, BEFORE), Some(path.clone()), None).await);
    for kind in KINDS {
        assert_eq!(ask(&service, kind, FIRST).await, FIRST, "{kind}");
    }

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let service = Arc::clone(&service);
        clients.push(tokio::spawn(async move {
            let mut allowed = [0; KINDS.len()];
            for _ in 0..EACH {
                for (index, kind) in KINDS.iter().enumerate() {
                    allowed[index] += ask(&service, kind, 1).await;
                }
            }
            allowed
        }));
    }
    // The reload lands among the clients' requests.
    tokio::task::yield_now().await;
    std::fs::write(&path, config(&store, AFTER)).unwrap();
    service
        .service
        .reload()
        .await
        .expect("the tightened file reloads");
    let mut allowed = [FIRST; KINDS.len()];
    for client in clients {
        for (total, more) in allowed.iter_mut().zip(client.await.unwrap()) {
            *total += more;
        }
    }
    for (kind, total) in KINDS.iter().zip(allowed) {
        assert!(
            (AFTER..=BEFORE).contains(&total),
            "{kind}: {total} allowed in all, {FIRST} of them before the reload from \
             {BEFORE} to {AFTER} a day"
        );
        // Used up under the new limit: nothing more passes.
        let (_, _, answer) = service.post("/v1/check", json!({"limits": [kind]})).await;
        assert_eq!(answer["allowed"], false, "{kind}: {answer}");
        assert_eq!(answer["limits"][0]["limit"], AFTER, "{kind}: {answer}");
        assert_eq!(answer["limits"][0]["remaining"], 0, "{kind}: {answer}");
    }
    let service = Arc::into_inner(service).unwrap();
    service.stop().await;
}

/// Returns at once unless UTC midnight, where the day windows of the
/// stores on real time turn, is less than two minutes away; then after it.
/// A turn mid-test would refill the fixed window and let more through
/// than either limit allows, whatever the carrying.
async fn clear_of_midnight() {
    const DAY: u64 = 86_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let left = DAY - now % DAY;
    if left < 120 {
        tokio::time::sleep(std::time::Duration::from_secs(left + 1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightening_under_load_on_the_memory_store_keeps_what_keys_used() {
    tighten_under_load("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightening_under_load_on_sqlite_keeps_what_keys_used() {
    tighten_under_load("[store]\nkind = \"sqlite\"\npath = \"{dir}/counts.db\"\n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tightening_under_load_on_redis_keeps_what_keys_used() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = {}\n",
        redis.url(),
        harness::UNHURRIED.as_millis()
    );
    tighten_under_load(&store).await;
}
