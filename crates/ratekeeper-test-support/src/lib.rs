//! What ratekeeper's tests share, so that no crate copies another's
//! helpers: private `redis-server` processes and clusters ([`redis`],
//! [`redis_tls`]), the policy lists the tests run on ([`policies`]) and
//! time in milliseconds ([`ms`]), the [`conformance`] suite every
//! store runs, and the [`skip`] of a test whose outside program is missing.
//!
//! Not published: a dev-dependency of the workspace's crates only.

pub mod conformance;
pub mod policies;
pub mod redis;
pub mod redis_sentinel;
pub mod redis_tls;
pub mod skip;

use ratekeeper::Timestamp;

/// `n` milliseconds after the clock's epoch: the time of most tests.
pub fn ms(n: u64) -> Timestamp {
    Timestamp::from_millis(n)
}
