//! What a reload does to the keys of each limit whose numbers changed: the
//! stores carry each key's state to the new numbers of the same kind of
//! policy ([`Policy::carry`](ratekeeper::Policy::carry)), and start the
//! keys fresh when the kind changed.

use std::fmt;

use ratekeeper::Policy;

use super::LimitSet;

/// What happens to a limit's keys when its policy changes under the same
/// name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeysAfterChange {
    /// The same kind with other numbers: each key's state is carried, so
    /// what a key used still counts under the new numbers.
    Carried,
    /// Another kind of policy: each key starts with a fresh quota.
    StartedFresh,
}

impl fmt::Display for KeysAfterChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeysAfterChange::Carried => "carried",
            KeysAfterChange::StartedFresh => "started fresh",
        })
    }
}

/// A limit, in force before and after a reload, whose policy changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangedLimit {
    /// The limit's name.
    pub name: String,
    /// Its policy before.
    pub before: Policy,
    /// Its policy now.
    pub after: Policy,
    /// What its keys' states became.
    pub keys: KeysAfterChange,
}

impl ChangedLimit {
    /// The policy as the log shows it: its kind and numbers.
    fn show(policy: &Policy) -> String {
        serde_json::to_string(policy).unwrap_or_else(|_| policy.kind().to_string())
    }

    /// [`ChangedLimit::before`] for a log line.
    pub(crate) fn before_shown(&self) -> String {
        Self::show(&self.before)
    }

    /// [`ChangedLimit::after`] for a log line.
    pub(crate) fn after_shown(&self) -> String {
        Self::show(&self.after)
    }
}

/// The limits of `before` still in `after` (by name) with another policy,
/// in `after`'s order.
pub fn changed_limits(before: &LimitSet, after: &LimitSet) -> Vec<ChangedLimit> {
    after
        .iter()
        .filter_map(|limit| {
            let old = before.get(limit.name())?;
            let (was, now) = (old.limit().policy(), limit.limit().policy());
            (was != now).then(|| ChangedLimit {
                name: limit.name().to_owned(),
                before: was.clone(),
                after: now.clone(),
                keys: if was.kind() == now.kind() {
                    KeysAfterChange::Carried
                } else {
                    KeysAfterChange::StartedFresh
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn limits(policy: &str, rate: &str) -> LimitSet {
        let toml = format!(
            "[[limits]]\nname = \"a\"\nrate = \"{rate}\"\npolicy = \"{policy}\"\nkey = [\"global\"]\n\
             [[limits]]\nname = \"b\"\nrate = \"1/second\"\nkey = [\"global\"]\n"
        );
        LimitSet::new(&Config::from_toml_str(&toml, "t.toml").unwrap().limits)
    }

    #[test]
    fn new_numbers_carry_and_another_kind_starts_fresh() {
        let before = limits("gcra", "5/minute");
        assert_eq!(changed_limits(&before, &limits("gcra", "5/minute")), []);
        let tightened = changed_limits(&before, &limits("gcra", "4/minute"));
        assert_eq!(tightened.len(), 1);
        assert_eq!(
            (tightened[0].name.as_str(), tightened[0].keys),
            ("a", KeysAfterChange::Carried)
        );
        assert!(tightened[0].after_shown().contains("\"limit\":4"));
        let other = changed_limits(&before, &limits("fixed_window", "4/minute"));
        assert_eq!(other[0].keys, KeysAfterChange::StartedFresh);
        assert_eq!(other[0].keys.to_string(), "started fresh");
    }
}
