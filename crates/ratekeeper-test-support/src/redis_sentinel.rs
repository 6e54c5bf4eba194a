//! A Redis primary, its replica and three Sentinels watching them, each
//! a private process of the test, for the Redis store's failover tests.
//!
//! The Sentinels are `redis-server --sentinel` on a configuration file of
//! their own (Sentinel rewrites it), in a scratch directory removed on
//! drop.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::redis::{available, free_port, RedisServer};

/// The name the Sentinels know the primary by.
pub const MASTER_NAME: &str = "rk-primary";

/// A primary, a replica of it and three Sentinels, killed on drop.
pub struct SentinelSet {
    /// The servers: the primary first, then its replica (until a
    /// failover swaps their roles).
    pub servers: [RedisServer; 2],
    sentinels: Vec<(u16, Child)>,
    dir: tempfile::TempDir,
    /// The servers' `requirepass`, if they have one.
    password: Option<String>,
}

impl SentinelSet {
    /// Starts the set and waits until every Sentinel knows the replica, or
    /// `None` (after a loud message) when `redis-server` is missing
    /// outside CI.
    pub fn start() -> Option<SentinelSet> {
        SentinelSet::start_with(None)
    }

    /// [`start`](Self::start), the primary and replica asking for
    /// `password` (`requirepass`, `masterauth`), the Sentinels knowing it
    /// (`sentinel auth-pass`).
    pub fn start_with_password(password: &str) -> Option<SentinelSet> {
        SentinelSet::start_with(Some(password))
    }

    fn start_with(password: Option<&str>) -> Option<SentinelSet> {
        if !available("redis-server") {
            return None;
        }
        let auth: Vec<&str> = match password {
            Some(password) => vec!["--requirepass", password, "--masterauth", password],
            None => Vec::new(),
        };
        let primary = RedisServer::start_with_args(&auth)?;
        let primary_port = primary.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &primary_port];
        args.extend(&auth);
        let replica = RedisServer::start_with_args(&args)?;
        let dir = tempfile::tempdir().expect("a scratch directory");
        let mut set = SentinelSet {
            servers: [primary, replica],
            sentinels: Vec::new(),
            dir,
            password: password.map(str::to_owned),
        };
        for _ in 0..3 {
            set.spawn_sentinel();
        }
        set.wait_until("the replica synced", |set| {
            info_with(&set.servers[1], set.password.as_deref(), "replication")
                .contains("master_link_status:up")
        });
        set.wait_until("every Sentinel knows the replica", |set| {
            set.sentinel_ports().iter().all(|&port| {
                let replicas: redis::RedisResult<Vec<std::collections::HashMap<String, String>>> =
                    redis::cmd("SENTINEL")
                        .arg("REPLICAS")
                        .arg(MASTER_NAME)
                        .query(&mut sentinel_connection(port));
                replicas.is_ok_and(|replicas| {
                    replicas
                        .iter()
                        .any(|r| r.get("flags").is_some_and(|f| f == "slave"))
                })
            })
        });
        Some(set)
    }

    fn spawn_sentinel(&mut self) {
        let port = free_port();
        let config = self.dir.path().join(format!("sentinel-{port}.conf"));
        let text = format!(
            "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile sentinel-{port}.log\n\
             sentinel monitor {MASTER_NAME} 127.0.0.1 {primary} 2\n\
             sentinel down-after-milliseconds {MASTER_NAME} 2000\n\
             sentinel failover-timeout {MASTER_NAME} 10000\n{auth}",
            dir = self.dir.path().display(),
            primary = self.servers[0].port(),
            auth = match &self.password {
                Some(password) => format!("sentinel auth-pass {MASTER_NAME} {password}\n"),
                None => String::new(),
            },
        );
        std::fs::write(&config, text).expect("write a Sentinel's configuration");
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        self.sentinels.push((port, child));
        let deadline = Instant::now() + Duration::from_secs(10);
        let answers = || {
            try_sentinel_connection(port)
                .is_some_and(|mut c| redis::cmd("PING").query::<String>(&mut c).is_ok())
        };
        while !answers() {
            assert!(
                Instant::now() < deadline,
                "a Sentinel did not answer PING; its log is in {}",
                self.dir.path().display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The Sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|(port, _)| *port).collect()
    }

    /// The Sentinels' URLs, `redis://127.0.0.1:PORT`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// The port of the server the Sentinels name as the primary now.
    pub fn master_port(&self) -> u16 {
        let (_, port): (String, String) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query(&mut sentinel_connection(self.sentinel_ports()[0]))
            .expect("a Sentinel names the primary");
        port.parse().expect("a port")
    }

    /// Waits until the replica has everything the primary wrote: a
    /// failover then loses nothing.
    pub fn wait_for_replica_sync(&self) {
        let offset = |server: &RedisServer, field: &str| -> Option<u64> {
            info_with(server, self.password.as_deref(), "replication")
                .lines()
                .find_map(|line| line.strip_prefix(field)?.trim().parse().ok())
        };
        let primary = self.master_port();
        let (primary, replica) = match self.servers[0].port() == primary {
            true => (&self.servers[0], &self.servers[1]),
            false => (&self.servers[1], &self.servers[0]),
        };
        self.wait_until("the replica caught up", |_| {
            let written = offset(primary, "master_repl_offset:");
            written.is_some() && offset(replica, "master_repl_offset:") >= written
        });
    }

    /// The server the Sentinels name as the primary now.
    pub fn master(&self) -> &RedisServer {
        let port = self.master_port();
        self.servers
            .iter()
            .find(|server| server.port() == port)
            .expect("one of the set")
    }

    /// The server that is not [`master`](Self::master).
    pub fn replica(&self) -> &RedisServer {
        let port = self.master_port();
        self.servers
            .iter()
            .find(|server| server.port() != port)
            .expect("one of the set")
    }

    /// Asks a Sentinel to fail over now (the replica becomes the primary)
    /// and waits until the new primary takes writes and the old one is its
    /// replica.
    pub fn fail_over(&self) {
        let before = self.master_port();
        let _: String = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query(&mut sentinel_connection(self.sentinel_ports()[0]))
            .expect("a Sentinel starts a failover");
        self.wait_until("the Sentinels name the new primary", |set| {
            set.master_port() != before
        });
        let after = self.master_port();
        let server = |port: u16| {
            self.servers
                .iter()
                .find(|server| server.port() == port)
                .expect("one of the set")
        };
        self.wait_until("the new primary takes writes", |_| {
            info_with(server(after), self.password.as_deref(), "replication")
                .contains("role:master")
        });
        self.wait_until("the old primary is its replica", |_| {
            let replication = info_with(server(before), self.password.as_deref(), "replication");
            replication.contains("role:slave") && replication.contains("master_link_status:up")
        });
    }

    /// Kills the primary (SIGKILL), as a crash would, and waits until the
    /// Sentinels have promoted the replica and it takes writes. The dead
    /// server's place in [`servers`](Self::servers).
    pub fn kill_primary(&mut self) -> usize {
        let before = self.master_port();
        let dead = self
            .servers
            .iter()
            .position(|server| server.port() == before)
            .expect("one of the set");
        self.servers[dead].kill();
        self.wait_until("the Sentinels promote the replica", |set| {
            set.master_port() != before
        });
        self.wait_until("the new primary takes writes", |set| {
            info_with(set.master(), set.password.as_deref(), "replication").contains("role:master")
        });
        dead
    }

    /// Starts the server at `index` of [`servers`](Self::servers) again
    /// (empty: the test servers keep nothing on disk) and waits until the
    /// Sentinels have made it a replica of the primary, synced.
    pub fn restart_as_replica(&mut self, index: usize) {
        self.servers[index].restart();
        self.wait_until("the old primary is a replica again", |set| {
            let replication =
                info_with(&set.servers[index], set.password.as_deref(), "replication");
            replication.contains("role:slave") && replication.contains("master_link_status:up")
        });
    }

    fn wait_until(&self, what: &str, done: impl Fn(&SentinelSet) -> bool) {
        // Generous: Sentinels talk every second or so, and a loaded
        // machine stretches that.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done(self) {
            assert!(Instant::now() < deadline, "{what}: not within 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for SentinelSet {
    fn drop(&mut self) {
        for (_, child) in &mut self.sentinels {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn sentinel_connection(port: u16) -> redis::Connection {
    try_sentinel_connection(port).expect("connect to a test Sentinel")
}

fn try_sentinel_connection(port: u16) -> Option<redis::Connection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .ok()?
        .get_connection_with_timeout(Duration::from_secs(2))
        .ok()
}

/// `INFO section` of `server` (authenticated with `password`), empty
/// when it does not answer.
fn info_with(server: &RedisServer, password: Option<&str>, section: &str) -> String {
    let url = match password {
        Some(password) => format!("redis://:{password}@127.0.0.1:{}", server.port()),
        None => server.url(),
    };
    let Ok(client) = redis::Client::open(url) else {
        return String::new();
    };
    let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
        return String::new();
    };
    redis::cmd("INFO")
        .arg(section)
        .query(&mut connection)
        .unwrap_or_default()
}
