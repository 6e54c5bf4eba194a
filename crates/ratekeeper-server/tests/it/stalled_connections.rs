//! HTTP/2 clients that stall a connection past its accept, over real
//! sockets with scaled-down caps: answers the peer never reads (a flow
//! control window held at zero), more streams than the door may keep, and
//! request bodies that never end. Each holds memory or a slot that the
//! door must reclaim. (The TLS handshake that never ends is in `tls.rs`,
//! the HTTP/1.1 body that never ends in `connections.rs`.)
//!
//! The attacker is the `h2` crate as a client, which can hold a window at
//! zero; the well-behaved client is tonic's. Timeouts here are real time;
//! each wait is bounded far past what it waits for, as a hang's bound.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::TestService;
use prost::Message;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::RateLimitRequest;
use tonic::transport::Channel;

const ENVOY_LIMIT: &str = r#"
[[limits]]
name = "per-user"
rate = "1000000/minute"
key = ["descriptor:user"]
match = { domain = "edge", descriptors = [{ key = "user" }] }
"#;

const SHOULD_RATE_LIMIT: &str =
    "http://test/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// A gRPC door with `sections` (`[listen.connections]`, `[listen.http2]`).
async fn start(sections: &str) -> (TestService, SocketAddr) {
    let toml = format!(
        "[listen]\nhttp = \"off\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n{sections}\n{ENVOY_LIMIT}"
    );
    let test = TestService::start(&toml).await;
    let addr = test.service.addrs().grpc.unwrap();
    (test, addr)
}

fn request(user: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge".into(),
        descriptors: vec![common::descriptor(&[("user", user)])],
        hits_addend: 0,
    }
}

/// `request` as a gRPC message: a length prefix, then the protobuf.
fn grpc_message(request: &RateLimitRequest) -> Bytes {
    let body = request.encode_to_vec();
    let mut framed = Vec::with_capacity(5 + body.len());
    framed.push(0);
    framed.extend_from_slice(&u32::try_from(body.len()).unwrap().to_be_bytes());
    framed.extend_from_slice(&body);
    framed.into()
}

/// An h2 client connection to `addr` whose streams' receive window is
/// `window` (0: no answer's body can ever be sent to it). The connection
/// runs in a task of its own (it answers the service's pings), whose
/// handle resolves when the service closes it.
async fn h2_client(
    addr: SocketAddr,
    window: u32,
) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(window)
        .handshake(tcp)
        .await
        .expect("an HTTP/2 handshake");
    let running = tokio::spawn(async move {
        let _ = connection.await;
    });
    (client, running)
}

/// A call in flight: its answer, and its body's sending half (kept: a
/// body whose handle drops unended is reset by h2).
type Call = (h2::client::ResponseFuture, h2::SendStream<Bytes>);

/// Starts a ShouldRateLimit call on `client`, its body sent whole or, if
/// not `whole`, only its first half and never ended.
async fn call(client: &mut h2::client::SendRequest<Bytes>, whole: bool) -> Result<Call, h2::Error> {
    call_padded(client, whole, 0).await
}

/// [`call`], with a header of `pad` bytes.
async fn call_padded(
    client: &mut h2::client::SendRequest<Bytes>,
    whole: bool,
    pad: usize,
) -> Result<Call, h2::Error> {
    let ready = client.clone().ready().await?;
    *client = ready;
    let head = http::Request::post(SHOULD_RATE_LIMIT)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-pad", "p".repeat(pad))
        .body(())
        .unwrap();
    let (response, mut body) = client.send_request(head, false)?;
    let message = grpc_message(&request("mallory"));
    if whole {
        body.send_data(message, true)?;
    } else {
        body.send_data(message.slice(..message.len() / 2), false)?;
    }
    Ok((response, body))
}

/// A tonic client on a new connection to `addr`.
async fn good_client(addr: SocketAddr) -> RateLimitServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("the gRPC door accepts");
    RateLimitServiceClient::new(channel)
}

/// One call from a well-behaved client, retried while the door refuses
/// its stream for want of room (`UNAVAILABLE`), for at most 30 s.
async fn served(addr: SocketAddr) -> Code {
    let mut client = good_client(addr).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match client.should_rate_limit(request("ann")).await {
            Ok(answer) => return Code::try_from(answer.into_inner().overall_code).unwrap(),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "never served: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("the call failed: {status:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_whose_answers_are_never_read_is_closed_at_the_send_timeout() {
    let (test, addr) = start("[listen.connections]\nsend_timeout = \"1s\"").await;
    let (mut attacker, running) = h2_client(addr, 0).await;
    let mut stuck = Vec::new();
    for _ in 0..8 {
        stuck.push(call(&mut attacker, true).await.expect("a stream"));
    }
    // The client answers pings and keeps the connection: only the service
    // giving up on the answers it cannot send ends it.
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the service closed the connection")
        .unwrap();
    let send_timeout = r#"ratekeeper_connections_closed_total{door="grpc",reason="send_timeout"}"#;
    let metrics = common::wait_for_metric(&test, send_timeout, |n| n == 1).await;
    let held = r#"ratekeeper_http2_streams_held{door="grpc"}"#;
    assert_eq!(common::sample(&metrics, held), Some(0), "{metrics}");
    // The door goes on serving.
    assert_eq!(served(addr).await, Code::Ok);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_past_the_doors_total_are_refused_and_a_newcomer_still_gets_one() {
    // A send timeout far past the test's: only the door's stream budget
    // can bound the attacker, and only the eighth of it kept for
    // connections with few streams (or a stalled one giving way) can serve
    // the good client.
    let (test, addr) = start(
        "[listen.connections]\nsend_timeout = \"120s\"\n\
         [listen.http2]\nmax_concurrent_streams = 64\nmax_streams_total = 16",
    )
    .await;
    let (mut attacker, _running) = h2_client(addr, 0).await;
    let mut refused = 0;
    let mut stuck = Vec::new();
    let mut bodies = Vec::new();
    for _ in 0..40 {
        let Ok((response, body)) = call(&mut attacker, true).await else {
            break; // the connection was closed to make room
        };
        stuck.push(tokio::spawn(response));
        bodies.push(body);
    }
    for response in stuck {
        // A stream refused for want of room ends at once; an answered one
        // only when its connection closes.
        let Ok(Ok(Err(error))) = tokio::time::timeout(Duration::from_millis(200), response).await
        else {
            continue;
        };
        if error.reason() == Some(h2::Reason::REFUSED_STREAM) {
            refused += 1;
        }
    }
    assert!(refused >= 1, "no stream was refused");
    let metrics = common::metrics(&test).await;
    // The attacker holds many: the last eighth stays for connections
    // holding few.
    let held = r#"ratekeeper_http2_streams_held{door="grpc"}"#;
    assert!(
        common::sample(&metrics, held).is_some_and(|n| n <= 14),
        "{metrics}"
    );
    let counted = r#"ratekeeper_http2_streams_refused_total{door="grpc"}"#;
    assert!(
        common::sample(&metrics, counted).is_some_and(|n| n >= refused),
        "{metrics}"
    );
    // A newcomer finds room.
    assert_eq!(served(addr).await, Code::Ok);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_connections_whose_bodies_never_end_give_way_to_a_new_client() {
    // Timeouts far past the test's: only making room can serve the client.
    let (test, addr) = start(
        "[listen.connections]\nmax_connections = 4\nbody_timeout = \"120s\"\n\
         request_timeout = \"120s\"",
    )
    .await;
    let mut attackers = Vec::new();
    for _ in 0..4 {
        let (mut attacker, running) = h2_client(addr, 65_535).await;
        let response = call(&mut attacker, false).await.expect("a stream");
        attackers.push((attacker, running, response));
    }
    let open = r#"ratekeeper_connections_open{door="grpc"}"#;
    common::wait_for_metric(&test, open, |n| n == 4).await;
    assert_eq!(served(addr).await, Code::Ok);
    let pressure = r#"ratekeeper_connections_closed_total{door="grpc",reason="pressure"}"#;
    common::wait_for_metric(&test, pressure, |n| n >= 1).await;
    drop(attackers);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stops_coming_closes_its_connection_at_the_body_timeout() {
    let (test, addr) =
        start("[listen.connections]\nbody_timeout = \"1s\"\nrequest_timeout = \"120s\"").await;
    let (mut attacker, running) = h2_client(addr, 65_535).await;
    let _response = call(&mut attacker, false).await.expect("a stream");
    tokio::time::timeout(Duration::from_secs(30), running)
        .await
        .expect("the service closed the connection")
        .unwrap();
    let body_timeout = r#"ratekeeper_connections_closed_total{door="grpc",reason="body_timeout"}"#;
    common::wait_for_metric(&test, body_timeout, |n| n == 1).await;
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_still_arriving_are_counted_with_their_heads_up_to_the_doors_total() {
    let (test, addr) = start(
        "[listen.connections]\nmax_request_bytes_total = 65536\nbody_timeout = \"120s\"\n\
         request_timeout = \"120s\"",
    )
    .await;
    // Five requests with 20,000-byte heads whose bodies stop half way:
    // more than the door may hold.
    let (mut attacker, _running) = h2_client(addr, 65_535).await;
    let mut calls = Vec::new();
    for _ in 0..5 {
        calls.push(
            call_padded(&mut attacker, false, 20_000)
                .await
                .expect("a stream"),
        );
    }
    let refused = r#"ratekeeper_request_bodies_refused_total{door="grpc"}"#;
    let metrics = common::wait_for_metric(&test, refused, |n| n >= 1).await;
    let held = r#"ratekeeper_request_bytes_held{door="grpc"}"#;
    let held = common::sample(&metrics, held).expect("counted");
    assert!((40_000..=65_536).contains(&held), "{held} bytes held");
    drop(calls);
    test.stop().await;
}
