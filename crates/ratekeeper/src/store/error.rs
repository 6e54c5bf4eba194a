//! What can go wrong in a store.

use std::time::Duration;

use thiserror::Error;

use crate::policy::PolicyKind;

/// A boxed error from a store's backend (a database driver, a network
/// client).
pub type BackendError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store could not decide.
///
/// Front ends turn these into `503 Service Unavailable` when the store fails
/// closed (see [`FailurePolicy`](crate::store::FailurePolicy)).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout.
    #[error("the rate-limit store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store failed recently and is not asked again until this retry
    /// interval has passed (see [`FailurePolicy`](crate::store::FailurePolicy)).
    #[error("the rate-limit store failed recently; it is tried again within {0:?}")]
    Down(Duration),
    /// The store could not be reached or refused the request.
    #[error("the rate-limit store is unavailable")]
    Unavailable(#[source] BackendError),
    /// The store stayed busy (locked by other writers) past its retry time.
    #[error("the rate-limit store stayed busy for {0:?}")]
    Busy(Duration),
    /// The store cannot run this policy.
    #[error("this store cannot run the {0} policy")]
    Unsupported(PolicyKind),
    /// The store cannot do this operation at all (a refund on a store that
    /// can only count up).
    #[error("this store cannot {0}")]
    UnsupportedOperation(&'static str),
    /// The store answered with something that is not a valid state or
    /// reply.
    #[error("the rate-limit store returned an invalid reply")]
    InvalidReply(#[source] BackendError),
}

impl StoreError {
    /// An [`Unavailable`](StoreError::Unavailable) error from any backend
    /// error.
    pub fn unavailable(error: impl Into<BackendError>) -> Self {
        StoreError::Unavailable(error.into())
    }

    /// An [`InvalidReply`](StoreError::InvalidReply) error from any backend
    /// error.
    pub fn invalid_reply(error: impl Into<BackendError>) -> Self {
        StoreError::InvalidReply(error.into())
    }
}
