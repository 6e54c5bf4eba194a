//! Instructions per call inside `redis-server`, counted by valgrind's
//! callgrind: unlike µs of Redis CPU (`INFO commandstats`), which swing with
//! the state of a shared VM by 2x or more, instruction counts do not move
//! with the machine's load, so they can guide the script's optimization.
//!
//! For each call (PING, INCR, `EVALSHA` of `return 1`, a script doing only
//! `TIME` + `GET` + `SET key v PX ttl`, the same with the write as `PSETEX`,
//! `SET ... PXAT` and `SET ... KEEPTTL`, a typical float GCRA script, and
//! ratekeeper's script for every policy, allowed and denied, and allowed on
//! one hot key for GCRA, the token bucket and the sliding window) it:
//!
//! 1. runs a warm-up against a `redis-server` started under
//!    `valgrind --tool=callgrind`, zeroes the counters
//!    (`callgrind_control -z`), runs `N` calls one at a time on one
//!    connection, dumps the counters (`callgrind_control -d`), and prints
//!    the instructions per call of the whole server process ("process":
//!    reading, parsing, the command, the reply, the event loop; less
//!    `serverCron`, whose timer-driven share valgrind's slowdown inflates) and of
//!    `processCommand` inclusive ("command": what `INFO commandstats`
//!    times, plus the command lookup);
//! 2. then runs the same calls against a native `redis-server` and prints
//!    `usec_per_call` from `INFO commandstats` (best of three rounds), for
//!    reference only: those µs move with the machine.
//!
//! Run it through `crates/ratekeeper-redis/scripts/callgrind-redis.sh`, or:
//!
//! ```sh
//! cargo run --release -p ratekeeper-redis --example callgrind -- [calls] [--keep DIR]
//! ```
//!
//! `--keep DIR` keeps the callgrind dumps (one per call kind, named after
//! it) for `callgrind_annotate`. `RATEKEEPER_CALLGRIND_ONLY=a,b` runs only
//! the calls whose names contain `a` or `b`; compare such runs only with
//! runs of the same selection: the keys earlier calls leave in the server
//! (the floors' 1,000) change what the dictionary work of later ones costs
//! by up to ~1.5k instructions per call.

use ratekeeper_test_support::redis as harness;
#[path = "../benches/common/limits.rs"]
mod limits;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use harness::RedisServer;
use ratekeeper::{Gcra, Limit, Policy, SlidingWindow, Store, TokenBucket};
use ratekeeper_redis::RedisStore;
use redis::aio::MultiplexedConnection;
use tokio::runtime::Runtime;

/// `TIME`, `GET` and `SET key v PX ttl`: the least any script reading
/// Redis's clock and reading and writing a key with an expiry does.
const FLOOR: &str = r#"
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)
return 1
"#;

/// The floor's write as `PSETEX key ttl v` (what the store writes when it
/// sets an expiry) and as `SET key v PXAT when` (an absolute expiry, which
/// Redis 7.0 rewrites for propagation just the same).
const FLOOR_PSETEX: &str = r#"
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('PSETEX', KEYS[1], 60000, ARGV[1])
return 1
"#;
const FLOOR_PXAT: &str = r#"
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', t[1] * 1000 + 60000)
return 1
"#;
/// The floor's write keeping the key's TTL (`SET key v KEEPTTL`).
const FLOOR_KEEPTTL: &str = r#"
local t = redis.call('TIME')
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
return 1
"#;

/// A typical GCRA script of the kind found in blog posts: numbers as
/// strings, seconds as floats, `GET` of the theoretical arrival time, `TIME`,
/// `SET ... PX`, a table reply.
const NAIVE_GCRA: &str = r#"
local burst = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local period = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
local interval = period / rate
local tolerance = interval * burst
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat or tat < now then tat = now end
local new_tat = tat + interval * cost
local allow_at = new_tat - tolerance
local diff = now - allow_at
local remaining = math.floor(diff / interval)
if remaining < 0 then
  return {0, 0, tostring(-diff), tostring(tat - now)}
end
local reset = new_tat - now
redis.call('SET', KEYS[1], tostring(new_tat), 'PX', math.ceil(reset * 1000))
return {1, remaining, '-1', tostring(reset)}
"#;

/// One kind of call: its name, the command `INFO commandstats` counts it
/// under, and how to make call number `i`.
struct Case {
    name: String,
    command: &'static str,
    call: Call,
}

enum Call {
    Ping,
    Incr,
    Script(redis::Script, Args),
    /// A Redis 7 function: its library's source and name.
    Function(String, &'static str, Args),
    /// A check that is allowed (true) or denied; allowed checks cycle over
    /// 1,000 keys unless `Keys::One`.
    Check(Limit, bool, Keys),
    /// `width` allowed checks made at once, per call, on the store's
    /// default [`Batching`](ratekeeper_redis::Batching): the first few go
    /// at once, each its own script, the rest wait and go together.
    Concurrent(Limit, u64, Keys),
    /// ratekeeper's script by EVALSHA (what the store runs on servers
    /// without functions): the GCRA limit's emission interval (ns) and
    /// burst, and whether calls are allowed.
    CheckEvalsha(f64, f64, bool),
}

#[derive(Clone, Copy, PartialEq)]
enum Keys {
    /// 1,000 keys in turn: each key is idle (expired, under valgrind) when
    /// it comes round again, so every call starts from a fresh state.
    Many,
    /// One key, hit by every call: a hot key's steady state.
    One,
}

#[derive(Clone, Copy)]
enum Args {
    None,
    Floor,
    NaiveGcra,
}

fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case {
            name: "PING".into(),
            command: "ping",
            call: Call::Ping,
        },
        Case {
            name: "INCR".into(),
            command: "incr",
            call: Call::Incr,
        },
        Case {
            name: "EVALSHA return 1".into(),
            command: "evalsha",
            call: Call::Script(redis::Script::new("return 1"), Args::None),
        },
        Case {
            name: "EVALSHA TIME+GET+SET PX".into(),
            command: "evalsha",
            call: Call::Script(redis::Script::new(FLOOR), Args::Floor),
        },
        Case {
            name: "EVALSHA naive float GCRA".into(),
            command: "evalsha",
            call: Call::Script(redis::Script::new(NAIVE_GCRA), Args::NaiveGcra),
        },
        Case {
            name: "FCALL return 1".into(),
            command: "fcall",
            call: Call::Function(function("one", "return 1"), "one", Args::None),
        },
        Case {
            name: "FCALL TIME+GET+SET PX".into(),
            command: "fcall",
            call: Call::Function(function("floor", FLOOR), "floor", Args::Floor),
        },
        Case {
            name: "FCALL TIME+GET+PSETEX".into(),
            command: "fcall",
            call: Call::Function(function("psetex", FLOOR_PSETEX), "psetex", Args::Floor),
        },
        Case {
            name: "FCALL TIME+GET+SET PXAT".into(),
            command: "fcall",
            call: Call::Function(function("pxat", FLOOR_PXAT), "pxat", Args::Floor),
        },
        Case {
            name: "FCALL TIME+GET+SET KEEPTTL".into(),
            command: "fcall",
            call: Call::Function(function("keepttl", FLOOR_KEEPTTL), "keepttl", Args::Floor),
        },
        Case {
            name: "ratekeeper gcra allowed, EVALSHA".into(),
            command: "evalsha",
            call: Call::CheckEvalsha(1_000.0, 1e6, true),
        },
        Case {
            name: "ratekeeper gcra denied, EVALSHA".into(),
            command: "evalsha",
            call: Call::CheckEvalsha(3.6e12, 1.0, false),
        },
    ];
    for (name, allow, deny) in limits::limits() {
        for (label, limit, allowed) in [("allowed", allow, true), ("denied", deny, false)] {
            cases.push(Case {
                name: format!("ratekeeper {name} {label}"),
                // FCALL on Redis 7; EVALSHA before
                command: "fcall",
                call: Call::Check(limit, allowed, Keys::Many),
            });
        }
    }
    for (name, limit) in hot_limits() {
        cases.push(Case {
            name: format!("ratekeeper {name} allowed, one key"),
            command: "fcall",
            call: Call::Check(limit, true, Keys::One),
        });
    }
    // Calls made at once share scripts: instructions per decision.
    for (name, allow, _) in limits::limits() {
        for width in [16, 64] {
            cases.push(Case {
                name: format!("ratekeeper {name} allowed, {width} at once"),
                command: "fcall",
                call: Call::Concurrent(allow.clone(), width, Keys::Many),
            });
        }
    }
    for (name, limit) in hot_limits() {
        cases.push(Case {
            name: format!("ratekeeper {name} allowed, 64 at once on one key"),
            command: "fcall",
            call: Call::Concurrent(limit, 64, Keys::One),
        });
    }
    // RATEKEEPER_CALLGRIND_ONLY=a,b keeps the cases whose names contain a
    // or b (a quicker run while trying a change).
    if let Ok(only) = std::env::var("RATEKEEPER_CALLGRIND_ONLY") {
        let only: Vec<&str> = only.split(',').collect();
        cases.retain(|case| only.iter().any(|o| case.name.contains(o)));
    }
    cases
}

/// Limits for one hot key that every call hits and none exhausts: each call
/// takes 1 ms of a burst of a million, so the state stays well ahead of
/// Redis's clock (about 40 s by the end of a run) and the key stays alive.
fn hot_limits() -> Vec<(&'static str, Limit)> {
    let limit = |name: &str, policy: Policy| Limit::new(format!("{name}-hot"), policy).unwrap();
    vec![
        (
            "gcra",
            limit(
                "gcra",
                Gcra::new(1_000, Duration::from_secs(1), 1_000_000)
                    .unwrap()
                    .into(),
            ),
        ),
        (
            "token_bucket",
            limit(
                "token_bucket",
                TokenBucket::new(1_000, Duration::from_secs(1), 1_000_000)
                    .unwrap()
                    .into(),
            ),
        ),
        (
            "sliding_window",
            limit(
                "sliding_window",
                SlidingWindow::new(1 << 20, Duration::from_secs(3_600))
                    .unwrap()
                    .into(),
            ),
        ),
    ]
}

/// A library of one function, `name`, running `body` with `KEYS` and `ARGV`.
fn function(name: &str, body: &str) -> String {
    format!(
        "#!lua name={name}\nredis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n"
    )
}

/// ratekeeper's argument for one check of one GCRA limit on Redis's clock
/// (see the script's header).
fn gcra_argument(interval_ns: f64, burst: f64) -> Vec<u8> {
    let mut arg = vec![1u8];
    for x in [1.0, 0.0] {
        arg.extend_from_slice(&f64::to_le_bytes(x));
    }
    arg.push(2);
    for x in [interval_ns, burst, 0.0] {
        arg.extend_from_slice(&f64::to_le_bytes(x));
    }
    arg
}

impl Case {
    /// How many decisions one call makes.
    fn decisions(&self) -> u64 {
        match &self.call {
            Call::Concurrent(_, width, _) => *width,
            _ => 1,
        }
    }

    /// `n` calls' worth of decisions, in calls of this case (at least 20).
    fn calls_for(&self, n: u64) -> u64 {
        (n / self.decisions()).max(20)
    }

    /// Runs calls `from..to`, one at a time.
    async fn run(&self, con: &mut MultiplexedConnection, store: &RedisStore, from: u64, to: u64) {
        for i in from..to {
            let key = format!("k{}", i % 1_000);
            match &self.call {
                Call::Ping => {
                    let _: String = redis::cmd("PING").query_async(con).await.unwrap();
                }
                Call::Incr => {
                    let _: i64 = redis::cmd("INCR").arg(&key).query_async(con).await.unwrap();
                }
                Call::Script(script, args) => {
                    let mut invocation = script.prepare_invoke();
                    match args {
                        Args::None => {}
                        Args::Floor => {
                            invocation.key(&key).arg(i);
                        }
                        Args::NaiveGcra => {
                            // 1,000,000 per second, a burst of 1,000,000:
                            // every call allowed.
                            invocation
                                .key(format!("naive:{key}"))
                                .arg(1_000_000)
                                .arg(1_000_000)
                                .arg(1)
                                .arg(1);
                        }
                    }
                    let _: redis::Value = invocation.invoke_async(con).await.unwrap();
                }
                Call::Function(library, name, args) => {
                    if i == from {
                        let _: String = redis::cmd("FUNCTION")
                            .arg("LOAD")
                            .arg("REPLACE")
                            .arg(library)
                            .query_async(con)
                            .await
                            .unwrap();
                    }
                    let mut fcall = redis::cmd("FCALL");
                    fcall.arg(name);
                    match args {
                        Args::Floor => fcall.arg(1).arg(&key).arg(i),
                        _ => fcall.arg(0),
                    };
                    let _: redis::Value = fcall.query_async(con).await.unwrap();
                }
                Call::CheckEvalsha(interval, burst, allowed) => {
                    let key = if *allowed {
                        format!("ratekeeper:evalsha-allow:{key}")
                    } else {
                        "ratekeeper:evalsha-deny:k".to_owned()
                    };
                    let reply: Vec<u8> = redis::Script::new(ratekeeper_redis::internals::SCRIPT)
                        .key(key)
                        .arg(gcra_argument(*interval, *burst))
                        .invoke_async(con)
                        .await
                        .unwrap();
                    if i > 0 {
                        assert_eq!(reply[..8], f64::to_le_bytes(f64::from(u8::from(*allowed))));
                    }
                }
                Call::Concurrent(limit, width, keys) => {
                    let mut checks = tokio::task::JoinSet::new();
                    for j in 0..*width {
                        let key = match keys {
                            Keys::Many => format!("k{}", (i * width + j) % 1_000),
                            Keys::One => "k".to_owned(),
                        };
                        let (store, limit) = (store.clone(), limit.clone());
                        checks.spawn(async move { store.check(&limit, key.as_bytes(), 1).await });
                    }
                    while let Some(outcome) = checks.join_next().await {
                        assert!(outcome.unwrap().unwrap().is_allowed(), "{}", self.name);
                    }
                }
                Call::Check(limit, allowed, keys) => {
                    let key = if *allowed && *keys == Keys::Many {
                        key.as_str()
                    } else {
                        "k"
                    };
                    let outcome = store.check(limit, key.as_bytes(), 1).await.unwrap();
                    // The first call on the denying key is allowed; the
                    // warm-up takes it.
                    if i > 0 {
                        assert_eq!(outcome.is_allowed(), *allowed, "{}", self.name);
                    }
                }
            }
        }
    }
}

/// A `redis-server` under callgrind, killed on drop.
struct Valgrind {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Valgrind {
    fn start(dir: &Path) -> Valgrind {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let child = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!(
                "--callgrind-out-file={}/callgrind.out.%p",
                dir.display()
            ))
            .arg("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("valgrind is installed (apt-get install -y valgrind)");
        let server = Valgrind {
            child,
            port,
            dir: dir.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok(mut c) = redis::Client::open(server.url())
                .unwrap()
                .get_connection_with_timeout(Duration::from_secs(1))
            {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return server;
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("redis-server under valgrind did not answer");
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn control(&self, flag: &str) {
        let status = Command::new("callgrind_control")
            .arg(flag)
            .arg(self.child.id().to_string())
            .stdout(Stdio::null())
            .status()
            .expect("callgrind_control runs");
        assert!(status.success(), "callgrind_control {flag} failed");
    }

    /// The newest dump file.
    fn last_dump(&self) -> PathBuf {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("callgrind.out.")
            })
            .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
            .expect("a callgrind dump")
            .path()
    }
}

impl Drop for Valgrind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The instructions of a dump: the whole process less `serverCron`
/// (inclusive), and `processCommand` inclusive.
///
/// `serverCron` runs 10 times a second whatever the load (active expiry,
/// statistics): under valgrind's slowdown its share per call is some 50
/// times what it is natively, so it is left out.
fn instructions(dump: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(dump).unwrap();
    let total: u64 = text
        .lines()
        .find_map(|l| {
            l.strip_prefix("summary:")
                .or_else(|| l.strip_prefix("totals:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("a summary line in the dump");
    let annotated = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(dump)
        .output()
        .expect("callgrind_annotate runs");
    let annotated = String::from_utf8_lossy(&annotated.stdout);
    let inclusive = |function: &str| -> u64 {
        let name = format!(":{function}");
        annotated
            .lines()
            .find(|l| l.split_whitespace().any(|w| w.ends_with(&name)))
            .and_then(|l| l.split_whitespace().next()?.replace(',', "").parse().ok())
            .unwrap_or(0)
    };
    (
        total.saturating_sub(inclusive("serverCron")),
        inclusive("processCommand"),
    )
}

fn connect(rt: &Runtime, url: &str) -> (MultiplexedConnection, RedisStore) {
    rt.block_on(async {
        let client = redis::Client::open(url).unwrap();
        let con = client.get_multiplexed_async_connection().await.unwrap();
        let store = RedisStore::builder()
            .timeout(Duration::from_secs(30))
            .connect(url)
            .await
            .unwrap();
        (con, store)
    })
}

fn main() {
    let mut calls = 2_000u64;
    let mut keep = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keep" => keep = Some(PathBuf::from(args.next().expect("--keep DIR"))),
            n => calls = n.parse().expect("usage: callgrind [calls] [--keep DIR]"),
        }
    }
    let warm_up = 1_000;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("ratekeeper-callgrind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(keep) = &keep {
        std::fs::create_dir_all(keep).unwrap();
    }

    let cases = cases();
    let mut counted = Vec::new();
    {
        let server = Valgrind::start(&dir);
        let (mut con, store) = connect(&rt, &server.url());
        for case in &cases {
            let (warm_up, calls) = (case.calls_for(warm_up), case.calls_for(calls));
            rt.block_on(case.run(&mut con, &store, 0, warm_up));
            server.control("-z");
            rt.block_on(case.run(&mut con, &store, warm_up, warm_up + calls));
            server.control("-d");
            let dump = server.last_dump();
            let (total, command) = instructions(&dump);
            if let Some(keep) = &keep {
                let name = case.name.replace([' ', '+'], "_");
                std::fs::copy(&dump, keep.join(format!("{name}.callgrind"))).unwrap();
            }
            let decisions = calls * case.decisions();
            counted.push((total / decisions, command / decisions));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);

    // The same calls on a native server, for INFO commandstats' µs.
    let server = RedisServer::start().expect("redis-server is installed");
    let (mut con, store) = connect(&rt, &server.url());
    let native_calls = 10_000;
    let mut usec = vec![f64::INFINITY; cases.len()];
    for round in 0..3 {
        for (case, best) in cases.iter().zip(&mut usec) {
            let (warm_up, native_calls) = (case.calls_for(warm_up), case.calls_for(native_calls));
            let from = warm_up + round * native_calls;
            rt.block_on(case.run(&mut con, &store, 0, warm_up));
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut server.connection())
                .unwrap();
            rt.block_on(case.run(&mut con, &store, from, from + native_calls));
            let (n, us) = server.command_stats(case.command);
            let decisions = match case.call {
                Call::Concurrent(..) => native_calls * case.decisions(),
                _ => n,
            };
            *best = best.min(us as f64 / decisions.max(1) as f64);
        }
    }

    println!(
        "{} calls per case under callgrind ({} warm-up); µs: best of 3 x {} native calls",
        calls, warm_up, native_calls
    );
    println!("(for calls made at once: per decision, however many scripts decided them)");
    println!("| call | instructions per call (process) | in processCommand | usec_per_call |");
    println!("|---|---:|---:|---:|");
    for ((case, (total, command)), us) in cases.iter().zip(counted).zip(usec) {
        println!(
            "| {} | {} | {} | {:.2} µs |",
            case.name,
            thousands(total),
            thousands(command),
            us
        );
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
