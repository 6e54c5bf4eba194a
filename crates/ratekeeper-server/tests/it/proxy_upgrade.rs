//! WebSocket through the proxy: the upgrade request is rate-limited like
//! any request; once the upstream switches protocols, bytes pass both
//! ways; over the limit, the upgrade is refused with the 429 and never
//! reaches the upstream.

use crate::common::upstream::{self, Speaks};
use crate::proxy_service::{ProxyService, STEP};

use std::sync::atomic::Ordering;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HANDSHAKE: &[u8] = b"GET /ws HTTP/1.1\r\nHost: app.example\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

/// Sends the handshake on a new connection: the response's head, and the
/// connection.
async fn upgrade(proxy: std::net::SocketAddr) -> (String, TcpStream) {
    let mut tcp = TcpStream::connect(proxy).await.expect("connected");
    tcp.write_all(HANDSHAKE).await.expect("sent");
    let mut head = Vec::new();
    let mut byte = [0; 1];
    // Byte by byte, so that nothing after the head is read here.
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(STEP, tcp.read(&mut byte))
            .await
            .expect("the head in time")
            .expect("read");
        assert!(n == 1, "closed before the head ended: {head:?}");
        head.push(byte[0]);
    }
    (String::from_utf8_lossy(&head).into_owned(), tcp)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrades_are_tunnelled_and_refused_with_429_over_the_limit() {
    let upstream = upstream::start(Speaks::Http1).await;
    let proxy = ProxyService::start(
        "[[limits]]\nname = \"sockets\"\nrate = \"2/hour\"\nkey = [\"peer\"]\n",
        &format!("http://{}", upstream.addr),
        |_| {},
    )
    .await;
    let mut tunnels = Vec::new();
    for n in 0..2u8 {
        let (head, mut tcp) = upgrade(proxy.proxy).await;
        let lower = head.to_ascii_lowercase();
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        assert!(lower.contains("upgrade: websocket\r\n"), "{head}");
        assert!(lower.contains("connection: upgrade\r\n"), "{head}");
        // The upstream saw the client's key: the handshake passed through.
        assert!(
            lower.contains("x-echo-key: dghlihnhbxbszsbub25jzq==\r\n"),
            "{head}"
        );
        assert!(
            lower.contains("ratelimit-policy: \"sockets\";q=2;w=3600"),
            "{head}"
        );
        // Bytes both ways, more than once, in a frame larger than a read.
        for round in 0..3u8 {
            let message: Vec<u8> = (0..100_000u32).map(|i| (i as u8) ^ round ^ n).collect();
            let (mut read, mut write) = tcp.split();
            let send = async {
                write.write_all(&message).await.expect("sent through");
            };
            let receive = async {
                let mut echoed = vec![0; message.len()];
                tokio::time::timeout(STEP, read.read_exact(&mut echoed))
                    .await
                    .expect("the echo in time")
                    .expect("echoed");
                echoed
            };
            let ((), echoed) = tokio::join!(send, receive);
            assert!(echoed == message, "round {round}: the echo differs");
        }
        tunnels.push(tcp);
    }
    assert_eq!(upstream.upgrades.load(Ordering::SeqCst), 2);

    let (head, _tcp) = upgrade(proxy.proxy).await;
    assert!(head.starts_with("HTTP/1.1 429 "), "{head}");
    assert!(
        head.to_ascii_lowercase().contains("retry-after: "),
        "{head}"
    );
    assert_eq!(upstream.upgrades.load(Ordering::SeqCst), 2);

    // The open tunnels still work after the refusal.
    let mut first = tunnels.remove(0);
    first.write_all(b"still there").await.expect("sent");
    let mut echoed = [0; 11];
    tokio::time::timeout(STEP, first.read_exact(&mut echoed))
        .await
        .expect("in time")
        .expect("echoed");
    assert_eq!(&echoed, b"still there");
    drop(tunnels);
    drop(first);
    proxy.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnel_idle_for_the_idle_timeout_is_closed() {
    let upstream = upstream::start(Speaks::Http1).await;
    let proxy = ProxyService::start(
        "[listen.connections]\nidle_timeout = \"1s\"\n\
         [[limits]]\nname = \"sockets\"\nrate = \"10/hour\"\nkey = [\"peer\"]\n",
        &format!("http://{}", upstream.addr),
        |_| {},
    )
    .await;
    let (head, mut tcp) = upgrade(proxy.proxy).await;
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    tcp.write_all(b"ping").await.expect("sent");
    let mut echoed = [0; 4];
    tokio::time::timeout(STEP, tcp.read_exact(&mut echoed))
        .await
        .expect("in time")
        .expect("echoed");
    // Then nothing either way: the proxy closes the tunnel, and the
    // client reads the end of the stream.
    let mut rest = Vec::new();
    let read = tokio::time::timeout(STEP, tcp.read_to_end(&mut rest))
        .await
        .expect("the idle tunnel closed in time");
    assert!(read.is_ok() && rest.is_empty(), "{read:?} {rest:?}");
    proxy.stop().await;
}
