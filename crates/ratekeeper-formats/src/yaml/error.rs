//! [`Position`] and [`YamlError`]: where a file says something, and why
//! the reader could not read it.

use std::fmt;

use thiserror::Error;

/// A place in a configuration file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    /// The file's name, as given to the loader.
    pub file: String,
    /// The line, from 1.
    pub line: usize,
    /// The column in characters, from 1.
    pub column: usize,
}

impl Position {
    pub(crate) fn new(file: &str, line: usize, column: usize) -> Position {
        Position {
            file: file.to_owned(),
            line: line.max(1),
            column: column.max(1),
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Why a file's text could not be read as YAML, before either format
/// looks at what it says: each format's error wraps it
/// ([`EnvoyConfigError::Yaml`](crate::envoy::EnvoyConfigError::Yaml),
/// [`LimitadorConfigError::Yaml`](crate::limitador::LimitadorConfigError::Yaml)).
///
/// Each message starts with `FILE:LINE:COLUMN: `.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum YamlError {
    /// The text is not YAML (or, read from a file, not UTF-8).
    #[error("{at}: not valid YAML: {message}")]
    Syntax {
        /// Where the parser stopped.
        at: Position,
        /// The parser's reason.
        message: String,
    },
    /// Lists and maps nested deeper than [`MAX_DEPTH`](super::MAX_DEPTH).
    #[error("{at}: nested more than {max} levels deep")]
    TooDeep {
        /// The collection that went too deep.
        at: Position,
        /// The cap.
        max: usize,
    },
    /// A tree too large: more nodes than
    /// [`MAX_NODES`](super::MAX_NODES), or than twice the file's length
    /// once aliases are expanded.
    #[error("{at}: more than {max} nodes, aliases expanded")]
    TooManyNodes {
        /// The node that went past the budget.
        at: Position,
        /// The budget.
        max: usize,
    },
}

impl YamlError {
    /// Where the reader stopped.
    pub fn position(&self) -> &Position {
        match self {
            YamlError::Syntax { at, .. }
            | YamlError::TooDeep { at, .. }
            | YamlError::TooManyNodes { at, .. } => at,
        }
    }
}
