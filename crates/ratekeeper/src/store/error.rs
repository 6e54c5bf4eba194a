//! What can go wrong in a store.

use std::fmt;
use std::sync::Arc;
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
///
/// Each message says what failed: a backend's error is part of the
/// message (with its own causes, each once), not a
/// [`source`](std::error::Error::source), so a log line or an answer that
/// shows the error alone shows why, and one that prints the chain of
/// sources does not repeat it.
///
/// ```
/// use ratekeeper::store::StoreError;
///
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
/// let error = StoreError::unavailable(refused).at("redis://10.0.0.5:6379");
/// assert_eq!(
///     error.to_string(),
///     "the rate-limit store is unavailable: Connection refused (store: redis://10.0.0.5:6379)"
/// );
/// assert!(matches!(error.without_store(), StoreError::Unavailable(_)));
/// ```
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store did not answer within its timeout.
    #[error("the rate-limit store did not answer within {0:?}")]
    Timeout(Duration),
    /// The store failed recently and is not asked again until this retry
    /// interval has passed (see [`FailurePolicy`](crate::store::FailurePolicy)).
    #[error("{last_error}; the store is tried again within {retry_within:?}")]
    Down {
        /// How long until the store is asked again, at most.
        retry_within: Duration,
        /// The message of the failure that took the store down.
        last_error: Arc<str>,
    },
    /// The store could not be reached or refused the request.
    #[error("the rate-limit store is unavailable: {}", Chain(.0.as_ref()))]
    Unavailable(BackendError),
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
    /// A reservation could not be made or settled.
    #[error(transparent)]
    Reservation(#[from] crate::store::reservation::ReservationError),
    /// The store answered with something that is not a valid state or
    /// reply.
    #[error("the rate-limit store returned an invalid reply: {}", Chain(.0.as_ref()))]
    InvalidReply(BackendError),
    /// An error of the store at `store` (its address, without credentials,
    /// or its path): see [`StoreError::at`].
    #[error("{error} (store: {store})")]
    At {
        /// Where the store is.
        store: Arc<str>,
        /// What failed.
        error: Box<StoreError>,
    },
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

    /// This error, saying which store failed: `store` is its address
    /// (without credentials) or path. An error that already names its
    /// store keeps the name it has.
    pub fn at(self, store: impl Into<Arc<str>>) -> Self {
        match self {
            located @ StoreError::At { .. } => located,
            error => StoreError::At {
                store: store.into(),
                error: Box::new(error),
            },
        }
    }

    /// The error without the store's address ([`StoreError::at`]), to
    /// match on what failed.
    pub fn without_store(&self) -> &StoreError {
        match self {
            StoreError::At { error, .. } => error.without_store(),
            error => error,
        }
    }

    /// The store's answer about a reservation (unknown, too many, ...),
    /// wherever the store is: an answer to the caller, not a failure of
    /// the store.
    pub fn reservation(&self) -> Option<&crate::store::reservation::ReservationError> {
        match self.without_store() {
            StoreError::Reservation(error) => Some(error),
            _ => None,
        }
    }
}

/// An error and its sources, `error: source: source`, each text once
/// (some errors, the redis crate's I/O errors among them, show their
/// source's text as their own).
struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut shown = self.0.to_string();
        f.write_str(&shown)?;
        let mut source = self.0.source();
        // Bounded: a cyclic chain must not loop for ever.
        for _ in 0..16 {
            let Some(cause) = source else { break };
            let text = cause.to_string();
            if !shown.contains(&text) {
                write!(f, ": {text}")?;
                shown.push_str(&text);
            }
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn a_backend_error_shows_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = StoreError::unavailable(Outer(io));
        assert_eq!(
            error.to_string(),
            "the rate-limit store is unavailable: outer: refused"
        );
        // Not a source too: a printer of chains says it once.
        assert!(std::error::Error::source(&error).is_none());
    }

    #[test]
    fn an_error_names_its_store_once() {
        let error = StoreError::Timeout(Duration::from_millis(5))
            .at("redis://a:1")
            .at("redis://b:2");
        assert_eq!(
            error.to_string(),
            "the rate-limit store did not answer within 5ms (store: redis://a:1)"
        );
        assert!(matches!(error.without_store(), StoreError::Timeout(_)));
    }
}
