//! What the service keeps and shows is bounded in bytes, whatever clients
//! send. A flood of denied requests with 100 KB keys (each a new key) grows
//! the process by a few megabytes at most, not by the keys' size, and
//! `/v1/stats` stays small; past 256 limits it shows the first and counts
//! the rest.
//!
//! The flood that found this was 3,000 requests, which grew the service by
//! 300 MB; a tenth of it shows the same growth per byte (30 MB before keys
//! were bounded) in a few seconds of a debug build, where hashing 100 KB
//! keys is slow.

use crate::common;

use common::{ServeProcess, TestService, LISTEN_ANY};
use ratekeeper_server::admin::{MAX_KEYS_SHOWN, MAX_LIMITS_SHOWN};
use serde_json::Value;

/// Requests in the flood (after a warm-up of [`WARM_UP`]), and the length
/// of each one's key.
const WARM_UP: usize = 32;
const REQUESTS: usize = 300;
const KEY_BYTES: usize = 100_000;

/// The most the flood may grow the process's resident set. The keys alone
/// weigh 30 MB; kept as 64-byte digests they weigh 20 KB, and the rest is
/// the allocator's and the runtime's slack.
const MAX_GROWTH_BYTES: u64 = 10 << 20;

/// The most `/v1/stats` may weigh with one limit: its windows, its last
/// hour and 32 keys of 64 bytes each.
const MAX_STATS_BYTES: usize = 16 << 10;

/// The request caps raised to their most (1 MiB a value), so the keys
/// reach the stores and stats: what they keep must be bounded however an
/// operator sets the caps.
const CONFIG: &str = "[listen]\ngrpc = \"off\"\n\n[requests]\nmax_value_bytes = 1048576\n\n[[limits]]\nname = \"flood\"\nrate = \"1/hour\"\npolicy = \"gcra\"\nkey = [\"header:x-api-key\"]\n";

/// The process's resident set (`VmRSS` of /proc/PID/status), in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

/// A key of [`KEY_BYTES`] unlike every other request's.
fn long_key(index: usize) -> String {
    let mut key = format!("{index:08}-");
    key.extend(std::iter::repeat_n('k', KEY_BYTES - key.len()));
    key
}

/// Sends requests `range` of the flood from `tasks` tasks at once: each is
/// denied (a cost of 2 never fits a quota of 1, so no key gets a state).
async fn flood(process: &ServeProcess, range: std::ops::Range<usize>, tasks: usize) {
    let client = reqwest::Client::new();
    let url = format!("http://{}/v1/check", process.http);
    let mut running = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let (client, url) = (client.clone(), url.clone());
        let mine: Vec<usize> = range.clone().skip(task).step_by(tasks).collect();
        running.spawn(async move {
            for index in mine {
                // Written out rather than serialized: the key needs no
                // escaping, and a debug build serializes slowly.
                let body = format!(
                    r#"{{"limits": ["flood"], "key": {{"header:x-api-key": "{}"}}, "cost": 2}}"#,
                    long_key(index)
                );
                let response = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(response.status(), 200, "request {index}");
                let answer: Value = response.json().await.unwrap();
                assert_eq!(answer["allowed"], false, "request {index}: {answer}");
            }
        });
    }
    while let Some(done) = running.join_next().await {
        done.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_long_denied_keys_keeps_memory_and_stats_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, CONFIG).unwrap();
    let process = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let pid = process.child.id();

    // Warm up first: the buffers for 100 KB bodies, the runtime's threads.
    flood(&process, 0..WARM_UP, 4).await;
    let before = rss_bytes(pid);
    flood(&process, WARM_UP..WARM_UP + REQUESTS, 4).await;
    let after = rss_bytes(pid);
    let growth = after.saturating_sub(before);
    eprintln!(
        "RSS {} MB -> {} MB after {REQUESTS} denied 100 KB keys",
        before >> 20,
        after >> 20
    );
    assert!(
        growth < MAX_GROWTH_BYTES,
        "the flood grew the process by {} MB (from {} MB)",
        growth >> 20,
        before >> 20
    );

    let admin = process.admin.expect("the admin listener is on");
    let body = reqwest::get(format!("http://{admin}/v1/stats"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    eprintln!("/v1/stats: {} bytes", body.len());
    assert!(
        body.len() < MAX_STATS_BYTES,
        "/v1/stats is {} bytes",
        body.len()
    );
    let stats: Value = serde_json::from_str(&body).unwrap();
    let flood = &stats["limits"][0];
    assert_eq!(flood["denied"], (WARM_UP + REQUESTS) as u64, "{flood}");
    let top = flood["top_denied"].as_array().unwrap();
    assert!(!top.is_empty());
    for entry in top {
        let key = entry["key"].as_str().unwrap();
        assert!(key.len() <= 64, "a top key of {} bytes", key.len());
        assert!(key.contains("~sha256:"), "{key}");
    }
}

/// Past [`MAX_LIMITS_SHOWN`] limits, `/v1/stats` shows the first and counts
/// the rest.
#[tokio::test]
async fn stats_show_the_first_limits_and_count_the_rest() {
    let mut config = LISTEN_ANY.to_owned();
    for i in 0..MAX_LIMITS_SHOWN + 5 {
        config.push_str(&format!(
            "\n[[limits]]\nname = \"l{i}\"\nrate = \"1/hour\"\nkey = [\"header:x-k\"]\n"
        ));
    }
    let service = TestService::start(&config).await;
    let stats = service.get_json(service.admin("/v1/stats")).await;
    let limits = stats["limits"].as_array().unwrap();
    assert_eq!(limits.len(), MAX_LIMITS_SHOWN);
    assert_eq!(limits[0]["name"], "l0");
    assert_eq!(stats["limits_not_shown"], 5);
    assert_eq!(
        MAX_KEYS_SHOWN,
        ratekeeper::stats::StatsConfig::DEFAULT_TOP_K
    );
    service.stop().await;
}
