//! Limitador's limits files (`[limitador]`) over real sockets: Envoy's
//! `ShouldRateLimit` over gRPC and Limitador's HTTP routes, on an
//! in-memory store whose clock is a manual one.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::TestService;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{RateLimitRequest, RateLimitResponse};
use ratekeeper_server::Config;
use serde_json::{json, Value};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// A native limit in another domain: the TOML file needs one.
const NATIVE: &str =
    "[[limits]]\nname = \"native\"\nrate = \"1/second\"\nkey = [\"global\"]\n[limits.match]\ndomain = \"native-only\"\ndescriptors = [{ key = \"k\" }]\n";

/// Limitador's fixtures, found as ratekeeper_formats::limitador's tests
/// find them.
pub(crate) fn compat(file: &str) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::var_os("RATEKEEPER_COMPAT_DIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(crate_dir.ancestors().map(|dir| dir.join("shared/compat")))
        .chain([PathBuf::from("/work/shared/compat")])
        .map(|compat| compat.join("limitador"))
        .find(|candidate| candidate.is_dir())
        .expect("shared/compat/limitador; set RATEKEEPER_COMPAT_DIR");
    dir.join(file)
}

/// The TOML of a service on free ports (gRPC too) serving `limits_file`.
fn toml(limits_file: &Path) -> String {
    format!(
        "[listen]\nhttp = \"127.0.0.1:0\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"off\"\n\
         [limitador]\nconfig_file = {:?}\n{NATIVE}",
        limits_file.display().to_string()
    )
}

/// A running service, a gRPC client to it, and the limits file's folder.
struct Limitador {
    service: TestService,
    rls: RateLimitServiceClient<Channel>,
    _dir: Option<tempfile::TempDir>,
}

impl Limitador {
    async fn on_file(file: &Path) -> Limitador {
        Limitador::start(&toml(file), None, None).await
    }

    async fn on_yaml(yaml: &str) -> Limitador {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("limits.yaml");
        std::fs::write(&file, yaml).unwrap();
        let mut limitador = Limitador::on_file(&file).await;
        limitador._dir = Some(dir);
        limitador
    }

    async fn start(toml: &str, path: Option<PathBuf>, watch: Option<Duration>) -> Limitador {
        let service = TestService::start_with(toml, path, watch).await;
        let addr = service.service.addrs().grpc.expect("grpc is on");
        Limitador {
            service,
            rls: crate::common::rls_client(addr).await,
            _dir: None,
        }
    }

    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.rls
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    }

    /// The overall code for `descriptors` in `domain`.
    async fn code(&mut self, domain: &str, descriptors: &[&[(&str, &str)]]) -> i32 {
        self.ask(request(domain, descriptors)).await.overall_code
    }

    /// POSTs `body` to `path`: status, headers and the body as text.
    async fn post(&self, path: &str, body: Value) -> (u16, reqwest::header::HeaderMap, String) {
        let response = self
            .service
            .client
            .post(self.service.http(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        (status, headers, response.text().await.unwrap())
    }

    fn advance(&self, secs: u64) {
        self.service.clock.advance(Duration::from_secs(secs));
    }

    async fn stop(self) {
        self.service.stop().await;
    }
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors: descriptors
            .iter()
            .map(|entries| crate::common::descriptor(entries))
            .collect(),
        hits_addend: 0,
    }
}

/// The examples fixture: a POST of a user is limited to 5 a minute per
/// user, every request to 1,000,000; the 5 refuses, and then counts in
/// neither.
#[tokio::test]
async fn the_examples_fixture_over_grpc() {
    let mut rls = Limitador::on_file(&compat("examples-limits.yaml")).await;
    let alice: &[(&str, &str)] = &[("req.method", "POST"), ("user_id", "alice")];
    for _ in 0..5 {
        assert_eq!(rls.code("test_namespace", &[alice]).await, OK);
    }
    let refused = rls.ask(request("test_namespace", &[alice])).await;
    assert_eq!(refused.overall_code, OVER);
    let status = &refused.statuses[0];
    assert_eq!(status.code, OVER);
    assert_eq!(status.limit_remaining, 0);
    assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 5);

    // Another user has a counter of their own.
    let bob: &[(&str, &str)] = &[("user_id", "bob"), ("req.method", "POST")];
    assert_eq!(rls.code("test_namespace", &[bob]).await, OK);

    // A GET meets the big limit only: 6 hits were taken from it (the
    // refused one took nothing), and this is the 7th.
    let get = rls
        .ask(request("test_namespace", &[&[("req.method", "GET")]]))
        .await;
    assert_eq!(get.overall_code, OK);
    assert_eq!(get.statuses[0].limit_remaining, 1_000_000 - 7);

    // A POST without a user leaves the variable unresolved: only the big
    // limit applies.
    assert_eq!(
        rls.code("test_namespace", &[&[("req.method", "POST")]])
            .await,
        OK
    );
    // Another domain is no Limitador namespace.
    assert_eq!(rls.code("other", &[alice]).await, OK);

    // A minute later alice's window is over.
    rls.advance(60);
    assert_eq!(rls.code("test_namespace", &[alice]).await, OK);
    rls.stop().await;
}

/// The examples fixture's limits, with a window of a year so that a test
/// on a store with the wall clock (SQLite, Redis) never meets a window's
/// end.
const EXAMPLES_LONG: &str = r#"
- namespace: test_namespace
  max_value: 1000000
  seconds: 31536000
  conditions: []
  variables: []
- namespace: test_namespace
  max_value: 5
  seconds: 31536000
  conditions: ["descriptors[0]['req.method'] == 'POST'"]
  variables: ["descriptors[0]['user_id']"]
"#;

/// The examples' decisions on SQLite and, when `redis-server` is
/// installed, on Redis: the same counts, all or nothing.
#[tokio::test]
async fn the_examples_on_sqlite_and_redis() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    std::fs::write(&file, EXAMPLES_LONG).unwrap();
    let sqlite = dir.path().join("counts.db").display().to_string();
    let mut stores = vec![format!("[store]\nkind = \"sqlite\"\npath = {sqlite:?}\n")];
    let redis = ratekeeper_test_support::redis::RedisServer::start();
    if let Some(redis) = &redis {
        stores.push(format!(
            "[store]\nkind = \"redis\"\nurl = \"{}\"\ntimeout_ms = 10000\n",
            redis.url()
        ));
    }
    for store in stores {
        let mut rls = Limitador::start(&format!("{store}{}", toml(&file)), None, None).await;
        let alice: &[(&str, &str)] = &[("req.method", "POST"), ("user_id", "alice")];
        for _ in 0..5 {
            assert_eq!(rls.code("test_namespace", &[alice]).await, OK, "{store}");
        }
        assert_eq!(rls.code("test_namespace", &[alice]).await, OVER, "{store}");
        let bob: &[(&str, &str)] = &[("req.method", "POST"), ("user_id", "bob")];
        assert_eq!(rls.code("test_namespace", &[bob]).await, OK, "{store}");
        let get = rls
            .ask(request("test_namespace", &[&[("req.method", "GET")]]))
            .await;
        assert_eq!(get.overall_code, OK, "{store}");
        assert_eq!(get.statuses[0].limit_remaining, 1_000_000 - 7, "{store}");
        rls.stop().await;
    }
}

/// The sandbox fixture: limits by method and path, a descriptor matching
/// by the entries it has, in any order, whatever else it holds.
#[tokio::test]
async fn the_sandbox_fixture_over_grpc() {
    let mut rls = Limitador::on_file(&compat("sandbox-limits.yaml")).await;
    let get_root: &[(&str, &str)] = &[("req.path", "/"), ("x", "y"), ("req.method", "GET")];
    for _ in 0..10 {
        assert_eq!(rls.code("test_namespace", &[get_root]).await, OK);
    }
    assert_eq!(rls.code("test_namespace", &[get_root]).await, OVER);
    let post_root: &[(&str, &str)] = &[("req.method", "POST"), ("req.path", "/")];
    for _ in 0..5 {
        assert_eq!(rls.code("test_namespace", &[post_root]).await, OK);
    }
    assert_eq!(rls.code("test_namespace", &[post_root]).await, OVER);
    // GET /json has 50,000 per 10 s: untouched by the others.
    let json_get = rls
        .ask(request(
            "test_namespace",
            &[&[("req.method", "GET"), ("req.path", "/json")]],
        ))
        .await;
    assert_eq!(json_get.overall_code, OK);
    assert_eq!(json_get.statuses[0].limit_remaining, 49_999);
    rls.stop().await;
}

/// The examples of Limitador's "how it works" page, each a limit of 1 per
/// minute: applying, the second request is refused; not applying, never.
#[tokio::test]
async fn the_how_it_works_examples_over_grpc() {
    let yaml = r#"
- namespace: applies
  max_value: 1
  seconds: 60
  conditions: ["descriptors[0].KEY_A == 'VALUE_A'"]
  variables: []
- namespace: key-missing
  max_value: 1
  seconds: 60
  conditions: ["descriptors[0].KEY_B == 'VALUE_B'"]
  variables: []
- namespace: not-all-conditions
  max_value: 1
  seconds: 60
  conditions:
    - "descriptors[0].KEY_A == 'VALUE_A'"
    - "descriptors[0].OTHER_KEY == 'WRONG_VALUE'"
  variables: []
- namespace: variable-missing
  max_value: 1
  seconds: 60
  conditions: []
  variables: ["descriptors[0].MY_VAR"]
- namespace: both-needed
  max_value: 1
  seconds: 60
  conditions: ["descriptors[0].KEY_B == 'VALUE_B'"]
  variables: ["descriptors[0].MY_VAR"]
"#;
    let mut rls = Limitador::on_yaml(yaml).await;
    let entries: &[(&str, &str)] = &[("KEY_A", "VALUE_A"), ("OTHER_KEY", "OTHER_VALUE")];
    assert_eq!(rls.code("applies", &[entries]).await, OK);
    assert_eq!(rls.code("applies", &[entries]).await, OVER);
    for namespace in [
        "key-missing",
        "not-all-conditions",
        "variable-missing",
        "both-needed",
    ] {
        for _ in 0..3 {
            assert_eq!(rls.code(namespace, &[entries]).await, OK, "{namespace}");
        }
    }
    rls.stop().await;
}

/// Each condition form Limitador's files use, and the others this loader
/// reads: a limit of 1 per minute in a namespace of its own; `applies`
/// says whether the request below meets it.
#[tokio::test]
async fn each_condition_form_over_grpc() {
    let forms = [
        ("brackets-eq", "descriptors[0]['method'] == 'GET'", true),
        ("dot-eq", "descriptors[0].method == \"GET\"", true),
        ("ne", "descriptors[0]['path'] != '/health'", true),
        ("ne-false", "descriptors[0].method != 'GET'", false),
        (
            "and",
            "descriptors[0].method == 'GET' && descriptors[0].path == '/api'",
            true,
        ),
        (
            "and-false",
            "descriptors[0].method == 'GET' && descriptors[0].path == '/x'",
            false,
        ),
        (
            "or",
            "descriptors[0].method == 'PUT' || descriptors[1].tier == 'gold'",
            true,
        ),
        ("not", "!(descriptors[0].method == 'PUT')", true),
        (
            "second-descriptor",
            "descriptors[1]['tier'] == 'gold'",
            true,
        ),
        ("third-descriptor", "descriptors[2].tier == 'gold'", false),
        ("dotted-key", "descriptors[0]['user.id'] == '7'", true),
    ];
    let mut yaml = String::new();
    for (namespace, condition, _) in forms {
        yaml.push_str(&format!(
            "- namespace: {namespace}\n  max_value: 1\n  seconds: 60\n  conditions: [{condition:?}]\n  variables: []\n"
        ));
    }
    let mut rls = Limitador::on_yaml(&yaml).await;
    let first: &[(&str, &str)] = &[("method", "GET"), ("path", "/api"), ("user.id", "7")];
    let second: &[(&str, &str)] = &[("tier", "gold")];
    for (namespace, condition, applies) in forms {
        assert_eq!(
            rls.code(namespace, &[first, second]).await,
            OK,
            "{condition}"
        );
        let expected = if applies { OVER } else { OK };
        assert_eq!(
            rls.code(namespace, &[first, second]).await,
            expected,
            "{condition}"
        );
    }
    rls.stop().await;
}

/// Variables: one counter per value, several variables per combination;
/// `hits_addend` counts; `max_value: 0` refuses every request.
#[tokio::test]
async fn variables_hits_and_zero_over_grpc() {
    let yaml = r#"
- namespace: api
  max_value: 4
  seconds: 10
  conditions: []
  variables: ["descriptors[0].user", "descriptors[0]['app']"]
- namespace: closed
  max_value: 0
  seconds: 10
  conditions: []
  variables: []
"#;
    let mut rls = Limitador::on_yaml(yaml).await;
    let mut hits = request("api", &[&[("user", "a"), ("app", "x")]]);
    hits.hits_addend = 3;
    assert_eq!(rls.ask(hits.clone()).await.overall_code, OK);
    // 3 of 4 taken: 3 more do not fit, and take nothing.
    assert_eq!(rls.ask(hits.clone()).await.overall_code, OVER);
    assert_eq!(rls.code("api", &[&[("user", "a"), ("app", "x")]]).await, OK);
    assert_eq!(
        rls.code("api", &[&[("user", "a"), ("app", "x")]]).await,
        OVER
    );
    // Another app of the same user counts apart.
    assert_eq!(rls.code("api", &[&[("user", "a"), ("app", "y")]]).await, OK);
    // The window is over after 10 s.
    rls.advance(10);
    assert_eq!(rls.ask(hits).await.overall_code, OK);

    let closed = rls.ask(request("closed", &[&[("any", "thing")]])).await;
    assert_eq!(closed.overall_code, OVER);
    assert_eq!(closed.statuses[0].limit_remaining, 0);
    rls.stop().await;
}

/// Limitador's HTTP routes: `/check` takes nothing, `/check_and_report`
/// takes all or nothing with its draft-03 headers, `/report` counts
/// whatever is left, `/limits/{namespace}` lists the limits.
#[tokio::test]
async fn the_http_routes_answer_as_limitador() {
    let rls = Limitador::on_file(&compat("examples-limits.yaml")).await;
    let body = |delta: u64| {
        json!({
            "namespace": "test_namespace",
            "values": {"req.method": "POST", "user_id": "alice"},
            "delta": delta,
        })
    };

    // /check never counts.
    for _ in 0..10 {
        let (status, _, text) = rls.post("/check", body(1)).await;
        assert_eq!((status, text.as_str()), (200, "null"));
    }
    let (status, _, text) = rls.post("/check", body(6)).await;
    assert_eq!((status, text.as_str()), (429, "Too many requests"));

    // /check_and_report counts; with draft-03 headers, the tightest limit
    // first, every limit that applied in the limit field.
    let mut with_headers = body(2);
    with_headers["response_headers"] = json!("DraftVersion03");
    let (status, headers, text) = rls.post("/check_and_report", with_headers.clone()).await;
    assert_eq!((status, text.as_str()), (200, "null"));
    assert_eq!(headers["x-ratelimit-limit"], "5, 5;w=60, 1000000;w=60");
    assert_eq!(headers["x-ratelimit-remaining"], "3");
    // The window's end: a minute after its counter's first hit, as
    // Limitador counts (not on the clock's minute, 20 s away).
    assert_eq!(headers["x-ratelimit-reset"], "60");
    let (status, _, _) = rls.post("/check_and_report", body(2)).await;
    assert_eq!(status, 200);
    // 1 left: 2 more are refused, and take nothing from either limit.
    let (status, headers, text) = rls.post("/check_and_report", with_headers).await;
    assert_eq!((status, text.as_str()), (429, "null"));
    assert_eq!(headers["x-ratelimit-remaining"], "1");
    let (status, headers, _) = rls.post("/check_and_report", body(1)).await;
    assert_eq!(status, 200);
    assert!(headers.get("x-ratelimit-limit").is_none());
    assert_eq!(rls.post("/check", body(1)).await.0, 429);

    // /report counts whatever is left, for bob: 7 of 5 fills his counter.
    let bob = json!({"namespace": "test_namespace", "values": {"req.method": "POST", "user_id": "bob"}, "delta": 7});
    let (status, _, text) = rls.post("/report", bob.clone()).await;
    assert_eq!((status, text.as_str()), (200, "null"));
    let mut bob_once = bob;
    bob_once["delta"] = json!(1);
    assert_eq!(rls.post("/check_and_report", bob_once.clone()).await.0, 429);

    // The window ends a minute later.
    rls.advance(60);
    assert_eq!(rls.post("/check_and_report", bob_once).await.0, 200);

    let limits = rls
        .service
        .get_json(rls.service.http("/limits/test_namespace"))
        .await;
    assert_eq!(
        limits,
        json!([
            {"id": null, "namespace": "test_namespace", "max_value": 1000000, "seconds": 60,
             "name": null, "conditions": [], "variables": []},
            {"id": null, "namespace": "test_namespace", "max_value": 5, "seconds": 60,
             "name": null, "conditions": ["descriptors[0]['req.method'] == 'POST'"],
             "variables": ["descriptors[0]['user_id']"]},
        ])
    );
    let none = rls
        .service
        .get_json(rls.service.http("/limits/nobody"))
        .await;
    assert_eq!(none, json!([]));
    rls.stop().await;
}

/// The JSON routes' caps and errors hold for Limitador's routes too.
#[tokio::test]
async fn the_http_routes_are_capped_and_refuse_bad_bodies() {
    let rls = Limitador::on_file(&compat("examples-limits.yaml")).await;
    let values: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    let over = json!({"namespace": "test_namespace", "values": values, "delta": 1});
    for path in ["/check", "/report", "/check_and_report"] {
        assert_eq!(rls.post(path, over.clone()).await.0, 413, "{path}");
        let no_delta = json!({"namespace": "test_namespace", "values": {}});
        assert_eq!(rls.post(path, no_delta).await.0, 400, "{path}");
    }
    rls.stop().await;
}

/// Limitador's routes are behind `[access.decisions]` as the others.
#[tokio::test]
async fn the_http_routes_need_the_decisions_token() {
    const TOKEN: &str = "a-token-of-thirty-two-characters";
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("decisions");
    std::fs::write(&tokens, format!("{TOKEN}\n")).unwrap();
    let text = format!(
        "{}\n[access.decisions]\ntoken_file = {:?}\n",
        toml(&compat("examples-limits.yaml")),
        tokens.display().to_string()
    );
    let rls = Limitador::start(&text, None, None).await;
    let body = json!({"namespace": "test_namespace", "values": {}, "delta": 1});
    let client = &rls.service.client;
    for path in ["/check", "/report", "/check_and_report"] {
        let url = rls.service.http(path);
        let refused = client.post(&url).json(&body).send().await.unwrap();
        assert_eq!(refused.status().as_u16(), 401, "{path}");
        let allowed = client
            .post(&url)
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(allowed.status().as_u16(), 200, "{path}");
    }
    let url = rls.service.http("/limits/test_namespace");
    assert_eq!(
        client.get(&url).send().await.unwrap().status().as_u16(),
        401
    );
    rls.stop().await;
}

/// Editing the limits file alone reloads it, counts of unchanged limits
/// kept.
#[tokio::test]
async fn a_changed_limits_file_is_picked_up_without_a_signal() {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.yaml");
    let one = "- {namespace: ns, max_value: 2, seconds: 60, conditions: [], variables: []}\n";
    std::fs::write(&limits, one).unwrap();
    let toml_path = dir.path().join("ratekeeper.toml");
    let text = toml(&limits);
    std::fs::write(&toml_path, &text).unwrap();
    let mut rls = Limitador::start(&text, Some(toml_path), Some(Duration::from_millis(50))).await;
    let any: &[(&str, &str)] = &[("a", "b")];
    assert_eq!(rls.code("ns", &[any]).await, OK);
    assert_eq!(rls.code("other", &[any]).await, OK);

    let two = format!(
        "{one}- {{namespace: other, max_value: 1, seconds: 60, conditions: [], variables: []}}\n"
    );
    std::fs::write(&limits, two).unwrap();
    let listed = |rls: &Limitador| {
        let url = rls.service.http("/limits/other");
        let client = rls.service.client.clone();
        async move {
            let answer: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            answer.as_array().map_or(0, Vec::len)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed(&rls).await != 1 {
        assert!(Instant::now() < deadline, "the change was not picked up");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The unchanged limit kept its count: one of two is left.
    assert_eq!(rls.code("ns", &[any]).await, OK);
    assert_eq!(rls.code("ns", &[any]).await, OVER);
    assert_eq!(rls.code("other", &[any]).await, OK);
    assert_eq!(rls.code("other", &[any]).await, OVER);
    rls.stop().await;
}

#[test]
fn the_setting_comes_from_the_file_or_the_environment_and_errors_name_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(
        &good,
        "- {namespace: ns, max_value: 2, seconds: 60, conditions: [], variables: []}\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "- namespace: ns\n  max_value: 2\n  seconds: 60\n  conditions: [\"descriptors[0].a === 'x'\"]\n  variables: []\n",
    )
    .unwrap();

    let config = Config::from_toml_str(&toml(&good), "test.toml").unwrap();
    // `ratekeeper check` tells the file and its limits.
    let explained = config.explain();
    assert!(
        explained.contains(&format!(
            "limitador: {}, 1 limit\n  namespace ns: 2 per 60s, fixed window\n",
            good.display()
        )),
        "{explained}"
    );
    assert_eq!(config.limitador.unwrap().limits.limits().len(), 1);

    let error = Config::from_toml_str(&toml(&bad), "test.toml")
        .unwrap_err()
        .to_string();
    let expected = format!("{}:4:16: conditions[0]: at character 20", bad.display());
    assert!(error.starts_with(&expected), "{error}");

    // The environment names the file (as `--limitador-config` does).
    let vars = [(
        "RATEKEEPER_LIMITADOR__CONFIG_FILE",
        good.display().to_string(),
    )];
    let config = Config::from_toml_str_with_env(&toml(&bad), "test.toml", vars).unwrap();
    assert_eq!(config.limitador.unwrap().path, good);

    let missing = dir.path().join("missing.yaml");
    let error = Config::from_toml_str(&toml(&missing), "test.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("test.toml:6:15: limitador.config_file: cannot read"),
        "{error}"
    );
}

/// `ratekeeper serve --limitador-config FILE`, as a real process on the
/// built-in defaults: the file's limits on the HTTP door, reloaded on
/// SIGHUP with their counts.
#[tokio::test]
async fn the_serve_flag_loads_the_file_and_reloads_keep_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.yaml");
    let limits = |name: &str| {
        format!(
            "- {{namespace: ns, max_value: 1, seconds: 3600, conditions: [], variables: [], name: {name}}}\n"
        )
    };
    std::fs::write(&file, limits("first")).unwrap();
    let process = common::ServeProcess::start(
        &["--limitador-config", file.to_str().unwrap(), "--watch", "0"],
        &[],
    );
    assert_eq!(
        process.banner[0],
        "ratekeeper 0.1.0 (memory store, 1 limit, 1 Limitador limit in 1 namespace)"
    );
    let client = reqwest::Client::new();
    let url = format!("http://{}/check_and_report", process.http);
    let body = json!({"namespace": "ns", "values": {}, "delta": 1});
    let status = |body: Value| {
        let (client, url) = (client.clone(), url.clone());
        async move {
            let response = client.post(url).json(&body).send().await.unwrap();
            response.status().as_u16()
        }
    };
    assert_eq!(status(body.clone()).await, 200);
    assert_eq!(status(body.clone()).await, 429);
    // /metrics counts the limit's decisions under its name.
    let metrics = reqwest::get(format!("http://{}/metrics", process.admin.unwrap()))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted = |decision: &str| {
        metrics.lines().any(|line| {
            line.starts_with("ratekeeper_decisions_total{")
                && line.contains("limit=\"limitador/ns/")
                && line.contains(&format!("decision=\"{decision}\""))
                && line.ends_with(" 1")
        })
    };
    assert!(counted("allowed") && counted("denied"), "{metrics}");

    // Renamed: the same limit to Limitador, whose count is kept.
    std::fs::write(&file, limits("renamed")).unwrap();
    process.signal("HUP");
    let listed = format!("http://{}/limits/ns", process.http);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer: Value = client
            .get(&listed)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if answer[0]["name"] == "renamed" {
            break;
        }
        assert!(Instant::now() < deadline, "not reloaded: {answer}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(body).await, 429);
}

/// One request of the model test: method, user and path (each possibly
/// absent), hits, and the seconds the clock moves before it.
type Step = (
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
    u32,
    u64,
);

const MODEL_LIMITS: &str = r#"
- namespace: ns
  max_value: 3
  seconds: 60
  conditions: ["descriptors[0].m == 'GET'"]
  variables: ["descriptors[0].u"]
- namespace: ns
  max_value: 5
  seconds: 60
  conditions: []
  variables: []
- namespace: ns
  max_value: 2
  seconds: 30
  conditions: ["descriptors[0].m != 'GET' && descriptors[0]['p'] == '/a'"]
  variables: ["descriptors[0]['u']"]
"#;

/// What Limitador decides: every limit that applies is checked, and
/// counted only when none is over; a counter's window opens at its first
/// hit and lasts the limit's seconds.
struct Model {
    /// (window start, count) per (limit, its variable's value).
    counts: std::collections::HashMap<(usize, Option<&'static str>), (u64, u64)>,
}

impl Model {
    fn decide(&mut self, step: &Step, now: u64) -> bool {
        let (m, u, p, hits, _) = *step;
        let hits = u64::from(hits);
        // (limit, its variable's value, max, window)
        let mut applying = Vec::new();
        if m == Some("GET") && u.is_some() {
            applying.push((0, u, 3, 60));
        }
        applying.push((1, None, 5, 60));
        // `m != 'GET'` reads m first: missing, the condition is unresolved.
        if m.is_some_and(|m| m != "GET") && p == "/a" && u.is_some() {
            applying.push((2, u, 2, 30));
        }
        // A counter whose window ended is gone: the next hit opens one.
        let current =
            |counts: &std::collections::HashMap<_, (u64, u64)>,
             &(limit, value, _, window): &(usize, Option<&'static str>, u64, u64)| {
                match counts.get(&(limit, value)) {
                    Some(&(start, count)) if count > 0 && now < start + window => (start, count),
                    _ => (now, 0),
                }
            };
        let over = applying
            .iter()
            .any(|applied| current(&self.counts, applied).1 + hits > applied.2);
        if !over {
            for applied in &applying {
                let (start, count) = current(&self.counts, applied);
                self.counts
                    .insert((applied.0, applied.1), (start, count + hits));
            }
        }
        !over
    }
}

fn steps() -> impl proptest::strategy::Strategy<Value = Vec<Step>> {
    use proptest::prelude::*;
    let step = (
        prop::option::of(prop::sample::select(vec!["GET", "POST"])),
        prop::option::of(prop::sample::select(vec!["alice", "bob"])),
        prop::sample::select(vec!["/a", "/b"]),
        1u32..4,
        prop::sample::select(vec![0u64, 0, 0, 1, 7, 29, 31, 61]),
    );
    proptest::collection::vec(step, 1..40)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// The Envoy door decides every request of a random sequence as the
    /// model of Limitador's semantics does.
    #[test]
    fn grpc_decisions_follow_limitadors_semantics(steps in steps()) {
        use std::sync::Arc;
        use ratekeeper::{clock::ManualClock, Timestamp};
        use ratekeeper_server::engine::Engine;
        use ratekeeper_server::envoy::EnvoyService;

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("limits.yaml");
        std::fs::write(&file, MODEL_LIMITS).unwrap();
        let config = Config::from_toml_str(&toml(&file), "test.toml").unwrap();
        // Windows open at first hits: the clock's start does not matter.
        let clock = Arc::new(ManualClock::new(Timestamp::from_secs(0)));
        let engine = runtime.block_on(Engine::builder(&config).clock(clock.clone()).start()).unwrap();
        let service = EnvoyService::new(engine);
        let mut model = Model { counts: Default::default() };
        let mut now = 0;
        for (index, step) in steps.iter().enumerate() {
            let (m, u, p, hits, advance) = *step;
            now += advance;
            clock.advance(Duration::from_secs(advance));
            let mut entries = vec![("p", p)];
            entries.extend(m.map(|m| ("m", m)));
            entries.extend(u.map(|u| ("u", u)));
            let mut ask = request("ns", &[&entries]);
            ask.hits_addend = hits;
            let answer = runtime.block_on(service.decide(&ask)).unwrap();
            let expected = if model.decide(step, now) { OK } else { OVER };
            proptest::prop_assert_eq!(answer.overall_code, expected, "step {} {:?}", index, step);
        }
    }
}
