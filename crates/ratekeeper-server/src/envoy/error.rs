//! Why a `ShouldRateLimit` call was not answered, and the gRPC status each
//! reason becomes.

use ratekeeper::store::StoreError;

use crate::config::CapError;
use crate::engine::PlanError;
use thiserror::Error;

/// Why a request to Envoy's rate limit service got a gRPC error instead of
/// a response.
///
/// Envoy treats any gRPC error as a failure of the service and lets the
/// filter's `failure_mode_deny` decide; so does [`tonic::Status::from`]:
/// a failed store is `UNAVAILABLE`, a malformed request or one over a cap
/// of `[requests]` `INVALID_ARGUMENT` (an override past
/// `requests.max_override_rates` `RESOURCE_EXHAUSTED`), a refund a limit
/// forbids `PERMISSION_DENIED`, never `UNKNOWN`.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EnvoyError {
    /// The request has no domain.
    #[error("the rate limit domain must not be empty")]
    EmptyDomain,
    /// The request has no descriptors.
    #[error("the rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// A descriptor's limit override cannot be used.
    #[error("descriptors[{index}].limit: {reason}")]
    InvalidOverride {
        /// The descriptor's position in the request.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A descriptor gives hits back (`is_negative_hits`) to a limit that
    /// accepts no refunds (`allow_refunds = false`).
    #[error(
        "descriptors[{index}]: limit {limit} accepts no refunds (allow_refunds = false), so \
         is_negative_hits is refused"
    )]
    RefundForbidden {
        /// The descriptor's position in the request.
        index: usize,
        /// The limit.
        limit: String,
    },
    /// The request holds more than `[requests]` allows.
    #[error("{0}")]
    OverCap(#[from] CapError),
    /// The store failed, and the failure policy refuses.
    #[error("the rate-limit store failed: {0}")]
    Store(#[from] StoreError),
    /// A limit's key needs a part the descriptor does not give (the
    /// Envoy door keys such parts `unknown`, so it does not refuse them).
    #[error("limit {limit:?} needs the key part {part:?}")]
    MissingPart {
        /// The limit.
        limit: String,
        /// The part, as written in the configuration.
        part: String,
    },
}

/// The engine's reasons, as the Envoy door names them.
impl From<PlanError> for EnvoyError {
    fn from(error: PlanError) -> EnvoyError {
        match error {
            PlanError::EmptyDomain => EnvoyError::EmptyDomain,
            PlanError::NoDescriptors => EnvoyError::NoDescriptors,
            PlanError::InvalidOverride { index, reason } => {
                EnvoyError::InvalidOverride { index, reason }
            }
            PlanError::RefundForbidden { index, limit } => {
                EnvoyError::RefundForbidden { index, limit }
            }
            PlanError::OverCap(cap) => EnvoyError::OverCap(cap),
            PlanError::Store(store) => EnvoyError::Store(store),
            PlanError::MissingPart { limit, part } => EnvoyError::MissingPart { limit, part },
        }
    }
}

impl From<EnvoyError> for tonic::Status {
    fn from(error: EnvoyError) -> tonic::Status {
        let message = error.to_string();
        match error {
            // Not the request's fault alone: the service counts enough
            // rates already.
            EnvoyError::OverCap(CapError::OverrideRates { .. }) => {
                tonic::Status::resource_exhausted(message)
            }
            EnvoyError::EmptyDomain
            | EnvoyError::NoDescriptors
            | EnvoyError::InvalidOverride { .. }
            | EnvoyError::MissingPart { .. }
            | EnvoyError::OverCap(_) => tonic::Status::invalid_argument(message),
            EnvoyError::RefundForbidden { .. } => tonic::Status::permission_denied(message),
            EnvoyError::Store(_) => tonic::Status::unavailable(message),
        }
    }
}
