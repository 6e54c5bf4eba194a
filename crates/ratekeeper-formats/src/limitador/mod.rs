//! Kuadrant Limitador's limits file, as its users write it: a loader, and
//! which limits apply to a request's descriptors with which counter.
//!
//! ```yaml
//! - namespace: example.org        # the Envoy request's domain
//!   max_value: 10                 # hits allowed per window
//!   seconds: 60                   # the window
//!   name: per-user-posts          # optional; shown by GET /limits/{namespace}
//!   conditions:                   # CEL, all must hold
//!     - "descriptors[0]['req.method'] == 'POST'"
//!     - "descriptors[0].path != '/health'"
//!   variables:                    # one counter per value; must resolve
//!     - descriptors[0].user_id
//! ```
//!
//! ```
//! use ratekeeper_formats::limitador::{Descriptors, LimitadorConfig};
//!
//! let config = LimitadorConfig::from_yaml_str(
//!     "- namespace: example.org\n  max_value: 10\n  seconds: 60\n  \
//!      conditions: [\"descriptors[0]['req.method'] == 'POST'\"]\n  \
//!      variables: [\"descriptors[0].user_id\"]\n",
//!     "limits.yaml",
//! )?;
//! let request = [vec![("req.method", "POST"), ("user_id", "alice"), ("other", "x")]];
//! let descriptors = Descriptors::new(request.iter().map(|d| d.iter().copied()));
//! let limit = &config.limits()[0];
//! assert!(limit.applies(&descriptors));
//! assert_eq!(limit.variable_values(&descriptors).unwrap(), ["alice"]);
//!
//! // A GET matches no condition; a POST without a user_id leaves the
//! // variable unresolved: the limit does not apply to either.
//! let get = [vec![("req.method", "GET"), ("user_id", "alice")]];
//! assert!(!limit.applies(&Descriptors::new(get.iter().map(|d| d.iter().copied()))));
//! let anonymous = [vec![("req.method", "POST")]];
//! assert!(!limit.applies(&Descriptors::new(anonymous.iter().map(|d| d.iter().copied()))));
//!
//! let error = LimitadorConfig::from_yaml_str(
//!     "- namespace: ns\n  max_value: 1\n  seconds: 0\n  conditions: []\n  variables: []\n",
//!     "limits.yaml",
//! )
//! .unwrap_err();
//! assert!(error.to_string().starts_with("limits.yaml:3:12: `seconds` is 0"));
//! # Ok::<(), ratekeeper_formats::limitador::LimitadorConfigError>(())
//! ```
//!
//! # What the file means, as to Limitador
//!
//! - `namespace` is the Envoy request's `domain` (or the `namespace` of
//!   Limitador's HTTP API).
//! - A limit applies to a request when every condition holds and every
//!   variable resolves ([`LimitadorLimit::applies`]). Expressions read
//!   `descriptors[N]`, the request's N-th descriptor as a map from entry
//!   key to value: a descriptor matches by the entries it has, whatever
//!   others it holds and in any order (a key given twice counts with its
//!   last value).
//! - One counter per limit and per combination of its variables' values
//!   ([`LimitadorLimit::variable_values`]).
//! - Two limits with the same namespace, window, conditions and variables
//!   are the same limit to Limitador (its `max_value` and `name` aside):
//!   the first one is kept, with a [`LimitadorWarning`].
//!
//! How the service counts them (windows from a counter's first hit, all
//! or nothing over the limits that apply, reloads) is its business, not
//! this crate's: see `docs/migrating-from-limitador.md`.
//!
//! The conditions and variables are the part of CEL Limitador's limits
//! use, parsed here by hand: see [`cel`] for the grammar and why.
//!
//! # Where this reader differs from Limitador's
//!
//! - Refused where Limitador loads: `seconds: 0` (Limitador's counters
//!   then expire at once and limit nothing), a missing `max_value`
//!   (Limitador takes 0), an empty namespace, a field it does not know
//!   (Limitador ignores it, so a misspelt `conditons` went unnoticed
//!   there), expressions outside the grammar of [`cel`], and conditions
//!   that are not booleans (Limitador fails on each request they meet).
//! - Expressions read `descriptors` only: Limitador also binds `limit`
//!   (`limit.name`, `limit.id`) and has CEL's functions and macros, which
//!   this loader refuses with an error naming the character.
//! - An expression that reads a descriptor the request lacks
//!   (`descriptors[2]` of a request with two) is unresolved here, like a
//!   missing entry; Limitador fails the request.
//! - Sizes are capped: [`MAX_LIMITADOR_FILE_BYTES`], [`MAX_LIMITS`],
//!   [`MAX_EXPRESSIONS`], [`MAX_TEXT_BYTES`], and the caps of [`cel`] and
//!   of the YAML parser ([`crate::yaml::MAX_DEPTH`],
//!   [`crate::yaml::MAX_NODES`]).
//! - The YAML parser is [`crate::yaml`], as for envoyproxy/ratelimit's
//!   files ([`crate::envoy`]): plain
//!   scalars such as `yes` are text for the text fields, as in Limitador,
//!   but numbers follow YAML 1.1 (`0x10` and `1_000` are numbers).

pub mod cel;
mod error;
mod read;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use sha2::{Digest, Sha256};

pub use cel::{CelError, Descriptors};
pub use error::{LimitadorConfigError, LimitadorWarning};

pub use crate::yaml::{Position, YamlError};

/// The largest limits file read.
pub const MAX_LIMITADOR_FILE_BYTES: usize = 16 * 1024 * 1024;

/// The most limits one file may have.
pub const MAX_LIMITS: usize = 100_000;

/// The most conditions, and the most variables, one limit may have.
pub const MAX_EXPRESSIONS: usize = 64;

/// The longest `namespace`, `name` or `id`, in bytes.
pub const MAX_TEXT_BYTES: usize = 1024;

/// A loaded limits file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LimitadorConfig {
    limits: Vec<LimitadorLimit>,
    warnings: Vec<LimitadorWarning>,
}

impl LimitadorConfig {
    /// One file's text; `file_name` is what errors call it.
    pub fn from_yaml_str(
        text: &str,
        file_name: &str,
    ) -> Result<LimitadorConfig, LimitadorConfigError> {
        if text.len() > MAX_LIMITADOR_FILE_BYTES {
            return Err(LimitadorConfigError::TooLarge {
                file: file_name.to_owned(),
                size: text.len() as u64,
                max: MAX_LIMITADOR_FILE_BYTES,
            });
        }
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let document = crate::yaml::parse(text, file_name)?;
        let mut reader = read::Reader::new(file_name);
        let limits = reader.document(&document)?;
        let mut warnings = reader.warnings;
        let mut seen: HashSet<[u8; 32]> = HashSet::with_capacity(limits.len());
        let mut kept = Vec::with_capacity(limits.len());
        for limit in limits {
            if seen.insert(limit.identity) {
                kept.push(limit);
            } else {
                let first = kept
                    .iter()
                    .find(|other: &&LimitadorLimit| other.identity == limit.identity)
                    .map(|other| other.at.to_string())
                    .unwrap_or_default();
                warnings.push(LimitadorWarning {
                    at: limit.at.clone(),
                    message: format!(
                        "the same namespace, seconds, conditions and variables as the limit at \
                         {first}: Limitador keeps one of them, and so is this one ignored"
                    ),
                });
            }
        }
        Ok(LimitadorConfig {
            limits: kept,
            warnings,
        })
    }

    /// The file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<LimitadorConfig, LimitadorConfigError> {
        let path = path.as_ref();
        let read = |source| LimitadorConfigError::Read {
            path: path.to_owned(),
            source,
        };
        let size = std::fs::metadata(path).map_err(read)?.len();
        let name = path.display().to_string();
        if size > MAX_LIMITADOR_FILE_BYTES as u64 {
            return Err(LimitadorConfigError::TooLarge {
                file: name,
                size,
                max: MAX_LIMITADOR_FILE_BYTES,
            });
        }
        let bytes = std::fs::read(path).map_err(read)?;
        let text = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(error) => {
                return Err(read(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("not UTF-8 after byte {}", error.utf8_error().valid_up_to()),
                )))
            }
        };
        LimitadorConfig::from_yaml_str(&text, &name)
    }

    /// Every limit, in the file's order (duplicates left out).
    pub fn limits(&self) -> &[LimitadorLimit] {
        &self.limits
    }

    /// The limits of `namespace`, in the file's order.
    pub fn namespace<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = &'a LimitadorLimit> + 'a {
        self.limits
            .iter()
            .filter(move |limit| limit.namespace == namespace)
    }

    /// What was accepted but is likely a mistake.
    pub fn warnings(&self) -> &[LimitadorWarning] {
        &self.warnings
    }
}

/// One limit of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitadorLimit {
    namespace: String,
    max_value: u64,
    seconds: u64,
    name: Option<String>,
    id: Option<String>,
    conditions: Vec<Expression>,
    variables: Vec<Expression>,
    /// The variables' indices in `variables`, by their text (a counter's
    /// values are ordered so, as Limitador's are), repeated ones once.
    counter_order: Vec<usize>,
    /// What Limitador tells limits apart by: namespace, seconds, and the
    /// sets of conditions and variables.
    identity: [u8; 32],
    at: Position,
}

impl LimitadorLimit {
    #[allow(clippy::too_many_arguments)]
    fn new(
        namespace: String,
        max_value: u64,
        seconds: u64,
        name: Option<String>,
        id: Option<String>,
        conditions: Vec<Expression>,
        variables: Vec<Expression>,
        at: Position,
    ) -> LimitadorLimit {
        let by_text: BTreeMap<&str, usize> = variables
            .iter()
            .enumerate()
            .rev()
            .map(|(index, variable)| (variable.source.as_str(), index))
            .collect();
        let counter_order: Vec<usize> = by_text.values().copied().collect();
        let conditions_set: std::collections::BTreeSet<&str> =
            conditions.iter().map(|c| c.source.as_str()).collect();
        // Length-prefixed, so no two different limits hash the same text.
        let mut hasher = Sha256::new();
        let mut field = |text: &str| {
            hasher.update((text.len() as u64).to_be_bytes());
            hasher.update(text.as_bytes());
        };
        field(&namespace);
        field(&seconds.to_string());
        field(&conditions_set.len().to_string());
        conditions_set.iter().for_each(|c| field(c));
        field(&by_text.len().to_string());
        by_text.keys().for_each(|v| field(v));
        let identity = hasher.finalize().into();
        LimitadorLimit {
            namespace,
            max_value,
            seconds,
            name,
            id,
            conditions,
            variables,
            counter_order,
            identity,
            at,
        }
    }

    /// The namespace (the Envoy domain) it belongs to.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Hits allowed per window; 0 refuses every hit.
    pub fn max_value(&self) -> u64 {
        self.max_value
    }

    /// The window, in seconds.
    pub fn seconds(&self) -> u64 {
        self.seconds
    }

    /// Its `name`, if the file gives one.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// Its `id`, if the file gives one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The conditions, in the file's order.
    pub fn conditions(&self) -> &[Expression] {
        &self.conditions
    }

    /// The variables, in the file's order.
    pub fn variables(&self) -> &[Expression] {
        &self.variables
    }

    /// Where the limit starts in its file.
    pub fn position(&self) -> &Position {
        &self.at
    }

    /// A digest of what Limitador tells limits apart by (namespace,
    /// seconds, and the sets of conditions and variables): equal for the
    /// same limit across reloads, whatever its `max_value` or `name`.
    pub fn identity(&self) -> &[u8; 32] {
        &self.identity
    }

    /// Whether the limit applies to a request: every condition holds and
    /// every variable resolves.
    pub fn applies(&self, descriptors: &Descriptors<'_>) -> bool {
        self.variable_values(descriptors).is_some()
    }

    /// The values of the variables, ordered by the variables' text (as
    /// Limitador's counters hold them, a repeated variable once), when the
    /// limit applies; `None` when it does not.
    pub fn variable_values(&self, descriptors: &Descriptors<'_>) -> Option<Vec<String>> {
        if !self
            .conditions
            .iter()
            .all(|condition| condition.test(descriptors))
        {
            return None;
        }
        self.counter_order
            .iter()
            .map(|&index| self.variables[index].value(descriptors))
            .collect()
    }

    /// The lowest descriptor index its expressions read (0 when they read
    /// none): the descriptor whose status reports it on the Envoy door.
    pub fn first_descriptor(&self) -> u32 {
        let mut read = Vec::new();
        for expression in self.conditions.iter().chain(&self.variables) {
            expression.expr.descriptors(&mut read);
        }
        read.into_iter().min().unwrap_or(0)
    }
}

/// A condition or variable: its text, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expression {
    source: String,
    expr: cel::Expr,
}

impl Expression {
    /// Parses `source` (see [`cel`] for what is read).
    pub fn parse(source: &str) -> Result<Expression, CelError> {
        Ok(Expression {
            source: source.to_owned(),
            expr: cel::Expr::parse(source)?,
        })
    }

    /// The text as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// As a condition: whether it holds (an unresolved expression, or one
    /// that is not a boolean, does not).
    pub fn test(&self, descriptors: &Descriptors<'_>) -> bool {
        self.expr.eval(descriptors) == Some(cel::Value::Bool(true))
    }

    /// As a variable: its value as Limitador writes it (strings as they
    /// are, numbers in decimal, `true`, `false`, `null`); `None` when
    /// unresolved.
    pub fn value(&self, descriptors: &Descriptors<'_>) -> Option<String> {
        self.expr.eval(descriptors).map(|value| value.to_string())
    }
}
