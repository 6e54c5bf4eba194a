//! Envoy's rate limit service over real gRPC on loopback: the service
//! started in-process on 127.0.0.1:0, asked by a tonic client generated
//! from the same .proto files.

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use ratekeeper_server::envoy::proto::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{
    RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
};
use ratekeeper_server::envoy::EnvoyService;
use ratekeeper_server::Config;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A running service and a client connected to it.
struct Rls {
    client: RateLimitServiceClient<Channel>,
    clock: Arc<ManualClock>,
    _stop: oneshot::Sender<()>,
    _dir: Option<tempfile::TempDir>,
}

async fn serve(engine: Engine) -> (RateLimitServiceClient<Channel>, oneshot::Sender<()>) {
    crate::common::serve_rls(engine).await
}

/// The service on an in-memory store running on a manual clock.
async fn start(toml: &str) -> Rls {
    let config = Config::from_toml_str(toml, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (client, stop) = serve(engine).await;
    Rls {
        client,
        clock,
        _stop: stop,
        _dir: None,
    }
}

use crate::common::descriptor;

fn with_hits(mut descriptor: RateLimitDescriptor, hits: u64) -> RateLimitDescriptor {
    descriptor.hits_addend = Some(hits);
    descriptor
}

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: 0,
    }
}

impl Rls {
    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    }

    /// One descriptor in `domain`; its status and the overall code.
    async fn one(&mut self, domain: &str, descriptor: RateLimitDescriptor) -> DescriptorStatus {
        let response = self.ask(request(domain, vec![descriptor])).await;
        assert_eq!(response.statuses.len(), 1);
        let status = response.statuses[0].clone();
        assert_eq!(response.overall_code, status.code, "{response:?}");
        status
    }
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

const PER_IP: &str = r#"
[[limits]]
name = "per-ip"
rate = "3/minute"
policy = "fixed_window"
key = ["client_ip"]
match = { domain = "edge", descriptors = [{ key = "remote_address" }] }
"#;

#[tokio::test]
async fn every_descriptor_gets_a_status_and_unmatched_ones_are_ok_without_a_limit() {
    let mut rls = start(PER_IP).await;
    let response = rls
        .ask(request(
            "edge",
            vec![
                descriptor(&[("remote_address", "10.0.0.1")]),
                descriptor(&[("header_match", "x")]),
            ],
        ))
        .await;
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses.len(), 2);
    let first = &response.statuses[0];
    assert_eq!(first.code, OK);
    let limit = first.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit, limit.unit),
        ("per-ip", 3, Unit::Minute as i32)
    );
    assert_eq!(first.limit_remaining, 2);
    let reset = first.duration_until_reset.unwrap();
    assert!(reset.seconds > 0 && reset.seconds <= 60, "{reset:?}");
    let second = &response.statuses[1];
    assert_eq!(second.code, OK);
    assert_eq!(second.current_limit, None);
    assert_eq!(second.limit_remaining, 0);

    // Another domain knows no limit.
    let other = rls
        .one("inner", descriptor(&[("remote_address", "10.0.0.1")]))
        .await;
    assert_eq!((other.code, other.current_limit), (OK, None));
}

#[tokio::test]
async fn a_limit_of_n_admits_exactly_n() {
    let mut rls = start(PER_IP).await;
    let ip = || descriptor(&[("remote_address", "10.0.0.1")]);
    for remaining in [2, 1, 0] {
        let status = rls.one("edge", ip()).await;
        assert_eq!((status.code, status.limit_remaining), (OK, remaining));
    }
    for _ in 0..3 {
        let status = rls.one("edge", ip()).await;
        assert_eq!((status.code, status.limit_remaining), (OVER, 0));
    }
    // Each address has its own count.
    let other = rls
        .one("edge", descriptor(&[("remote_address", "10.0.0.2")]))
        .await;
    assert_eq!(other.code, OK);
    // The next window admits again.
    rls.clock.advance(Duration::from_secs(60));
    assert_eq!(rls.one("edge", ip()).await.code, OK);
}

#[tokio::test]
async fn wildcards_and_nested_descriptors_match_as_in_envoys_service() {
    let mut rls = start(
        r#"
[[limits]]
name = "ip"
rate = "2/minute"
key = ["global"]
match = { domain = "edge", descriptors = [{ key = "remote_address" }] }

[[limits]]
name = "ip-login"
rate = "1/minute"
key = ["global"]
match = { domain = "edge", descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }] }

[[limits]]
name = "api"
rate = "1/minute"
key = ["global"]
match = { domain = "edge", descriptors = [{ key = "path", value = "/api/*" }] }
"#,
    )
    .await;
    let name = |status: &DescriptorStatus| status.current_limit.as_ref().map(|l| l.name.clone());

    // Nested: only the two-entry limit applies, per address.
    let login = |ip: &str| descriptor(&[("remote_address", ip), ("path", "/login")]);
    let status = rls.one("edge", login("10.0.0.1")).await;
    assert_eq!(
        (status.code, name(&status).as_deref()),
        (OK, Some("ip-login"))
    );
    assert_eq!(rls.one("edge", login("10.0.0.1")).await.code, OVER);
    assert_eq!(rls.one("edge", login("10.0.0.2")).await.code, OK);
    // The one-entry limit was not touched by the nested descriptor.
    let status = rls
        .one("edge", descriptor(&[("remote_address", "10.0.0.1")]))
        .await;
    assert_eq!((status.code, status.limit_remaining), (OK, 1));
    assert_eq!(name(&status).as_deref(), Some("ip"));
    // Another path under the same address: no limit has those entries.
    let status = rls
        .one(
            "edge",
            descriptor(&[("remote_address", "10.0.0.1"), ("path", "/home")]),
        )
        .await;
    assert_eq!((status.code, status.current_limit), (OK, None));

    // Prefix: every value under /api/ matches, each counted separately.
    let api = |path: &str| descriptor(&[("path", path)]);
    assert_eq!(
        name(&rls.one("edge", api("/api/users")).await).as_deref(),
        Some("api")
    );
    assert_eq!(rls.one("edge", api("/api/users")).await.code, OVER);
    assert_eq!(rls.one("edge", api("/api/orders")).await.code, OK);
    assert_eq!(rls.one("edge", api("/apix")).await.current_limit, None);
}

#[tokio::test]
async fn hits_addend_at_request_and_descriptor_level() {
    let mut rls = start(
        r#"
[[limits]]
name = "per-user"
rate = "10/minute"
policy = "fixed_window"
key = ["descriptor:user"]
match = { domain = "d", descriptors = [{ key = "user" }] }
"#,
    )
    .await;
    let user = || descriptor(&[("user", "alice")]);

    // The request's hits_addend.
    let mut ask = request("d", vec![user()]);
    ask.hits_addend = 3;
    assert_eq!(rls.ask(ask.clone()).await.statuses[0].limit_remaining, 7);
    // The descriptor's replaces it.
    ask.descriptors = vec![with_hits(user(), 2)];
    assert_eq!(rls.ask(ask.clone()).await.statuses[0].limit_remaining, 5);
    // 0 at the descriptor only reports.
    ask.descriptors = vec![with_hits(user(), 0)];
    for _ in 0..3 {
        let response = rls.ask(ask.clone()).await;
        assert_eq!(
            (response.overall_code, response.statuses[0].limit_remaining),
            (OK, 5)
        );
    }
    // 0 at the request means 1.
    assert_eq!(rls.one("d", user()).await.limit_remaining, 4);
    // More hits than remain: refused, nothing taken.
    let status = rls.one("d", with_hits(user(), 5)).await;
    assert_eq!((status.code, status.limit_remaining), (OVER, 4));
    let status = rls.one("d", with_hits(user(), 4)).await;
    assert_eq!((status.code, status.limit_remaining), (OK, 0));
    // Reporting an exhausted key is not over the limit, as in Envoy's service.
    assert_eq!(rls.one("d", with_hits(user(), 0)).await.code, OK);
    assert_eq!(rls.one("d", user()).await.code, OVER);
}

#[tokio::test]
async fn a_descriptor_override_replaces_the_configured_limit() {
    let mut rls = start(PER_IP).await;
    let overridden = |requests, unit: RateLimitUnit| {
        let mut d = descriptor(&[("remote_address", "10.0.0.1")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: requests,
            unit: unit as i32,
        });
        d
    };
    for remaining in [1, 0] {
        let status = rls.one("edge", overridden(2, RateLimitUnit::Hour)).await;
        assert_eq!((status.code, status.limit_remaining), (OK, remaining));
        let limit = status.current_limit.unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("envoy-override-2-per-hour", 2, Unit::Hour as i32)
        );
        let reset = status.duration_until_reset.unwrap().seconds;
        assert!(reset > 60 && reset <= 3600, "{reset}");
    }
    assert_eq!(
        rls.one("edge", overridden(2, RateLimitUnit::Hour))
            .await
            .code,
        OVER
    );
    // The configured limit was not used.
    let status = rls
        .one("edge", descriptor(&[("remote_address", "10.0.0.1")]))
        .await;
    assert_eq!((status.code, status.limit_remaining), (OK, 2));
    // Other numbers are another count.
    assert_eq!(
        rls.one("edge", overridden(5, RateLimitUnit::Hour))
            .await
            .code,
        OK
    );
    // Zero per unit refuses every hit.
    let status = rls.one("edge", overridden(0, RateLimitUnit::Second)).await;
    assert_eq!(status.code, OVER);
    assert_eq!(status.current_limit.unwrap().requests_per_unit, 0);
    // A zero override refuses the whole request: the other descriptor
    // reports but takes nothing.
    let response = rls
        .ask(request(
            "edge",
            vec![
                overridden(0, RateLimitUnit::Minute),
                descriptor(&[("remote_address", "10.0.0.9")]),
            ],
        ))
        .await;
    assert_eq!(response.overall_code, OVER);
    assert_eq!(
        (response.statuses[0].code, response.statuses[1].code),
        (OVER, OK)
    );
    let status = rls
        .one(
            "edge",
            with_hits(descriptor(&[("remote_address", "10.0.0.9")]), 0),
        )
        .await;
    assert_eq!(status.limit_remaining, 3);
    // In a domain no limit names, an override is ignored, as in Envoy's service.
    let status = rls
        .one("elsewhere", overridden(1, RateLimitUnit::Hour))
        .await;
    assert_eq!((status.code, status.current_limit), (OK, None));
    // An unknown unit is a bad request.
    let error = rls
        .client
        .should_rate_limit(request("edge", vec![overridden(1, RateLimitUnit::Unknown)]))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().contains("descriptors[0].limit"), "{error}");
}

#[tokio::test]
async fn negative_hits_give_back() {
    let mut rls = start(PER_IP).await;
    let ip = || descriptor(&[("remote_address", "10.0.0.1")]);
    for _ in 0..3 {
        assert_eq!(rls.one("edge", ip()).await.code, OK);
    }
    assert_eq!(rls.one("edge", ip()).await.code, OVER);
    let mut refund = with_hits(ip(), 2);
    refund.is_negative_hits = true;
    let status = rls.one("edge", refund).await;
    assert_eq!((status.code, status.limit_remaining), (OK, 2));
    assert_eq!(rls.one("edge", ip()).await.code, OK);
    assert_eq!(rls.one("edge", ip()).await.code, OK);
    assert_eq!(rls.one("edge", ip()).await.code, OVER);
}

#[tokio::test]
async fn responses_carry_the_draft_headers_and_retry_after_when_over() {
    let mut rls = start(PER_IP).await;
    let ask = || request("edge", vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    let response = rls.ask(ask()).await;
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some("\"per-ip\";q=3;w=60")
    );
    let value = header(&response, "ratelimit").unwrap();
    assert!(value.starts_with("\"per-ip\";r=2;t="), "{value}");
    assert_eq!(header(&response, "retry-after"), None);

    rls.ask(ask()).await;
    rls.ask(ask()).await;
    rls.clock.advance(Duration::from_secs(5));
    let response = rls.ask(ask()).await;
    assert_eq!(response.overall_code, OVER);
    let value = header(&response, "ratelimit").unwrap();
    assert_eq!(value, "\"per-ip\";r=0;t=15");
    // The fixed window began at t=960 (a multiple of 60), so at t=1005 the
    // next one starts in 15 s.
    assert_eq!(header(&response, "retry-after"), Some("15"));

    // No limit, no headers.
    let response = rls
        .ask(request("edge", vec![descriptor(&[("k", "v")])]))
        .await;
    assert!(response.response_headers_to_add.is_empty(), "{response:?}");
}

/// `[envoy] response_headers`: envoyproxy/ratelimit's three fields, named
/// as configured, of the descriptor closest to its limit (one over its
/// limit first), instead of or beside the draft's.
#[tokio::test]
async fn responses_can_carry_envoy_ratelimits_headers_by_their_configured_names() {
    let two_limits = |headers: &str| {
        format!(
            "[envoy]\n{headers}\n\
             [[limits]]\nname = \"per-ip\"\nrate = \"3/minute\"\npolicy = \"fixed_window\"\n\
             key = [\"client_ip\"]\nmatch = {{ domain = \"edge\", descriptors = [{{ key = \"remote_address\" }}] }}\n\
             [[limits]]\nname = \"per-user\"\nrate = \"10/hour\"\npolicy = \"fixed_window\"\n\
             key = [\"descriptor:user\"]\nmatch = {{ domain = \"edge\", descriptors = [{{ key = \"user\" }}] }}\n"
        )
    };
    let ask = || {
        request(
            "edge",
            vec![
                descriptor(&[("user", "alice")]),
                descriptor(&[("remote_address", "10.0.0.1")]),
            ],
        )
    };
    let names = "response_headers = \"envoy_ratelimit\"\nlimit_header = \"X-Limit\"\n\
                 remaining_header = \"X-Remaining\"\nreset_header = \"X-Reset\"";
    let mut rls = start(&two_limits(names)).await;
    let response = rls.ask(ask()).await;
    // The per-ip limit has 2 of 3 left, the per-user 9 of 10: per-ip is
    // the closest; its window (from t=960) ends in 20 s.
    assert_eq!(header(&response, "x-limit"), Some("3"));
    assert_eq!(header(&response, "x-remaining"), Some("2"));
    assert_eq!(header(&response, "x-reset"), Some("20"));
    assert_eq!(header(&response, "ratelimit"), None);
    assert_eq!(header(&response, "ratelimit-policy"), None);
    rls.ask(ask()).await;
    rls.ask(ask()).await;
    rls.clock.advance(Duration::from_millis(4_500));
    // Over the per-ip limit: that descriptor is reported, reset rounded up.
    let response = rls.ask(ask()).await;
    assert_eq!(response.overall_code, OVER);
    assert_eq!(header(&response, "x-remaining"), Some("0"));
    assert_eq!(header(&response, "x-limit"), Some("3"));
    assert_eq!(header(&response, "x-reset"), Some("16"));

    let mut both = start(&two_limits("response_headers = \"both\"")).await;
    let response = both.ask(ask()).await;
    assert_eq!(header(&response, "RateLimit-Limit"), Some("3"));
    assert_eq!(header(&response, "RateLimit-Remaining"), Some("2"));
    assert!(header(&response, "ratelimit").is_some());

    let mut none = start(&two_limits("response_headers = \"none\"")).await;
    let response = none.ask(ask()).await;
    assert!(response.response_headers_to_add.is_empty(), "{response:?}");
}

/// `[envoy] counting = "each_descriptor"`: as envoyproxy/ratelimit, a
/// descriptor whose limit allows is counted even when another refuses the
/// request; by default the refused request takes nothing from it.
#[tokio::test]
async fn descriptors_can_be_counted_each_on_its_own_as_envoy_ratelimit_counts() {
    let toml = |counting: &str| {
        format!(
            "[envoy]\ncounting = \"{counting}\"\n\
             [[limits]]\nname = \"strict\"\nrate = \"1/minute\"\npolicy = \"fixed_window\"\n\
             key = [\"descriptor:user\"]\nmatch = {{ domain = \"edge\", descriptors = [{{ key = \"user\" }}] }}\n\
             [[limits]]\nname = \"wide\"\nrate = \"5/minute\"\npolicy = \"fixed_window\"\n\
             key = [\"descriptor:path\"]\nmatch = {{ domain = \"edge\", descriptors = [{{ key = \"path\" }}] }}\n"
        )
    };
    let both = || {
        request(
            "edge",
            vec![
                descriptor(&[("user", "alice")]),
                descriptor(&[("path", "/a")]),
            ],
        )
    };
    for (counting, wide_left) in [("all_or_nothing", 3), ("each_descriptor", 2)] {
        let mut rls = start(&toml(counting)).await;
        assert_eq!(rls.ask(both()).await.overall_code, OK);
        let refused = rls.ask(both()).await;
        assert_eq!(refused.overall_code, OVER, "{counting}");
        assert_eq!(refused.statuses[0].code, OVER);
        assert_eq!(refused.statuses[1].code, OK);
        let wide = rls.one("edge", descriptor(&[("path", "/a")])).await;
        assert_eq!(wide.limit_remaining, wide_left, "{counting}");
    }
}

#[tokio::test]
async fn descriptors_are_decided_all_or_nothing() {
    let mut rls = start(
        r#"
[[limits]]
name = "per-user"
rate = "10/minute"
policy = "fixed_window"
key = ["descriptor:user"]
match = { domain = "d", descriptors = [{ key = "user" }] }

[[limits]]
name = "per-ip"
rate = "1/minute"
policy = "fixed_window"
key = ["client_ip"]
match = { domain = "d", descriptors = [{ key = "remote_address" }] }
"#,
    )
    .await;
    let both = || {
        request(
            "d",
            vec![
                descriptor(&[("user", "alice")]),
                descriptor(&[("remote_address", "10.0.0.1")]),
            ],
        )
    };
    let response = rls.ask(both()).await;
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses[0].limit_remaining, 9);
    assert_eq!(response.statuses[1].limit_remaining, 0);
    for hits in [1, 3] {
        let mut ask = both();
        ask.hits_addend = hits;
        let response = rls.ask(ask).await;
        assert_eq!(response.overall_code, OVER);
        assert_eq!(
            (response.statuses[0].code, response.statuses[1].code),
            (OK, OVER)
        );
    }
    // Both limits are in the draft fields; the tightest in RateLimit.
    let mut ask = both();
    ask.hits_addend = 1;
    let response = rls.ask(ask).await;
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some("\"per-user\";q=10;w=60, \"per-ip\";q=1;w=60")
    );
    assert!(header(&response, "ratelimit")
        .unwrap()
        .starts_with("\"per-ip\";r=0;"));
    // The refused requests took nothing from the user's limit.
    let status = rls
        .one("d", with_hits(descriptor(&[("user", "alice")]), 0))
        .await;
    assert_eq!(status.limit_remaining, 9);
    // Per-descriptor costs that differ are all or nothing too.
    let response = rls
        .ask(request(
            "d",
            vec![
                with_hits(descriptor(&[("user", "alice")]), 4),
                with_hits(descriptor(&[("remote_address", "10.0.0.1")]), 1),
            ],
        ))
        .await;
    assert_eq!(response.overall_code, OVER);
    let status = rls
        .one("d", with_hits(descriptor(&[("user", "alice")]), 0))
        .await;
    assert_eq!(status.limit_remaining, 9);
}

#[tokio::test]
async fn shadow_limits_report_but_never_refuse() {
    let mut rls = start(
        r#"
[[limits]]
name = "trial"
rate = "1/minute"
policy = "fixed_window"
key = ["client_ip"]
shadow = true
match = { domain = "edge", descriptors = [{ key = "remote_address" }] }
"#,
    )
    .await;
    let ip = || descriptor(&[("remote_address", "10.0.0.1")]);
    for _ in 0..3 {
        let response = rls.ask(request("edge", vec![ip()])).await;
        assert_eq!(response.overall_code, OK);
        let status = &response.statuses[0];
        assert_eq!((status.code, status.limit_remaining), (OK, 0));
        assert_eq!(status.current_limit.as_ref().unwrap().name, "trial");
        assert!(response.response_headers_to_add.is_empty());
    }
}

#[tokio::test]
async fn a_failed_store_is_unavailable_not_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let toml = format!(
        "[store]\nkind = \"sqlite\"\npath = {path:?}\non_failure = \"closed\"\n{PER_IP}",
        path = path.display().to_string()
    );
    let config = Config::from_toml_str(&toml, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (client, stop) = serve(engine).await;
    let mut rls = Rls {
        client,
        clock,
        _stop: stop,
        _dir: Some(dir),
    };
    let ask = || request("edge", vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    assert_eq!(rls.ask(ask()).await.overall_code, OK);

    // The store's table goes away under it: every statement fails.
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("DROP TABLE ratekeeper")
        .unwrap();
    let error = rls.client.should_rate_limit(ask()).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable, "{error}");
    assert!(error.message().contains("store"), "{error}");
}

#[tokio::test]
async fn malformed_requests_are_invalid_arguments() {
    let mut rls = start(PER_IP).await;
    for bad in [
        request("", vec![descriptor(&[("remote_address", "1")])]),
        request("edge", vec![]),
    ] {
        let error = rls.client.should_rate_limit(bad).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error}");
    }
}

#[tokio::test]
async fn concurrent_requests_over_grpc_admit_exactly_the_limit() {
    let rls = start(
        r#"
[[limits]]
name = "global"
rate = "20/minute"
policy = "gcra"
key = ["global"]
match = { domain = "edge", descriptors = [{ key = "generic_key", value = "all" }] }
"#,
    )
    .await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let mut client = rls.client.clone();
        calls.spawn(async move {
            client
                .should_rate_limit(request("edge", vec![descriptor(&[("generic_key", "all")])]))
                .await
                .unwrap()
                .into_inner()
                .overall_code
        });
    }
    let mut admitted = 0;
    while let Some(code) = calls.join_next().await {
        let code = code.unwrap();
        assert!(code == OK || code == OVER, "{code}");
        admitted += usize::from(code == OK);
    }
    assert_eq!(admitted, 20);
}

/// A limit on `k`, and caps of 3 descriptors, 2 entries and 8 bytes.
const CAPPED: &str = r#"
[requests]
max_descriptors = 3
max_entries = 2
max_value_bytes = 8

[[limits]]
name = "per-k"
rate = "100/minute"
key = ["descriptor:k"]
match = { domain = "edge", descriptors = [{ key = "k" }] }
"#;

#[tokio::test]
async fn requests_at_the_caps_are_answered_and_one_over_is_refused() {
    let mut rls = start(CAPPED).await;
    let one = || descriptor(&[("k", "12345678")]);
    // At every cap: three descriptors, two entries, values of 8 bytes.
    let at_caps = request(
        "edge",
        vec![one(), one(), descriptor(&[("k", "v"), ("x", "12345678")])],
    );
    let response = rls.ask(at_caps).await;
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses.len(), 3);

    let over = [
        (
            request("edge", vec![one(), one(), one(), one()]),
            "the request has 4 descriptors, more than requests.max_descriptors (3)",
        ),
        (
            request(
                "edge",
                vec![one(), descriptor(&[("k", "v"), ("a", "b"), ("c", "d")])],
            ),
            "descriptors[1] has 3 entries, more than requests.max_entries (2)",
        ),
        (
            request("edge", vec![descriptor(&[("k", "123456789")])]),
            "descriptors[0].entries[0].value is 9 bytes, more than requests.max_value_bytes (8)",
        ),
        (
            request("edge", vec![descriptor(&[("kkkkkkkkk", "v")])]),
            "descriptors[0].entries[0].key is 9 bytes, more than requests.max_value_bytes (8)",
        ),
        (
            request("edge-edge", vec![one()]),
            "domain is 9 bytes, more than requests.max_value_bytes (8)",
        ),
    ];
    for (request, message) in over {
        let error = rls.client.should_rate_limit(request).await.unwrap_err();
        assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error}");
        assert_eq!(error.message(), message);
    }
    // Nothing over a cap was counted: the key still has all but its 2.
    let status = rls.one("edge", one()).await;
    assert_eq!(status.limit_remaining, 97);
}

#[tokio::test]
async fn the_default_caps_take_256_descriptors_and_refuse_257() {
    let mut rls = start(PER_IP).await;
    let many = |count: usize| {
        let descriptors = (0..count)
            .map(|i| descriptor(&[("remote_address", &format!("10.0.{}.{}", i / 256, i % 256))]))
            .collect();
        request("edge", descriptors)
    };
    let response = rls.ask(many(256)).await;
    assert_eq!(response.statuses.len(), 256);
    let error = rls.client.should_rate_limit(many(257)).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error.message().contains("requests.max_descriptors (256)"),
        "{error}"
    );
}

#[tokio::test]
async fn override_rates_are_capped_so_clients_cannot_grow_the_service() {
    let toml = format!("[store]\nmax_keys = 100\n\n[requests]\nmax_override_rates = 4\n\n{PER_IP}");
    let mut rls = start(&toml).await;
    let overridden = |requests| {
        let mut d = descriptor(&[("remote_address", "10.0.0.1")]);
        d.limit = Some(RateLimitOverride {
            requests_per_unit: requests,
            unit: RateLimitUnit::Minute as i32,
        });
        d
    };
    // Four rates, asked in one request and again: one count each.
    for remaining in [9, 8] {
        let response = rls
            .ask(request("edge", (10..14).map(overridden).collect()))
            .await;
        assert_eq!(response.overall_code, OK);
        assert_eq!(response.statuses[0].limit_remaining, remaining);
    }
    // A fifth is refused with the cap's name, and counts nothing.
    let error = rls
        .client
        .should_rate_limit(request("edge", vec![overridden(10), overridden(99)]))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::ResourceExhausted, "{error}");
    assert!(
        error.message().contains("requests.max_override_rates"),
        "{error}"
    );
    let status = rls.one("edge", overridden(10)).await;
    assert_eq!(status.limit_remaining, 7);
}

/// The wire as an HTTP/2 client sees it: `ShouldRateLimit` is answered by
/// the service's own unary path (one message, `application/grpc`, then
/// `grpc-status: 0` trailers), bad frames get tonic's codes, and another
/// method of the service still goes to tonic (UNIMPLEMENTED).
#[tokio::test]
async fn the_unary_path_speaks_grpc_on_the_wire() {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use prost::Message;

    let config = Config::from_toml_str(
        "[[limits]]\nname = \"edge\"\nrate = \"1/hour\"\nkey = [\"descriptor:user\"]\n[limits.match]\ndomain = \"edge\"\ndescriptors = [{ key = \"user\" }]\n",
        "test.toml",
    )
    .unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_000)));
    let engine = Engine::builder(&config).clock(clock).start().await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(EnvoyService::new(engine).serve(listener, async {
        let _ = stopped.await;
    }));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let framed = |flag: u8, message: Vec<u8>| {
        let mut bytes = vec![flag];
        bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
        bytes.extend(message);
        Full::new(Bytes::from(bytes))
    };
    let request = RateLimitRequest {
        domain: "edge".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".to_owned(),
                value: "alice".to_owned(),
            }],
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    };
    let mut call = |path: &str, body: Full<Bytes>| {
        let request = http::Request::post(format!("http://{addr}{path}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(body)
            .unwrap();
        h2.send_request(request)
    };
    const METHOD: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

    // Twice: allowed, then over the limit of 1.
    for expected in [Code::Ok, Code::OverLimit] {
        let response = call(METHOD, framed(0, request.encode_to_vec()))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "application/grpc");
        let collected = response.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        let bytes = collected.to_bytes();
        assert_eq!(bytes[0], 0, "uncompressed");
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 5);
        let answer = RateLimitResponse::decode(&bytes[5..]).unwrap();
        assert_eq!(answer.overall_code, expected as i32);
    }

    // A compressed message, without compression negotiated.
    let status = |response: http::Response<hyper::body::Incoming>| {
        response.headers()["grpc-status"]
            .to_str()
            .unwrap()
            .to_owned()
    };
    let compressed = call(METHOD, framed(1, request.encode_to_vec()))
        .await
        .unwrap();
    assert_eq!(
        status(compressed),
        (tonic::Code::Unimplemented as i32).to_string()
    );
    // A truncated message.
    let message = request.encode_to_vec();
    let mut body = vec![0];
    body.extend_from_slice(&(message.len() as u32).to_be_bytes());
    body.extend_from_slice(&message[..3]);
    let truncated = call(METHOD, Full::new(Bytes::from(body))).await.unwrap();
    assert_eq!(truncated.status(), 200);
    assert_eq!(
        status(truncated),
        (tonic::Code::Internal as i32).to_string()
    );
    // Not the method this service answers itself: tonic's router.
    let other = call(
        "/envoy.service.ratelimit.v3.RateLimitService/Other",
        framed(0, Vec::new()),
    )
    .await
    .unwrap();
    assert_eq!(
        status(other),
        (tonic::Code::Unimplemented as i32).to_string()
    );
}

/// A check-only call (hits_addend 0) on a key nothing has used tells the
/// time to the window's end, as for a used key (and as envoyproxy/ratelimit
/// does), not 0.
#[tokio::test]
async fn a_check_only_call_on_a_fresh_key_tells_the_window_end() {
    let mut rls = start(PER_IP).await;
    // The clock is at 1,000 s: the minute's window runs from 960 s to 1,020 s.
    let fresh = rls
        .one(
            "edge",
            with_hits(descriptor(&[("remote_address", "10.0.0.7")]), 0),
        )
        .await;
    assert_eq!((fresh.code, fresh.limit_remaining), (OK, 3));
    assert_eq!(
        fresh.duration_until_reset.map(|reset| reset.seconds),
        Some(20),
        "{fresh:?}"
    );
    let used = rls
        .one("edge", descriptor(&[("remote_address", "10.0.0.8")]))
        .await;
    assert_eq!(used.duration_until_reset, fresh.duration_until_reset);
}
