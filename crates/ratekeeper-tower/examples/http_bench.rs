//! An axum hello-world for the HTTP benchmark in BENCHMARKS.md, with no
//! limiter, ratekeeper's layer, or tower_governor's, all keyed per client
//! address with a quota no load can exhaust (so the overhead is measured,
//! not refusals); and with a layer that changes nothing, for what axum's
//! layering itself costs any limiter.
//!
//! `cargo run --release -p ratekeeper-tower --example http_bench -- MODE PORT`
//! with MODE one of `none`, `identity-layer`, `ratekeeper`,
//! `ratekeeper-headers`, `tower-governor`. `scripts/bench-http.sh` drives it with wrk.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use ratekeeper::{Gcra, Limit, MemoryStore};
use ratekeeper_tower::headers::HeaderStyle;
use ratekeeper_tower::{Key, RateLimitLayer};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "none".into());
    let port: u16 = args.next().unwrap_or_else(|| "3000".into()).parse()?;
    let app = Router::new().route("/", get(|| async { "hello" }));
    // A billion per second per client: nothing is ever refused.
    let quota = || {
        Limit::new(
            "per-ip",
            Gcra::new(
                1_000_000_000,
                std::time::Duration::from_secs(1),
                1_000_000_000,
            )
            .unwrap(),
        )
    };
    let app = match mode.as_str() {
        "none" => app,
        "identity-layer" => app.layer(tower::util::MapResponseLayer::new(
            |response: axum::response::Response| response,
        )),
        "ratekeeper" | "ratekeeper-headers" => {
            let headers = if mode == "ratekeeper" {
                HeaderStyle::None
            } else {
                HeaderStyle::Draft
            };
            let layer = RateLimitLayer::builder(MemoryStore::new())
                .limit(quota()?, Key::peer())
                .headers(headers)
                .build()?;
            app.layer(layer)
        }
        "tower-governor" => {
            let config = GovernorConfigBuilder::default()
                .per_nanosecond(1)
                .burst_size(u32::MAX)
                .finish()
                .ok_or("tower_governor refused the configuration")?;
            app.layer(GovernorLayer::new(Arc::new(config)))
        }
        other => return Err(format!("unknown mode {other:?}").into()),
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    println!("{mode} listening on {}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
