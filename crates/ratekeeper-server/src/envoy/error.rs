//! The gRPC status each reason a `ShouldRateLimit` call was not answered
//! becomes.

use crate::config::CapError;
use crate::engine::PlanError;

/// Why a request to Envoy's rate limit service got a gRPC error instead of
/// a response, as Envoy reads it.
///
/// Envoy treats any gRPC error as a failure of the service and lets the
/// filter's `failure_mode_deny` decide: a failed store is `UNAVAILABLE`, a
/// malformed request or one over a cap of `[requests]` `INVALID_ARGUMENT`
/// (an override past `requests.max_override_rates` `RESOURCE_EXHAUSTED`),
/// a refund a limit forbids `PERMISSION_DENIED`, never `UNKNOWN`.
impl From<PlanError> for tonic::Status {
    fn from(error: PlanError) -> tonic::Status {
        let message = error.to_string();
        match error {
            // Not the request's fault alone: the service counts enough
            // rates already.
            PlanError::OverCap(CapError::OverrideRates { .. }) => {
                tonic::Status::resource_exhausted(message)
            }
            PlanError::EmptyDomain
            | PlanError::NoDescriptors
            | PlanError::InvalidOverride { .. }
            | PlanError::MissingPart { .. }
            | PlanError::UnknownLimit(_)
            | PlanError::OverCap(_) => tonic::Status::invalid_argument(message),
            PlanError::RefundForbidden { .. } => tonic::Status::permission_denied(message),
            PlanError::Store(_) => tonic::Status::unavailable(message),
        }
    }
}
