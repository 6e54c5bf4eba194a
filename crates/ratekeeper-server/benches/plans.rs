//! What choosing a key's plan costs: one `ShouldRateLimit` of one
//! descriptor `[api_key = K, plan = P]` decided in process
//! (`EnvoyService::decide`, in-memory store, no network), K one of 1,000
//! keys in turn, against the same limit without plans:
//!
//! - `no_plans`: a limit keyed by the API key, `match` on both entries;
//! - `plans`: the same limit with `plan_from = "descriptor:plan"` and
//!   three plans, every request naming `pro` (a lookup, then pro's own
//!   table).
//!
//! ```text
//! cargo bench -p ratekeeper-server --bench plans
//! ```
//!
//! Before criterion's runs it prints 15 rounds of both in turn, the order
//! rotating each round: their medians, and the median of each round's
//! ratio, which a drift in a shared VM's speed during the run does not
//! bias.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use ratekeeper::{clock::ManualClock, Timestamp};
use ratekeeper_server::engine::Engine;
use ratekeeper_server::envoy::proto::rate_limit_descriptor::Entry;
use ratekeeper_server::envoy::proto::rate_limit_response::Code;
use ratekeeper_server::envoy::proto::{RateLimitDescriptor, RateLimitRequest};
use ratekeeper_server::envoy::EnvoyService;
use ratekeeper_server::Config;
use tokio::runtime::Runtime;

const KEYS: usize = 1_000;

const LIMIT: &str = r#"
[[limits]]
name = "api"
rate = "1000000000/minute"
key = ["descriptor:api_key"]
match = { domain = "edge", descriptors = [{ key = "api_key" }, { key = "plan" }] }
"#;

const PLANS: &str = r#"plan_from = "descriptor:plan"
[limits.plans]
pro = "2000000000/minute"
enterprise = "unlimited"
suspended = "deny"
"#;

fn service(runtime: &Runtime, plans: bool) -> EnvoyService {
    let toml = match plans {
        true => format!("{LIMIT}{PLANS}"),
        false => LIMIT.to_owned(),
    };
    let config = Config::from_toml_str(&toml, "bench.toml").unwrap();
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1_700_000_000)));
    let engine = runtime
        .block_on(Engine::builder(&config).clock(clock).start())
        .unwrap();
    EnvoyService::new(engine)
}

fn requests() -> Vec<RateLimitRequest> {
    (0..KEYS)
        .map(|key| RateLimitRequest {
            domain: "edge".to_owned(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![
                    Entry {
                        key: "api_key".to_owned(),
                        value: format!("key-{key}"),
                    },
                    Entry {
                        key: "plan".to_owned(),
                        value: "pro".to_owned(),
                    },
                ],
                limit: None,
                hits_addend: None,
                is_negative_hits: false,
            }],
            hits_addend: 1,
        })
        .collect()
}

/// One decision; its one limit's quota, to tell the plans apart.
#[inline(never)]
fn decide(runtime: &Runtime, service: &EnvoyService, request: &RateLimitRequest) -> u32 {
    let response = runtime.block_on(service.decide(request)).unwrap();
    assert_eq!(response.overall_code, Code::Ok as i32);
    response.statuses[0]
        .current_limit
        .as_ref()
        .map_or(0, |limit| limit.requests_per_unit)
}

fn interleaved(runtime: &Runtime, services: &[EnvoyService; 2], requests: &[RateLimitRequest]) {
    const ROUNDS: usize = 15;
    const CALLS: usize = 4_000;
    let mut us: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        for turn in 0..2 {
            let at = (round + turn) % 2;
            let start = Instant::now();
            for call in 0..CALLS {
                black_box(decide(runtime, &services[at], &requests[call % KEYS]));
            }
            us[at].push(start.elapsed().as_secs_f64() * 1e6 / CALLS as f64);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = median((0..ROUNDS).map(|r| us[1][r] / us[0][r]).collect());
    eprintln!(
        "interleaved no_plans {:.3} µs, plans {:.3} µs; plans / no_plans: {ratio:.3}x (median of {ROUNDS} rounds)",
        median(us[0].clone()),
        median(us[1].clone()),
    );
}

fn plans(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let services = [service(&runtime, false), service(&runtime, true)];
    let requests = requests();
    // The plans' limit answers with pro's numbers.
    let (own, pro) = (
        decide(&runtime, &services[0], &requests[0]),
        decide(&runtime, &services[1], &requests[0]),
    );
    assert_eq!((own, pro), (1_000_000_000, 2_000_000_000));
    if !std::env::args().any(|arg| arg == "--profile-time") {
        interleaved(&runtime, &services, &requests);
    }
    let mut group = c.benchmark_group("plans");
    for (name, service) in ["no_plans", "plans"].into_iter().zip(&services) {
        let mut call = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                call = (call + 1) % KEYS;
                black_box(decide(&runtime, service, &requests[call]))
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = plans
}
criterion_main!(benches);
