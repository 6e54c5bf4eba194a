//! Decisions per second of the SQLite store, on a file in a temporary
//! directory: from one process (blocking and async APIs; the allow path
//! with a huge quota, the deny path, a read-only peek), and from four
//! processes deciding on one file at once.
//!
//! The four-process case runs this bench binary itself as workers: with
//! `BENCH_WORKER_DB` set, `main` opens the store, says `ready`, and then
//! for each number `n` read from stdin does `n` decisions and says `done`.
//! The workers are started once; each measurement hands every worker a
//! quarter of the iterations and times from the hand-out to the last
//! `done`, so process start-up is not measured.

use futures_executor::block_on;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use ratekeeper::{Gcra, Limit, Store};
use ratekeeper_sqlite::SqliteStore;

/// Set in a worker's environment to the database's path.
const WORKER_DB: &str = "RATEKEEPER_SQLITE_BENCH_WORKER_DB";
const PROCESSES: usize = 4;

/// A quota no benchmark can use up: a billion a second.
fn huge() -> Limit {
    Limit::new(
        "huge",
        Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).unwrap(),
    )
    .unwrap()
}

fn open(path: &Path) -> SqliteStore {
    SqliteStore::builder(path)
        .busy_timeout(Duration::from_secs(30))
        .open()
        .unwrap()
}

/// A worker process: decides on the huge limit as told on stdin.
fn worker(path: &Path) {
    let store = open(path);
    let limit = huge();
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    for line in std::io::stdin().lock().lines() {
        let n: u64 = line.unwrap().trim().parse().unwrap();
        for _ in 0..n {
            // Every worker on the same key: the worst case.
            let outcome = block_on(store.check(&limit, b"k", 1)).unwrap();
            assert!(outcome.is_allowed());
        }
        writeln!(out, "done").unwrap();
        out.flush().unwrap();
    }
}

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(path: &Path) -> Worker {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(WORKER_DB, path)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut worker = Worker {
            child,
            stdin,
            stdout,
        };
        worker.expect("ready");
        worker
    }

    fn expect(&mut self, word: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), word, "the worker said {line:?}");
    }
}

fn single_process(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir.path().join("one.db"));
    let huge = huge();
    let tight = Limit::new("tight", Gcra::per_hour(1).unwrap()).unwrap();
    assert!(block_on(store.check(&tight, b"k", 1)).unwrap().is_allowed());

    let mut group = c.benchmark_group("sqlite/1 process");
    group.throughput(Throughput::Elements(1));
    group.bench_function("check allowed (blocking)", |b| {
        b.iter(|| block_on(store.check(&huge, b"k", 1)).unwrap())
    });
    group.bench_function("check denied (blocking)", |b| {
        b.iter(|| block_on(store.check(&tight, b"k", 1)).unwrap())
    });
    group.bench_function("peek (blocking)", |b| {
        b.iter(|| block_on(store.peek(&huge, b"k")).unwrap())
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    group.bench_function("check allowed (async, spawn_blocking)", |b| {
        b.iter(|| runtime.block_on(store.check(&huge, b"k", 1)).unwrap())
    });
    group.finish();
}

fn four_processes(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("four.db");
    drop(open(&path));
    let mut workers: Vec<Worker> = (0..PROCESSES).map(|_| Worker::start(&path)).collect();

    let mut group = c.benchmark_group(format!("sqlite/{PROCESSES} processes"));
    group.throughput(Throughput::Elements(1));
    group.bench_function("check allowed (blocking)", |b| {
        b.iter_custom(|iters| {
            let share = iters.div_ceil(PROCESSES as u64);
            let started = Instant::now();
            for worker in &mut workers {
                writeln!(worker.stdin, "{share}").unwrap();
                worker.stdin.flush().unwrap();
            }
            for worker in &mut workers {
                worker.expect("done");
            }
            // Report the time per `iters` decisions, though a few more were
            // made when `iters` does not divide evenly.
            started
                .elapsed()
                .mul_f64(iters as f64 / (share * PROCESSES as u64) as f64)
        })
    });
    group.finish();
    for worker in workers {
        let Worker {
            mut child, stdin, ..
        } = worker;
        drop(stdin);
        child.wait().unwrap();
    }
}

fn main() {
    if let Some(path) = std::env::var_os(WORKER_DB) {
        worker(path.as_ref());
        return;
    }
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    single_process(&mut c);
    four_processes(&mut c);
    c.final_summary();
}
