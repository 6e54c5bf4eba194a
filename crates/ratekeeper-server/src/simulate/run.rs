//! Policies to simulate, and running them over requests with the core.
//!
//! # Policy strings
//!
//! `[KIND:]RATE`, where `KIND` is one of `token_bucket`, `gcra`,
//! `fixed_window`, `sliding_log` or `sliding_window` (case-insensitive,
//! `-` for `_` allowed; [`PolicyKind`]'s names) and `RATE` is a
//! [`Rate`] string such as `100/minute burst 20`. Without a kind, the policy
//! is [`PolicyKind::DEFAULT`], the service's default: the token bucket. The
//! window policies take no burst.
//!
//! ```
//! use ratekeeper::policy::PolicyKind;
//! use ratekeeper_server::simulate::SimPolicy;
//!
//! let policy: SimPolicy = "100/minute burst 20".parse().unwrap();
//! assert_eq!(policy.kind(), PolicyKind::TokenBucket);
//! assert_eq!(policy.to_string(), "token_bucket:100/minute burst 20");
//!
//! let policy: SimPolicy = "sliding-window: 100/minute".parse().unwrap();
//! assert_eq!(policy.to_string(), "sliding_window:100/minute");
//! ```

use std::fmt;
use std::str::FromStr;

use ratekeeper::{
    policy::{Algorithm, ParseRateError, PolicyError, PolicyKind, State, UnknownPolicyKind},
    Decision, Policy, Rate,
};
use thiserror::Error;

use super::Request;

/// One policy to simulate: a kind and a rate, built into the core's
/// [`Policy`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimPolicy {
    rate: Rate,
    policy: Policy,
}

/// Why a policy string was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParsePolicyError {
    /// The text before `:` is not a policy kind.
    #[error(transparent)]
    UnknownKind(#[from] UnknownPolicyKind),
    /// The rate does not parse.
    #[error("rate {text:?}: {source}")]
    Rate {
        /// The rate as written.
        text: String,
        /// Why.
        source: ParseRateError,
    },
    /// The kind refuses the rate's numbers (such as a burst for a window
    /// policy).
    #[error(transparent)]
    Policy(#[from] PolicyError),
}

impl SimPolicy {
    /// The policy of `kind` for `rate`.
    ///
    /// # Errors
    ///
    /// What [`Policy::new`] refuses, such as a burst for a window policy.
    pub fn new(kind: PolicyKind, rate: Rate) -> Result<SimPolicy, PolicyError> {
        Ok(SimPolicy {
            policy: Policy::new(kind, &rate)?,
            rate,
        })
    }

    /// `rate` under each of the five kinds, in [`PolicyKind::ALL`]'s order,
    /// for `--compare`. The window policies take no burst, so they get the
    /// rate without it (their labels show the rate they run).
    ///
    /// ```
    /// use ratekeeper_server::simulate::SimPolicy;
    ///
    /// let labels: Vec<String> = SimPolicy::compare("10/s burst 20".parse().unwrap())
    ///     .unwrap()
    ///     .iter()
    ///     .map(ToString::to_string)
    ///     .collect();
    /// assert_eq!(labels, [
    ///     "token_bucket:10/second burst 20",
    ///     "gcra:10/second burst 20",
    ///     "fixed_window:10/second",
    ///     "sliding_log:10/second",
    ///     "sliding_window:10/second",
    /// ]);
    /// ```
    ///
    /// # Errors
    ///
    /// What [`Policy::new`] refuses for any kind.
    pub fn compare(rate: Rate) -> Result<Vec<SimPolicy>, PolicyError> {
        PolicyKind::ALL
            .into_iter()
            .map(|kind| {
                let rate = match kind {
                    PolicyKind::TokenBucket | PolicyKind::Gcra => rate,
                    _ => Rate::new(rate.amount(), rate.period())?,
                };
                SimPolicy::new(kind, rate)
            })
            .collect()
    }

    /// The algorithm.
    pub fn kind(&self) -> PolicyKind {
        self.policy.kind()
    }

    /// The rate it was built from.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The core's policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The decisions for `requests`, in order, from a fresh state: the
    /// core's [`Algorithm::simulate`].
    ///
    /// ```
    /// use ratekeeper::Timestamp;
    /// use ratekeeper_server::simulate::{Request, SimPolicy};
    ///
    /// let policy: SimPolicy = "fixed_window:2/s".parse().unwrap();
    /// let requests = [0, 10, 20, 1000].map(|ms| Request { time: Timestamp::from_millis(ms), cost: 1 });
    /// let allowed: Vec<bool> = policy.simulate(&requests).iter().map(|d| d.is_allowed()).collect();
    /// assert_eq!(allowed, [true, true, false, true]);
    /// ```
    pub fn simulate(&self, requests: &[Request]) -> Vec<Decision> {
        self.policy
            .simulate(requests.iter().map(|r| (r.time, r.cost)))
    }
}

impl fmt::Display for SimPolicy {
    /// `KIND:RATE`, which parses back to the same policy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind(), self.rate)
    }
}

impl FromStr for SimPolicy {
    type Err = ParsePolicyError;

    fn from_str(s: &str) -> Result<SimPolicy, ParsePolicyError> {
        let (kind, rate) = match s.split_once(':') {
            Some((kind, rate)) => (kind.parse::<PolicyKind>()?, rate),
            None => (PolicyKind::DEFAULT, s),
        };
        let rate = rate
            .parse::<Rate>()
            .map_err(|source| ParsePolicyError::Rate {
                text: rate.trim().to_owned(),
                source,
            })?;
        Ok(SimPolicy::new(kind, rate)?)
    }
}

/// What one policy did with the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Requests offered.
    pub offered: u64,
    /// Requests allowed.
    pub admitted: u64,
    /// Requests refused.
    pub refused: u64,
    /// Units offered (the sum of the costs).
    pub offered_units: u64,
    /// Units allowed.
    pub admitted_units: u64,
}

/// Several policies deciding the same requests, one request at a time,
/// each with its own state: for traces too long to keep every decision.
///
/// ```
/// use ratekeeper::Timestamp;
/// use ratekeeper_server::simulate::{Request, SimPolicy, Simulator};
///
/// let policies = SimPolicy::compare("2/s".parse().unwrap()).unwrap();
/// let mut simulator = Simulator::new(&policies);
/// for _ in 0..3 {
///     simulator.decide(Request { time: Timestamp::ZERO, cost: 1 });
/// }
/// assert!(simulator.totals().iter().all(|t| (t.admitted, t.refused) == (2, 1)));
/// ```
#[derive(Debug)]
pub struct Simulator<'a> {
    policies: &'a [SimPolicy],
    states: Vec<State>,
    decisions: Vec<Decision>,
    totals: Vec<Totals>,
}

impl<'a> Simulator<'a> {
    /// Fresh states for `policies`.
    pub fn new(policies: &'a [SimPolicy]) -> Simulator<'a> {
        Simulator {
            policies,
            states: policies.iter().map(|p| p.policy.fresh()).collect(),
            decisions: Vec::with_capacity(policies.len()),
            totals: vec![Totals::default(); policies.len()],
        }
    }

    /// The policies, in order.
    pub fn policies(&self) -> &'a [SimPolicy] {
        self.policies
    }

    /// Decides `request` under every policy; the decisions are in the
    /// policies' order.
    pub fn decide(&mut self, request: Request) -> &[Decision] {
        self.decisions.clear();
        for ((policy, state), totals) in self
            .policies
            .iter()
            .zip(&mut self.states)
            .zip(&mut self.totals)
        {
            let (decision, next) = policy.policy.decide(state, request.time, request.cost);
            *state = next;
            totals.offered += 1;
            totals.offered_units = totals.offered_units.saturating_add(request.cost);
            if decision.is_allowed() {
                totals.admitted += 1;
                totals.admitted_units = totals.admitted_units.saturating_add(request.cost);
            } else {
                totals.refused += 1;
            }
            self.decisions.push(decision);
        }
        &self.decisions
    }

    /// What each policy did so far, in the policies' order.
    pub fn totals(&self) -> &[Totals] {
        &self.totals
    }
}
