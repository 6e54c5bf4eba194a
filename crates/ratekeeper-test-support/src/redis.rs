//! Private `redis-server` processes on free loopback ports, stopped when
//! dropped, and Redis Clusters made of them.
//!
//! When `redis-server` is not installed the tests are skips, shown and
//! counted by [`crate::skip`], except under `CI=true`, where a missing
//! server fails them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The store timeout of every test call whose timing is not under test: a
/// loaded 2-core machine can stall a process for a good part of a second,
/// and such a stall must not fail a test about something else. (The store
/// builders that use it are in the Redis crate's tests, which this crate
/// does not depend on.)
pub const UNHURRIED: Duration = Duration::from_secs(10);

/// Whether `program --version` runs; when it does not, the running test
/// is a [`skip`](crate::skip) (a failure under CI).
pub fn available(program: &str) -> bool {
    let ok = Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        crate::skip::program_missing(program, "apt-get install -y redis-server redis-tools");
    }
    ok
}

/// A unique scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "ratekeeper-redis-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create a scratch directory");
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits, up to 20 s, until `is_ok` says every node of a cluster just
/// created reports `cluster_state:ok` (the nodes agree on the slots a
/// moment after `redis-cli --cluster create` returns); `what` names the
/// cluster in the failure.
pub fn wait_for_cluster_ok(what: &str, is_ok: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_ok() {
        assert!(Instant::now() < deadline, "{what} did not reach state ok");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A port that was free a moment ago, with `port + 10000` free too (for the
/// cluster bus).
pub fn free_port() -> u16 {
    for _ in 0..200 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().unwrap().port();
        if !(1_024..=55_000).contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
    panic!("no free port pair found");
}

/// A `redis-server` of this test, killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    cluster: bool,
    extra: Vec<String>,
    dir: Scratch,
}

impl RedisServer {
    /// Starts a standalone server, or `None` (after a loud message) when
    /// `redis-server` is missing outside CI.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(false, &[])
    }

    /// Starts a standalone server with more command-line arguments (for
    /// example `["--rename-command", "FCALL", ""]`).
    pub fn start_with_args(args: &[&str]) -> Option<RedisServer> {
        Self::start_with(false, args)
    }

    /// Starts a server with `cluster-enabled yes`.
    pub fn start_cluster_node() -> Option<RedisServer> {
        Self::start_with(true, &[])
    }

    fn start_with(cluster: bool, args: &[&str]) -> Option<RedisServer> {
        if !available("redis-server") {
            return None;
        }
        for _ in 0..5 {
            let mut server = RedisServer {
                child: None,
                port: free_port(),
                cluster,
                extra: args.iter().map(|a| a.to_string()).collect(),
                dir: Scratch::new(),
            };
            if server.spawn().is_ok() {
                return Some(server);
            }
        }
        panic!("redis-server did not start");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir.0)
            .args(["--logfile", &format!("redis-{}.log", self.port)]);
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args([
                    "--cluster-config-file",
                    &format!("nodes-{}.conf", self.port),
                ])
                // A node that misses heartbeats this long is marked failed
                // and the cluster answers CLUSTERDOWN: on a loaded machine
                // (every core busy) a node can stall for seconds, and no
                // test here is about failure detection.
                .args(["--cluster-node-timeout", "30000"]);
        }
        command.args(&self.extra);
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ping() {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("redis-server exited: {status}"));
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
        Err("redis-server did not answer PING".into())
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server is running").id()
    }

    /// Whether the server answers PING within 200 ms (a server with
    /// `requirepass` answers it `NOAUTH`, which counts).
    pub fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(
            &([127, 0, 0, 1], self.port).into(),
            Duration::from_millis(200),
        ) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 7];
        stream.read_exact(&mut buf).is_ok() && (&buf == b"+PONG\r\n" || &buf == b"-NOAUTH")
    }

    /// Kills the server (SIGKILL) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("restart failed: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Freezes the process (SIGSTOP): it keeps its connections but answers
    /// nothing.
    pub fn pause(&self) {
        signal(self.pid(), "-STOP");
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid(), "-CONT");
    }

    /// A synchronous connection for inspecting the server.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection()
            .expect("connect to the test server")
    }

    /// The server process's CPU time so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let info: String = redis::cmd("INFO")
            .arg("cpu")
            .query(&mut self.connection())
            .unwrap();
        info.lines()
            .filter(|l| l.starts_with("used_cpu_user:") || l.starts_with("used_cpu_sys:"))
            .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
            .sum()
    }

    /// `INFO commandstats`: calls and total µs of `command` (lower case).
    pub fn command_stats(&self, command: &str) -> (u64, u64) {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection())
            .unwrap();
        let prefix = format!("cmdstat_{command}:");
        let line = info.lines().find(|l| l.starts_with(&prefix));
        let Some(line) = line else { return (0, 0) };
        let field = |name: &str| {
            line[prefix.len()..]
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("calls"), field("usec"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_ref() {
            // A stopped process dies of SIGKILL too; continue it anyway,
            // ignoring failures (never panic in a drop).
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
        }
        self.kill();
    }
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid} failed");
}

/// Three masters joined into a Redis Cluster by `redis-cli --cluster create`.
pub struct RedisCluster {
    /// The masters, in the order their hash slots were assigned.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the cluster, or `None` (after a loud message) when
    /// `redis-server` or `redis-cli` is missing outside CI.
    pub fn start() -> Option<RedisCluster> {
        if !available("redis-server") || !available("redis-cli") {
            return None;
        }
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| RedisServer::start_cluster_node().expect("redis-server is available"))
            .collect();
        let mut command = Command::new("redis-cli");
        command.arg("--cluster").arg("create");
        for node in &nodes {
            command.arg(format!("127.0.0.1:{}", node.port()));
        }
        let output = command
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        wait_for_cluster_ok("the cluster", || cluster.is_ok());
        Some(cluster)
    }

    fn is_ok(&self) -> bool {
        self.nodes.iter().all(|node| {
            let info: redis::RedisResult<String> = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut node.connection());
            // Up, every slot served, and every node known to each.
            info.is_ok_and(|i| {
                i.contains("cluster_state:ok")
                    && i.contains("cluster_slots_ok:16384")
                    && i.contains(&format!("cluster_known_nodes:{}", self.nodes.len()))
            })
        })
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// A small deterministic generator (xorshift64*), so failures replay.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (zero is taken as one).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }

    /// The next number.
    #[allow(clippy::should_implement_trait)] // not an iterator: it never ends
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
