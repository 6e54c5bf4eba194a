//! HTTP versions through the proxy: HTTP/2 clients with prior knowledge
//! (h2c) to HTTP/2 and HTTP/1.1 upstreams, large bodies streamed both ways
//! over HTTP/2, and HTTP/1.1 clients answered in HTTP/1.1 (keeping their
//! connection) when the upstream speaks HTTP/1.0.

use crate::common::upstream::{self, fnv, pattern, Speaks, FNV_START};
use crate::proxy_service::{ProxyService, STEP};

use bytes::Bytes;
use http::{Request, Version};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A client that speaks only HTTP/2, with prior knowledge.
fn h2c() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

/// GETs `url` over h2c: the status, the response's version and its body.
async fn get(client: &Client<HttpConnector, Full<Bytes>>, url: &str) -> (u16, Version, Bytes) {
    let request = Request::get(url).body(Full::default()).unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("answered in time")
        .expect("answered");
    let (status, version) = (response.status().as_u16(), response.version());
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the body")
        .to_bytes();
    (status, version, body)
}

const GLOBAL_TWO: &str = "[[limits]]\nname = \"everyone\"\nrate = \"2/hour\"\nkey = [\"global\"]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_client_reaches_an_h2c_upstream_and_is_limited_over_http2() {
    let upstream = upstream::start(Speaks::Http2).await;
    let proxy = ProxyService::start(GLOBAL_TWO, &format!("http://{}", upstream.addr), |o| {
        o.upstream_http2 = true;
    })
    .await;
    let client = h2c();
    let (status, version, body) = get(&client, &proxy.url("/info")).await;
    assert_eq!((status, version), (200, Version::HTTP_2));
    let info: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(info["version"], "HTTP/2.0");
    let authority = proxy.proxy.to_string();
    assert_eq!(info["x-forwarded-host"], authority.as_str());
    assert_eq!(info["x-forwarded-proto"], "http");
    assert_eq!(info["x-forwarded-for"], "127.0.0.1");

    let (status, version, _) = get(&client, &proxy.url("/info")).await;
    assert_eq!((status, version), (200, Version::HTTP_2));
    let (status, version, _) = get(&client, &proxy.url("/info")).await;
    assert_eq!((status, version), (429, Version::HTTP_2));
    assert_eq!(
        upstream.requests.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_client_reaches_an_http1_upstream_that_sees_its_host() {
    let upstream = upstream::start(Speaks::Http1).await;
    let proxy = ProxyService::start(GLOBAL_TWO, &format!("http://{}", upstream.addr), |_| {}).await;
    let (status, version, body) = get(&h2c(), &proxy.url("/info")).await;
    assert_eq!((status, version), (200, Version::HTTP_2));
    let info: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(info["version"], "HTTP/1.1");
    // HTTP/2's :authority became HTTP/1.1's Host.
    let authority = proxy.proxy.to_string();
    assert_eq!(info["host"], authority.as_str());
    assert_eq!(info["x-forwarded-host"], authority.as_str());
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_mebibytes_stream_both_ways_over_http2() {
    const SIZE: usize = 8 * 1024 * 1024;
    let upstream = upstream::start(Speaks::Http2).await;
    let proxy = ProxyService::start(GLOBAL_TWO, &format!("http://{}", upstream.addr), |o| {
        o.upstream_http2 = true;
    })
    .await;
    let client = h2c();
    let body: Vec<u8> = (0..SIZE).map(pattern).collect();
    let expected = format!("{SIZE} {:x}", fnv(FNV_START, &body));
    let request = Request::post(proxy.url("/upload"))
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    let response = tokio::time::timeout(STEP, client.request(request))
        .await
        .expect("answered in time")
        .expect("answered");
    assert_eq!(response.status(), 200);
    let uploaded = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(uploaded, expected.as_bytes());

    let request = Request::get(proxy.url(&format!("/download/{SIZE}")))
        .body(Full::default())
        .unwrap();
    let response = client.request(request).await.expect("answered");
    assert_eq!(response.version(), Version::HTTP_2);
    let mut body = response.into_body();
    let (mut length, mut hash, mut frames) = (0usize, FNV_START, 0usize);
    while let Some(frame) = tokio::time::timeout(STEP, body.frame())
        .await
        .expect("in time")
    {
        if let Ok(data) = frame.expect("a frame").into_data() {
            length += data.len();
            hash = fnv(hash, &data);
            frames += 1;
        }
    }
    assert_eq!(format!("{length} {hash:x}"), expected);
    // Many frames: the body came as it was sent, not as one buffer.
    assert!(frames > 8, "{frames} frames");
    proxy.stop().await;
}

/// An HTTP/1.0 server: answers each connection's request with a body
/// delimited by closing the connection, as HTTP/1.0 does.
async fn http10_upstream() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tcp
                    .write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nfrom 1.0")
                    .await;
                let _ = tcp.shutdown().await;
            });
        }
    });
    addr
}

/// Reads one response (with `Content-Length` or chunked) off `tcp`: its
/// status line and its whole text.
async fn read_response(tcp: &mut tokio::net::TcpStream) -> String {
    let mut text = Vec::new();
    let mut buf = [0; 4096];
    loop {
        let done = std::str::from_utf8(&text).ok().is_some_and(|t| {
            t.split_once("\r\n\r\n").is_some_and(|(head, body)| {
                let head = head.to_ascii_lowercase();
                if head.contains("transfer-encoding: chunked") {
                    body.ends_with("0\r\n\r\n")
                } else {
                    head.lines()
                        .find_map(|l| l.strip_prefix("content-length: "))
                        .and_then(|n| n.trim().parse::<usize>().ok())
                        .is_some_and(|n| body.len() >= n)
                }
            })
        });
        if done {
            return String::from_utf8_lossy(&text).into_owned();
        }
        let n = tokio::time::timeout(STEP, tcp.read(&mut buf))
            .await
            .expect("the response in time")
            .expect("read");
        assert!(n > 0, "closed before the response ended: {text:?}");
        text.extend_from_slice(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http11_client_keeps_its_connection_when_the_upstream_speaks_http10() {
    let upstream = http10_upstream().await;
    let proxy = ProxyService::start(
        "[[limits]]\nname = \"everyone\"\nrate = \"10/hour\"\nkey = [\"global\"]\n",
        &format!("http://{upstream}"),
        |_| {},
    )
    .await;
    let mut tcp = tokio::net::TcpStream::connect(proxy.proxy)
        .await
        .expect("connected");
    for _ in 0..2 {
        tcp.write_all(b"GET /old HTTP/1.1\r\nHost: app.example\r\n\r\n")
            .await
            .expect("sent");
        let response = read_response(&mut tcp).await;
        assert!(response.starts_with("HTTP/1.1 200 OK\r\n"), "{response}");
        assert!(response.contains("from 1.0"), "{response}");
        assert!(
            !response.to_ascii_lowercase().contains("connection: close"),
            "{response}"
        );
    }
    proxy.stop().await;
}
