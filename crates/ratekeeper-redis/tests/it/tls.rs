//! `rediss://` against a real TLS-only `redis-server` with certificates made
//! for the test: exact counting over TLS, and handshakes that must fail (a
//! CA that did not sign the server, no client certificate) failing at
//! connect with the handshake's reason.

use ratekeeper_test_support::redis as harness;
use ratekeeper_test_support::redis_tls as tls;

use std::time::Duration;

use ratekeeper::{FixedWindow, Limit, Store};
use ratekeeper_redis::{ConnectError, PemInput, RedisStore, Tls, TlsError};
use tls::{TestCerts, TlsRedisCluster, TlsRedisServer};

/// Every test's timeouts: a loaded 2-core machine must not turn a slow
/// handshake into a failure, and no test here is about time.
const UNHURRIED: Duration = harness::UNHURRIED;

/// The client settings that the server accepts.
fn client_tls(certs: &TestCerts) -> Tls {
    Tls::new()
        .with_ca_pem(certs.read("ca.pem"))
        .unwrap()
        .with_client_pem(certs.read("client.pem"), certs.read("client.key"))
        .unwrap()
}

fn builder() -> ratekeeper_redis::RedisStoreBuilder {
    RedisStore::builder()
        .timeout(UNHURRIED)
        .connect_timeout(UNHURRIED)
}

/// The error and its sources, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn a_limit_of_5_allows_exactly_5_of_8_over_tls() {
    let Some(server) = TlsRedisServer::start() else {
        return;
    };
    let store = builder()
        .tls(client_tls(server.certs()))
        .connect(&server.url())
        .await
        .expect("a TLS connection");
    let limit = Limit::new(
        "tls",
        FixedWindow::new(5, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    let mut allowed = 0;
    for _ in 0..8 {
        if store.check(&limit, b"k", 1).await.unwrap().is_allowed() {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    // The count is the server's: a second connection sees it spent.
    let other = builder()
        .tls(client_tls(server.certs()))
        .batching(ratekeeper_redis::Batching::OFF)
        .connect(&server.url())
        .await
        .unwrap();
    assert!(!other.check(&limit, b"k", 1).await.unwrap().is_allowed());
    assert!(other.check(&limit, b"other", 1).await.unwrap().is_allowed());
}

#[tokio::test]
async fn a_tls_cluster_counts_exactly_on_every_node() {
    let Some(cluster) = TlsRedisCluster::start() else {
        return;
    };
    let store = builder()
        .tls(client_tls(cluster.certs()))
        .cluster(cluster.urls())
        .await
        .expect("a TLS cluster connection");
    let limit = Limit::new(
        "tls",
        FixedWindow::new(5, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    // Keys in slots on each of the three masters (`--cluster create`
    // gives them slots 0-5460, 5461-10922 and 10923-16383).
    let keys: Vec<Vec<u8>> = (0..12).map(|i| format!("key-{i}").into_bytes()).collect();
    let masters: std::collections::HashSet<u8> = keys
        .iter()
        .map(
            |key| match ratekeeper_redis::internals::hash_slot(&store.key(&limit, key)) {
                0..=5_460 => 0,
                5_461..=10_922 => 1,
                _ => 2,
            },
        )
        .collect();
    assert_eq!(masters.len(), 3, "the keys reach every master");
    for key in &keys {
        let mut allowed = 0;
        for _ in 0..8 {
            if store.check(&limit, key, 1).await.unwrap().is_allowed() {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 5, "{}", String::from_utf8_lossy(key));
    }
}

#[tokio::test]
async fn a_ca_that_did_not_sign_the_server_fails_at_connect() {
    let Some(server) = TlsRedisServer::start() else {
        return;
    };
    let certs = server.certs();
    let tls = Tls::new()
        .with_ca_pem(certs.read("other-ca.pem"))
        .unwrap()
        .with_client_pem(certs.read("client.pem"), certs.read("client.key"))
        .unwrap();
    let error = builder()
        .tls(tls)
        .connect(&server.url())
        .await
        .expect_err("the server's certificate is not trusted");
    assert!(matches!(error, ConnectError::Redis(_)), "{error:?}");
    let text = chain(&error);
    assert!(
        text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
        "{text}"
    );
}

#[tokio::test]
async fn a_server_that_requires_a_client_certificate_refuses_a_client_without_one() {
    let Some(server) = TlsRedisServer::start() else {
        return;
    };
    let tls = Tls::new()
        .with_ca_pem(server.certs().read("ca.pem"))
        .unwrap();
    let error = builder()
        .tls(tls)
        .connect(&server.url())
        .await
        .expect_err("the server wants a client certificate");
    let text = chain(&error);
    assert!(text.contains("could not connect to Redis"), "{text}");
    // Under TLS 1.3 the client's handshake ends before the server reads its
    // (empty) certificate, so the refusal is the server's alert after the
    // first command, or, when the server's close wins the race with it, a
    // reset connection.
    let lower = text.to_lowercase();
    assert!(
        text.contains("received fatal alert: CertificateRequired")
            || lower.contains("reset")
            || lower.contains("broken pipe"),
        "{text}"
    );
}

#[tokio::test]
async fn tls_settings_with_a_plain_url_are_refused() {
    let certs = TestCerts::new();
    let error = builder()
        .tls(client_tls(&certs))
        .connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::TlsWithoutRediss), "{error:?}");
    let error = builder()
        .tls(client_tls(&certs))
        .cluster(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"])
        .await
        .unwrap_err();
    assert!(matches!(error, ConnectError::TlsWithoutRediss), "{error:?}");
}

#[test]
fn pem_that_cannot_be_used_is_refused_when_given() {
    let certs = TestCerts::new();
    assert_eq!(
        Tls::new().with_ca_pem(b"hello".to_vec()).unwrap_err(),
        TlsError::Missing(PemInput::Ca)
    );
    // A key is no CA: its section is skipped, and no certificate is left.
    assert_eq!(
        Tls::new()
            .with_ca_pem(certs.read("client.key"))
            .unwrap_err(),
        TlsError::Missing(PemInput::Ca)
    );
    let broken = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec();
    assert!(matches!(
        Tls::new().with_ca_pem(broken).unwrap_err(),
        TlsError::Pem {
            input: PemInput::Ca,
            ..
        }
    ));
    let garbage = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
    assert!(matches!(
        Tls::new().with_ca_pem(garbage).unwrap_err(),
        TlsError::Anchor { index: 0, .. }
    ));
    assert_eq!(
        Tls::new()
            .with_client_pem(certs.read("client.pem"), certs.read("client.pem"))
            .unwrap_err(),
        TlsError::Missing(PemInput::ClientKey)
    );
    assert_eq!(
        Tls::new()
            .with_client_pem(certs.read("client.key"), certs.read("client.key"))
            .unwrap_err(),
        TlsError::Missing(PemInput::ClientCert)
    );
    // The server's key does not belong to the client's certificate.
    assert!(matches!(
        Tls::new()
            .with_client_pem(certs.read("client.pem"), certs.read("server.key"))
            .unwrap_err(),
        TlsError::ClientKey { .. }
    ));
    let tls = client_tls(&certs);
    assert_eq!(tls.ca_pem(), Some(certs.read("ca.pem").as_slice()));
    assert!(tls.has_client_cert());
    let shown = format!("{tls:?}");
    assert!(!shown.contains("BEGIN"), "{shown}");
}
