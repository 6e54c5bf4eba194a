//! TLS on the front doors, over real sockets: HTTPS on the HTTP and admin
//! doors, gRPC over TLS, client certificates (mTLS), and certificates
//! rotated by a reload, a changed file and SIGHUP. The certificates are
//! made by rcgen at test time.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{ServeProcess, TestService};
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, ServerName};
use tonic::transport::{Channel, ClientTlsConfig};

/// A test CA.
struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A certificate and its key, as PEM.
struct Leaf {
    cert: String,
    key: String,
    der: CertificateDer<'static>,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.distinguished_name.push(DnType::CommonName, name);
        Ca {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn pem(&self) -> String {
        self.issuer.pem()
    }

    fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> Leaf {
        let names = vec![name.to_owned(), "127.0.0.1".to_owned()];
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    fn server(&self) -> Leaf {
        self.leaf("localhost", ExtendedKeyUsagePurpose::ServerAuth)
    }

    fn client(&self, name: &str) -> Leaf {
        self.leaf(name, ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// Certificates in a temporary directory.
struct Files {
    dir: tempfile::TempDir,
    ca: Ca,
    server: Leaf,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("server CA");
        let server = ca.server();
        let files = Files { dir, ca, server };
        files.write_server(&files.server);
        std::fs::write(files.path("ca.pem"), files.ca.pem()).unwrap();
        files
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Replaces the server's certificate and key files, each in one
    /// rename, as a careful rotation does.
    fn write_server(&self, leaf: &Leaf) {
        for (name, text) in [("server.pem", &leaf.cert), ("server.key", &leaf.key)] {
            let temporary = self.path(&format!("{name}.new"));
            std::fs::write(&temporary, text).unwrap();
            std::fs::rename(&temporary, self.path(name)).unwrap();
        }
    }

    /// A `[listen.tls.DOOR]` table for the server files, with `client_ca`
    /// if given.
    fn table(&self, door: &str, client_ca: Option<&Path>) -> String {
        let mut text = format!(
            "[listen.tls.{door}]\ncert = '{}'\nkey = '{}'\n",
            self.path("server.pem").display(),
            self.path("server.key").display()
        );
        if let Some(ca) = client_ca {
            text.push_str(&format!("client_ca = '{}'\n", ca.display()));
        }
        text
    }
}

const LISTEN: &str =
    "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n";

const LIMITS: &str = "[[limits]]\nname = \"edge\"\nrate = \"1000/hour\"\n\
    key = [\"descriptor:remote_address\"]\n[limits.match]\ndomain = \"edge\"\n\
    descriptors = [{ key = \"remote_address\" }]\n\n\
    [[limits]]\nname = \"api\"\nrate = \"1000/hour\"\nkey = [\"global\"]\n\
    [limits.match]\npath_prefix = \"/\"\n";

fn config(tables: &str) -> String {
    format!("{LISTEN}\n{tables}\n{LIMITS}")
}

/// An HTTPS client trusting `ca`, presenting `identity` if given.
fn https(ca: &str, identity: Option<&Leaf>) -> reqwest::Client {
    let mut builder = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(Duration::from_secs(10));
    if let Some(leaf) = identity {
        let pem = format!("{}{}", leaf.cert, leaf.key);
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// A gRPC channel over TLS to `addr`, trusting `ca`.
async fn grpc_tls(
    addr: SocketAddr,
    ca: &str,
    identity: Option<&Leaf>,
) -> Result<RateLimitServiceClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(ca))
        .domain_name("localhost");
    if let Some(leaf) = identity {
        tls = tls.identity(tonic::transport::Identity::from_pem(&leaf.cert, &leaf.key));
    }
    let channel = Channel::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    Ok(RateLimitServiceClient::new(channel))
}

fn request() -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".to_owned(),
                value: "198.51.100.4".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// The certificate a new TLS connection to `addr` is shown, by a client
/// that checks nothing (the tests compare it themselves).
async fn served_certificate(addr: SocketAddr) -> CertificateDer<'static> {
    #[derive(Debug)]
    struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].clone()
}

#[tokio::test]
async fn the_http_door_serves_https_and_refuses_plaintext() {
    let files = Files::new();
    let service = TestService::start(&config(&files.table("http", None))).await;
    let addr = service.service.addrs().http.unwrap();
    let answer = https(&files.ca.pem(), None)
        .post(format!("https://{addr}/v1/check"))
        .json(&serde_json::json!({"limits": ["api"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.version(), reqwest::Version::HTTP_11);
    let body: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(body["allowed"], true, "{body}");

    let plain = reqwest::Client::new()
        .get(format!("http://{addr}/v1/limits"))
        .send()
        .await;
    assert!(plain.is_err(), "plaintext to a TLS door: {plain:?}");
    // The door is still up after refusing it.
    let again = https(&files.ca.pem(), None)
        .get(format!("https://{addr}/v1/limits"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    // A client that does not trust the CA refuses the door.
    let stranger = https(&Ca::new("other CA").pem(), None)
        .get(format!("https://{addr}/v1/limits"))
        .send()
        .await;
    assert!(stranger.is_err(), "{stranger:?}");
}

#[tokio::test]
async fn grpc_over_tls_answers_should_rate_limit() {
    let files = Files::new();
    let service = TestService::start(&config(&files.table("grpc", None))).await;
    let addr = service.service.addrs().grpc.unwrap();
    let mut client = grpc_tls(addr, &files.ca.pem(), None).await.unwrap();
    let answer = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);

    let plain = async {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(Duration::from_secs(5))
            .connect()
            .await?;
        RateLimitServiceClient::new(channel)
            .should_rate_limit(request())
            .await
            .map_err(|status| status.to_string().into())
            .map(|_| ())
    };
    let plain: Result<(), Box<dyn std::error::Error>> = plain.await;
    assert!(plain.is_err(), "plaintext gRPC to a TLS door");
    // The HTTP door, without a table, is still plaintext.
    let limits = reqwest::get(service.http("/v1/limits")).await.unwrap();
    assert_eq!(limits.status(), 200);
}

#[tokio::test]
async fn the_admin_door_serves_https() {
    let files = Files::new();
    let service = TestService::start(&config(&files.table("admin", None))).await;
    let addr = service.service.addrs().admin.unwrap();
    let client = https(&files.ca.pem(), None);
    for path in ["/healthz", "/readyz", "/metrics"] {
        let answer = client
            .get(format!("https://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn mtls_serves_only_clients_with_a_certificate_from_the_ca() {
    let files = Files::new();
    let clients = Ca::new("client CA");
    std::fs::write(files.path("clients.pem"), clients.pem()).unwrap();
    let ca = files.path("clients.pem");
    let tables = format!(
        "{}{}",
        files.table("http", Some(&ca)),
        files.table("grpc", Some(&ca))
    );
    let service = TestService::start(&config(&tables)).await;
    let (http, grpc) = (
        service.service.addrs().http.unwrap(),
        service.service.addrs().grpc.unwrap(),
    );
    let url = format!("https://{http}/v1/limits");
    let member = clients.client("member");
    let stranger = files.ca.client("stranger");

    let anonymous = https(&files.ca.pem(), None).get(&url).send().await;
    assert!(anonymous.is_err(), "no client certificate: {anonymous:?}");
    let foreign = https(&files.ca.pem(), Some(&stranger))
        .get(&url)
        .send()
        .await;
    assert!(foreign.is_err(), "a certificate of another CA: {foreign:?}");
    let served = https(&files.ca.pem(), Some(&member)).get(&url).send().await;
    assert_eq!(served.unwrap().status(), 200);

    // gRPC: tonic connects lazily enough that a refused handshake may
    // surface on the first call instead; either way nothing is answered.
    let anonymous = match grpc_tls(grpc, &files.ca.pem(), None).await {
        Ok(mut client) => client
            .should_rate_limit(request())
            .await
            .err()
            .map(|e| e.to_string()),
        Err(error) => Some(error.to_string()),
    };
    assert!(
        anonymous.is_some(),
        "gRPC without a client certificate was answered"
    );
    let mut client = grpc_tls(grpc, &files.ca.pem(), Some(&member))
        .await
        .unwrap();
    let answer = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
}

#[tokio::test]
async fn a_rotated_certificate_reaches_new_connections_after_a_reload() {
    let files = Files::new();
    let path = files.path("ratekeeper.toml");
    let text = config(&files.table("grpc", None));
    std::fs::write(&path, &text).unwrap();
    // No watching: only the explicit reload rotates.
    let service = TestService::start_with(&text, Some(path), None).await;
    let addr = service.service.addrs().grpc.unwrap();
    let mut before = grpc_tls(addr, &files.ca.pem(), None).await.unwrap();
    assert_eq!(served_certificate(addr).await, files.server.der);

    // A new certificate from a new CA.
    let next_ca = Ca::new("next CA");
    let next = next_ca.server();
    files.write_server(&next);
    assert_eq!(
        served_certificate(addr).await,
        files.server.der,
        "not before a reload"
    );
    assert!(service.service.reload_tls().unwrap());
    assert_eq!(served_certificate(addr).await, next.der);
    let mut after = grpc_tls(addr, &next_ca.pem(), None).await.unwrap();
    assert_eq!(
        after
            .should_rate_limit(request())
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        Code::Ok as i32
    );
    // The connection made before the rotation carries on.
    assert_eq!(
        before
            .should_rate_limit(request())
            .await
            .unwrap()
            .into_inner()
            .overall_code,
        Code::Ok as i32
    );

    // Half a rotation (a certificate without its key) is refused; the
    // running certificate stays.
    std::fs::write(files.path("server.pem"), next_ca.server().cert).unwrap();
    let error = service.service.reload_tls().unwrap_err();
    assert!(error.to_string().contains("does not match"), "{error}");
    assert_eq!(served_certificate(addr).await, next.der);
}

#[tokio::test]
async fn a_changed_certificate_is_picked_up_without_a_signal() {
    let files = Files::new();
    let path = files.path("ratekeeper.toml");
    let text = config(&files.table("http", None));
    std::fs::write(&path, &text).unwrap();
    let service = TestService::start_with(&text, Some(path), Some(Duration::from_millis(20))).await;
    let addr = service.service.addrs().http.unwrap();
    assert_eq!(served_certificate(addr).await, files.server.der);
    let next = files.ca.server();
    files.write_server(&next);
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_certificate(addr).await != next.der {
        assert!(
            Instant::now() < deadline,
            "the changed files were not picked up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sighup_reloads_the_certificate() {
    let files = Files::new();
    let path = files.path("ratekeeper.toml");
    std::fs::write(&path, config(&files.table("grpc", None))).unwrap();
    let process = ServeProcess::start(&["--config", path.to_str().unwrap(), "--watch", "0"], &[]);
    let grpc = process.grpc.unwrap();
    assert!(
        process
            .banner
            .iter()
            .any(|l| l.starts_with("grpc  ") && l.contains("TLS")),
        "{:?}",
        process.banner
    );
    assert_eq!(served_certificate(grpc).await, files.server.der);
    let next = files.ca.server();
    files.write_server(&next);
    assert_eq!(
        served_certificate(grpc).await,
        files.server.der,
        "no reload without the signal"
    );
    process.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(10);
    while served_certificate(grpc).await != next.der {
        assert!(
            Instant::now() < deadline,
            "SIGHUP did not reload the certificate"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn check_names_the_tls_doors_and_a_bad_file() {
    let files = Files::new();
    let path = files.path("ratekeeper.toml");
    let ca = files.path("ca.pem");
    let tables = format!(
        "{}{}",
        files.table("grpc", Some(&ca)),
        files.table("admin", None)
    );
    std::fs::write(&path, config(&tables)).unwrap();
    let check = |path: &Path| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
        for (key, _) in std::env::vars().filter(|(key, _)| key.starts_with("RATEKEEPER_")) {
            command.env_remove(key);
        }
        command
            .args(["check", "--config", path.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let output = check(&path);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("tls: "))
        .unwrap_or_default();
    assert_eq!(
        line,
        format!(
            "tls: http plaintext, grpc TLS (cert {cert}) with mTLS (clients need a certificate \
             signed by {ca}), admin TLS (cert {cert})",
            cert = files.path("server.pem").display(),
            ca = ca.display()
        )
    );

    std::fs::write(files.path("server.key"), files.ca.server().key).unwrap();
    let output = check(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:8:7: listen.tls.grpc.key: the private key in {} does not match the certificate",
            path.display(),
            files.path("server.key").display()
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_or_failed_handshake_closes_only_that_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let files = Files::new();
    let tables = format!(
        "{}[listen.connections]\nhandshake_timeout = \"1s\"\n",
        files.table("grpc", None)
    );
    let service = TestService::start(&config(&tables)).await;
    let addr = service.service.addrs().grpc.unwrap();

    // Connected, and not a byte sent: closed at the handshake timeout (a
    // timer never fires early; 20 s is far past it, room for a loaded
    // machine), and not sooner.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0; 64];
    let read = tokio::time::timeout(Duration::from_secs(20), silent.read(&mut buf)).await;
    let elapsed = started.elapsed();
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    assert!(
        elapsed >= Duration::from_millis(990),
        "closed after {elapsed:?}"
    );

    // Plaintext HTTP/2 to the TLS door: the handshake fails at once.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), plain.read_to_end(&mut rest))
        .await
        .expect("a failed handshake closes the connection");

    // The door goes on serving.
    let mut client = grpc_tls(addr, &files.ca.pem(), None).await.unwrap();
    let answer = client
        .should_rate_limit(request())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let metrics = reqwest::get(service.admin("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .contains(r#"ratekeeper_connections_closed_total{door="grpc",reason="handshake"} 2"#),
        "{metrics}"
    );
}

/// The first bytes of a TLS ClientHello whose record announces 512 bytes:
/// a handshake begun and never finished.
const HALF_CLIENT_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, // a handshake record of 512 bytes
    0x01, 0x00, 0x01, 0xfc, // ClientHello, 508 bytes
    0x03, 0x03, 0x5a, 0x5a, 0x5a, 0x5a, // TLS 1.2, the random's start
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_a_handshake_that_never_finishes_gives_way_to_a_new_client() {
    use tokio::io::AsyncWriteExt;

    let files = Files::new();
    // Timeouts far past the test's: only making room can serve the client.
    let tables = format!(
        "{}[listen.connections]\nmax_connections = 4\nhandshake_timeout = \"120s\"\n\
         header_timeout = \"120s\"\n",
        files.table("http", None)
    );
    let service = TestService::start(&config(&tables)).await;
    let addr = service.service.addrs().http.unwrap();
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tcp.write_all(HALF_CLIENT_HELLO).await.unwrap();
        stalled.push(tcp);
    }
    let open = r#"ratekeeper_connections_open{door="http"}"#;
    common::wait_for_metric(&service, open, |n| n == 4).await;

    // The door is full of handshakes going nowhere: a new client is served.
    let client = https(&files.ca.pem(), None);
    let answer = client
        .get(format!("https://{addr}/v1/limits"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .expect("a stalled handshake gave way");
    assert_eq!(answer.status(), 200);
    let pressure = r#"ratekeeper_connections_closed_total{door="http",reason="pressure"}"#;
    common::wait_for_metric(&service, pressure, |n| n >= 1).await;
    drop(stalled);
}
