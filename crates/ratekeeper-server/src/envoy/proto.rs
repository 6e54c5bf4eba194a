//! The messages and the gRPC service of Envoy's rate limit service API v3,
//! generated at build time from the `.proto` files under `proto/` (by
//! tonic-prost-build, parsed with protox: no system `protoc`).
//!
//! The modules follow the protobuf packages (`envoy.service.ratelimit.v3`
//! is [`envoy::service::ratelimit::v3`]); the types a front door or a
//! client needs are re-exported here.
//!
//! Both sides are generated: [`rate_limit_service_server`] is what
//! [`EnvoyService`](super::EnvoyService) implements, and
//! [`rate_limit_service_client`] is a client over any tonic transport (a
//! `tonic::transport::Channel` in tests and benchmarks).

#![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]

/// Envoy's protobuf packages, as far as the rate limit service needs them.
pub mod envoy {
    /// `envoy.config`.
    pub mod config {
        /// `envoy.config.core`.
        pub mod core {
            /// `envoy.config.core.v3`: [`HeaderValue`](v3::HeaderValue).
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.config.core.v3.rs"));
            }
        }
    }
    /// `envoy.extensions`.
    pub mod extensions {
        /// `envoy.extensions.common`.
        pub mod common {
            /// `envoy.extensions.common.ratelimit`.
            pub mod ratelimit {
                /// `envoy.extensions.common.ratelimit.v3`: the descriptor.
                pub mod v3 {
                    include!(concat!(
                        env!("OUT_DIR"),
                        "/envoy.extensions.common.ratelimit.v3.rs"
                    ));
                }
            }
        }
    }
    /// `envoy.type`.
    pub mod r#type {
        /// `envoy.type.v3`: the rate limit unit.
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }
    /// `envoy.service`.
    pub mod service {
        /// `envoy.service.ratelimit`.
        pub mod ratelimit {
            /// `envoy.service.ratelimit.v3`: the service, its request and
            /// its response.
            pub mod v3 {
                include!(concat!(env!("OUT_DIR"), "/envoy.service.ratelimit.v3.rs"));
            }
        }
    }
}

pub use envoy::config::core::v3::HeaderValue;
pub use envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor, RateLimitDescriptor};
pub use envoy::r#type::v3::RateLimitUnit;
pub use envoy::service::ratelimit::v3::{
    rate_limit_response, rate_limit_service_client, rate_limit_service_server, RateLimitRequest,
    RateLimitResponse,
};
