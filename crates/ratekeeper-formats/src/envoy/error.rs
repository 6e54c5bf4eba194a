//! [`EnvoyConfigError`] and [`EnvoyWarning`]: what is wrong with a file,
//! and where.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

use crate::yaml::{Position, YamlError};

/// Why an envoyproxy/ratelimit configuration was refused.
///
/// Each message starts with `FILE:LINE:COLUMN: `. The variants follow the
/// checks envoyproxy/ratelimit makes, so the same file fails for the same
/// reason here, with a different text.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum EnvoyConfigError {
    /// A file or directory could not be read.
    #[error("{}: cannot read the configuration: {source}", path.display())]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file is larger than [`MAX_ENVOY_FILE_BYTES`](super::MAX_ENVOY_FILE_BYTES).
    #[error("{file}: {size} bytes, more than the {max} a configuration file may have")]
    TooLarge {
        /// The file.
        file: String,
        /// Its size.
        size: u64,
        /// The cap.
        max: usize,
    },
    /// The text is not YAML (or not UTF-8), is nested too deep, or has
    /// too many nodes: the shared reader's error ([`crate::yaml`]).
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// A map key is not one of envoyproxy/ratelimit's field names (a
    /// misspelling, usually).
    #[error("{at}: unknown field `{key}`{}", suggestion(key))]
    UnknownField {
        /// The key.
        at: Position,
        /// The key's text.
        key: String,
    },
    /// A map key that is a number, a boolean, null or a collection.
    #[error("{at}: a field name must be a string, not {found}")]
    NonStringKey {
        /// The key.
        at: Position,
        /// What it is.
        found: String,
    },
    /// A list entry that is not a map, where every list holds maps.
    #[error("{at}: lists hold maps in this format, not {found}")]
    NonMapListEntry {
        /// The entry.
        at: Position,
        /// What it is.
        found: String,
    },
    /// A value of the wrong type for its field.
    #[error("{at}: `{field}` must be {expected}, not {found}")]
    WrongType {
        /// The value.
        at: Position,
        /// The field's name.
        field: String,
        /// What the field takes.
        expected: &'static str,
        /// What the value is.
        found: String,
    },
    /// The file has no `domain`, or an empty one.
    #[error("{at}: the file has no domain (`domain: NAME` is required)")]
    EmptyDomain {
        /// The document, or the empty value.
        at: Position,
    },
    /// A descriptor without a `key`, or with an empty one.
    #[error("{at}: a descriptor has an empty key")]
    EmptyKey {
        /// The descriptor.
        at: Position,
    },
    /// Two descriptors of one level with the same key and value
    /// (envoyproxy/ratelimit's "duplicate composite key").
    #[error("{at}: duplicate descriptor `{path}`: a level may have each key and value once")]
    DuplicateDescriptor {
        /// The second descriptor.
        at: Position,
        /// Its path from the domain, `DOMAIN.KEY_VALUE.KEY...`.
        path: String,
    },
    /// Two files with the same domain, without merging.
    #[error("{at}: duplicate domain `{domain}`, already in {first} (merging domains is off)")]
    DuplicateDomain {
        /// The second file's domain.
        at: Position,
        /// The domain.
        domain: String,
        /// Where the first file defined it.
        first: Position,
    },
    /// A `unit` that is not one of the seven.
    #[error(
        "{at}: invalid rate limit unit `{unit}`: one of second, minute, hour, day, week, month, year"
    )]
    BadUnit {
        /// The unit, or its `rate_limit` when it has none.
        at: Position,
        /// The unit's text.
        unit: String,
    },
    /// `unlimited: true` beside a valid `unit`.
    #[error("{at}: an unlimited rate_limit must not have a unit")]
    UnlimitedWithUnit {
        /// The unit.
        at: Position,
    },
    /// A `replaces` entry without a name.
    #[error("{at}: a replaces entry has an empty name")]
    EmptyReplaces {
        /// The entry.
        at: Position,
    },
    /// A `rate_limit` that replaces its own name.
    #[error("{at}: rate_limit `{name}` replaces itself")]
    ReplacesSelf {
        /// The entry.
        at: Position,
        /// The name.
        name: String,
    },
    /// `share_threshold: true` on a descriptor whose key and value have no `*`.
    #[error("{at}: share_threshold needs a wildcard value (with `*`); `{key}` has none")]
    ShareThresholdWithoutWildcard {
        /// The descriptor.
        at: Position,
        /// Its key and value, `KEY_VALUE`.
        key: String,
    },
    /// Our `policy` extension names no policy.
    #[error("{at}: unknown policy `{policy}`: fixed_window (default), sliding_window, token_bucket, gcra or sliding_log")]
    BadPolicy {
        /// The value.
        at: Position,
        /// Its text.
        policy: String,
    },
}

impl EnvoyConfigError {
    /// Where the problem is, when it is inside a file.
    pub fn position(&self) -> Option<&Position> {
        match self {
            EnvoyConfigError::Read { .. } | EnvoyConfigError::TooLarge { .. } => None,
            EnvoyConfigError::Yaml(error) => Some(error.position()),
            EnvoyConfigError::UnknownField { at, .. }
            | EnvoyConfigError::NonStringKey { at, .. }
            | EnvoyConfigError::NonMapListEntry { at, .. }
            | EnvoyConfigError::WrongType { at, .. }
            | EnvoyConfigError::EmptyDomain { at }
            | EnvoyConfigError::EmptyKey { at }
            | EnvoyConfigError::DuplicateDescriptor { at, .. }
            | EnvoyConfigError::DuplicateDomain { at, .. }
            | EnvoyConfigError::BadUnit { at, .. }
            | EnvoyConfigError::UnlimitedWithUnit { at }
            | EnvoyConfigError::EmptyReplaces { at }
            | EnvoyConfigError::ReplacesSelf { at, .. }
            | EnvoyConfigError::ShareThresholdWithoutWildcard { at, .. }
            | EnvoyConfigError::BadPolicy { at, .. } => Some(at),
        }
    }
}

/// A field name close to `key`, offered with an unknown one.
fn suggestion(key: &str) -> String {
    let normalized: String = key
        .chars()
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect();
    super::validate::FIELDS
        .iter()
        .find(|field| field.replace('_', "") == normalized)
        .map(|field| format!(" (did you mean `{field}`?)"))
        .unwrap_or_default()
}

/// Something a file says that envoyproxy/ratelimit accepts and ignores,
/// which is likely not what its author meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvoyWarning {
    /// Where.
    pub at: Position,
    /// What is ignored, and why.
    pub message: String,
}

impl fmt::Display for EnvoyWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}
