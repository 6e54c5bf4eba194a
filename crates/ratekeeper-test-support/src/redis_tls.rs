//! A `redis-server` that speaks only TLS (`--port 0 --tls-port P`), with a
//! certificate authority, server and client certificates made by rcgen for
//! this test in a temporary directory; killed, and the directory removed,
//! on drop; and a Redis Cluster of such servers.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::redis::{available, free_port, wait_for_cluster_ok};

/// PEM files made for one test: a CA, the server's certificate for
/// `127.0.0.1` and `localhost` signed by it, a client certificate signed by
/// it, and a second CA that signed nothing (the wrong CA).
pub struct TestCerts {
    dir: tempfile::TempDir,
}

impl Default for TestCerts {
    fn default() -> Self {
        TestCerts::new()
    }
}

impl TestCerts {
    /// Makes the certificates and writes them into a new temporary
    /// directory.
    pub fn new() -> TestCerts {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("write a PEM file")
        };
        let ca = authority("ratekeeper test CA");
        write("ca.pem", ca.pem());
        write("other-ca.pem", authority("ratekeeper unrelated CA").pem());
        let leaf = |names: Vec<String>, usages: Vec<ExtendedKeyUsagePurpose>, stem: &str| {
            let key = KeyPair::generate().expect("a key pair");
            let mut params = CertificateParams::new(names).expect("certificate parameters");
            params
                .distinguished_name
                .push(DnType::CommonName, format!("ratekeeper test {stem}"));
            params.extended_key_usages = usages;
            let cert = params.signed_by(&key, &ca).expect("sign the certificate");
            write(&format!("{stem}.pem"), cert.pem());
            write(&format!("{stem}.key"), key.serialize_pem());
        };
        // The server's certificate is also its client certificate on a
        // TLS cluster's bus.
        leaf(
            vec!["127.0.0.1".to_owned(), "localhost".to_owned()],
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
            "server",
        );
        leaf(vec![], vec![ExtendedKeyUsagePurpose::ClientAuth], "client");
        TestCerts { dir }
    }

    /// The path of one of the files: `ca.pem`, `other-ca.pem`,
    /// `server.pem`, `server.key`, `client.pem`, `client.key`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The contents of one of the files.
    pub fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).expect("read a PEM file")
    }

    /// The directory, for more files of the test.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }
}

/// A self-signed CA certificate and its key.
fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let key = KeyPair::generate().expect("a key pair");
    CertifiedIssuer::self_signed(params, key).expect("a self-signed CA")
}

/// A TLS-only `redis-server` that requires client certificates from
/// [`TestCerts`]' CA (redis-server's default, `tls-auth-clients yes`).
pub struct TlsRedisServer {
    child: Option<Child>,
    port: u16,
    certs: TestCerts,
}

impl TlsRedisServer {
    /// Starts the server, or `None` (after a loud message) when
    /// `redis-server` is missing outside CI. Panics when it does not start,
    /// for example when it was built without TLS.
    pub fn start() -> Option<TlsRedisServer> {
        if !available("redis-server") {
            return None;
        }
        let certs = TestCerts::new();
        let mut last = String::new();
        for _ in 0..5 {
            let port = {
                let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
                listener.local_addr().expect("its address").port()
            };
            match spawn(&certs, port, false) {
                Ok(child) => {
                    return Some(TlsRedisServer {
                        child: Some(child),
                        port,
                        certs,
                    })
                }
                // Another process may have taken the port meanwhile.
                Err(error) => last = error,
            }
        }
        panic!("the TLS redis-server did not start: {last}");
    }

    /// The TLS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:{port}`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// The certificates it was started with, and the client's.
    pub fn certs(&self) -> &TestCerts {
        &self.certs
    }
}

impl Drop for TlsRedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Three TLS-only masters (`tls-cluster yes`: the bus is TLS too) joined
/// by `redis-cli --tls --cluster create`, sharing one [`TestCerts`].
pub struct TlsRedisCluster {
    nodes: Vec<Child>,
    ports: Vec<u16>,
    certs: TestCerts,
}

impl TlsRedisCluster {
    /// Starts the cluster, or `None` (after a loud message) when
    /// `redis-server` or `redis-cli` is missing outside CI.
    pub fn start() -> Option<TlsRedisCluster> {
        if !available("redis-server") || !available("redis-cli") {
            return None;
        }
        let certs = TestCerts::new();
        let mut cluster = TlsRedisCluster {
            nodes: Vec::new(),
            ports: Vec::new(),
            certs,
        };
        for _ in 0..3 {
            let mut last = String::new();
            let started = (0..5).find_map(|_| {
                let port = free_port();
                match spawn(&cluster.certs, port, true) {
                    Ok(child) => Some((child, port)),
                    Err(error) => {
                        last = error;
                        None
                    }
                }
            });
            let (child, port) =
                started.unwrap_or_else(|| panic!("a TLS cluster node did not start: {last}"));
            cluster.nodes.push(child);
            cluster.ports.push(port);
        }
        let mut create = cluster.cli();
        create.args(["--cluster", "create"]);
        for port in &cluster.ports {
            create.arg(format!("127.0.0.1:{port}"));
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --tls --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        wait_for_cluster_ok("the TLS cluster", || cluster.is_ok());
        Some(cluster)
    }

    /// `redis-cli` over TLS with the client certificate.
    fn cli(&self) -> Command {
        let mut command = Command::new("redis-cli");
        command
            .arg("--tls")
            .arg("--cacert")
            .arg(self.certs.path("ca.pem"))
            .arg("--cert")
            .arg(self.certs.path("client.pem"))
            .arg("--key")
            .arg(self.certs.path("client.key"));
        command
    }

    fn is_ok(&self) -> bool {
        self.ports.iter().all(|port| {
            self.cli()
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "CLUSTER",
                    "INFO",
                ])
                .stdin(Stdio::null())
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
        })
    }

    /// Every node's `rediss://` URL.
    pub fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|port| format!("rediss://127.0.0.1:{port}"))
            .collect()
    }

    /// The certificates the nodes were started with, and the client's.
    pub fn certs(&self) -> &TestCerts {
        &self.certs
    }
}

impl Drop for TlsRedisCluster {
    fn drop(&mut self) {
        for child in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `redis-server` on `port` (TLS only; a cluster node whose bus,
/// on `port + 10000`, is TLS too, when `cluster`) and waits until its log
/// says it accepts connections, or it exits.
fn spawn(certs: &TestCerts, port: u16, cluster: bool) -> Result<Child, String> {
    let log = certs.path(&format!("redis-{port}.log"));
    let mut command = Command::new("redis-server");
    if cluster {
        command
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args(["--cluster-node-timeout", "30000"])
            .args(["--tls-cluster", "yes"]);
    }
    let mut child = command
        .args(["--port", "0"])
        .args(["--tls-port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(certs.dir())
        .arg("--logfile")
        .arg(&log)
        .arg("--tls-cert-file")
        .arg(certs.path("server.pem"))
        .arg("--tls-key-file")
        .arg(certs.path("server.key"))
        .arg("--tls-ca-cert-file")
        .arg(certs.path("ca.pem"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Ready to accept connections") {
            return Ok(child);
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("redis-server exited ({status}); its log:\n{text}"));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "redis-server was not ready in 10 s; its log:\n{text}"
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
