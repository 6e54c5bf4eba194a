//! [`LimitadorConfigError`] and [`LimitadorWarning`]: what is wrong with a
//! limits file, and where.

use std::fmt;
use std::path::PathBuf;

use thiserror::Error;

use super::cel::CelError;
use crate::yaml::{Position, YamlError};

/// Why a Limitador limits file was refused.
///
/// Each message starts with `FILE:LINE:COLUMN: ` (except for a file that
/// cannot be read, or is too large).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LimitadorConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the Limitador limits file: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_LIMITADOR_FILE_BYTES`](super::MAX_LIMITADOR_FILE_BYTES).
    #[error("{file}: {size} bytes, more than the {max} a limits file may have")]
    TooLarge {
        /// The file.
        file: String,
        /// Its size.
        size: u64,
        /// The cap.
        max: usize,
    },
    /// The text is not YAML, is nested too deep, or has too many nodes
    /// (the reader and caps of [`crate::yaml`], as for envoyproxy/ratelimit's
    /// files).
    #[error(transparent)]
    Yaml(#[from] YamlError),
    /// The file holds a second YAML document, which Limitador refuses.
    #[error("{at}: a second YAML document: the limits file holds one list of limits")]
    SecondDocument {
        /// Where it starts.
        at: Position,
    },
    /// The file's top level is not a list.
    #[error("{at}: the file must be a list of limits, not {found}")]
    NotAList {
        /// The document.
        at: Position,
        /// What it is.
        found: String,
    },
    /// More limits than [`MAX_LIMITS`](super::MAX_LIMITS).
    #[error("{at}: more than {max} limits")]
    TooManyLimits {
        /// The first limit past the cap.
        at: Position,
        /// The cap.
        max: usize,
    },
    /// A field Limitador does not know.
    #[error("{at}: unknown field `{field}`: a limit has namespace, max_value, seconds, name, id, conditions and variables")]
    UnknownField {
        /// The key.
        at: Position,
        /// Its text.
        field: String,
    },
    /// A field given twice in one limit.
    #[error("{at}: duplicate field `{field}`")]
    DuplicateField {
        /// The second one.
        at: Position,
        /// Its name.
        field: String,
    },
    /// A required field is absent.
    #[error("{at}: the limit has no `{field}`")]
    MissingField {
        /// The limit.
        at: Position,
        /// The field.
        field: &'static str,
    },
    /// A value of the wrong type for its field.
    #[error("{at}: `{field}` must be {expected}, not {found}")]
    WrongType {
        /// The value.
        at: Position,
        /// The field.
        field: String,
        /// What the field takes.
        expected: &'static str,
        /// What the value is.
        found: String,
    },
    /// A number outside what the field takes.
    #[error("{at}: `{field}` is {value}: {why}")]
    OutOfRange {
        /// The value.
        at: Position,
        /// The field.
        field: &'static str,
        /// Its text.
        value: String,
        /// What it takes.
        why: String,
    },
    /// An empty namespace.
    #[error("{at}: the namespace is empty")]
    EmptyNamespace {
        /// The value.
        at: Position,
    },
    /// A text field longer than [`MAX_TEXT_BYTES`](super::MAX_TEXT_BYTES).
    #[error("{at}: `{field}` is {len} bytes, more than {max}")]
    TooLong {
        /// The value.
        at: Position,
        /// The field.
        field: &'static str,
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// More conditions or variables in one limit than
    /// [`MAX_EXPRESSIONS`](super::MAX_EXPRESSIONS).
    #[error("{at}: more than {max} {field} in one limit")]
    TooManyExpressions {
        /// The list.
        at: Position,
        /// `conditions` or `variables`.
        field: &'static str,
        /// The cap.
        max: usize,
    },
    /// A condition or variable that is not one of the CEL forms this
    /// loader reads (see [`super::cel`]).
    #[error("{at}: {field}: {source} in `{expression}`")]
    Cel {
        /// The expression's string.
        at: Position,
        /// `conditions[N]` or `variables[N]`.
        field: String,
        /// The expression.
        expression: String,
        /// What is wrong, and where in the expression.
        source: CelError,
    },
    /// A condition that is not a boolean (`descriptors[0].key` alone), or
    /// a variable that is one (`descriptors[0].a == 'x'`): Limitador fails
    /// on every request it applies to.
    #[error("{at}: {field}: `{expression}` {why}")]
    BadType {
        /// The expression's string.
        at: Position,
        /// `conditions[N]` or `variables[N]`.
        field: String,
        /// The expression.
        expression: String,
        /// What is wrong.
        why: &'static str,
    },
}

impl LimitadorConfigError {
    /// Where the problem is, when it is inside the file.
    pub fn position(&self) -> Option<&Position> {
        match self {
            LimitadorConfigError::Read { .. } | LimitadorConfigError::TooLarge { .. } => None,
            LimitadorConfigError::Yaml(error) => Some(error.position()),
            LimitadorConfigError::SecondDocument { at }
            | LimitadorConfigError::NotAList { at, .. }
            | LimitadorConfigError::TooManyLimits { at, .. }
            | LimitadorConfigError::UnknownField { at, .. }
            | LimitadorConfigError::DuplicateField { at, .. }
            | LimitadorConfigError::MissingField { at, .. }
            | LimitadorConfigError::WrongType { at, .. }
            | LimitadorConfigError::OutOfRange { at, .. }
            | LimitadorConfigError::EmptyNamespace { at }
            | LimitadorConfigError::TooLong { at, .. }
            | LimitadorConfigError::TooManyExpressions { at, .. }
            | LimitadorConfigError::Cel { at, .. }
            | LimitadorConfigError::BadType { at, .. } => Some(at),
        }
    }
}

/// Something the file says that Limitador accepts and that is likely not
/// what its author meant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitadorWarning {
    /// Where.
    pub at: Position,
    /// What, and what happens.
    pub message: String,
}

impl fmt::Display for LimitadorWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}
