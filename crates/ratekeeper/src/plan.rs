//! Plans: one limit whose numbers depend on the key's class.
//!
//! A service sells its API by plan: a free key gets 10 requests a second,
//! a pro key 100, an enterprise key no limit, a suspended key none. With
//! [`Plans`], that is one limit with a number of plans, not one limit per
//! plan, and nothing grows per key: each request names its key's plan (from
//! wherever the caller trusts: a header its own edge sets, a verified
//! token's claim, a table), and [`Plans::get`] gives the [`Limit`] to check
//! it against, or says it is not limited, or refused.
//!
//! A key's use is counted once over all of a limit's plans: when a key's
//! plan changes, what it used moves to the new numbers
//! ([`Policy::carry`]), as when a configuration reload changes a limit, so
//! an upgrade never hands out a fresh quota and a downgrade never forgives
//! the use already made. [`MemoryStore`](crate::MemoryStore) keeps each
//! plan's keys in a table of its own and moves a key between them on its
//! first request under its new plan; the Redis and SQLite stores keep one
//! state per key, which records the numbers it was made under, and carry
//! it on the key's next request. Every plan's policy is therefore of the
//! same kind as the limit's own (refused otherwise: another kind would
//! start the key afresh).
//!
//! A plan name that [`Plans`] does not know, or none, gets the limit's own
//! numbers, never no limit: a client that manages to send a plan of its
//! choosing gains nothing by inventing one.
//!
//! ```
//! use ratekeeper::plan::{Plan, Plans};
//! use ratekeeper::{Limit, MemoryStore, Store, TokenBucket};
//!
//! # futures_executor::block_on(async {
//! let plans = Plans::new(Limit::new("api", TokenBucket::per_second(1)?)?)
//!     .limited("pro", TokenBucket::per_second(3)?)?
//!     .unlimited("internal")?
//!     .deny("suspended")?;
//! let store = MemoryStore::new();
//!
//! // A free key (no plan): 1 request a second.
//! let Plan::Limited(free) = plans.get(None) else { unreachable!() };
//! assert!(store.check(free, b"key-1", 1).await?.is_allowed());
//! assert!(!store.check(free, b"key-1", 1).await?.is_allowed());
//!
//! // key-1 upgrades: its one request so far counts against pro's 3.
//! let Plan::Limited(pro) = plans.get(Some("pro")) else { unreachable!() };
//! assert!(store.check(pro, b"key-1", 1).await?.is_allowed());
//! assert!(store.check(pro, b"key-1", 1).await?.is_allowed());
//! assert!(!store.check(pro, b"key-1", 1).await?.is_allowed());
//!
//! assert_eq!(plans.get(Some("internal")), &Plan::Unlimited);
//! assert_eq!(plans.get(Some("suspended")), &Plan::Deny);
//! // An unknown plan is the default, never unlimited.
//! assert_eq!(plans.get(Some("platinum")), plans.get(None));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;

use thiserror::Error;

use crate::policy::PolicyKind;
use crate::store::check_name;
use crate::{Limit, Policy};

/// The most plans one [`Plans`] holds, its default not counted.
pub const MAX_PLANS: usize = 64;

/// The name of the plan of keys that name none or an unknown one: the
/// limit's own numbers. No other plan may take it.
pub const DEFAULT_PLAN: &str = "default";

/// What a plan does to its keys' requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Checked against this limit: the [`Plans`]' limit with the plan's
    /// numbers.
    Limited(Limit),
    /// Never limited, and not counted.
    Unlimited,
    /// Always refused, without asking a store.
    Deny,
}

/// A limit's numbers per plan, with the limit's own as the default (see
/// the [module](self)).
#[derive(Clone)]
pub struct Plans {
    default: Plan,
    named: HashMap<Box<str>, Plan, ahash::RandomState>,
}

/// Why a plan was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The name is not one a limit could have.
    #[error("the plan name {name:?} is not valid: {reason}")]
    BadName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The name is [`DEFAULT_PLAN`], which is the limit's own numbers.
    #[error("a plan may not be called {DEFAULT_PLAN:?}: the limit's own numbers are that plan")]
    Reserved,
    /// Two plans of one name.
    #[error("the plan {0:?} is given twice")]
    Duplicate(String),
    /// More than [`MAX_PLANS`] plans.
    #[error("a limit may have at most {MAX_PLANS} plans")]
    TooMany,
    /// The plan's policy is of another kind than the limit's: a key moving
    /// to it would start afresh.
    #[error("the plan {plan:?} is a {found:?} policy, and the limit a {expected:?} one; a plan changes a limit's numbers, not its kind")]
    OtherKind {
        /// The plan.
        plan: String,
        /// Its policy's kind.
        found: PolicyKind,
        /// The limit's.
        expected: PolicyKind,
    },
}

impl Plans {
    /// Plans for `limit`, whose own numbers are the [`DEFAULT_PLAN`]: a key
    /// that names no plan, or one not added here, is checked against them.
    pub fn new(limit: Limit) -> Plans {
        let default = limit.in_plan(DEFAULT_PLAN, limit.policy().clone());
        Plans {
            default: Plan::Limited(default),
            named: HashMap::default(),
        }
    }

    /// Adds the plan `name` with `policy`'s numbers (of the limit's kind).
    ///
    /// # Errors
    ///
    /// A [`PlanError`] for a bad, reserved or repeated name, one plan too
    /// many, or a policy of another kind.
    pub fn limited(self, name: &str, policy: impl Into<Policy>) -> Result<Plans, PlanError> {
        let policy = policy.into();
        let expected = self.limit().policy().kind();
        if policy.kind() != expected {
            return Err(PlanError::OtherKind {
                plan: name.to_owned(),
                found: policy.kind(),
                expected,
            });
        }
        let limit = self.limit().in_plan(name, policy);
        self.add(name, Plan::Limited(limit))
    }

    /// Adds the plan `name`, whose keys are never limited.
    ///
    /// # Errors
    ///
    /// As [`limited`](Plans::limited).
    pub fn unlimited(self, name: &str) -> Result<Plans, PlanError> {
        self.add(name, Plan::Unlimited)
    }

    /// Adds the plan `name`, whose keys are always refused.
    ///
    /// # Errors
    ///
    /// As [`limited`](Plans::limited).
    pub fn deny(self, name: &str) -> Result<Plans, PlanError> {
        self.add(name, Plan::Deny)
    }

    fn add(mut self, name: &str, plan: Plan) -> Result<Plans, PlanError> {
        check_name(name).map_err(|error| PlanError::BadName {
            name: name.to_owned(),
            reason: error.to_string(),
        })?;
        if name == DEFAULT_PLAN {
            return Err(PlanError::Reserved);
        }
        if self.named.contains_key(name) {
            return Err(PlanError::Duplicate(name.to_owned()));
        }
        if self.named.len() >= MAX_PLANS {
            return Err(PlanError::TooMany);
        }
        self.named.insert(name.into(), plan);
        Ok(self)
    }

    /// What the plan `plan` does: [`default`](Plans::default_plan) for
    /// `None` and for a plan not added.
    #[inline]
    pub fn get(&self, plan: Option<&str>) -> &Plan {
        plan.and_then(|plan| self.find(plan))
            .unwrap_or(&self.default)
    }

    /// The plan `plan`, if it was added ([`DEFAULT_PLAN`] is the default).
    #[inline]
    pub fn find(&self, plan: &str) -> Option<&Plan> {
        if self.named.is_empty() {
            return (plan == DEFAULT_PLAN).then_some(&self.default);
        }
        match self.named.get(plan) {
            Some(found) => Some(found),
            None => (plan == DEFAULT_PLAN).then_some(&self.default),
        }
    }

    /// The default plan: the limit's own numbers.
    pub fn default_plan(&self) -> &Plan {
        &self.default
    }

    /// The limit, with its own numbers (the default plan's).
    pub fn limit(&self) -> &Limit {
        match &self.default {
            Plan::Limited(limit) => limit,
            Plan::Unlimited | Plan::Deny => unreachable!("the default plan is always limited"),
        }
    }

    /// Every plan added, by name, in no set order (the default not
    /// included).
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Plan)> {
        self.named.iter().map(|(name, plan)| (&**name, plan))
    }

    /// How many plans were added (the default not counted).
    pub fn len(&self) -> usize {
        self.named.len()
    }

    /// Whether no plan was added: every key gets the limit's own numbers.
    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }
}

impl fmt::Debug for Plans {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut named: Vec<_> = self.iter().collect();
        named.sort_by_key(|(name, _)| *name);
        f.debug_struct("Plans")
            .field("limit", self.limit())
            .field("plans", &named)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FixedWindow, Gcra, TokenBucket};

    fn plans() -> Plans {
        Plans::new(Limit::new("api", TokenBucket::per_second(1).unwrap()).unwrap())
    }

    #[test]
    fn names_are_checked_and_bounded() {
        assert!(matches!(
            plans().unlimited("has space"),
            Err(PlanError::BadName { .. })
        ));
        assert_eq!(plans().deny(DEFAULT_PLAN).unwrap_err(), PlanError::Reserved);
        assert_eq!(
            plans().deny("x").unwrap().unlimited("x").unwrap_err(),
            PlanError::Duplicate("x".into())
        );
        let mut full = plans();
        for n in 0..MAX_PLANS {
            full = full.deny(&format!("p{n}")).unwrap();
        }
        assert_eq!(full.len(), MAX_PLANS);
        assert_eq!(full.deny("one-more").unwrap_err(), PlanError::TooMany);
    }

    #[test]
    fn a_plan_keeps_the_limits_kind() {
        let error = plans()
            .limited(
                "pro",
                FixedWindow::new(5, std::time::Duration::from_secs(1)).unwrap(),
            )
            .unwrap_err();
        assert!(matches!(error, PlanError::OtherKind { .. }), "{error}");
        assert!(plans()
            .limited("pro", Gcra::per_second(5).unwrap())
            .is_err());
    }

    #[test]
    fn unknown_and_missing_plans_get_the_limits_own_numbers() {
        let plans = plans()
            .limited("pro", TokenBucket::per_second(5).unwrap())
            .unwrap()
            .unlimited("internal")
            .unwrap();
        let Plan::Limited(default) = plans.get(None) else {
            panic!("the default is limited")
        };
        assert_eq!(default.policy(), plans.limit().policy());
        assert_eq!(default.plan(), Some(DEFAULT_PLAN));
        assert_eq!(plans.get(Some("nope")), plans.get(None));
        assert_eq!(plans.get(Some(DEFAULT_PLAN)), plans.get(None));
        let Plan::Limited(pro) = plans.get(Some("pro")) else {
            panic!("pro is limited")
        };
        assert_eq!((pro.name(), pro.plan()), ("api", Some("pro")));
        assert_eq!(
            pro.policy(),
            &Policy::from(TokenBucket::per_second(5).unwrap())
        );
        assert_eq!(plans.get(Some("internal")), &Plan::Unlimited);
        assert_eq!(plans.find("nope"), None);
    }
}
