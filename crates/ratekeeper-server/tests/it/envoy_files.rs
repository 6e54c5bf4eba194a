//! envoyproxy/ratelimit's configuration files (`[envoy] config_dir`)
//! decided over real gRPC: each example of its README and each feature of
//! the format, on the in-memory store with a manual clock (codes,
//! remaining counts and reset times) and on a real Redis (codes and
//! counts; the reset follows Redis's own clock there).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::RateLimitOverride;
use ratekeeper_server::envoy::proto::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus,
};
use ratekeeper_server::envoy::proto::rate_limit_service_client::RateLimitServiceClient;
use ratekeeper_server::envoy::proto::{
    RateLimitDescriptor, RateLimitRequest, RateLimitResponse, RateLimitUnit,
};
use ratekeeper_server::Config;
use ratekeeper_test_support::redis::RedisServer;
use tokio::sync::oneshot;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// Unix time at the start of the tests' clock: 20 s into a minute, 800 s
/// into an hour, 80,000 s into a day (and on a whole second), so that each
/// unit's reset tells an epoch-aligned window from one counted from the
/// first hit.
const T0: u64 = 1_700_000_000;

/// Where the counts are kept.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Store<'a> {
    Memory,
    Redis(&'a str),
    /// A database file's path.
    Sqlite(&'a str),
}

/// A running service reading a directory of YAML files, and a client.
struct Rls {
    client: RateLimitServiceClient<Channel>,
    clock: Arc<ManualClock>,
    store: String,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// `text` with every unit a year.
fn in_years(text: &str) -> String {
    ["second", "minute", "hour", "day"]
        .iter()
        .fold(text.to_owned(), |text, unit| {
            text.replace(&format!("unit: {unit}"), "unit: year")
        })
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
}

/// The service on `store`, reading `files` (name, YAML) and `toml` (more
/// of the configuration: `[envoy]` settings must come first in it).
async fn start_on(store: Store<'_>, files: &[(&str, &str)], toml: &str) -> Rls {
    // Redis and SQLite count on their own clocks, which the test cannot
    // stop: in year windows no boundary passes while a test runs.
    start_with_units(store, files, toml, store != Store::Memory).await
}

async fn start_with_units(
    store: Store<'_>,
    files: &[(&str, &str)],
    toml: &str,
    years: bool,
) -> Rls {
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<(&str, String)> = files
        .iter()
        .map(|&(name, text)| match years {
            false => (name, text.to_owned()),
            true => (name, in_years(text)),
        })
        .collect();
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    write_files(dir.path(), &files);
    let store_toml = match store {
        Store::Memory => String::new(),
        Store::Redis(url) => {
            format!("[store]\nkind = \"redis\"\nurl = \"{url}\"\ntimeout_ms = 5000\n")
        }
        Store::Sqlite(path) => format!("[store]\nkind = \"sqlite\"\npath = {path:?}\n"),
    };
    let text = format!(
        "{store_toml}[envoy]\nconfig_dir = {:?}\n{toml}",
        dir.path().display().to_string()
    );
    let config = Config::from_toml_str(&text, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(T0)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (client, stop) = crate::common::serve_rls(engine).await;
    Rls {
        client,
        clock,
        store: format!("{store:?}"),
        _stop: stop,
        _dir: dir,
    }
}

async fn start(files: &[(&str, &str)]) -> Rls {
    start_on(Store::Memory, files, "").await
}

use crate::common::descriptor;

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_owned(),
        descriptors,
        hits_addend: hits,
    }
}

impl Rls {
    fn memory(&self) -> bool {
        self.store == "Memory"
    }

    async fn ask(&mut self, request: RateLimitRequest) -> RateLimitResponse {
        self.client
            .should_rate_limit(request)
            .await
            .unwrap()
            .into_inner()
    }

    /// Asks for `descriptors` (each a list of entries) with `hits`, and
    /// checks the overall code and each status's (code, remaining).
    async fn expect(
        &mut self,
        domain: &str,
        descriptors: &[&[(&str, &str)]],
        hits: u32,
        overall: i32,
        statuses: &[(i32, u32)],
    ) -> RateLimitResponse {
        let descriptors = descriptors.iter().map(|pairs| descriptor(pairs)).collect();
        let response = self.ask(request(domain, descriptors, hits)).await;
        let got: Vec<(i32, u32)> = response
            .statuses
            .iter()
            .map(|status| (status.code, status.limit_remaining))
            .collect();
        assert_eq!(got, statuses, "{}: {response:?}", self.store);
        assert_eq!(
            response.overall_code, overall,
            "{}: {response:?}",
            self.store
        );
        response
    }

    /// Checks a status's limit, and its reset: exactly `reset` seconds on
    /// the manual clock; on Redis and SQLite (in years) within the year.
    fn check_limit(&self, status: &DescriptorStatus, limit: (&str, u32, Unit), reset: u64) {
        let shown = status.current_limit.as_ref().expect("a current limit");
        let unit = if self.memory() { limit.2 } else { Unit::Year };
        assert_eq!(
            (shown.name.as_str(), shown.requests_per_unit, shown.unit),
            (limit.0, limit.1, unit as i32)
        );
        let until = status.duration_until_reset.expect("a reset");
        if self.memory() {
            assert_eq!(
                (until.seconds, until.nanos),
                (reset as i64, 0),
                "{status:?}"
            );
        } else {
            assert!(
                until.seconds > 0 && until.seconds <= 365 * 86_400,
                "{status:?}"
            );
        }
    }

    /// The next second (memory); on Redis a second passes by itself only,
    /// so the tests that need one run on memory alone.
    fn next_second(&self) {
        self.clock.advance(Duration::from_secs(1));
    }
}

/// Runs `test` on the memory store, on SQLite, then on a Redis of its own
/// when `redis-server` is installed (CI installs it).
macro_rules! on_every_store {
    ($name:ident, $files:expr, $body:expr) => {
        #[tokio::test]
        async fn $name() {
            let test = $body;
            test(start_on(Store::Memory, $files, "").await).await;
            let sqlite = tempfile::tempdir().unwrap();
            let path = sqlite.path().join("counts.db").display().to_string();
            test(start_on(Store::Sqlite(&path), $files, "").await).await;
            if let Some(redis) = RedisServer::start() {
                test(start_on(Store::Redis(&redis.url()), $files, "").await).await;
            }
        }
    };
}

// Example 1: two values of one key, each with its own limit.
const EXAMPLE_1: &str = "
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 500
";

on_every_store!(
    readme_example_1_values_with_limits_of_their_own,
    &[("config.yaml", EXAMPLE_1)],
    |mut rls: Rls| async move {
        let users: &[(&str, &str)] = &[("database", "users")];
        let response = rls.expect("mongo_cps", &[users], 499, OK, &[(OK, 1)]).await;
        rls.check_limit(&response.statuses[0], ("", 500, Unit::Second), 1);
        rls.expect("mongo_cps", &[users], 1, OK, &[(OK, 0)]).await;
        rls.expect("mongo_cps", &[users], 1, OVER, &[(OVER, 0)])
            .await;
        // The other value counts apart; an unknown one has no limit.
        rls.expect(
            "mongo_cps",
            &[&[("database", "default")]],
            1,
            OK,
            &[(OK, 499)],
        )
        .await;
        let other = rls
            .expect("mongo_cps", &[&[("database", "other")]], 1, OK, &[(OK, 0)])
            .await;
        assert_eq!(other.statuses[0].current_limit, None);
    }
);

const EXAMPLE_2: &str = "
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
";

on_every_store!(
    readme_example_2_nested_descriptors_and_several_per_request,
    &[("messaging.yaml", EXAMPLE_2)],
    |mut rls: Rls| async move {
        let marketing: &[(&str, &str)] =
            &[("message_type", "marketing"), ("to_number", "2061111111")];
        let number: &[(&str, &str)] = &[("to_number", "2061111111")];
        for left in (0..5).rev() {
            let response = rls
                .expect(
                    "messaging",
                    &[marketing, number],
                    0,
                    OK,
                    &[(OK, left), (OK, 95 + left)],
                )
                .await;
            // A day window from the Unix epoch: T0 is 80,000 s into its day.
            rls.check_limit(&response.statuses[0], ("", 5, Unit::Day), 6_400);
        }
        // The sixth marketing message is refused, and takes nothing from
        // the number's own limit (ratekeeper's all or nothing).
        rls.expect(
            "messaging",
            &[marketing, number],
            0,
            OVER,
            &[(OVER, 0), (OK, 95)],
        )
        .await;
        rls.expect("messaging", &[number], 0, OK, &[(OK, 94)]).await;
        // Each number has its counters.
        let other: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "2062222222")];
        rls.expect("messaging", &[other], 0, OK, &[(OK, 4)]).await;
    }
);

const EXAMPLE_3: &str = "
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
";

on_every_store!(
    readme_example_3_the_exact_value_before_the_key,
    &[("edge.yaml", EXAMPLE_3)],
    |mut rls: Rls| async move {
        let domain = "edge_proxy_per_ip";
        let response = rls
            .expect(
                domain,
                &[&[("remote_address", "50.0.0.1")]],
                0,
                OK,
                &[(OK, 9)],
            )
            .await;
        rls.check_limit(&response.statuses[0], ("", 10, Unit::Second), 1);
        // The blocked address: every hit over its limit of 0.
        for _ in 0..2 {
            let response = rls
                .expect(
                    domain,
                    &[&[("remote_address", "50.0.0.5")]],
                    0,
                    OVER,
                    &[(OVER, 0)],
                )
                .await;
            rls.check_limit(&response.statuses[0], ("", 0, Unit::Second), 1);
        }
        // A request naming both: refused, the other address not charged.
        rls.expect(
            domain,
            &[
                &[("remote_address", "50.0.0.1")],
                &[("remote_address", "50.0.0.5")],
            ],
            0,
            OVER,
            &[(OK, 9), (OVER, 0)],
        )
        .await;
        rls.expect(
            domain,
            &[&[("remote_address", "50.0.0.1")]],
            0,
            OK,
            &[(OK, 8)],
        )
        .await;
    }
);

const EXAMPLE_4_FLAT: &str = "
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 300
      unit: second
";

const EXAMPLE_4_NESTED: &str = "
domain: example4_nested
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 300
          unit: second
";

on_every_store!(
    readme_example_4_a_descriptor_matches_at_its_full_depth,
    &[
        ("flat.yaml", EXAMPLE_4_FLAT),
        ("nested.yaml", EXAMPLE_4_NESTED)
    ],
    |mut rls: Rls| async move {
        let two: &[(&str, &str)] = &[("key", "value"), ("subkey", "subvalue")];
        let flat = rls.expect("example4", &[two], 0, OK, &[(OK, 0)]).await;
        assert_eq!(flat.statuses[0].current_limit, None);
        rls.expect("example4", &[&[("key", "value")]], 0, OK, &[(OK, 299)])
            .await;
        let nested = rls
            .expect("example4_nested", &[two], 0, OK, &[(OK, 299)])
            .await;
        rls.check_limit(&nested.statuses[0], ("", 300, Unit::Second), 1);
        // The placeholder above it has no limit of its own.
        let top = rls
            .expect("example4_nested", &[&[("key", "value")]], 0, OK, &[(OK, 0)])
            .await;
        assert_eq!(top.statuses[0].current_limit, None);
    }
);

const EXAMPLE_5: &str = "
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

on_every_store!(
    readme_example_5_unlimited_answers_ok_with_the_largest_count,
    &[("internal.yaml", EXAMPLE_5)],
    |mut rls: Rls| async move {
        let both: &[&[(&str, &str)]] = &[&[("ldap", "x")], &[("azure", "y")]];
        for left in [60, 20] {
            let response = rls
                .expect("internal", both, 40, OK, &[(OK, u32::MAX), (OK, left)])
                .await;
            assert_eq!(response.statuses[0].current_limit, None);
            assert_eq!(response.statuses[0].duration_until_reset, None);
            // T0 is 20 s into its minute.
            rls.check_limit(&response.statuses[1], ("", 100, Unit::Minute), 40);
        }
        // The third 40 is over azure's 100: refused whole, the 20 left
        // still there (envoyproxy/ratelimit, having counted the 40 anyway,
        // says 0).
        rls.expect("internal", both, 40, OVER, &[(OK, u32::MAX), (OVER, 20)])
            .await;
    }
);

const EXAMPLE_6: &str = "
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 10
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 20
          unit: second
";

on_every_store!(
    readme_example_6_shadow_mode_counts_but_never_refuses,
    &[("example6.yaml", EXAMPLE_6)],
    |mut rls: Rls| async move {
        let a: &[(&str, &str)] = &[("service", "auth-service"), ("user", "user-a")];
        let b: &[(&str, &str)] = &[("service", "auth-service"), ("user", "user-b")];
        rls.expect("example6", &[a], 10, OK, &[(OK, 0)]).await;
        // Over its 10, answered OK.
        rls.expect("example6", &[a], 1, OK, &[(OK, 0)]).await;
        rls.expect("example6", &[b], 20, OK, &[(OK, 0)]).await;
        rls.expect("example6", &[b], 1, OVER, &[(OVER, 0)]).await;
    }
);

const EXAMPLE_7: &str = "
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
";

#[tokio::test]
async fn readme_example_7_replaces_drops_the_named_limit_of_the_same_request() {
    let mut rls = start(&[("example7.yaml", EXAMPLE_7)]).await;
    let one: &[(&str, &str)] = &[("key_1", "value_1"), ("user", "bkthomps")];
    let two: &[(&str, &str)] = &[("key_2", "value_2"), ("user", "bkthomps")];
    let response = rls.expect("example7", &[one], 5, OK, &[(OK, 0)]).await;
    rls.check_limit(
        &response.statuses[0],
        ("specific_limit", 5, Unit::Second),
        1,
    );
    rls.expect("example7", &[one], 1, OVER, &[(OVER, 0)]).await;
    // Together, the first is replaced: no limit, and not refused although
    // its own limit is spent.
    let both = rls
        .expect("example7", &[one, two], 10, OK, &[(OK, 0), (OK, 0)])
        .await;
    assert_eq!(both.statuses[0].current_limit, None);
    rls.check_limit(&both.statuses[1], ("", 10, Unit::Second), 1);
    rls.expect("example7", &[one, two], 1, OVER, &[(OK, 0), (OVER, 0)])
        .await;
    // The replaced limit was not charged by those: a fresh second gives
    // it its 5 again, whatever the combined requests did.
    rls.next_second();
    rls.expect("example7", &[one, two], 10, OK, &[(OK, 0), (OK, 0)])
        .await;
    rls.expect("example7", &[one], 1, OK, &[(OK, 4)]).await;
}

const EXAMPLE_8: &str = "
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 10
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

on_every_store!(
    readme_example_8_each_unspecified_value_has_its_own_count,
    &[("example8.yaml", EXAMPLE_8)],
    |mut rls: Rls| async move {
        rls.expect(
            "example8",
            &[&[("key1", "unspecified_value")]],
            10,
            OK,
            &[(OK, 0)],
        )
        .await;
        rls.expect(
            "example8",
            &[&[("key1", "unspecified_value")]],
            1,
            OVER,
            &[(OVER, 0)],
        )
        .await;
        rls.expect(
            "example8",
            &[&[("key1", "unspecified_value2")]],
            1,
            OK,
            &[(OK, 9)],
        )
        .await;
        let value = rls
            .expect("example8", &[&[("key1", "value1")]], 1, OK, &[(OK, 19)])
            .await;
        rls.check_limit(&value.statuses[0], ("", 20, Unit::Minute), 40);
    }
);

const EXAMPLE_9: &str = "
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const EXAMPLE_9_MIDDLE: &str = "
domain: example9_middle
descriptors:
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

const EXAMPLE_9_MULTIPLE: &str = "
domain: example9_multiple
descriptors:
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 20
";

on_every_store!(
    readme_example_9_wildcards_anywhere_in_the_value,
    &[
        ("trailing.yaml", EXAMPLE_9),
        ("middle.yaml", EXAMPLE_9_MIDDLE),
        ("multiple.yaml", EXAMPLE_9_MULTIPLE),
    ],
    |mut rls: Rls| async move {
        rls.expect("example9", &[&[("key1", "value1")]], 1, OK, &[(OK, 19)])
            .await;
        rls.expect("example9", &[&[("key1", "valueXYZ")]], 1, OK, &[(OK, 19)])
            .await;
        rls.expect("example9", &[&[("key1", "value1")]], 1, OK, &[(OK, 18)])
            .await;
        let none = rls
            .expect("example9", &[&[("key1", "valu")]], 1, OK, &[(OK, 0)])
            .await;
        assert_eq!(none.statuses[0].current_limit, None);
        rls.expect(
            "example9_middle",
            &[&[("path", "/api/123/action")]],
            1,
            OK,
            &[(OK, 19)],
        )
        .await;
        rls.expect(
            "example9_middle",
            &[&[("path", "/api/user-id/action")]],
            1,
            OK,
            &[(OK, 19)],
        )
        .await;
        let other = rls
            .expect(
                "example9_middle",
                &[&[("path", "/api/123/other")]],
                1,
                OK,
                &[(OK, 0)],
            )
            .await;
        assert_eq!(other.statuses[0].current_limit, None);
        rls.expect(
            "example9_multiple",
            &[&[("route", "/api/v1/resource/123/action")]],
            1,
            OK,
            &[(OK, 19)],
        )
        .await;
        let missing = rls
            .expect(
                "example9_multiple",
                &[&[("route", "/api/v1/resource/123")]],
                1,
                OK,
                &[(OK, 0)],
            )
            .await;
        assert_eq!(missing.statuses[0].current_limit, None);
    }
);

const EXAMPLE_10: &str = "
domain: example10
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            rate_limit:
              unit: minute
              requests_per_unit: 60
";

const EXAMPLE_10_WILDCARD: &str = "
domain: example10_wildcard
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit:
              unit: minute
              requests_per_unit: 100
";

on_every_store!(
    readme_example_10_every_value_of_the_path_counts_apart,
    &[("e10.yaml", EXAMPLE_10), ("e10w.yaml", EXAMPLE_10_WILDCARD)],
    |mut rls: Rls| async move {
        let api: &[(&str, &str)] = &[
            ("route", "api"),
            ("http_method", "GET"),
            ("subject_id", "123"),
        ];
        let web: &[(&str, &str)] = &[
            ("route", "web"),
            ("http_method", "POST"),
            ("subject_id", "456"),
        ];
        rls.expect("example10", &[api], 60, OK, &[(OK, 0)]).await;
        rls.expect("example10", &[api], 1, OVER, &[(OVER, 0)]).await;
        rls.expect("example10", &[web], 1, OK, &[(OK, 59)]).await;
        let alice: &[(&str, &str)] = &[
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ];
        let write: &[(&str, &str)] = &[
            ("user", "alice"),
            ("action", "write"),
            ("resource", "documents"),
        ];
        rls.expect("example10_wildcard", &[alice], 1, OK, &[(OK, 99)])
            .await;
        let none = rls
            .expect("example10_wildcard", &[write], 1, OK, &[(OK, 0)])
            .await;
        assert_eq!(none.statuses[0].current_limit, None);
    }
);

const EXAMPLE_11: &str = "
domain: example11
descriptors:
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: files_no_share
    value: files_no_share/*
    share_threshold: false
    rate_limit:
      unit: hour
      requests_per_unit: 10
";

on_every_store!(
    readme_example_11_share_threshold_shares_one_count,
    &[("example11.yaml", EXAMPLE_11)],
    |mut rls: Rls| async move {
        rls.expect(
            "example11",
            &[&[("files", "files/a.pdf")]],
            5,
            OK,
            &[(OK, 5)],
        )
        .await;
        let b = rls
            .expect(
                "example11",
                &[&[("files", "files/b.csv")]],
                5,
                OK,
                &[(OK, 0)],
            )
            .await;
        // An hour window from the epoch: T0 is 800 s into its hour.
        rls.check_limit(&b.statuses[0], ("", 10, Unit::Hour), 2_800);
        rls.expect(
            "example11",
            &[&[("files", "files/c.txt")]],
            1,
            OVER,
            &[(OVER, 0)],
        )
        .await;
        rls.expect(
            "example11",
            &[&[("files_no_share", "files_no_share/a.pdf")]],
            10,
            OK,
            &[(OK, 0)],
        )
        .await;
        rls.expect(
            "example11",
            &[&[("files_no_share", "files_no_share/a.pdf")]],
            1,
            OVER,
            &[(OVER, 0)],
        )
        .await;
        rls.expect(
            "example11",
            &[&[("files_no_share", "files_no_share/b.csv")]],
            1,
            OK,
            &[(OK, 9)],
        )
        .await;
    }
);

#[tokio::test]
async fn windows_start_on_the_unix_epochs_multiples() {
    let mut rls = start(&[(
        "w.yaml",
        "domain: w\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n",
    )])
    .await;
    let k: &[(&str, &str)] = &[("k", "v")];
    let first = rls.expect("w", &[k], 2, OK, &[(OK, 0)]).await;
    rls.check_limit(&first.statuses[0], ("", 2, Unit::Minute), 40);
    // 39 s later, still the same minute...
    rls.clock.advance(Duration::from_secs(39));
    let late = rls.expect("w", &[k], 1, OVER, &[(OVER, 0)]).await;
    rls.check_limit(&late.statuses[0], ("", 2, Unit::Minute), 1);
    // ...and on the minute a new one, though the first hit was 40 s ago
    // (a window counted from it would still run 20 s).
    rls.clock.advance(Duration::from_secs(1));
    let fresh = rls.expect("w", &[k], 1, OK, &[(OK, 1)]).await;
    rls.check_limit(&fresh.statuses[0], ("", 2, Unit::Minute), 60);
}

#[tokio::test]
async fn the_policy_extension_gives_a_sliding_window() {
    let mut rls = start(&[(
        "s.yaml",
        "domain: s\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n      policy: sliding_window\n",
    )])
    .await;
    let k = || request("s", vec![descriptor(&[("k", "v")])], 1);
    rls.expect("s", &[&[("k", "v")]], 10, OK, &[(OK, 0)]).await;
    // On the next minute a fixed window would admit again; the sliding
    // window still weighs the whole last minute's 10.
    rls.clock.advance(Duration::from_secs(40));
    assert_eq!(rls.ask(k()).await.overall_code, OVER);
    // Half way through it, half of them.
    rls.clock.advance(Duration::from_secs(30));
    assert_eq!(rls.ask(k()).await.overall_code, OK);
}

const QUOTAS: &str = "
domain: quota
descriptors:
  - key: plan
    value: free
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: plan
    value: paid
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 100
";

#[tokio::test]
async fn quota_mode_refuses_only_when_every_quota_is_over() {
    let mut rls = start(&[("quota.yaml", QUOTAS)]).await;
    let free: &[(&str, &str)] = &[("plan", "free")];
    let paid: &[(&str, &str)] = &[("plan", "paid")];
    let user: &[(&str, &str)] = &[("user", "u")];
    rls.expect(
        "quota",
        &[free, paid, user],
        2,
        OK,
        &[(OK, 0), (OK, 1), (OK, 98)],
    )
    .await;
    // The free quota is over, the paid one is not: the request passes,
    // the free descriptor's status saying it is over.
    rls.expect(
        "quota",
        &[free, paid, user],
        1,
        OK,
        &[(OVER, 0), (OK, 0), (OK, 97)],
    )
    .await;
    // Both over: refused.
    rls.expect(
        "quota",
        &[free, paid, user],
        1,
        OVER,
        &[(OVER, 0), (OVER, 0), (OK, 96)],
    )
    .await;
    // A request with one quota, over: refused.
    rls.expect("quota", &[free], 1, OVER, &[(OVER, 0)]).await;
}

#[tokio::test]
async fn global_shadow_and_quota_modes() {
    let files = [("edge.yaml", EXAMPLE_3)];
    let mut rls = start_on(Store::Memory, &files, "shadow_mode = true\n").await;
    let domain = "edge_proxy_per_ip";
    let ip: &[(&str, &str)] = &[("remote_address", "50.0.0.1")];
    let blocked: &[(&str, &str)] = &[("remote_address", "50.0.0.5")];
    rls.expect(domain, &[ip], 10, OK, &[(OK, 0)]).await;
    // Over the limit: the status says so, the answer is OK.
    rls.expect(domain, &[ip], 1, OK, &[(OVER, 0)]).await;
    rls.expect(domain, &[blocked], 1, OK, &[(OVER, 0)]).await;

    let mut rls = start_on(
        Store::Memory,
        &[("example8.yaml", EXAMPLE_8)],
        "quota_mode = true\n",
    )
    .await;
    let a: &[(&str, &str)] = &[("key1", "a")];
    let b: &[(&str, &str)] = &[("key1", "b")];
    rls.expect("example8", &[a], 10, OK, &[(OK, 0)]).await;
    rls.expect("example8", &[a, b], 1, OK, &[(OVER, 0), (OK, 9)])
        .await;
    rls.expect("example8", &[a], 1, OVER, &[(OVER, 0)]).await;
}

#[tokio::test]
async fn a_request_override_wins_over_the_files_in_their_domain() {
    let mut rls = start(&[("config.yaml", EXAMPLE_1)]).await;
    let mut overridden = descriptor(&[("database", "users")]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: RateLimitUnit::Minute as i32,
    });
    for (code, remaining) in [(OK, 1), (OK, 0), (OVER, 0)] {
        let response = rls
            .ask(request("mongo_cps", vec![overridden.clone()], 0))
            .await;
        let status = &response.statuses[0];
        assert_eq!((status.code, status.limit_remaining), (code, remaining));
        assert_eq!(status.current_limit.as_ref().unwrap().requests_per_unit, 2);
    }
    // The file's own limit was not charged.
    rls.expect(
        "mongo_cps",
        &[&[("database", "users")]],
        1,
        OK,
        &[(OK, 499)],
    )
    .await;
}

#[tokio::test]
async fn files_and_native_limits_decide_together() {
    let native = r#"
[[limits]]
name = "per-database"
rate = "3/minute"
policy = "fixed_window"
key = ["descriptor:database"]
match = { domain = "mongo_cps", descriptors = [{ key = "database" }] }
"#;
    let mut rls = start_on(Store::Memory, &[("config.yaml", EXAMPLE_1)], native).await;
    let users: &[(&str, &str)] = &[("database", "users")];
    // The tighter of the two shows.
    let first = rls.expect("mongo_cps", &[users], 1, OK, &[(OK, 2)]).await;
    rls.check_limit(&first.statuses[0], ("per-database", 3, Unit::Minute), 40);
    rls.expect("mongo_cps", &[users], 2, OK, &[(OK, 0)]).await;
    let over = rls
        .expect("mongo_cps", &[users], 1, OVER, &[(OVER, 0)])
        .await;
    assert_eq!(
        over.statuses[0].current_limit.as_ref().unwrap().name,
        "per-database"
    );
}

#[tokio::test]
async fn each_descriptor_counting_applies_to_the_files() {
    let mut rls = start_on(
        Store::Memory,
        &[("messaging.yaml", EXAMPLE_2)],
        "counting = \"each_descriptor\"\n",
    )
    .await;
    let marketing: &[(&str, &str)] = &[("message_type", "marketing"), ("to_number", "1")];
    let number: &[(&str, &str)] = &[("to_number", "1")];
    rls.expect(
        "messaging",
        &[marketing, number],
        5,
        OK,
        &[(OK, 0), (OK, 95)],
    )
    .await;
    // Refused by the marketing limit, and still counted by the number's,
    // as envoyproxy/ratelimit counts.
    rls.expect(
        "messaging",
        &[marketing, number],
        1,
        OVER,
        &[(OVER, 0), (OK, 94)],
    )
    .await;
}

/// A ConfigMap volume as Kubernetes lays it out: the files in a
/// `..TIMESTAMP` directory, `..data` linking to it, and each file a link
/// through `..data`. An update writes a new directory and swaps `..data`.
fn config_map(dir: &Path, version: &str, text: &str) {
    let data = dir.join(format!("..{version}"));
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("config.yaml"), text).unwrap();
    let swap = dir.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &swap).unwrap();
    // rename(2) replaces the old link in one step, as kubelet does.
    std::fs::rename(&swap, dir.join("..data")).unwrap();
    let file = dir.join("config.yaml");
    if std::fs::symlink_metadata(&file).is_err() {
        std::os::unix::fs::symlink("..data/config.yaml", &file).unwrap();
    }
}

#[tokio::test]
async fn a_config_map_update_is_picked_up_without_a_restart_and_keeps_counts() {
    use ratekeeper_server::serve::Service;

    let dir = tempfile::tempdir().unwrap();
    let before = "domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n";
    config_map(dir.path(), "2026_12_02_a", before);
    let toml = format!(
        "[listen]\nhttp = \"off\"\ngrpc = \"127.0.0.1:0\"\nadmin = \"off\"\n[envoy]\nconfig_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let path = dir.path().join("ratekeeper.toml");
    // Beside the volume, not in it: a .toml file would be read as YAML.
    let toml_dir = tempfile::tempdir().unwrap();
    let path = toml_dir.path().join(path.file_name().unwrap());
    std::fs::write(&path, &toml).unwrap();
    let config = Config::from_toml_str(&toml, "test.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(T0)));
    let service = Service::builder(config)
        .clock(clock.clone())
        .config_file(path)
        .watch_interval(Some(Duration::from_millis(20)))
        .start()
        .await
        .unwrap();
    let client = crate::common::rls_client(service.addrs().grpc.unwrap()).await;
    let ask = |pairs: &'static [(&'static str, &'static str)]| {
        let request = request("edge", vec![descriptor(pairs)], 1);
        let mut client = client.clone();
        async move {
            client
                .should_rate_limit(request)
                .await
                .unwrap()
                .into_inner()
        }
    };
    let user: &[(&str, &str)] = &[("user", "u")];
    assert_eq!(ask(user).await.statuses[0].limit_remaining, 2);

    // The update adds a descriptor and keeps the first as it was.
    let after = format!(
        "{before}  - key: path\n    rate_limit:\n      unit: minute\n      requests_per_unit: 7\n"
    );
    config_map(dir.path(), "2026_12_02_b", &after);
    let path: &[(&str, &str)] = &[("path", "/")];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if ask(path).await.statuses[0].current_limit.is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the swapped ..data link was not picked up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first descriptor's count went on: 1 of 3 was left before.
    let status = ask(user).await.statuses[0].clone();
    assert_eq!((status.code, status.limit_remaining), (OK, 1));
    let limits = service.engine().limits();
    assert_eq!(limits.envoy().unwrap().files().config().limit_count(), 2);
    drop(client);
    service.shutdown();
    service.wait().await.unwrap();
}

#[test]
fn a_broken_file_is_refused_naming_its_place() {
    let dir = tempfile::tempdir().unwrap();
    write_files(
        dir.path(),
        &[(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
        )],
    );
    let text = format!(
        "[envoy]\nconfig_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let error = Config::from_toml_str(&text, "rk.toml")
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("rk.toml:2:14: envoy.config_dir: "),
        "{error}"
    );
    assert!(error.contains("bad.yaml:5:"), "{error}");
    // A directory that is not there.
    let error = Config::from_toml_str("[envoy]\nconfig_dir = \"/nonexistent/rl\"\n", "rk.toml")
        .unwrap_err()
        .to_string();
    assert!(error.contains("/nonexistent/rl"), "{error}");
}

#[test]
fn config_maps_dot_directories_are_skipped_by_default() {
    let dir = tempfile::tempdir().unwrap();
    config_map(dir.path(), "2026_12_02_a", EXAMPLE_1);
    let text = |extra: &str| {
        format!(
            "[envoy]\nconfig_dir = {:?}\n{extra}",
            dir.path().display().to_string()
        )
    };
    let config = Config::from_toml_str(&text(""), "rk.toml").unwrap();
    let files = config.envoy.files.as_ref().unwrap();
    assert_eq!(files.config().limit_count(), 2);
    // envoyproxy/ratelimit's default reads the ..2026 copy as well: the
    // domain is then defined twice.
    let error = Config::from_toml_str(&text("ignore_dot_files = false\n"), "rk.toml")
        .unwrap_err()
        .to_string();
    assert!(error.contains("mongo_cps"), "{error}");
}

/// Seconds since the Unix epoch now.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// On the stores with a clock of their own, a minute window ends on the
/// wall clock's minute too: the reset said is the rest of the minute
/// around the request (asked again if a minute turns meanwhile).
#[tokio::test]
async fn every_store_aligns_windows_to_the_unix_epoch() {
    let minute = "domain: m\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1000\n";
    let sqlite = tempfile::tempdir().unwrap();
    let path = sqlite.path().join("counts.db").display().to_string();
    let redis = RedisServer::start();
    let mut stores = vec![Store::Sqlite(&path)];
    let url = redis.as_ref().map(RedisServer::url);
    if let Some(url) = &url {
        stores.push(Store::Redis(url));
    }
    for store in stores {
        let mut rls = start_with_units(store, &[("m.yaml", minute)], "", false).await;
        let mut checked = false;
        for _ in 0..3 {
            let before = unix_now();
            let response = rls
                .ask(request("m", vec![descriptor(&[("k", "v")])], 1))
                .await;
            assert_eq!(response.overall_code, OK, "{store:?}: {response:?}");
            let after = unix_now();
            if before / 60 != after / 60 {
                continue;
            }
            let reset = response.statuses[0].duration_until_reset.unwrap().seconds as u64;
            // The store read its clock between `before` and `after`
            // (however slow the machine), and rounds to whole seconds
            // either way.
            let (most, least) = (60 - before % 60, 60 - after % 60);
            assert!(
                reset + 1 >= least && reset <= most,
                "{store:?}: reset {reset} s, {most} to {least} s left in the minute"
            );
            checked = true;
            break;
        }
        assert!(
            checked,
            "{store:?}: three minutes turned during three requests"
        );
    }
}

/// Where `import` and the files must meet: exact values, wildcards and
/// the bare key side by side, deeper levels under the bare key, shadow
/// mode and a shared wildcard.
const PRECEDENCE: &str = r#"
domain: precedence
descriptors:
  - key: k
    value: a
    rate_limit:
      unit: minute
      requests_per_unit: 3
  - key: k
    value: a*
    rate_limit:
      unit: minute
      requests_per_unit: 4
  - key: k
    value: "*b"
    rate_limit:
      unit: hour
      requests_per_unit: 5
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 6
    descriptors:
      - key: j
        rate_limit:
          unit: second
          requests_per_unit: 2
      - key: j
        value: x
        shadow_mode: true
        rate_limit:
          unit: minute
          requests_per_unit: 1
  - key: m
    value: "*"
    share_threshold: true
    rate_limit:
      unit: minute
      requests_per_unit: 5
"#;

/// The configurations the property runs over, with the keys and values
/// its requests are made of.
fn import_cases() -> Vec<(
    &'static str,
    &'static str,
    Vec<&'static str>,
    Vec<&'static str>,
)> {
    vec![
        (
            "mongo_cps",
            EXAMPLE_1,
            vec!["database"],
            vec!["users", "default", "x"],
        ),
        (
            "messaging",
            EXAMPLE_2,
            vec!["message_type", "to_number"],
            vec!["marketing", "1", "2"],
        ),
        (
            "example4_nested",
            EXAMPLE_4_NESTED,
            vec!["key", "subkey"],
            vec!["value", "v"],
        ),
        (
            "example8",
            EXAMPLE_8,
            vec!["key1"],
            vec!["value1", "a", "b"],
        ),
        (
            "example9_middle",
            EXAMPLE_9_MIDDLE,
            vec!["path"],
            vec!["/api/1/action", "/api/2/action", "/api/1/other"],
        ),
        (
            "example10_wildcard",
            EXAMPLE_10_WILDCARD,
            vec!["user", "action", "resource"],
            vec!["alice", "readfile", "read", "write", "doc"],
        ),
        (
            "example11",
            EXAMPLE_11,
            vec!["files", "files_no_share"],
            vec!["files/a", "files/b", "files_no_share/a", "files_no_share/b"],
        ),
        (
            "precedence",
            PRECEDENCE,
            vec!["k", "j", "m"],
            vec!["a", "ab", "b", "x", "zz", "aab"],
        ),
    ]
}

/// One service on the files, one on the TOML `ratekeeper import` makes of
/// them, both on a manual clock.
async fn files_and_import(yaml: &str) -> (Rls, Rls) {
    let files = start(&[("config.yaml", yaml)]).await;
    let imported = ratekeeper_formats::envoy::import_files(
        [("config.yaml", yaml)],
        &ratekeeper_formats::envoy::LoadOptions::default(),
    )
    .unwrap();
    let config = Config::from_toml_str(&imported.toml, "imported.toml")
        .unwrap_or_else(|error| panic!("{error}\n{}", imported.toml));
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(T0)));
    let engine = Engine::builder(&config)
        .clock(clock.clone())
        .start()
        .await
        .unwrap();
    let (client, stop) = crate::common::serve_rls(engine).await;
    let native = Rls {
        client,
        clock,
        store: "Memory".to_owned(),
        _stop: stop,
        _dir: tempfile::tempdir().unwrap(),
    };
    (files, native)
}

/// A status as [`decided`] compares it: code, remaining count, reset in
/// seconds, and the limit's rate (requests per unit, unit).
type Decided = (i32, u32, Option<i64>, Option<(u32, i32)>);

/// What must agree: each status's code, remaining count, reset and rate
/// (the names differ: a file's `name`, a native limit's own), and the
/// overall code.
fn decided(response: &RateLimitResponse) -> (i32, Vec<Decided>) {
    let statuses = response
        .statuses
        .iter()
        .map(|status| {
            (
                status.code,
                status.limit_remaining,
                status.duration_until_reset.map(|d| d.seconds),
                status
                    .current_limit
                    .as_ref()
                    .map(|limit| (limit.requests_per_unit, limit.unit)),
            )
        })
        .collect();
    (response.overall_code, statuses)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: 24,
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// The TOML `ratekeeper import envoy` prints decides every request as
    /// the files do: random requests (1 to 3 descriptors of 1 to 3
    /// entries, made of the configuration's keys and values and some it
    /// does not know, 0 to 3 hits, time moving on between some), over
    /// each README example and a configuration of every precedence rule.
    #[test]
    fn the_imported_toml_decides_as_the_files(
        case in 0usize..8,
        requests in proptest::collection::vec(
            (
                proptest::collection::vec(
                    proptest::collection::vec((0usize..4, 0usize..7), 1..4),
                    1..4,
                ),
                0u32..4,
                proptest::option::weighted(0.2, 1u64..90),
            ),
            1..30,
        ),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let cases = import_cases();
            let (domain, yaml, keys, values) = &cases[case];
            let (mut files, mut native) = files_and_import(yaml).await;
            let pick = |list: &[&'static str], at: usize| list.get(at).copied().unwrap_or("unknown");
            for (descriptors, hits, wait) in requests {
                let descriptors: Vec<RateLimitDescriptor> = descriptors
                    .iter()
                    .map(|entries| {
                        let pairs: Vec<(&str, &str)> = entries
                            .iter()
                            .map(|&(k, v)| (pick(keys, k), pick(values, v)))
                            .collect();
                        descriptor(&pairs)
                    })
                    .collect();
                let asked = request(domain, descriptors, hits);
                let by_files = files.ask(asked.clone()).await;
                let by_import = native.ask(asked.clone()).await;
                assert_eq!(decided(&by_files), decided(&by_import), "{asked:?}");
                if let Some(secs) = wait {
                    files.clock.advance(Duration::from_secs(secs));
                    native.clock.advance(Duration::from_secs(secs));
                }
            }
        });
    }
}

#[test]
fn check_explains_the_files_limit_by_limit() {
    let dir = tempfile::tempdir().unwrap();
    let long = "v".repeat(80);
    let yaml = format!(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n      policy: sliding_window\n  - key: b\n    rate_limit:\n      unlimited: true\n  - key: c\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n  - key: s\n    shadow_mode: true\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n  - key: k\n    value: {long}\n    rate_limit:\n      unit: day\n      requests_per_unit: 3\n"
    );
    write_files(dir.path(), &[("d.yaml", &yaml)]);
    let text = format!(
        "[envoy]\nconfig_dir = {:?}\n",
        dir.path().display().to_string()
    );
    let explained = Config::from_toml_str(&text, "rk.toml").unwrap().explain();
    assert!(explained.contains("(1 domain: d; 5 limits)"), "{explained}");
    for line in [
        "  d.a: sliding_window 5/minute\n",
        "  d.b: unlimited\n",
        "  d.c: refuses every request (0 per unit)\n",
        "  d.s: fixed_window 2/hour, shadow\n",
    ] {
        assert!(explained.contains(line), "{line:?} in {explained}");
    }
    // A path too long for a limit name is shown with the name metrics use.
    let long_line = explained
        .lines()
        .find(|line| line.starts_with("  d.k_v"))
        .expect("the long path's line");
    assert!(long_line.contains(": limit d.k_vvv"), "{long_line}");
    assert!(long_line.ends_with(": fixed_window 3/day"), "{long_line}");
}
