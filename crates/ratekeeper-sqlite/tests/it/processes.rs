//! Several processes, and several threads, on one file and one key admit
//! exactly the quota.
//!
//! The test re-runs its own binary as workers: `processes_share_one_file`
//! starts `WORKERS` copies of this test binary running only itself, with
//! `WORKER_DB` naming the database, which makes it a [`worker`] instead.
//! Each worker hammers one key under each of the five policies and prints
//! how many requests were allowed; the parent adds them up. The worker is
//! no test of its own, so it cannot be counted as one that passed.
//!
//! Every process reads the same frozen time from a manual clock, so the
//! windows never roll over mid-test and nothing refills; the workers wait
//! for a line on their standard input, so they start hammering together.

use futures_executor::block_on;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ratekeeper::{
    clock::ManualClock, store::StoreError, FixedWindow, Gcra, Limit, Policy, SlidingLog,
    SlidingWindow, Store, Timestamp, TokenBucket,
};
use ratekeeper_sqlite::SqliteStore;

/// Set in a worker's environment to the database's path.
const WORKER_DB: &str = "RATEKEEPER_SQLITE_TEST_WORKER_DB";

/// The time every process reads: mid-afternoon, mid-window.
const FROZEN: Timestamp = Timestamp::from_secs(1_700_000_000);

const WORKERS: usize = 4;
const CHECKS: usize = 200;
const QUOTA: u64 = 150;
const DAY: Duration = Duration::from_secs(24 * 60 * 60);
/// How long the whole test may take before the workers are killed.
const DEADLINE: Duration = Duration::from_secs(60);

/// Five limits of 150 a day, one per policy: nothing refills during the
/// test.
fn limits() -> Vec<Limit> {
    let policies: [Policy; 5] = [
        TokenBucket::new(QUOTA, DAY, QUOTA).unwrap().into(),
        Gcra::new(QUOTA, DAY, QUOTA).unwrap().into(),
        FixedWindow::new(QUOTA, DAY).unwrap().into(),
        SlidingLog::new(QUOTA, DAY).unwrap().into(),
        SlidingWindow::new(QUOTA, DAY).unwrap().into(),
    ];
    policies
        .into_iter()
        .map(|policy| Limit::new(policy.kind().name(), policy).unwrap())
        .collect()
}

/// Checks one key under every limit `CHECKS` times, interleaved, and counts
/// per limit what was allowed and what failed.
fn hammer(store: &SqliteStore<ManualClock>, limits: &[Limit]) -> Vec<(usize, usize)> {
    let mut counts = vec![(0, 0); limits.len()];
    for _ in 0..CHECKS {
        for (limit, (allowed, errors)) in limits.iter().zip(&mut counts) {
            match block_on(store.check(limit, b"the-key", 1)) {
                Ok(outcome) => *allowed += usize::from(outcome.is_allowed()),
                Err(error) => {
                    eprintln!("{}: {error}", limit.name());
                    *errors += 1;
                }
            }
        }
    }
    counts
}

fn open(path: &std::path::Path) -> SqliteStore<ManualClock> {
    SqliteStore::builder(path)
        .clock(ManualClock::new(FROZEN))
        // Generous: the workers contend on one file; the test is bounded by
        // DEADLINE anyway.
        .busy_timeout(Duration::from_secs(20))
        .open()
        .unwrap()
}

/// The worker's body, in a process started by `processes_share_one_file`
/// with the database at `path`.
fn worker(path: &str) {
    let store = open(path.as_ref());
    let limits = limits();
    // The starting signal: one line from the parent.
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    for (limit, (allowed, errors)) in limits.iter().zip(hammer(&store, &limits)) {
        println!("RESULT {} {allowed} {errors}", limit.name());
    }
}

/// Reads `child`'s results and waits for it to exit.
fn results(mut child: Child) -> String {
    let mut stdout = String::new();
    let reader = BufReader::new(child.stdout.take().unwrap());
    for line in reader.lines() {
        // libtest may print "test worker ... " on the same line.
        let line = line.unwrap();
        if let Some(at) = line.find("RESULT ") {
            stdout.push_str(&line[at..]);
            stdout.push('\n');
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "a worker failed: {status}");
    stdout
}

/// Kills the processes `pids` unless `done` is signalled within DEADLINE,
/// so a hung worker fails the test instead of hanging it.
fn watchdog(pids: Vec<u32>) -> mpsc::Sender<()> {
    let (done, finished) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if finished.recv_timeout(DEADLINE) == Err(mpsc::RecvTimeoutError::Timeout) {
            for pid in pids {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
    });
    done
}

#[test]
fn processes_share_one_file() {
    if let Ok(path) = std::env::var(WORKER_DB) {
        worker(&path);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // Create the file and table first, as a service would.
    drop(open(&path));

    let started = Instant::now();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<Child> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "processes::processes_share_one_file",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_DB, &path)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let done = watchdog(children.iter().map(Child::id).collect());
    // All started: let them go at once.
    for child in &mut children {
        writeln!(child.stdin.take().unwrap(), "go").unwrap();
    }
    let outputs: Vec<String> = children.into_iter().map(results).collect();
    let _ = done.send(());

    for limit in limits() {
        let mut allowed = 0;
        let mut per_worker = Vec::new();
        for output in &outputs {
            let line = output
                .lines()
                .find(|line| line.split(' ').nth(1) == Some(limit.name()))
                .unwrap_or_else(|| panic!("no result for {} in {output:?}", limit.name()));
            let fields: Vec<usize> = line
                .split(' ')
                .skip(2)
                .map(|n| n.parse().unwrap())
                .collect();
            assert_eq!(fields[1], 0, "{}: a worker had errors", limit.name());
            allowed += fields[0];
            per_worker.push(fields[0]);
        }
        assert_eq!(
            allowed as u64,
            QUOTA,
            "{}: allowed {per_worker:?}",
            limit.name()
        );
        eprintln!("{}: allowed per worker {per_worker:?}", limit.name());
    }
    eprintln!(
        "{WORKERS} processes x {CHECKS} checks x 5 policies in {:?}",
        started.elapsed()
    );
}

#[test]
fn threads_share_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.db");
    let shared = open(&path);
    let limits = limits();
    let counts: Vec<Vec<(usize, usize)>> = std::thread::scope(|scope| {
        // Four threads on one store (one connection), four on a store each.
        let handles: Vec<_> = (0..8)
            .map(|thread| {
                let (shared, limits, path) = (&shared, &limits, &path);
                scope.spawn(move || {
                    if thread < 4 {
                        hammer(shared, limits)
                    } else {
                        hammer(&open(path), limits)
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (index, limit) in limits.iter().enumerate() {
        let allowed: usize = counts.iter().map(|c| c[index].0).sum();
        let errors: usize = counts.iter().map(|c| c[index].1).sum();
        assert_eq!(errors, 0, "{}", limit.name());
        assert_eq!(allowed as u64, QUOTA, "{}", limit.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("tasks.db"));
    let limit = Limit::new("gcra", Gcra::new(QUOTA, DAY, QUOTA).unwrap()).unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                let mut allowed = 0;
                for _ in 0..50 {
                    let outcome: Result<_, StoreError> =
                        ratekeeper::Store::check(&store, &limit, b"k", 1).await;
                    allowed += u64::from(outcome.unwrap().is_allowed());
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap();
    }
    assert_eq!(allowed, QUOTA);
}
