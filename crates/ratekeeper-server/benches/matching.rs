//! What matching a descriptor costs against the number of limits: one
//! `ShouldRateLimit` (domain `d`, one descriptor `[k = VALUE]`) decided in
//! process (`EnvoyService::decide`, in-memory store, no network) against 1,
//! 100 and 10,000 limits, for a value one limit matches (`hit`) and for one
//! no limit matches (`miss`), with the limits as:
//!
//! - `native`: `[[limits]]` tables, each `match = { domain = "d",
//!   descriptors = [{ key = "k", value = "vN" }] }`;
//! - `envoy_files`: envoyproxy/ratelimit's YAML (`[envoy] config_dir`), one
//!   file of domain `d` whose descriptors are `key: k, value: vN`;
//! - `json`: the native limits again, through the JSON API's `"descriptors"`
//!   (`POST /v1/check` on the axum router called in process: JSON parsing
//!   and answering included).
//!
//! ```text
//! cargo bench -p ratekeeper-server --bench matching
//! ```
//!
//! Before criterion's runs (one benchmark after another), it prints 15
//! rounds of each door's three sizes in turn, the order rotating each
//! round: their medians, and the median of each round's ratio of 10,000
//! limits to 1, which a drift in a shared VM's speed during the run does
//! not bias. The matched value is the middle limit's, so a walk over the
//! limits would show.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, StatusCode};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
use ratekeeper_server::envoy::EnvoyService;
use ratekeeper_server::{http as api, Config};
use tokio::runtime::Runtime;
use tower::ServiceExt;

const SIZES: [usize; 3] = [1, 100, 10_000];

/// Far more than a run asks: every decision is allowed, and counted.
const RATE: u32 = 1_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Door {
    Native,
    EnvoyFiles,
    Json,
}

impl Door {
    const ALL: [Door; 3] = [Door::Native, Door::EnvoyFiles, Door::Json];

    fn name(self) -> &'static str {
        match self {
            Door::Native => "native",
            Door::EnvoyFiles => "envoy_files",
            Door::Json => "json",
        }
    }
}

/// The value one limit of `size` matches: the middle one's.
fn hit(size: usize) -> String {
    format!("v{}", size / 2)
}

const MISS: &str = "nothing";

/// A service with `size` limits as `door` has them.
struct Setup {
    door: Door,
    envoy: EnvoyService,
    router: Router,
    _dir: Option<tempfile::TempDir>,
}

fn native_toml(size: usize) -> String {
    let mut toml = String::new();
    for n in 0..size {
        toml.push_str(&format!(
            "[[limits]]\nname = \"l{n}\"\nrate = \"{RATE}/minute\"\nkey = [\"global\"]\n\
             match = {{ domain = \"d\", descriptors = [{{ key = \"k\", value = \"v{n}\" }}] }}\n"
        ));
    }
    toml
}

fn envoy_yaml(size: usize) -> String {
    let mut yaml = String::from("domain: d\ndescriptors:\n");
    for n in 0..size {
        yaml.push_str(&format!(
            "  - key: k\n    value: v{n}\n    rate_limit:\n      unit: minute\n      \
             requests_per_unit: {RATE}\n"
        ));
    }
    yaml
}

fn setup(runtime: &Runtime, door: Door, size: usize) -> Setup {
    let (text, dir) = match door {
        Door::Native | Door::Json => (native_toml(size), None),
        Door::EnvoyFiles => {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("d.yaml"), envoy_yaml(size)).unwrap();
            let text = format!("[envoy]\nconfig_dir = {:?}\n", path_text(dir.path()));
            (text, Some(dir))
        }
    };
    let config = Config::from_toml_str(&text, "bench.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let engine = runtime
        .block_on(Engine::builder(&config).clock(clock).start())
        .unwrap();
    Setup {
        door,
        envoy: EnvoyService::new(engine.clone()),
        router: api::router(engine),
        _dir: dir,
    }
}

fn path_text(path: &Path) -> String {
    path.display().to_string()
}

fn grpc_request(value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "d".to_owned(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "k".to_owned(),
                value: value.to_owned(),
            }],
            limit: None,
            hits_addend: None,
            is_negative_hits: false,
        }],
        hits_addend: 1,
    }
}

fn json_body(value: &str) -> String {
    format!(r#"{{"domain":"d","descriptors":[[{{"key":"k","value":"{value}"}}]]}}"#)
}

/// One decision of `setup` for `value`; how many limits counted it.
#[inline(never)] // one frame to count in profiles
fn decide(runtime: &Runtime, setup: &Setup, value: &str) -> usize {
    match setup.door {
        Door::Native | Door::EnvoyFiles => {
            let request = grpc_request(value);
            let response = runtime.block_on(setup.envoy.decide(&request)).unwrap();
            assert_eq!(response.overall_code, Code::Ok as i32);
            response
                .statuses
                .iter()
                .filter(|status| status.current_limit.is_some())
                .count()
        }
        Door::Json => {
            let request = Request::post("/v1/check")
                .header("content-type", "application/json")
                .body(Body::from(json_body(value)))
                .unwrap();
            let response = runtime
                .block_on(setup.router.clone().oneshot(request))
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            let body = runtime
                .block_on(axum::body::to_bytes(response.into_body(), 1 << 20))
                .unwrap();
            let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(answer["allowed"], true);
            answer["limits"].as_array().map_or(0, Vec::len)
        }
    }
}

/// Rounds of a door's sizes in turn, the order rotating each round; prints
/// each size's median µs per decision and the median of each round's
/// ratio of the largest to the smallest.
fn interleaved(runtime: &Runtime, door: Door, setups: &[Setup], kind: &str) {
    const ROUNDS: usize = 15;
    const CALLS: u32 = 2_000;
    let mut us = vec![Vec::with_capacity(ROUNDS); setups.len()];
    for round in 0..ROUNDS {
        for turn in 0..setups.len() {
            let at = (round + turn) % setups.len();
            let value = match kind {
                "hit" => hit(SIZES[at]),
                _ => MISS.to_owned(),
            };
            let start = Instant::now();
            for _ in 0..CALLS {
                black_box(decide(runtime, &setups[at], &value));
            }
            us[at].push(start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let last = setups.len() - 1;
    let ratio = median((0..ROUNDS).map(|r| us[last][r] / us[0][r]).collect());
    let cells: Vec<String> = SIZES
        .iter()
        .zip(&us)
        .map(|(size, us)| format!("{size}: {:.2} µs", median(us.clone())))
        .collect();
    eprintln!(
        "interleaved {:<11} {kind:<4} {}; {} / {}: {ratio:.3}x (median of {ROUNDS} rounds)",
        door.name(),
        cells.join(", "),
        SIZES[last],
        SIZES[0],
    );
}

fn matching(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let profiling = std::env::args().any(|arg| arg == "--profile-time");
    for door in Door::ALL {
        let setups: Vec<Setup> = SIZES
            .iter()
            .map(|&size| setup(&runtime, door, size))
            .collect();
        for (setup, &size) in setups.iter().zip(&SIZES) {
            assert_eq!(decide(&runtime, setup, &hit(size)), 1, "{}", door.name());
            assert_eq!(decide(&runtime, setup, MISS), 0, "{}", door.name());
        }
        // A profiler's run (`--profile-time`) wants the one benchmark it
        // names.
        if !profiling {
            for kind in ["hit", "miss"] {
                interleaved(&runtime, door, &setups, kind);
            }
        }
        for kind in ["hit", "miss"] {
            let mut group = c.benchmark_group(format!("matching/{}/{kind}", door.name()));
            for (setup, &size) in setups.iter().zip(&SIZES) {
                let value = match kind {
                    "hit" => hit(size),
                    _ => MISS.to_owned(),
                };
                group.bench_function(size.to_string(), |b| {
                    b.iter(|| black_box(decide(&runtime, setup, &value)))
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = matching
}
criterion_main!(benches);
