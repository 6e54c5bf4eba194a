//! OpenTelemetry traces and JSON logs of a `ratekeeper serve` process: a
//! collector started here (OTLP/gRPC with opentelemetry-proto's generated
//! `TraceService`, or OTLP/HTTP on `POST /v1/traces`) receives the
//! decisions' spans, children of the callers' `traceparent`.

use crate::common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::ServeProcess;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, status::StatusCode, Span};
use prost::Message as _;
use serde_json::{json, Value};

/// Everything a collector received.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<ExportTraceServiceRequest>>>);

impl Received {
    fn push(&self, request: ExportTraceServiceRequest) {
        self.0.lock().unwrap().push(request);
    }

    /// Every span received, with its resource's `service.name`.
    fn spans(&self) -> Vec<(String, Span)> {
        let requests = self.0.lock().unwrap();
        let mut spans = Vec::new();
        for resource_spans in requests.iter().flat_map(|r| &r.resource_spans) {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| string(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope in &resource_spans.scope_spans {
                for span in &scope.spans {
                    spans.push((service.clone(), span.clone()));
                }
            }
        }
        spans
    }

    /// The span of the trace `trace_id` (hex), waiting for it up to a
    /// generous deadline (the exporter batches every 100 ms here).
    async fn span_of_trace(&self, trace_id: &str) -> (String, Span) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(found) = self
                .spans()
                .into_iter()
                .find(|(_, span)| hex(&span.trace_id) == trace_id)
            {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "no span of trace {trace_id} within 30 s; received {:#?}",
                self.spans()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP/gRPC collector on a free loopback port.
async fn grpc_collector() -> (SocketAddr, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let received = Received::default();
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(received.clone()))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    (addr, received)
}

/// An OTLP/HTTP collector on a free loopback port: `POST /v1/traces` with
/// a protobuf body.
async fn http_collector() -> (SocketAddr, Received) {
    use axum::http::{header, HeaderMap, StatusCode as Http};
    let received = Received::default();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            axum::routing::post(
                |axum::extract::State(received): axum::extract::State<Received>,
                 headers: HeaderMap,
                 body: bytes::Bytes| async move {
                    if headers[header::CONTENT_TYPE] != "application/x-protobuf" {
                        return (Http::UNSUPPORTED_MEDIA_TYPE, Vec::new());
                    }
                    match ExportTraceServiceRequest::decode(body) {
                        Ok(request) => {
                            received.push(request);
                            (
                                Http::OK,
                                ExportTraceServiceResponse::default().encode_to_vec(),
                            )
                        }
                        Err(_) => (Http::BAD_REQUEST, Vec::new()),
                    }
                },
            ),
        )
        .with_state(received.clone());
    (common::serve_app(app).await, received)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|value| value.value.as_ref())
}

fn string(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attribute(attributes, key)? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        _ => None,
    }
}

/// A string array attribute of `span`.
fn strings(span: &Span, key: &str) -> Vec<String> {
    match attribute(&span.attributes, key) {
        Some(any_value::Value::ArrayValue(array)) => array
            .values
            .iter()
            .map(|AnyValue { value }| match value {
                Some(any_value::Value::StringValue(text)) => text.clone(),
                other => panic!("{key} holds {other:?}"),
            })
            .collect(),
        other => panic!("{key} is {other:?} in {span:#?}"),
    }
}

fn text(span: &Span, key: &str) -> String {
    string(&span.attributes, key).unwrap_or_else(|| panic!("no {key} in {span:#?}"))
}

/// A W3C `traceparent` for a sampled span `span_id` of `trace_id`.
fn traceparent(trace_id: &str, span_id: &str) -> String {
    format!("00-{trace_id}-{span_id}-01")
}

const LIMITS: &str = r#"
[[limits]]
name = "roomy"
rate = "100/minute"
key = ["global"]

[[limits]]
name = "tight"
rate = "1/hour"
key = ["global"]

[[limits]]
name = "edge"
rate = "1/hour"
key = ["descriptor:remote_address"]
[limits.match]
domain = "edge"
descriptors = [{ key = "remote_address" }]
"#;

/// A config file with [`LIMITS`], in a directory kept while it is used.
fn config_file() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(&path, LIMITS).unwrap();
    let path = path.to_str().unwrap().to_owned();
    (dir, path)
}

/// `POST /v1/check` of both global limits, as the span `parent`; whether
/// it was allowed.
async fn check(process: &ServeProcess, parent: &str) -> bool {
    let answer: Value = reqwest::Client::new()
        .post(format!("http://{}/v1/check", process.http))
        .header("traceparent", parent)
        .header("tracestate", "caller=1")
        .json(&json!({"limits": ["roomy", "tight"]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["allowed"].as_bool().expect("allowed is a boolean")
}

#[tokio::test]
async fn decisions_are_exported_over_grpc_as_children_of_the_callers_spans() {
    use ratekeeper_server::envoy::proto::rate_limit_response::Code;
    use ratekeeper_server::envoy::proto::RateLimitRequest;

    let (collector, received) = grpc_collector().await;
    let (_dir, path) = config_file();
    let endpoint = format!("http://{collector}");
    let process = ServeProcess::start(
        &["--config", &path],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "edge-limits"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );

    let allowed_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let denied_trace = "5bf92f3577b34da6a3ce929d0e0e4737";
    assert!(check(&process, &traceparent(allowed_trace, "00f067aa0ba902b7")).await);
    assert!(!check(&process, &traceparent(denied_trace, "10f067aa0ba902b8")).await);

    let envoy_trace = "6bf92f3577b34da6a3ce929d0e0e4738";
    let mut client = common::rls_client(process.grpc.unwrap()).await;
    let mut request = tonic::Request::new(RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![common::descriptor(&[("remote_address", "198.51.100.4")])],
        hits_addend: 0,
    });
    request.metadata_mut().insert(
        "traceparent",
        traceparent(envoy_trace, "20f067aa0ba902b9")
            .parse()
            .unwrap(),
    );
    let answer = client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);

    let (service, allowed) = received.span_of_trace(allowed_trace).await;
    assert_eq!(service, "edge-limits");
    assert_eq!(allowed.name, "ratekeeper.decide");
    assert_eq!(allowed.kind, SpanKind::Server as i32);
    assert_eq!(hex(&allowed.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(allowed.trace_state, "caller=1");
    assert_eq!(text(&allowed, "ratekeeper.door"), "http");
    assert_eq!(text(&allowed, "ratekeeper.store"), "memory");
    assert_eq!(text(&allowed, "ratekeeper.decision"), "allowed");
    assert_eq!(strings(&allowed, "ratekeeper.limits"), ["roomy", "tight"]);
    assert!(strings(&allowed, "ratekeeper.denied_by").is_empty());

    let (_, denied) = received.span_of_trace(denied_trace).await;
    assert_eq!(hex(&denied.parent_span_id), "10f067aa0ba902b8");
    assert_eq!(text(&denied, "ratekeeper.decision"), "denied");
    assert_eq!(strings(&denied, "ratekeeper.denied_by"), ["tight"]);
    assert_ne!(
        denied.status.as_ref().map(|status| status.code),
        Some(StatusCode::Error as i32),
        "a denial is an answer, not an error"
    );

    let (_, envoy) = received.span_of_trace(envoy_trace).await;
    assert_eq!(hex(&envoy.parent_span_id), "20f067aa0ba902b9");
    assert_eq!(text(&envoy, "ratekeeper.door"), "grpc");
    assert_eq!(text(&envoy, "ratekeeper.decision"), "allowed");
    assert_eq!(strings(&envoy, "ratekeeper.limits"), ["edge"]);

    // A request without a traceparent starts a trace of its own.
    let before = received.spans().len();
    assert!(!check(&process, "not a traceparent").await);
    let deadline = Instant::now() + Duration::from_secs(30);
    let root = loop {
        let spans = received.spans();
        if spans.len() > before {
            break spans[before].1.clone();
        }
        assert!(Instant::now() < deadline, "the fourth span never came");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(root.parent_span_id.is_empty(), "{root:#?}");
    assert_eq!(root.trace_id.len(), 16);
    assert!(![allowed_trace, denied_trace, envoy_trace].contains(&hex(&root.trace_id).as_str()));
}

/// `ratekeeper serve ARGS` with `env`, its stderr piped.
fn serve_with_stderr(args: &[&str], env: &[(&str, &str)]) -> ServeProcess {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command.arg("serve").args(args);
    for (key, _) in std::env::vars()
        .filter(|(key, _)| key.starts_with("RATEKEEPER_") || key.starts_with("OTEL_"))
    {
        command.env_remove(key);
    }
    command
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "off")
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    ServeProcess::from_command(command)
}

/// nginx's `auth_request` subrequest, as the span `parent`; its status.
async fn auth(process: &ServeProcess, parent: &str) -> u16 {
    reqwest::Client::new()
        .get(format!("http://{}/v1/auth", process.http))
        .header("x-original-uri", "/login")
        .header("traceparent", parent)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

// The collector answers while this thread blocks in wait_exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_protobuf_export_is_flushed_at_shutdown() {
    let (collector, received) = http_collector().await;
    let (_dir, path) = config_file();
    let endpoint = format!("http://{collector}/v1/traces");
    let mut process = serve_with_stderr(
        &["--config", &path],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            // Ten minutes: only the shutdown can send the span in time.
            ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
        ],
    );
    let trace = "7bf92f3577b34da6a3ce929d0e0e4739";
    assert_eq!(
        auth(&process, &traceparent(trace, "30f067aa0ba902ba")).await,
        204
    );
    assert!(received.spans().is_empty(), "exported before the shutdown");

    process.signal("TERM");
    let status = process.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}: {}", process.stderr());
    let spans = received.spans();
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let (service, span) = &spans[0];
    assert_eq!(service, "ratekeeper", "the default service name");
    assert_eq!(hex(&span.trace_id), trace);
    assert_eq!(hex(&span.parent_span_id), "30f067aa0ba902ba");
    assert_eq!(text(span, "ratekeeper.door"), "nginx");
    assert_eq!(text(span, "ratekeeper.decision"), "allowed");
    assert_eq!(strings(span, "ratekeeper.limits"), ["roomy", "tight"]);
}

// The collector answers while this thread blocks in wait_exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_sdk_disabled_exports_nothing() {
    let (collector, received) = http_collector().await;
    let (_dir, path) = config_file();
    let endpoint = format!("http://{collector}/v1/traces");
    let mut process = serve_with_stderr(
        &["--config", &path],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "1"),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    let parent = traceparent("8bf92f3577b34da6a3ce929d0e0e473a", "40f067aa0ba902bb");
    assert_eq!(auth(&process, &parent).await, 204);
    process.signal("TERM");
    let status = process.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "{status:?}");
    // The exporter, had it run, flushed before the exit.
    assert!(received.spans().is_empty(), "{:#?}", received.spans());
    assert!(!process.stderr().contains("exporting traces"));
}

#[test]
fn an_unsupported_protocol_is_refused_at_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_ratekeeper"))
        .arg("serve")
        .env("RATEKEEPER_LISTEN__HTTP", "127.0.0.1:0")
        .env("RATEKEEPER_LISTEN__GRPC", "off")
        .env("RATEKEEPER_LISTEN__ADMIN", "off")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"http/json\" is not supported"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "it never started serving");
}

/// Every line of `text` as a JSON object with a timestamp, a level, a
/// target and a message.
fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line:?}"));
            for field in ["timestamp", "level", "target"] {
                assert!(value[field].is_string(), "no {field} in {line}");
            }
            assert!(
                value["fields"]["message"].is_string(),
                "no message in {line}"
            );
            value
        })
        .collect()
}

#[tokio::test]
async fn log_format_json_writes_json_lines() {
    let mut process = serve_with_stderr(&["--log-format", "json"], &[]);
    // Without a file, SIGHUP is logged as a warning, then SIGTERM as info.
    process.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !process.stderr().contains("SIGHUP") {
        assert!(
            Instant::now() < deadline,
            "no SIGHUP warning: {}",
            process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    process.signal("TERM");
    assert!(process.wait_exit(Duration::from_secs(30)).success());
    let lines = json_lines(&process.stderr());
    let warning = lines
        .iter()
        .find(|line| {
            line["fields"]["message"]
                .as_str()
                .unwrap()
                .contains("SIGHUP")
        })
        .expect("the SIGHUP warning");
    assert_eq!(warning["level"], "WARN");
    assert!(warning["target"]
        .as_str()
        .unwrap()
        .starts_with("ratekeeper_server"));
    assert!(lines.iter().any(|line| line["level"] == "INFO"
        && line["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("stopping")));
}

// The collector-free upstream answers while this thread waits for the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_format_comes_from_the_environment_on_proxy_too() {
    // A limit on HTTP paths keyed by a descriptor draws a warning at start.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ratekeeper.toml");
    std::fs::write(
        &path,
        "[[limits]]\nname = \"x\"\nrate = \"1/hour\"\nkey = [\"descriptor:tenant\"]\n\
         [limits.match]\nmethods = [\"GET\"]\n",
    )
    .unwrap();
    let upstream = common::serve_app(axum::Router::new()).await;
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .arg("--upstream")
        .arg(format!("http://{upstream}"))
        .arg("--config")
        .arg(&path);
    for (key, _) in std::env::vars()
        .filter(|(key, _)| key.starts_with("RATEKEEPER_") || key.starts_with("OTEL_"))
    {
        command.env_remove(key);
    }
    let mut child = command
        .env_remove("RUST_LOG")
        .env("RATEKEEPER_LISTEN__ADMIN", "off")
        .env("RATEKEEPER_LOG_FORMAT", "json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its first line says it listens: the warning was logged before.
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert!(first.contains(" proxy http://"), "{first:?}");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines = json_lines(&stderr);
    let warning = lines
        .iter()
        .find(|line| line["level"] == "WARN")
        .unwrap_or_else(|| panic!("no warning in {stderr}"));
    assert!(warning["fields"]["message"]
        .as_str()
        .unwrap()
        .contains("descriptor:tenant"));
}

/// `ratekeeper proxy` in front of `upstream` with `env`, and where it
/// listens (read from its first line).
fn proxy(
    upstream: SocketAddr,
    config: &str,
    env: &[(&str, &str)],
) -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratekeeper"));
    command
        .args(["proxy", "--listen", "127.0.0.1:0", "--config", config])
        .arg("--upstream")
        .arg(format!("http://{upstream}"));
    for (key, _) in std::env::vars()
        .filter(|(key, _)| key.starts_with("RATEKEEPER_") || key.starts_with("OTEL_"))
    {
        command.env_remove(key);
    }
    let mut child = command
        .env("RATEKEEPER_LISTEN__ADMIN", "127.0.0.1:0")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    let first = lines.next().expect("a first line").unwrap();
    std::thread::spawn(move || lines.for_each(drop));
    let url = first
        .split_whitespace()
        .find(|word| word.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {first:?}"))
        .to_owned();
    (child, url)
}

// The collector answers while this thread waits for the proxy to exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_door_exports_its_decisions_too() {
    let (collector, received) = http_collector().await;
    let upstream = common::serve_app(
        axum::Router::new().route("/hello", axum::routing::get(|| async { "hello" })),
    )
    .await;
    let (_dir, path) = config_file();
    let endpoint = format!("http://{collector}");
    let (mut child, url) = proxy(
        upstream,
        &path,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let trace = "9bf92f3577b34da6a3ce929d0e0e473b";
    let response = reqwest::Client::new()
        .get(format!("{url}/hello"))
        .header("traceparent", traceparent(trace, "50f067aa0ba902bc"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let (_, span) = received.span_of_trace(trace).await;
    assert_eq!(hex(&span.parent_span_id), "50f067aa0ba902bc");
    assert_eq!(text(&span, "ratekeeper.door"), "proxy");
    assert_eq!(text(&span, "ratekeeper.decision"), "allowed");
    let _ = child.kill();
    let _ = child.wait();
}
