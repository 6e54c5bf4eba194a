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
        })
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
        f.debug_struct("Limit")
            .field("name", &self.name)
            .field("policy", &self.policy)
            .finish()
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
