//! `ShouldRateLimit`: Envoy's request turned into the engine's checks, and
//! the engine's verdict into Envoy's response.

use std::future::Future;

use ratekeeper::store::AnsweredBy;
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use tower::Layer;

use super::proto::rate_limit_descriptor::Entry;
use super::proto::rate_limit_service_server::RateLimitService;
use super::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse};
use super::response;
use super::unary::EnvoyServer;
use crate::access::{self, RequireTokenService};
use crate::config::ConnectionConfig;
use crate::engine::{
    DecisionDoor, Descriptor, DescriptorRequest, DoorRules, Engine, MissingPart, PlanError,
    RateOverride, STORE_HEADER,
};
use crate::listen::{Door, Protocol};

/// Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService`)
/// deciding through an [`Engine`].
///
/// Serve it with [`EnvoyService::into_server`] on a tonic server; or call
/// [`EnvoyService::decide`] directly. See the [module](super) for what it
/// answers.
#[derive(Clone, Debug)]
pub struct EnvoyService {
    engine: Engine,
}

/// Envoy's descriptor, read in place by the engine's plan.
impl Descriptor for RateLimitDescriptor {
    type Entry = Entry;

    fn entries(&self) -> &[Entry] {
        &self.entries
    }

    fn hits(&self) -> Option<u64> {
        self.hits_addend
    }

    fn is_refund(&self) -> bool {
        self.is_negative_hits
    }

    fn rate_override(&self) -> Option<RateOverride> {
        self.limit.as_ref().map(|asked| RateOverride {
            requests_per_unit: asked.requests_per_unit,
            unit: asked.unit,
        })
    }
}

impl EnvoyService {
    /// The service deciding through `engine`.
    pub fn new(engine: Engine) -> EnvoyService {
        EnvoyService { engine }
    }

    /// The gRPC server of this service (`ShouldRateLimit` decoded and
    /// answered by [`EnvoyServer`] itself, other methods by tonic's
    /// generated server), to serve with hyper or add to a
    /// `tonic::transport::Server`; it takes messages up to the engine's
    /// `requests.max_body_bytes` (read now: a reload does not change it),
    /// and is behind the engine's `[access.decisions]` tokens when it has
    /// some: a call without one is answered `UNAUTHENTICATED` (see
    /// [`crate::access`]). Other services on the same server (gRPC health)
    /// are not behind it.
    pub fn into_server(self) -> RequireTokenService<EnvoyServer> {
        let max = self.engine.request_caps().max_body_bytes;
        let access = self.engine.access().layer(access::Door::Grpc);
        access.layer(EnvoyServer::new(self, max))
    }

    /// Serves this service over gRPC (HTTP/2) on `listener` until
    /// `shutdown` completes, then lets the calls in flight finish, with the
    /// default [`ConnectionConfig`](crate::config::ConnectionConfig)'s
    /// timeouts and caps (what `ratekeeper serve` does with its own).
    /// Its connections are counted by no admin door's `/metrics`: for
    /// those, run it as a door of `ratekeeper serve`.
    ///
    /// ```no_run
    /// # async fn run(engine: ratekeeper_server::engine::Engine) -> Result<(), Box<dyn std::error::Error>> {
    /// use ratekeeper_server::envoy::EnvoyService;
    ///
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8081").await?;
    /// EnvoyService::new(engine)
    ///     .serve(listener, async { let _ = tokio::signal::ctrl_c().await; })
    ///     .await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future<Output = ()> + Send) {
        let door = Door::new(
            "grpc",
            Protocol::Http2,
            &ConnectionConfig::default(),
            &crate::listen::ConnectionStats::default(),
        );
        crate::listen::serve(listener, door, self.into_server(), shutdown).await;
    }

    /// The engine it decides through.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Answers one `ShouldRateLimit` request.
    ///
    /// Errors are a failed store ([`PlanError::Store`]), malformed
    /// requests (no domain, no descriptors, an override with an unknown
    /// unit) and requests over the engine's
    /// [`RequestCaps`](crate::config::RequestCaps) ([`PlanError::OverCap`]);
    /// whatever the request holds, this never panics, and its work is
    /// linear in the request's size.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, PlanError> {
        Ok(self.decide_answered(request).await?.0)
    }

    /// [`EnvoyService::decide`], and who answered: the store, or the
    /// failure policy while it failed (then `response_headers_to_add`
    /// carries `x-ratekeeper-store` too, and the gRPC door sends it as
    /// response metadata).
    pub(crate) async fn decide_answered(
        &self,
        request: &RateLimitRequest,
    ) -> Result<(RateLimitResponse, AnsweredBy), PlanError> {
        let door = self.engine.envoy_door();
        let asked = DescriptorRequest {
            domain: &request.domain,
            descriptors: &request.descriptors,
            hits: match request.hits_addend {
                0 => 1,
                hits => u64::from(hits),
            },
            door: DecisionDoor::Grpc,
            rules: DoorRules {
                counting: door.counting,
                quota_mode: door.quota_mode,
                shadow_mode: door.shadow_mode,
            },
            missing: MissingPart::Unknown,
            in_flight: true,
        };
        let verdict = self.engine.decide_descriptors(&asked).await?;
        let answered_by = verdict.answered_by();
        Ok((response::answer(verdict, &door, answered_by), answered_by))
    }
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let (answer, answered_by) = self
            .decide_answered(request.get_ref())
            .await
            .map_err(Status::from)?;
        let mut response = Response::new(answer);
        if answered_by.is_failover() {
            response.metadata_mut().insert(
                STORE_HEADER,
                tonic::metadata::MetadataValue::from_static(answered_by.as_str()),
            );
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::CapError;
    use crate::envoy::proto::rate_limit_descriptor::RateLimitOverride;
    use crate::envoy::proto::rate_limit_response::Code;
    use crate::envoy::proto::{RateLimitDescriptor, RateLimitUnit};
    use crate::Config;
    use ratekeeper::{clock::ManualClock, Timestamp};

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn an_override_past_the_cap_is_resource_exhausted() {
        let cap = CapError::OverrideRates {
            index: 4,
            requests: 8,
            unit: "minute".to_owned(),
            max: 3,
        };
        let error = PlanError::OverCap(cap);
        assert_eq!(
            tonic::Status::from(error).code(),
            tonic::Code::ResourceExhausted
        );
    }

    /// The results the answer looks at for a request of `count`
    /// descriptors, each matched by a configured limit and each with an
    /// override of its own rate (a limit name of its own).
    fn steps_for(count: usize) -> u64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let config = Config::from_toml_str(
                // Room for every override rate.
                "[requests]\nmax_override_rates = 256\n\
                 [[limits]]\nname = \"per-user\"\nrate = \"1000/minute\"\nkey = [\"global\"]\n\
                 match = { domain = \"d\", descriptors = [{ key = \"user\" }] }\n",
                "test.toml",
            )
            .unwrap();
            let clock = Arc::new(ManualClock::new(Timestamp::from_secs(1)));
            let service =
                EnvoyService::new(Engine::builder(&config).clock(clock).start().await.unwrap());
            let configured = (0..count).map(|i| RateLimitDescriptor {
                entries: vec![entry("user", &format!("u{i}"))],
                ..RateLimitDescriptor::default()
            });
            let overridden = (0..count).map(|i| RateLimitDescriptor {
                entries: vec![entry("other", &format!("o{i}"))],
                limit: Some(RateLimitOverride {
                    requests_per_unit: 1_000 + i as u32,
                    unit: RateLimitUnit::Minute as i32,
                }),
                ..RateLimitDescriptor::default()
            });
            let request = RateLimitRequest {
                domain: "d".into(),
                descriptors: configured.chain(overridden).collect(),
                hits_addend: 0,
            };
            crate::engine::work::take();
            let response = service.decide(&request).await.unwrap();
            assert_eq!(response.statuses.len(), 2 * count);
            assert!(response
                .statuses
                .iter()
                .all(|status| status.code == Code::Ok as i32));
            crate::engine::work::take()
        })
    }

    #[test]
    fn the_work_of_an_answer_is_linear_in_the_descriptors() {
        let (small, large) = (steps_for(32), steps_for(128));
        // Every result is looked at, a bounded number of times each.
        assert!(small >= 2 * 32, "{small}");
        assert!(
            large <= 4 * small,
            "32 descriptors: {small} steps, 128: {large}"
        );
    }

    /// A decision's future is copied at every level of a request (into
    /// its parent's state, and into the box the door serves it from): the
    /// remote stores' kilobyte futures are boxed so that it stays small on
    /// every store (it was 9.7 KB, a sixth of the Envoy door's CPU in
    /// copies).
    #[test]
    fn a_decisions_future_stays_small() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let config = Config::from_toml_str(
                "[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"global\"]\n",
                "test.toml",
            )
            .unwrap();
            let engine = Engine::builder(&config).start().await.unwrap();
            let service = EnvoyService::new(engine.clone());
            let request = RateLimitRequest::default();
            let decide = service.decide_answered(&request);
            assert!(
                std::mem::size_of_val(&decide) <= 2048,
                "{}",
                std::mem::size_of_val(&decide)
            );
            let check = engine.check(Vec::new());
            assert!(
                std::mem::size_of_val(&check) <= 2048,
                "{}",
                std::mem::size_of_val(&check)
            );
        });
    }
}
