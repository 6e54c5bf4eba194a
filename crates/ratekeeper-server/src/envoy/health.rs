//! The standard gRPC health service (`grpc.health.v1.Health`, tonic-health)
//! on the gRPC port, following the service's readiness.
//!
//! It answers for the server (`""`) and for
//! `envoy.service.ratelimit.v3.RateLimitService`, both `SERVING` while
//! decisions are answered as configured and `NOT_SERVING` while they are
//! not: while a store that fails closed is down (what `/readyz` says on
//! the admin port). `Check` answers the state now; `Watch` streams each
//! change as the store goes down and comes back (the engine's store
//! monitor looks every second). No token is asked for: probes carry none,
//! and the answer says nothing a caller could abuse.

use tokio::sync::watch;
use tonic::server::NamedService;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

use crate::engine::{Engine, StoreState};

/// The path prefix of the health service's methods.
pub(crate) const PATH_PREFIX: &str = crate::access::OPEN_GRPC_PREFIX;

/// The health service of `engine`, kept current by a task on the running
/// tokio runtime (none without one: then it says `SERVING`).
pub(crate) fn service(engine: &Engine) -> HealthServer<HealthService> {
    let reporter = HealthReporter::new();
    let server = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let serves_while_down = engine.store().answers_while_down();
        runtime.spawn(follow(
            reporter,
            engine.watch_store_state(),
            serves_while_down,
        ));
    }
    server
}

/// Sets both names' status from each state the store goes through, until
/// the engine is gone.
async fn follow(
    reporter: HealthReporter,
    mut states: watch::Receiver<StoreState>,
    serves_while_down: bool,
) {
    loop {
        let serving = {
            let state = states.borrow_and_update();
            state.up || serves_while_down
        };
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in ["", super::EnvoyServer::NAME] {
            reporter.set_service_status(name, status).await;
        }
        if states.changed().await.is_err() {
            return;
        }
    }
}
