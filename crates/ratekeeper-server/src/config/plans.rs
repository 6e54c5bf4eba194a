//! `plan_from` and `[limits.plans]`: a limit whose numbers depend on the
//! plan of the request's key ([`ratekeeper::plan`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::HeaderName;
use ipnet::IpNet;
use ratekeeper::plan::Plans;
use ratekeeper::Rate;

use super::KeyPart;

/// A limit's plans and where a request's plan is read.
#[derive(Clone, Debug)]
pub struct PlanConfig {
    /// Where a request names its plan.
    pub from: PlanFrom,
    /// The numbers of each plan; the limit's own are the default, for a
    /// request that names none or one not listed.
    pub plans: Plans,
    /// Each plan as written (`"100/minute"`, `"unlimited"`, `"deny"`), by
    /// name, in name order: what `/v1/limits` shows.
    pub written: Vec<(String, String)>,
    /// The rate each limited plan was built from, by name, in name order:
    /// the numbers its answers show (Envoy's `current_limit`, the
    /// `RateLimit-Policy` header).
    pub rates: Vec<(String, Rate)>,
}

/// Where a request names its plan (`plan_from`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanFrom {
    /// A request header (`header:NAME`), believed only from one of `peers`
    /// on the doors that read a client's request (nginx's
    /// `auth_request`): any client can write a header, so only one your
    /// edge sets and strips from clients is a plan. The JSON API's
    /// callers state it among the key parts.
    Header {
        /// The header.
        name: HeaderName,
        /// The peers whose header is believed (`plan_from_peers`).
        peers: Vec<IpNet>,
    },
    /// A descriptor entry's value (`descriptor:KEY`): Envoy's descriptors
    /// are built by Envoy, from what its route configuration says.
    Descriptor(String),
    /// A table of keys and their plans in a file of its own
    /// (`table:PATH`), read again when it changes: the request's key
    /// (the limit's own) names nothing, the table does.
    Table(Arc<PlanTable>),
}

/// The most bytes a plan table file may hold.
pub const MAX_PLAN_TABLE_BYTES: u64 = 64 << 20;

/// The most keys a plan table may list.
pub const MAX_PLAN_TABLE_KEYS: usize = 1_000_000;

/// A file of keys and their plans (`plan_from = "table:PATH"`), as read
/// when the configuration was loaded.
#[derive(Clone)]
pub struct PlanTable {
    /// The file: relative to the configuration file's folder when
    /// written there.
    pub path: PathBuf,
    /// Each key's plan; a plan name is shared by its keys.
    plans: HashMap<Box<[u8]>, Arc<str>>,
    /// A digest of the file's bytes: two tables are the same when read
    /// from the same file with the same contents.
    digest: [u8; 32],
}

impl PlanTable {
    /// The table in `bytes`, read from `path`: a TOML file of
    /// `"KEY" = "PLAN"` lines, each plan one of `names` (a limit's plans)
    /// or `default`, at most [`MAX_PLAN_TABLE_KEYS`] keys in
    /// [`MAX_PLAN_TABLE_BYTES`].
    ///
    /// # Errors
    ///
    /// What is wrong, naming the file (and the line, for TOML that does
    /// not parse).
    pub fn parse(bytes: &[u8], path: &Path, names: &[&str]) -> Result<PlanTable, String> {
        use sha2::{Digest, Sha256};
        if bytes.len() as u64 > MAX_PLAN_TABLE_BYTES {
            return Err(format!(
                "{} is over {} MiB: a plan table holds at most {MAX_PLAN_TABLE_KEYS} keys",
                path.display(),
                MAX_PLAN_TABLE_BYTES >> 20
            ));
        }
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let text = std::str::from_utf8(bytes)
            .map_err(|error| format!("{} is not UTF-8: {error}", path.display()))?;
        let keys: toml::Table = text.parse().map_err(|error| {
            format!(
                "{} is not a TOML table of \"KEY\" = \"PLAN\": {error}",
                path.display()
            )
        })?;
        if keys.len() > MAX_PLAN_TABLE_KEYS {
            return Err(format!(
                "{} lists {} keys; a plan table holds at most {MAX_PLAN_TABLE_KEYS}",
                path.display(),
                keys.len()
            ));
        }
        // One shared name per plan: a million keys on three plans hold
        // three names.
        let shared: Vec<Arc<str>> = names
            .iter()
            .copied()
            .chain([ratekeeper::plan::DEFAULT_PLAN])
            .map(Arc::from)
            .collect();
        let mut plans = HashMap::with_capacity(keys.len());
        for (key, plan) in keys {
            let Some(plan) = plan.as_str() else {
                return Err(format!(
                    "{}: the plan of {key:?} must be a plan's name in quotes, not {plan}",
                    path.display()
                ));
            };
            let Some(name) = shared.iter().find(|name| ***name == *plan) else {
                return Err(format!(
                    "{}: {key:?} is on the plan {plan:?}, which [limits.plans] does not list",
                    path.display()
                ));
            };
            plans.insert(key.into_bytes().into_boxed_slice(), Arc::clone(name));
        }
        Ok(PlanTable {
            path: path.to_owned(),
            plans,
            digest,
        })
    }

    /// The plan of `key`, if the table lists it.
    #[inline]
    pub fn plan_of(&self, key: &[u8]) -> Option<&Arc<str>> {
        self.plans.get(key)
    }

    /// How many keys the table lists.
    pub fn len(&self) -> usize {
        self.plans.len()
    }

    /// Whether the table lists no key.
    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }
}

impl PartialEq for PlanTable {
    fn eq(&self, other: &PlanTable) -> bool {
        self.path == other.path && self.digest == other.digest
    }
}

impl Eq for PlanTable {}

impl std::fmt::Debug for PlanTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanTable")
            .field("path", &self.path)
            .field("keys", &self.plans.len())
            .finish()
    }
}

impl PlanFrom {
    /// The key part whose value names the plan; `None` for a table,
    /// which the limit's key looks up.
    pub fn part(&self) -> Option<KeyPart> {
        match self {
            PlanFrom::Header { name, .. } => Some(KeyPart::Header(name.clone())),
            PlanFrom::Descriptor(key) => Some(KeyPart::Descriptor(key.clone())),
            PlanFrom::Table(_) => None,
        }
    }
}

impl std::fmt::Display for PlanFrom {
    /// As written in the file.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanFrom::Header { name, .. } => write!(f, "header:{name}"),
            PlanFrom::Descriptor(key) => write!(f, "descriptor:{key}"),
            PlanFrom::Table(table) => write!(f, "table:{}", table.path.display()),
        }
    }
}

/// Two plan configurations are the same when written the same: the same
/// source, default numbers and plans.
impl PartialEq for PlanConfig {
    fn eq(&self, other: &PlanConfig) -> bool {
        self.from == other.from
            && self.written == other.written
            && self.plans.limit() == other.plans.limit()
    }
}

impl Eq for PlanConfig {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NAMES: [&str; 3] = ["pro", "internal", "default"];

    proptest! {
        /// Any keys, each on one of the plans, written as TOML: the table
        /// gives each key its plan, and no key it was not given.
        #[test]
        fn a_table_gives_each_key_its_plan(
            keys in proptest::collection::hash_map(".{0,12}", 0..3usize, 0..40),
            stranger in ".{0,12}",
        ) {
            let mut text = String::new();
            for (key, plan) in &keys {
                let line = toml::to_string(&HashMap::from([(key, NAMES[*plan])])).unwrap();
                text.push_str(&line);
            }
            let table = PlanTable::parse(text.as_bytes(), Path::new("k.toml"), &NAMES[..2]).unwrap();
            prop_assert_eq!(table.len(), keys.len());
            for (key, plan) in &keys {
                prop_assert_eq!(table.plan_of(key.as_bytes()).map(|p| &**p), Some(NAMES[*plan]));
            }
            if !keys.contains_key(&stranger) {
                prop_assert!(table.plan_of(stranger.as_bytes()).is_none());
            }
        }

        /// Any text: a table or an error naming the file, never a panic.
        #[test]
        fn any_text_is_a_table_or_an_error_naming_the_file(text in "\\PC{0,200}") {
            if let Err(error) = PlanTable::parse(text.as_bytes(), Path::new("k.toml"), &["pro"]) {
                prop_assert!(error.contains("k.toml"), "{}", error);
            }
        }
    }

    #[test]
    fn a_table_past_its_bounds_is_refused() {
        let big = vec![b'#'; MAX_PLAN_TABLE_BYTES as usize + 1];
        let error = PlanTable::parse(&big, Path::new("k.toml"), &[]).unwrap_err();
        assert!(error.contains("over 64 MiB"), "{error}");
    }
}
