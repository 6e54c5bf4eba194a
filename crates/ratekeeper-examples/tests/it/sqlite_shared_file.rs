//! Seed 001's promises: its README's two transcripts, line for line, and
//! its SQLite store shared by processes that never lose an update (two real
//! processes on one file admit exactly the limit between them).

#[path = "../../examples/sqlite_shared_file.rs"]
#[allow(dead_code)]
mod example;

use futures_executor::block_on;
use ratekeeper::{clock::ManualClock, Store, Timestamp};
use ratekeeper_sqlite::SqliteStore;

#[test]
fn the_policy_transcript_line_for_line() {
    assert_eq!(
        example::policy_transcript().unwrap(),
        [
            "t=0ms: allowed, 1 left",
            "t=10ms: allowed, 0 left",
            "t=20ms: denied, retry in 480 ms",
            "t=600ms: allowed, 0 left",
        ]
    );
}

#[tokio::test]
async fn the_guard_transcript_line_for_line() {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    assert_eq!(
        example::guard_transcript(clock).await.unwrap(),
        [
            r#"200 "per-ip";r=1;t=30"#,
            r#"200 "per-ip";r=0;t=60"#,
            r#"429 "per-ip";r=0;t=30 30"#,
        ]
    );
}

/// Starts two copies of this test binary running this test alone, which
/// an environment variable turns into the example's worker: the worker is
/// no test of its own, so it cannot be counted as one that passed.
#[test]
fn two_processes_share_one_sqlite_file() {
    if let Some(result) = example::run_worker_if_asked() {
        result.expect("the worker failed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.db");
    let exe = std::env::current_exe().unwrap();
    let at = Timestamp::from_secs(1_800_000_000);
    for round in 0..3 {
        let key_time = Timestamp::from_secs(at.as_millis() / 1_000 + round * 3_600);
        let counts = example::run_processes(
            &exe,
            &[
                "--exact",
                "sqlite_shared_file::two_processes_share_one_sqlite_file",
                "--nocapture",
                "--test-threads=1",
            ],
            2,
            &path,
            key_time,
            40,
        )
        .unwrap();
        assert_eq!(counts.len(), 2);
        // 80 attempts at a limit of 50: exactly 50 admitted between them,
        // and each process took at least the 10 the other could not.
        assert_eq!(counts.iter().sum::<u64>(), 50, "round {round}: {counts:?}");
        assert!(counts.iter().all(|&n| n >= 10), "round {round}: {counts:?}");

        // The file agrees: nothing is left in this hour's window.
        let store = SqliteStore::builder(&path)
            .clock(ManualClock::new(key_time))
            .open()
            .unwrap();
        let left = block_on(store.peek(&example::shared_limit().unwrap(), b"alice")).unwrap();
        assert_eq!(left.remaining(), 0);
    }
}
