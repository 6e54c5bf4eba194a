//! TLS on both sides of the proxy: an HTTPS upstream checked against a CA
//! file (HTTP/2 by ALPN, the upstream's name as SNI), and the proxy's own
//! door serving TLS with HTTP/2 or HTTP/1.1 as ALPN picks.

use crate::common::upstream::{self, Speaks};
use crate::proxy_service::{client, ProxyService, STEP};

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use serde_json::Value;

const LIMIT: &str = "[[limits]]\nname = \"everyone\"\nrate = \"100/hour\"\nkey = [\"global\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upstream_is_reached_with_its_ca_file_and_refused_without() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = upstream::certificates();
    let ca_path = dir.path().join("ca.pem");
    std::fs::write(&ca_path, ca).expect("the CA written");
    let upstream = upstream::start(Speaks::Tls {
        cert,
        key,
        h2: true,
    })
    .await;
    // By name: the certificate is for localhost, which SNI and the check
    // take from the URL.
    let url = format!("https://localhost:{}", upstream.addr.port());

    let proxy = ProxyService::start(LIMIT, &url, |o| o.upstream_ca = Some(ca_path.clone())).await;
    let response = client()
        .get(proxy.url("/info"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    let info: Value = response.json().await.expect("JSON");
    assert_eq!(info["version"], "HTTP/2.0", "ALPN picked h2: {info}");
    assert_eq!(info["x-forwarded-proto"], "http");
    proxy.stop().await;

    // Without the CA (the system's roots), the upstream's certificate is
    // refused: a 502, and the upstream answers nothing.
    let before = upstream.requests.load(std::sync::atomic::Ordering::SeqCst);
    let proxy = ProxyService::start(LIMIT, &url, |_| {}).await;
    let response = client()
        .get(proxy.url("/info"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 502);
    assert_eq!(
        upstream.requests.load(std::sync::atomic::Ordering::SeqCst),
        before
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_door_serves_tls_with_http2_or_http1_as_alpn_picks() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca, cert, key) = upstream::certificates();
    let (cert_path, key_path) = (dir.path().join("proxy.pem"), dir.path().join("proxy.key"));
    std::fs::write(&cert_path, cert).unwrap();
    std::fs::write(&key_path, key).unwrap();
    let upstream = upstream::start(Speaks::Http1).await;
    let toml = format!(
        "[listen.tls.proxy]\ncert = '{}'\nkey = '{}'\n{LIMIT}",
        cert_path.display(),
        key_path.display()
    );
    let proxy = ProxyService::start(&toml, &format!("http://{}", upstream.addr), |_| {}).await;
    let url = format!("https://localhost:{}/info", proxy.proxy.port());

    // HTTP/2, chosen by ALPN.
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_all_versions()
        .build();
    let h2: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    let response = tokio::time::timeout(
        STEP,
        h2.request(Request::get(&url).body(Full::default()).unwrap()),
    )
    .await
    .expect("in time")
    .expect("answered");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), Version::HTTP_2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let info: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(info["x-forwarded-proto"], "https");
    assert_eq!(info["version"], "HTTP/1.1");

    // HTTP/1.1, for a client that offers only it.
    let http1 = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .no_proxy()
        .timeout(STEP)
        .build()
        .unwrap();
    let response = http1.get(&url).send().await.expect("answered");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), Version::HTTP_11);
    proxy.stop().await;
}
