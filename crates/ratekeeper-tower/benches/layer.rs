//! The layer's own cost, without a network: one request through an axum
//! hello-world `Router` called in process, with no limiter, with a layer
//! that changes nothing (what axum's layering itself costs), with
//! ratekeeper's layer (in-memory store, keyed by the socket peer; without
//! and with the draft headers) and with tower_governor keyed alike, as
//! `examples/http_bench.rs` sets them up for the loopback benchmark.
//!
//! Run with `cargo bench -p ratekeeper-tower --bench layer`. Before
//! criterion's runs (one mode after another), it prints 31 rounds of every
//! mode in turn, the order rotating each round: their medians, and the
//! median of each round's ratios, which a drift in the VM's speed during the
//! run does not bias.
//!
//! Each request carries axum's `ConnectInfo<SocketAddr>` (one client
//! address, as from one load generator), is answered by the router, and its
//! response is dropped; every response is checked to be 200. The future of
//! each call is driven by `futures_executor::block_on`: nothing in these
//! services waits, so that costs a poll, the same for all four. Loopback
//! requests/s move with the VM by ±10% between rounds; this does not, so it
//! is where a difference of a few percent between two layers shows.

use std::convert::Infallible;
use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::routing::get;
use axum::Router;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use http::{Request, Response, StatusCode};
use ratekeeper::{Gcra, Limit, MemoryStore};
use ratekeeper_tower::headers::HeaderStyle;
use ratekeeper_tower::{Key, RateLimitLayer};
use tower::util::MapResponseLayer;
use tower::{Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

fn router(mode: &str) -> Router {
    let app = Router::new().route("/", get(|| async { "hello" }));
    // A billion per second per client: nothing is ever refused.
    let quota = || {
        Limit::new(
            "per-ip",
            Gcra::new(1_000_000_000, Duration::from_secs(1), 1_000_000_000).unwrap(),
        )
        .unwrap()
    };
    match mode {
        "none" => app,
        // What any layer costs on an axum route: one that changes nothing.
        "identity_layer" => app.layer(MapResponseLayer::new(|response: Response<Body>| response)),
        "ratekeeper" | "ratekeeper_draft_headers" => {
            let headers = if mode == "ratekeeper" {
                HeaderStyle::None
            } else {
                HeaderStyle::Draft
            };
            let layer = RateLimitLayer::builder(MemoryStore::new())
                .limit(quota(), Key::peer())
                .headers(headers)
                .build()
                .unwrap();
            app.layer(layer)
        }
        "tower_governor" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .unwrap();
            app.layer(GovernorLayer::new(Arc::new(config)))
        }
        other => unreachable!("unknown mode {other}"),
    }
}

fn request(peer: SocketAddr) -> Request<Body> {
    let mut request = Request::get("/").body(Body::empty()).unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

#[inline(never)] // one frame to count in profiles
fn call(service: &mut Router, peer: SocketAddr) -> Response<Body> {
    futures_executor::block_on(async {
        let ready = ServiceExt::<Request<Body>>::ready(service).await?;
        Service::call(ready, request(peer)).await
    })
    .unwrap_or_else(|never: Infallible| match never {})
}

const MODES: [&str; 5] = [
    "none",
    "identity_layer",
    "ratekeeper",
    "ratekeeper_draft_headers",
    "tower_governor",
];

/// Rounds of every mode in turn, the order rotating each round, so a change
/// in the VM's speed during the run falls on all alike (criterion measures
/// one after another); prints each mode's median ns per request and the
/// median of each round's ratios.
fn interleaved(peer: SocketAddr) {
    const ROUNDS: usize = 31;
    const CALLS: u32 = 20_000;
    let mut services: Vec<Router> = MODES.iter().map(|mode| router(mode)).collect();
    let mut ns = vec![Vec::with_capacity(ROUNDS); MODES.len()];
    for round in 0..ROUNDS {
        for turn in 0..MODES.len() {
            let mode = (round + turn) % MODES.len();
            let service = &mut services[mode];
            let start = Instant::now();
            for _ in 0..CALLS {
                black_box(call(service, peer));
            }
            ns[mode].push(start.elapsed().as_nanos() as f64 / f64::from(CALLS));
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ratio = |a: usize, b: usize| median((0..ROUNDS).map(|r| ns[a][r] / ns[b][r]).collect());
    for (mode, name) in MODES.iter().enumerate() {
        eprintln!(
            "interleaved {name:<26} {:>7.1} ns/request, {:.3}x the time without a limiter",
            median(ns[mode].clone()),
            ratio(mode, 0)
        );
    }
    eprintln!(
        "interleaved ratekeeper / tower_governor, time per request, median of {ROUNDS} rounds: {:.3}x",
        ratio(2, 4)
    );
}

/// `LAYER_BENCH_PROFILE=<mode>[:calls]`: only `calls` requests (100,000
/// unless given) of one mode, then exit; for a profiler such as callgrind
/// (`--toggle-collect='layer::call'`), whose count divided by the calls is
/// the instructions per request.
fn profile_only(peer: SocketAddr) -> bool {
    let Ok(spec) = std::env::var("LAYER_BENCH_PROFILE") else {
        return false;
    };
    let (mode, calls) = spec.split_once(':').unwrap_or((spec.as_str(), "100000"));
    let calls: u32 = calls.parse().expect("LAYER_BENCH_PROFILE=<mode>[:calls]");
    assert!(
        MODES.contains(&mode),
        "unknown mode {mode}; one of {MODES:?}"
    );
    let mut service = router(mode);
    for _ in 0..calls {
        black_box(call(&mut service, peer));
    }
    true
}

fn layers(c: &mut Criterion) {
    let peer: SocketAddr = "192.0.2.1:40000".parse().unwrap();
    if profile_only(peer) {
        return;
    }
    // A profiler's run (`--profile-time`) wants the one benchmark it names.
    if !std::env::args().any(|arg| arg == "--profile-time") {
        interleaved(peer);
    }
    let mut group = c.benchmark_group("layer/axum_hello_world");
    group.throughput(Throughput::Elements(1));
    for mode in MODES {
        let mut service = router(mode);
        assert_eq!(call(&mut service, peer).status(), StatusCode::OK, "{mode}");
        group.bench_function(mode, |b| {
            b.iter(|| {
                let response = call(&mut service, peer);
                assert_eq!(response.status(), StatusCode::OK);
                black_box(response)
            })
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    targets = layers
}
criterion_main!(benches);
