//! A policy's numbers as the script takes them, and the check that the
//! script's arithmetic stays exact.

use std::fmt;
use std::time::Duration;

use ratekeeper::{
    policy::{Algorithm, PolicyKind},
    Policy,
};
use thiserror::Error;

/// The largest integer a Lua number (a double) holds exactly: 2^53.
pub const MAX_EXACT: u64 = 1 << 53;

/// Why the Redis store cannot run a policy exactly.
///
/// The script computes in Lua numbers, which are doubles: exact for integers
/// up to 2^53. Times are microseconds (Redis's `TIME`), so the window
/// policies need windows of whole microseconds; every policy needs its
/// largest intermediate number below 2^53. [`check_policy`] tells which
/// bound a policy misses; the store itself answers
/// [`StoreError::Unsupported`](ratekeeper::store::StoreError::Unsupported).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("the Redis store cannot run this {kind} policy exactly: {reason}")]
pub struct UnsupportedPolicy {
    /// The policy's kind.
    pub kind: PolicyKind,
    /// Which bound it misses, in words.
    pub reason: &'static str,
}

/// Checks that the Redis store runs `policy` with the same decisions as the
/// pure policy, and says why not otherwise.
///
/// The bounds (2^53 ns is about 104 days, 2^53 µs about 285 years):
///
/// - token bucket: a full bucket in the core's internal units
///   (`burst × period / gcd(rate, period)`, the period in ns) and the time to
///   fill an empty one both at most 2^53 (ns);
/// - GCRA: the burst tolerance (`burst × emission interval`) at most 2^53 ns;
/// - fixed window and sliding log: a window of whole microseconds;
/// - sliding window counter: a window of whole microseconds, and `limit ×
///   window` (in µs) at most 2^53 (for example 2.5 million per hour, or
///   100,000 per day).
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{FixedWindow, Gcra, Policy};
/// use ratekeeper_redis::check_policy;
///
/// assert!(check_policy(&Policy::from(Gcra::per_second(3)?)).is_ok());
/// let odd = FixedWindow::new(10, Duration::from_nanos(1_500))?;
/// assert!(check_policy(&Policy::from(odd)).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn check_policy(policy: &Policy) -> Result<(), UnsupportedPolicy> {
    Params::of(policy).map(|_| ())
}

/// The script's numbers for one limit: its kind code and three parameters.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Params {
    pub(crate) code: u8,
    pub(crate) args: [u64; 3],
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Params({}, {:?})", self.code, self.args)
    }
}

impl Params {
    pub(crate) fn of(policy: &Policy) -> Result<Params, UnsupportedPolicy> {
        let kind = policy.kind();
        let refuse = |reason| UnsupportedPolicy { kind, reason };
        match policy {
            Policy::TokenBucket(p) => {
                let period = nanos(p.period());
                let g = gcd(p.rate(), period);
                let (gain, unit) = (p.rate() / g, period / g);
                let full = p
                    .burst()
                    .checked_mul(unit)
                    .filter(|&full| full <= MAX_EXACT)
                    .ok_or_else(|| {
                        refuse("a full bucket (burst x period / gcd(rate, period)) exceeds 2^53")
                    })?;
                if full.div_ceil(gain) > MAX_EXACT {
                    return Err(refuse("the time to fill the bucket exceeds 2^53 ns"));
                }
                Ok(Params {
                    code: 1,
                    args: [full, unit, gain],
                })
            }
            Policy::Gcra(p) => {
                let interval = nanos(p.emission_interval());
                interval
                    .checked_mul(p.burst())
                    .filter(|&t| t <= MAX_EXACT)
                    .ok_or_else(|| refuse("the burst tolerance exceeds 2^53 ns"))?;
                Ok(Params {
                    code: 2,
                    args: [interval, p.burst(), 0],
                })
            }
            Policy::FixedWindow(_) | Policy::SlidingLog(_) | Policy::SlidingWindow(_) => {
                let window = nanos(policy.window());
                if !window.is_multiple_of(1_000) {
                    return Err(refuse("the window is not a whole number of microseconds"));
                }
                let window = window / 1_000;
                let limit = policy.quota();
                let code = match kind {
                    PolicyKind::FixedWindow => 3,
                    PolicyKind::SlidingLog => 4,
                    _ => {
                        if limit.checked_mul(window).is_none_or(|w| w > MAX_EXACT) {
                            return Err(refuse("limit x window (in microseconds) exceeds 2^53"));
                        }
                        5
                    }
                };
                // A fixed window's third number: 1 opens each window at
                // the key's first hit, 0 on the epoch's multiples.
                let from_first_hit = match policy {
                    Policy::FixedWindow(w) => u64::from(w.is_from_first_hit()),
                    _ => 0,
                };
                Ok(Params {
                    code,
                    args: [limit, window, from_first_hit],
                })
            }
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let r = a % b;
        a = b;
        b = r;
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratekeeper::{FixedWindow, Gcra, SlidingLog, SlidingWindow, TokenBucket};

    #[test]
    fn bounds() {
        let ok = |p: Policy| Params::of(&p).is_ok();
        assert!(ok(TokenBucket::new(3, Duration::from_secs(1), 10)
            .unwrap()
            .into()));
        // A full bucket of 10^18 internal units: exact in u64, not in f64.
        assert!(!ok(TokenBucket::new(
            1,
            Duration::from_secs(10_000),
            100_000
        )
        .unwrap()
        .into()));
        assert!(ok(Gcra::per_second(3).unwrap().into()));
        assert!(!ok(Gcra::new(1, Duration::from_secs(86_400 * 200), 1)
            .unwrap()
            .into()));
        assert!(ok(FixedWindow::new(
            5,
            Duration::from_secs(86_400 * 365 * 100)
        )
        .unwrap()
        .into()));
        assert!(!ok(SlidingLog::new(5, Duration::from_nanos(1_001))
            .unwrap()
            .into()));
        assert!(ok(SlidingWindow::new(100_000, Duration::from_secs(86_400))
            .unwrap()
            .into()));
        assert!(!ok(SlidingWindow::new(
            200_000,
            Duration::from_secs(86_400)
        )
        .unwrap()
        .into()));
        let bucket = Params::of(
            &TokenBucket::new(3, Duration::from_secs(1), 2)
                .unwrap()
                .into(),
        );
        // 3 per 10^9 ns: gcd 1, a token is 10^9 units, a ns adds 3.
        assert_eq!(bucket.unwrap().args, [2_000_000_000, 1_000_000_000, 3]);
    }
}
