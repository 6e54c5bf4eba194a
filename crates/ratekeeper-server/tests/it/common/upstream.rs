//! An upstream for the proxy's tests: a hyper server on loopback speaking
//! HTTP/1.1 (with upgrades), HTTP/2 with prior knowledge (h2c), or either
//! over TLS as ALPN picks, that answers with what it saw.
//!
//! - `/info`: JSON with the request's version, `Host`, `:authority` and
//!   forwarding headers;
//! - `/upload`: the body's length and FNV-1a hash, read as it streams;
//! - `/download/N`: N bytes of [`pattern`], in 64 KiB chunks;
//! - `/ws` with `Upgrade`: `101 Switching Protocols`, then every byte sent
//!   back (an echo, standing for the WebSocket protocol);
//! - anything else: 404.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;

/// How the upstream speaks.
pub enum Speaks {
    Http1,
    /// HTTP/2 with prior knowledge.
    Http2,
    /// TLS with this certificate and key (PEM), then HTTP/2 or HTTP/1.1 as
    /// ALPN picks (`h2` offered when `h2`).
    Tls {
        cert: String,
        key: String,
        h2: bool,
    },
}

/// A running upstream.
pub struct TestUpstream {
    pub addr: SocketAddr,
    /// Requests answered.
    pub requests: Arc<AtomicUsize>,
    /// Upgrades accepted.
    pub upgrades: Arc<AtomicUsize>,
}

/// The byte at `index` of the test pattern.
pub fn pattern(index: usize) -> u8 {
    ((index * 31 + 7) % 251) as u8
}

/// FNV-1a, to compare large bodies.
pub fn fnv(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

type Body = BoxBody<Bytes, hyper::Error>;

/// Starts an upstream on a free loopback port.
pub async fn start(speaks: Speaks) -> TestUpstream {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    let requests = Arc::new(AtomicUsize::new(0));
    let upgrades = Arc::new(AtomicUsize::new(0));
    let tls = match &speaks {
        Speaks::Tls { cert, key, h2 } => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
            server_config(cert, key, *h2),
        ))),
        _ => None,
    };
    let http2 = matches!(speaks, Speaks::Http2);
    let counters = (Arc::clone(&requests), Arc::clone(&upgrades));
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (requests, upgrades) = (Arc::clone(&counters.0), Arc::clone(&counters.1));
            let tls = tls.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    handle(request, Arc::clone(&requests), Arc::clone(&upgrades))
                });
                match tls {
                    None => serve(tcp, http2, service).await,
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                        serve(stream, h2, service).await;
                    }
                }
            });
        }
    });
    TestUpstream {
        addr,
        requests,
        upgrades,
    }
}

async fn serve<IO, S>(io: IO, http2: bool, service: S)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let io = TokioIo::new(io);
    if http2 {
        let _ = http2::Builder::new(TokioExecutor::new())
            .serve_connection(io, service)
            .await;
    } else {
        let _ = http1::Builder::new()
            .serve_connection(io, service)
            .with_upgrades()
            .await;
    }
}

async fn handle(
    mut request: Request<Incoming>,
    requests: Arc<AtomicUsize>,
    upgrades: Arc<AtomicUsize>,
) -> Result<Response<Body>, Infallible> {
    requests.fetch_add(1, Ordering::SeqCst);
    let path = request.uri().path().to_owned();
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
    };
    if path == "/info" {
        let info = json!({
            "version": format!("{:?}", request.version()),
            "host": header("host"),
            "authority": request.uri().authority().map(|a| a.to_string()),
            "x-forwarded-for": header("x-forwarded-for"),
            "x-forwarded-proto": header("x-forwarded-proto"),
            "x-forwarded-host": header("x-forwarded-host"),
            "forwarded": header("forwarded"),
        });
        return Ok(full(StatusCode::OK, info.to_string()));
    }
    if path == "/ws" && request.headers().contains_key("upgrade") {
        let key = header("sec-websocket-key").unwrap_or_default();
        let on = hyper::upgrade::on(&mut request);
        upgrades.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let Ok(upgraded) = on.await else { return };
            let (mut read, mut write) = tokio::io::split(TokioIo::new(upgraded));
            let _ = tokio::io::copy(&mut read, &mut write).await;
        });
        let mut response = full(StatusCode::SWITCHING_PROTOCOLS, String::new());
        let headers = response.headers_mut();
        headers.insert("upgrade", "websocket".parse().unwrap());
        headers.insert("connection", "Upgrade".parse().unwrap());
        // Not the real digest: the test checks that it passes through.
        headers.insert("x-echo-key", key.parse().unwrap());
        return Ok(response);
    }
    if path == "/upload" {
        let mut body = request.into_body();
        let (mut length, mut hash) = (0usize, FNV_START);
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else {
                return Ok(full(StatusCode::BAD_REQUEST, "broken body".to_owned()));
            };
            if let Ok(data) = frame.into_data() {
                length += data.len();
                hash = fnv(hash, &data);
            }
        }
        return Ok(full(StatusCode::OK, format!("{length} {hash:x}")));
    }
    if let Some(n) = path.strip_prefix("/download/") {
        let n: usize = n.parse().unwrap_or(0);
        let chunks = futures_util::stream::unfold(0usize, move |start| async move {
            (start < n).then(|| {
                let end = (start + 64 * 1024).min(n);
                let chunk: Vec<u8> = (start..end).map(pattern).collect();
                (Ok::<_, hyper::Error>(Frame::data(Bytes::from(chunk))), end)
            })
        });
        return Ok(Response::new(StreamBody::new(chunks).boxed()));
    }
    Ok(full(StatusCode::NOT_FOUND, "not here".to_owned()))
}

fn full(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).map_err(|e| match e {}).boxed());
    *response.status_mut() = status;
    response
}

fn server_config(cert: &str, key: &str, h2: bool) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .expect("the certificate");
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).expect("the key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("a server configuration");
    config.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    config
}

/// A test CA and a server certificate it signed for `localhost` and
/// `127.0.0.1`: (CA, certificate, key), as PEM.
pub fn certificates() -> (String, String, String) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
        .distinguished_name
        .push(DnType::CommonName, "proxy test CA");
    let ca =
        CertifiedIssuer::self_signed(params, KeyPair::generate().expect("a key")).expect("the CA");
    let names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    let mut params = CertificateParams::new(names).expect("params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let key = KeyPair::generate().expect("a key");
    let cert = params.signed_by(&key, &ca).expect("the certificate");
    (ca.pem(), cert.pem(), key.serialize_pem())
}
