//! A named limit: a policy with a name stores can keep keys under.

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

use crate::Policy;

/// The longest name a limit may have, in bytes.
pub const MAX_LIMIT_NAME: usize = 64;

/// A policy with a name, the unit a [`Store`](crate::Store) decides against.
///
/// The name separates the keys of different limits in a shared store (a
/// Redis key is `{prefix}{length of the name}:{name}:{key}`) and names the policy in rate-limit
/// headers, so it is 1 to 64 bytes of printable ASCII without spaces,
/// quotes, backslashes, braces or colons (those would break Structured
/// Fields, Redis Cluster hash tags, or the `name:key` separation, where `a:b`
/// with key `c` and `a` with key `b:c` would meet). Clones are cheap.
///
/// ```
/// use ratekeeper::{Gcra, Limit};
///
/// let limit = Limit::new("per-ip", Gcra::per_minute(100)?)?;
/// assert_eq!(limit.name(), "per-ip");
/// assert!(Limit::new("has space", Gcra::per_minute(100)?).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Limit {
    name: Arc<str>,
    policy: Policy,
    plan: Option<InPlan>,
}

/// A limit's plan ([`Plans`](crate::plan::Plans)), and the name of the
/// in-memory table its keys are kept in.
#[derive(Clone, PartialEq, Eq, Hash)]
struct InPlan {
    plan: Arc<str>,
    /// `name:plan`: no limit is named so, as names hold no colon.
    table: Arc<str>,
}

/// Why a limit's name was refused.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum LimitNameError {
    /// The name was empty.
    #[error("a limit's name must not be empty")]
    Empty,
    /// The name was longer than [`MAX_LIMIT_NAME`] bytes.
    #[error("the limit name {name:?} is {len} bytes long; at most {max} are allowed", max = MAX_LIMIT_NAME)]
    TooLong {
        /// The name given.
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// The name holds a character that is not allowed.
    #[error("the limit name {name:?} contains {character:?}; use letters, digits and punctuation other than quotes, backslashes, braces and colons")]
    BadCharacter {
        /// The name given.
        name: String,
        /// The first character refused.
        character: char,
    },
}

impl Limit {
    /// A limit called `name` enforcing `policy`.
    pub fn new(name: impl Into<String>, policy: impl Into<Policy>) -> Result<Self, LimitNameError> {
        let name = name.into();
        check_name(&name)?;
        Ok(Limit {
            name: name.into(),
            policy: policy.into(),
            plan: None,
        })
    }

    /// This limit with `policy`, for the keys of `plan`: every store counts
    /// a key once over all of a limit's plans (see
    /// [`Plans`](crate::plan::Plans)). `plan` is a valid name already.
    pub(crate) fn in_plan(&self, plan: &str, policy: Policy) -> Limit {
        Limit {
            name: Arc::clone(&self.name),
            policy,
            plan: Some(InPlan {
                plan: plan.into(),
                table: format!("{}:{plan}", self.name).into(),
            }),
        }
    }

    /// The plan this limit's numbers are for, if it is one plan's of a
    /// [`Plans`](crate::plan::Plans).
    pub fn plan(&self) -> Option<&str> {
        self.plan.as_ref().map(|in_plan| &*in_plan.plan)
    }

    /// The name of the in-memory table that keeps this limit's keys: its
    /// name, or `name:plan` for one plan's numbers.
    pub(crate) fn table(&self) -> &str {
        self.plan
            .as_ref()
            .map_or(&*self.name, |in_plan| &*in_plan.table)
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The policy it enforces.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("Limit");
        debug
            .field("name", &self.name)
            .field("policy", &self.policy);
        if let Some(plan) = self.plan() {
            debug.field("plan", &plan);
        }
        debug.finish()
    }
}

pub(crate) fn check_name(name: &str) -> Result<(), LimitNameError> {
    if name.is_empty() {
        return Err(LimitNameError::Empty);
    }
    if name.len() > MAX_LIMIT_NAME {
        return Err(LimitNameError::TooLong {
            name: name.to_owned(),
            len: name.len(),
        });
    }
    let refused = |c: char| !c.is_ascii_graphic() || matches!(c, '"' | '\\' | '{' | '}' | ':');
    match name.chars().find(|&c| refused(c)) {
        Some(character) => Err(LimitNameError::BadCharacter {
            name: name.to_owned(),
            character,
        }),
        None => Ok(()),
    }
}
