//! The front doors against clients that are slow, idle or many, over real
//! sockets: `[listen.connections]`'s timeouts and caps, the body limit and
//! the shutdown's grace period.
//!
//! Timeouts here are real time (a socket's deadline cannot run on a manual
//! clock); each test asserts that a close comes no sooner than its timeout
//! (a timer never fires early) and well before the next thing that would
//! close it, with room for a loaded machine.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{ServeProcess, TestService};

/// A limit for every test: generous, so no request is refused by it.
const LIMIT: &str = r#"
[[limits]]
name = "per-user"
rate = "1000000/minute"
key = ["header:x-user"]
"#;

fn config(connections: &str) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n\
         [listen.connections]\n{connections}\n{LIMIT}"
    )
}

/// How long a socket read blocks before the test calls it a hang.
const HANG: Duration = Duration::from_secs(30);

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("the door accepts");
    stream.set_read_timeout(Some(HANG)).unwrap();
    stream
}

/// Reads until the service closes the connection; what it sent, and
/// whether it closed with FIN (`true`) rather than a reset.
fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(error) if error.kind() == std::io::ErrorKind::ConnectionReset => {
                return (got, false)
            }
            Err(error) => panic!("the connection was neither answered nor closed: {error}"),
        }
    }
}

const CHECK_BODY: &str = r#"{"limits":["per-user"],"key":{"header:x-user":"ann"}}"#;

fn check_request(close: bool) -> String {
    let connection = if close { "close" } else { "keep-alive" };
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Connection: {connection}\r\nContent-Length: {}\r\n\r\n{CHECK_BODY}",
        CHECK_BODY.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_head_sent_too_slowly_is_cut_at_the_header_timeout() {
    let test = TestService::start(&config("header_timeout = \"1s\"\nidle_timeout = \"60s\"")).await;
    let addr = test.service.addrs().http.unwrap();
    let closed = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        let started = Instant::now();
        // Half a head, then nothing: a slowloris.
        stream
            .write_all(b"POST /v1/check HTTP/1.1\r\nHost: test\r\n")
            .unwrap();
        let (answer, _) = read_to_close(&mut stream);
        (started.elapsed(), answer)
    })
    .await
    .unwrap();
    let (elapsed, answer) = closed;
    assert!(
        elapsed >= Duration::from_secs(1),
        "closed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "closed after {elapsed:?}"
    );
    assert!(answer.is_empty(), "{:?}", String::from_utf8_lossy(&answer));
    let metrics = test
        .client
        .get(test.admin("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            r#"ratekeeper_connections_closed_total{door="http",reason="header_timeout"} 1"#
        ),
        "{metrics}"
    );
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_never_sends_a_request_is_closed_at_the_header_timeout() {
    let test = TestService::start(&config("header_timeout = \"1s\"")).await;
    let addr = test.service.addrs().http.unwrap();
    let elapsed = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        let started = Instant::now();
        read_to_close(&mut stream);
        started.elapsed()
    })
    .await
    .unwrap();
    assert!(
        elapsed >= Duration::from_secs(1),
        "closed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "closed after {elapsed:?}"
    );
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_cleanly_after_the_idle_timeout() {
    // The idle timeout is longer than the header timeout: an idle
    // keep-alive connection is not cut at the header timeout.
    let test = TestService::start(&config("header_timeout = \"1s\"\nidle_timeout = \"3s\"")).await;
    let addr = test.service.addrs().http.unwrap();
    let (answer, clean, idle) = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        stream.write_all(check_request(false).as_bytes()).unwrap();
        // The answer, then the wait for the close.
        let mut buf = [0; 4096];
        let n = stream.read(&mut buf).unwrap();
        let started = Instant::now();
        let (rest, clean) = read_to_close(&mut stream);
        let mut answer = buf[..n].to_vec();
        answer.extend(rest);
        (answer, clean, started.elapsed())
    })
    .await
    .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(clean, "closed with a reset");
    assert!(idle >= Duration::from_millis(2900), "closed after {idle:?}");
    assert!(idle < Duration::from_secs(25), "closed after {idle:?}");
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_too_slowly_is_cut_at_the_request_timeout() {
    let test = TestService::start(&config("request_timeout = \"1s\"")).await;
    let addr = test.service.addrs().http.unwrap();
    let elapsed = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        let started = Instant::now();
        stream
            .write_all(
                b"POST /v1/check HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
                  Content-Length: 1000\r\n\r\n{\"limits\":",
            )
            .unwrap();
        read_to_close(&mut stream);
        started.elapsed()
    })
    .await
    .unwrap();
    assert!(
        elapsed >= Duration::from_secs(1),
        "closed after {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(20),
        "closed after {elapsed:?}"
    );
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_body_bytes_is_refused_with_413_problem_details() {
    let toml = format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"off\"\n\
         [requests]\nmax_body_bytes = 20000\n{LIMIT}"
    );
    let test = TestService::start(&toml).await;
    let padding = "x".repeat(30_000);
    let body =
        format!(r#"{{"limits":["per-user"],"key":{{"header:x-user":"ann"}},"pad":"{padding}"}}"#);
    let response = test
        .client
        .post(test.http("/v1/check"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let problem: serde_json::Value = response.json().await.unwrap();
    assert_eq!(problem["status"], 413);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("requests.max_body_bytes (20000 bytes)"),
        "{problem}"
    );
    // A body under the cap is read.
    let (status, _, _) = test
        .post(
            "/v1/check",
            serde_json::json!({"limits": ["per-user"], "key": {"header:x-user": "ann"}}),
        )
        .await;
    assert_eq!(status, 200);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_arriving_past_the_doors_total_fail_and_are_counted() {
    let test = TestService::start(&format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"off\"\nadmin = \"127.0.0.1:0\"\n\
         [listen.connections]\nmax_request_bytes_total = 65536\nbody_timeout = \"120s\"\n\
         request_timeout = \"120s\"\n[requests]\nmax_body_bytes = 65536\n{LIMIT}"
    ))
    .await;
    let addr = test.service.addrs().http.unwrap();
    // Two bodies of 60,000 bytes, each stopped after 40,000: together more
    // than the door may hold.
    let held = tokio::task::spawn_blocking(move || {
        (0..2)
            .map(|_| {
                let mut stream = connect(addr);
                let head = "POST /v1/check HTTP/1.1\r\nHost: test\r\n\
                            Content-Type: application/json\r\nContent-Length: 60000\r\n\r\n";
                stream.write_all(head.as_bytes()).unwrap();
                stream.write_all(&[b' '; 40_000]).unwrap();
                stream
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let refused = r#"ratekeeper_request_bodies_refused_total{door="http"}"#;
    let metrics = common::wait_for_metric(&test, refused, |n| n >= 1).await;
    let bytes = r#"ratekeeper_request_bytes_held{door="http"}"#;
    assert!(
        common::sample(&metrics, bytes).is_some_and(|n| n <= 65_536),
        "{metrics}"
    );
    // The refused request was answered with an error, not left hanging.
    let mut answers = Vec::new();
    for mut stream in held {
        stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0; 64];
        if let Ok(n) = stream.read(&mut buf) {
            answers.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
    assert!(
        answers
            .iter()
            .any(|answer| answer.starts_with("HTTP/1.1 4")),
        "{answers:?}"
    );
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_answers_is_closed_at_the_send_timeout() {
    let test = TestService::start(&config(
        "send_timeout = \"1s\"\nidle_timeout = \"120s\"\nrequest_timeout = \"120s\"",
    ))
    .await;
    let addr = test.service.addrs().http.unwrap();
    // Pipelined requests whose answers are never read: once the sockets'
    // buffers are full, the service cannot send, then stops reading.
    let writer = tokio::task::spawn_blocking(move || {
        let mut stream = connect(addr);
        stream.set_write_timeout(Some(HANG)).unwrap();
        let request = check_request(false);
        let mut sent = 0;
        while sent < 200_000 && stream.write_all(request.as_bytes()).is_ok() {
            sent += 1;
        }
        sent
    });
    let send_timeout = r#"ratekeeper_connections_closed_total{door="http",reason="send_timeout"}"#;
    common::wait_for_metric(&test, send_timeout, |n| n == 1).await;
    // Its writes fail once the service has closed it, long before it could
    // have sent them all.
    let sent = writer.await.unwrap();
    assert!(sent < 200_000, "{sent} requests were taken");
    test.stop().await;
}

/// Opens `n` connections to `addr` that each send half a request body, so
/// that each holds a request in flight whose body does not come.
fn hold_requests(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut stream = connect(addr);
            stream
                .write_all(
                    b"POST /v1/check HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
                      Content-Length: 1000\r\n\r\n{",
                )
                .unwrap();
            stream
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_the_admin_port_answers_and_a_stalled_body_gives_way() {
    let test = TestService::start(&config(
        "max_connections = 8\nrequest_timeout = \"60s\"\nbody_timeout = \"60s\"",
    ))
    .await;
    let addr = test.service.addrs().http.unwrap();
    let held = tokio::task::spawn_blocking(move || hold_requests(addr, 8))
        .await
        .unwrap();
    // Every slot holds a request whose body does not come. The admin port
    // has its own share.
    let health = test
        .client
        .get(test.admin("/healthz"))
        .send()
        .await
        .expect("the admin port answers");
    assert_eq!(health.status(), 200);
    // The door accepts the eight (a connect returns before the accept).
    let open = r#"ratekeeper_connections_open{door="http"}"#;
    common::wait_for_metric(&test, open, |n| n == 8).await;
    // A ninth client is served long before any timeout would free a slot:
    // a connection whose body has stalled gives way to it.
    let served = test
        .client
        .get(test.http("/v1/limits"))
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .expect("served: a stalled body made room");
    assert_eq!(served.status(), 200);
    let metrics = common::metrics(&test).await;
    let pressure = r#"ratekeeper_connections_closed_total{door="http",reason="pressure"}"#;
    assert!(
        common::sample(&metrics, pressure).is_some_and(|n| n >= 1),
        "{metrics}"
    );
    drop(held);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_idle_connections_make_room_for_new_ones() {
    let test = TestService::start(&config(
        "max_connections = 8\nheader_timeout = \"60s\"\nidle_timeout = \"60s\"",
    ))
    .await;
    let addr = test.service.addrs().http.unwrap();
    // Eight connections that sent nothing: idle, and kept by every timeout.
    let idle: Vec<TcpStream> = (0..8).map(|_| connect(addr)).collect();
    let started = Instant::now();
    let response = test
        .client
        .get(test.http("/v1/limits"))
        .send()
        .await
        .expect("served after idle connections made room");
    assert_eq!(response.status(), 200);
    assert!(started.elapsed() < Duration::from_secs(20));
    drop(idle);
    test.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clients_keep_going_while_another_opens_two_thousand_idle_connections() {
    raise_open_files(4_096);
    // A cap below what the idle client opens, so the door runs full and
    // closes idle connections while the busy clients go on.
    let test = TestService::start(&config("max_connections = 1000")).await;
    let url = test.http("/v1/check");
    let addr = test.service.addrs().http.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Answers of all clients together, so the idle connections are held
    // until the clients have worked beside them, not for a set time.
    let total = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut clients = Vec::new();
    for client in 0..16 {
        let (url, stop, total) = (url.clone(), stop.clone(), total.clone());
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut answered = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) || answered < 20 {
                let response = http
                    .post(&url)
                    .json(&serde_json::json!({"limits": ["per-user"], "key": {"header:x-user": format!("c{client}")}}))
                    .send()
                    .await
                    .unwrap_or_else(|error| panic!("client {client}, request {answered}: {error}"));
                assert_eq!(response.status(), 200);
                answered += 1;
                total.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            answered
        }));
    }
    let held = total.clone();
    let opened = tokio::task::spawn_blocking(move || {
        let total = held;
        let mut idle = Vec::new();
        for _ in 0..2_000 {
            match TcpStream::connect(addr) {
                Ok(stream) => idle.push(stream),
                Err(error) => panic!("connect {}: {error}", idle.len()),
            }
        }
        // Hold them while the clients answer 16 x 50 more requests.
        let before = total.load(std::sync::atomic::Ordering::Relaxed);
        let deadline = Instant::now() + Duration::from_secs(60);
        while total.load(std::sync::atomic::Ordering::Relaxed) < before + 16 * 50 {
            assert!(
                Instant::now() < deadline,
                "the clients stalled beside the idle connections"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        idle.len()
    })
    .await
    .unwrap();
    assert_eq!(opened, 2_000);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for client in clients {
        let answered = client.await.expect("no client request failed");
        assert!(answered >= 20);
    }
    let health = test
        .client
        .get(test.admin("/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    test.stop().await;
}

/// Raises this test process's soft open-file limit to at least `want`.
fn raise_open_files(want: u64) {
    let (soft, hard) = rlimit::Resource::NOFILE
        .get()
        .expect("the limit is readable");
    if soft < want {
        assert!(
            hard >= want,
            "the hard open-file limit ({hard}) is below {want}"
        );
        rlimit::Resource::NOFILE.set(want, hard).expect("raised");
    }
}

#[test]
fn sigterm_with_a_half_sent_request_exits_within_the_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        format!("[listen.connections]\nshutdown_grace = \"1s\"\nheader_timeout = \"60s\"\nrequest_timeout = \"60s\"\n{LIMIT}"),
    )
    .unwrap();
    let mut serve = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    // A head sent halfway, and a request whose body never ends.
    let mut half_head = connect(serve.http);
    half_head
        .write_all(b"POST /v1/check HTTP/1.1\r\nHost: test\r\n")
        .unwrap();
    let mut half_body = connect(serve.http);
    half_body
        .write_all(
            b"POST /v1/check HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\n\r\n{",
        )
        .unwrap();
    // A keep-alive connection that was answered and is idle.
    let mut idle = connect(serve.http);
    idle.write_all(check_request(false).as_bytes()).unwrap();
    let mut buf = [0; 4096];
    let n = idle.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // The stalled connections were accepted before the third one, which
    // was answered: all three are the service's when SIGTERM comes.
    let started = Instant::now();
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20));
    let elapsed = started.elapsed();
    assert!(status.success(), "{status:?}");
    // The grace period, not the 60 s timeouts, ended the stalled requests.
    assert!(
        elapsed < Duration::from_secs(15),
        "exited after {elapsed:?}"
    );
    // The idle connection was closed with a FIN, not a reset.
    let (_, clean) = read_to_close(&mut idle);
    assert!(clean, "the idle keep-alive connection was reset");
    drop((half_head, half_body));
}

#[test]
fn a_process_with_few_file_descriptors_fits_its_caps_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, format!("[listen]\ngrpc = \"off\"\n{LIMIT}")).unwrap();
    let bin = env!("CARGO_BIN_EXE_ratekeeper");
    let mut command = std::process::Command::new("sh");
    command
        .arg("-c")
        .arg(format!(
            "ulimit -n 200 && exec {bin} serve --config {}",
            path.display()
        ))
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut serve = ServeProcess::from_command(command);
    // An established keep-alive client.
    let mut client = connect(serve.http);
    client.write_all(check_request(false).as_bytes()).unwrap();
    let mut buf = [0; 4096];
    let n = client.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // More connections than descriptors, while the client goes on (a
    // client idle for a second may be closed to make room, so it keeps busy).
    let addr = serve.http;
    let flooding = std::thread::spawn(move || {
        (0..400)
            .filter_map(|_| TcpStream::connect(addr).ok())
            .collect::<Vec<_>>()
    });
    let mut asked = 0;
    while !flooding.is_finished() || asked < 20 {
        client.write_all(check_request(false).as_bytes()).unwrap();
        let n = client.read(&mut buf).unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "request {asked}: {:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        asked += 1;
    }
    let flood = flooding.join().unwrap();
    assert!(flood.len() > 200, "{}", flood.len());
    let admin = serve.admin.expect("admin is on");
    let mut health = connect(admin);
    health
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let (answer, _) = read_to_close(&mut health);
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    drop(flood);
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let log = serve.stderr();
    assert!(
        log.contains("connection caps lowered to fit the open-file limit"),
        "{log}"
    );
}

mod grpc {
    //! The gRPC door's HTTP/2 settings.

    use super::*;
    use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
    use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
    use tonic::transport::Channel;

    const ENVOY_LIMIT: &str = r#"
[[limits]]
name = "per-user"
rate = "1000000/minute"
key = ["descriptor:user"]
match = { domain = "edge", descriptors = [{ key = "user" }] }
"#;

    async fn start(sections: &str) -> (TestService, RateLimitServiceClient<Channel>) {
        let toml = format!(
            "[listen]\nhttp = \"off\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n{sections}\n{ENVOY_LIMIT}"
        );
        let test = TestService::start(&toml).await;
        let addr = test.service.addrs().grpc.unwrap();
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(Duration::from_secs(10))
            .connect()
            .await
            .expect("the gRPC door accepts");
        (test, RateLimitServiceClient::new(channel))
    }

    fn request(user: &str) -> RateLimitRequest {
        RateLimitRequest {
            domain: "edge".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry {
                    key: "user".into(),
                    value: user.into(),
                }],
                ..Default::default()
            }],
            hits_addend: 0,
        }
    }

    async fn metrics(test: &TestService) -> String {
        test.client
            .get(test.admin("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_over_max_body_bytes_is_refused_and_one_under_is_answered() {
        let (test, mut client) = start("[requests]\nmax_body_bytes = 20000").await;
        let answer = client.should_rate_limit(request("ann")).await.unwrap();
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
        let mut big = request("ann");
        big.descriptors[0].entries[0].value = "x".repeat(16_000);
        big.descriptors.push(big.descriptors[0].clone());
        let refused = client.should_rate_limit(big).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::OutOfRange, "{refused:?}");
        // The connection goes on.
        let answer = client.should_rate_limit(request("bob")).await.unwrap();
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
        test.stop().await;
    }

    /// Whether a failed call never reached the service: refused by the
    /// GOAWAY it crossed, or queued on a connection that closed before it
    /// was written (hyper's `Canceled`: dropped before ever being
    /// processed). Either is the client's to send again.
    fn unprocessed(status: &tonic::Status) -> bool {
        if format!("{status:?}").contains("GoAway") {
            return true;
        }
        let mut source = std::error::Error::source(status);
        while let Some(error) = source {
            if error
                .downcast_ref::<hyper::Error>()
                .is_some_and(hyper::Error::is_canceled)
            {
                return true;
            }
            source = error.source();
        }
        false
    }

    /// Connections past their age get a GOAWAY: calls in flight finish, and
    /// a call the client started as the GOAWAY crossed it is refused
    /// unprocessed (or, queued as the connection closed, never sent), for
    /// the client to send again on a new connection (Envoy and grpc-go do
    /// so by themselves; tonic's channel does not, so this client does it
    /// once). No call is lost or counted twice: the allowed decisions are
    /// exactly the calls answered.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_past_their_age_close_gently_and_no_call_is_lost() {
        let (test, mut client) = start("[listen.http2]\nmax_connection_age = \"1s\"").await;
        let started = Instant::now();
        let (mut calls, mut refused) = (0u64, 0u64);
        while started.elapsed() < Duration::from_millis(3500) || calls < 50 {
            let answer = match client.should_rate_limit(request("ann")).await {
                Ok(answer) => answer,
                Err(status) if unprocessed(&status) => {
                    refused += 1;
                    client
                        .should_rate_limit(request("ann"))
                        .await
                        .unwrap_or_else(|status| panic!("call {calls}, sent again: {status:?}"))
                }
                Err(status) => panic!("call {calls}: {status:?}"),
            };
            assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
            calls += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(refused <= calls / 10, "{refused} of {calls} calls refused");
        let metrics = metrics(&test).await;
        let sample = |prefix: &str| -> u64 {
            metrics
                .lines()
                .find_map(|line| line.strip_prefix(prefix))
                .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
                .parse()
                .unwrap()
        };
        assert!(
            sample(r#"ratekeeper_connections_closed_total{door="grpc",reason="max_age"} "#) >= 1,
            "{metrics}"
        );
        // Every call answered was decided once; the refused ones never were.
        assert_eq!(
            sample(r#"ratekeeper_decisions_total{limit="per-user",decision="allowed"} "#),
            calls,
            "{metrics}"
        );
        test.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_grpc_connection_is_closed_after_the_idle_timeout() {
        let (test, mut client) = start("[listen.connections]\nidle_timeout = \"1s\"").await;
        let answer = client.should_rate_limit(request("ann")).await.unwrap();
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
        // Idle, until the door closes it.
        let started = Instant::now();
        loop {
            let metrics = metrics(&test).await;
            if metrics
                .contains(r#"ratekeeper_connections_closed_total{door="grpc",reason="idle"} 1"#)
            {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{metrics}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(started.elapsed() >= Duration::from_millis(900));
        // The client reconnects for its next call.
        let answer = client.should_rate_limit(request("ann")).await.unwrap();
        assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
        test.stop().await;
    }
}

/// How one keep-alive client's run ended.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The service closed the connection cleanly before answering the
    /// request just sent (never read: the client may send it again).
    Closed,
    /// A reset, or an answer cut short: what a client must never see.
    Broken(String),
}

/// Sends requests on one keep-alive connection, a few milliseconds apart
/// (so that the shutdown finds it idle, as keep-alive connections mostly
/// are), until it ends; the answers read whole, and how it ended.
fn keep_asking(addr: SocketAddr) -> (u32, Ending) {
    let mut stream = connect(addr);
    let mut answered = 0;
    loop {
        if answered > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        // The head, then the body, in two writes as many clients send
        // them: a reset that came between would fail the second.
        let request = check_request(false);
        let (head, body) = request.split_at(request.len() - CHECK_BODY.len());
        if let Err(error) = stream.write_all(head.as_bytes()) {
            return (answered, Ending::Broken(format!("write: {error}")));
        }
        std::thread::sleep(Duration::from_millis(5));
        if let Err(error) = stream.write_all(body.as_bytes()) {
            return (answered, Ending::Broken(format!("write: {error}")));
        }
        match read_response(&mut stream) {
            Ok(Some(head)) => {
                assert!(head.starts_with("HTTP/1.1 200"), "{head}");
                answered += 1;
                if head.to_ascii_lowercase().contains("connection: close") {
                    let (rest, clean) = read_to_close(&mut stream);
                    return match (rest.is_empty(), clean) {
                        (true, true) => (answered, Ending::Closed),
                        _ => (
                            answered,
                            Ending::Broken("bytes or a reset after connection: close".into()),
                        ),
                    };
                }
            }
            Ok(None) => return (answered, Ending::Closed),
            Err(error) => return (answered, Ending::Broken(error)),
        }
    }
}

/// One response: its head, once its body is read whole; `None` if the
/// connection closed cleanly before any byte of it.
fn read_response(stream: &mut TcpStream) -> Result<Option<String>, String> {
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&got[..end]).into_owned();
            let length: usize = head
                .lines()
                .find_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .ok_or_else(|| format!("no content-length in {head}"))?;
            while got.len() < end + 4 + length {
                match stream.read(&mut buf) {
                    Ok(0) => return Err(format!("the body was cut short after {head}")),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(error) => return Err(format!("body: {error}")),
                }
            }
            if got.len() > end + 4 + length {
                return Err("bytes after the body".into());
            }
            return Ok(Some(head));
        }
        match stream.read(&mut buf) {
            Ok(0) if got.is_empty() => return Ok(None),
            Ok(0) => return Err("the head was cut short".into()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(error) => return Err(format!("head: {error}")),
        }
    }
}

#[test]
fn keep_alive_clients_see_no_reset_and_no_cut_answer_at_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        format!("[listen.connections]\nshutdown_grace = \"5s\"\n{LIMIT}"),
    )
    .unwrap();
    let mut serve = ServeProcess::start(&["--config", path.to_str().unwrap()], &[]);
    let addr = serve.http;
    let clients: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || keep_asking(addr)))
        .collect();
    // Every client is at work before the signal: the metrics count their
    // connections.
    let admin = serve.admin.expect("admin is on");
    let started = Instant::now();
    loop {
        let mut stream = connect(admin);
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let (metrics, _) = read_to_close(&mut stream);
        let metrics = String::from_utf8_lossy(&metrics);
        if metrics.contains(r#"ratekeeper_connections_open{door="http"} 8"#) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{metrics}");
    }
    serve.signal("TERM");
    let status = serve.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    for client in clients {
        let (answered, ending) = client.join().unwrap();
        assert!(answered > 0);
        assert_eq!(ending, Ending::Closed, "after {answered} answers");
    }
}
