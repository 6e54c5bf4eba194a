//! [`ConfigError`] and [`Location`]: what went wrong, and where.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use thiserror::Error;

/// Where a configuration value came from.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// A place in a file: 1-based line and column (in characters).
    File {
        /// The file's name as given to the loader.
        source: String,
        /// The line, from 1.
        line: usize,
        /// The column in characters, from 1.
        column: usize,
    },
    /// An environment variable that overrode the file.
    Env {
        /// The variable's name, such as `RATEKEEPER_STORE__URL`.
        variable: String,
    },
    /// Somewhere in the file, without a known place.
    Source {
        /// The file's name as given to the loader.
        source: String,
    },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File {
                source,
                line,
                column,
            } => write!(f, "{source}:{line}:{column}"),
            Location::Env { variable } => write!(f, "env {variable}"),
            Location::Source { source } => f.write_str(source),
        }
    }
}

/// Why a configuration was refused.
///
/// Each message starts with where the problem is, then the field, then what
/// is wrong, for example
/// `ratekeeper.toml:12:8: limits[1].rate: unknown time unit "fortnight" ...`,
/// or `env RATEKEEPER_STORE__KIND: store.kind: ...` for a value that came
/// from the environment.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{}: cannot read the configuration: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The document is not valid TOML, or not shaped like a configuration
    /// where no single field is to blame.
    #[error("{location}: {message}")]
    Syntax {
        /// Where.
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// A field's value was refused.
    #[error("{location}: {field}: {message}")]
    Invalid {
        /// Where the value is.
        location: Location,
        /// The field's path, such as `limits[1].rate` or `store.url`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The Limitador limits file named by `limitador.config_file` was
    /// refused; the message names its own file, line and column.
    #[error(transparent)]
    Limitador(#[from] ratekeeper_formats::limitador::LimitadorConfigError),
}

impl ConfigError {
    /// Where the problem is, when known.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ConfigError::Read { .. } | ConfigError::Limitador(_) => None,
            ConfigError::Syntax { location, .. } | ConfigError::Invalid { location, .. } => {
                Some(location)
            }
        }
    }

    /// The field's path for [`ConfigError::Invalid`].
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// Turns byte spans into [`Location`]s: spans inside the text are file
/// positions, spans past its end stand for environment variables (see
/// `env.rs`).
#[derive(Debug)]
pub(crate) struct Locator<'a> {
    pub(crate) source: &'a str,
    pub(crate) text: &'a str,
    /// The overriding variables, by index: `(name, field path)`.
    pub(crate) vars: Vec<(String, String)>,
    /// The folder of the file the text was read from, if any: relative
    /// paths written in the file are read from there.
    pub(crate) base: Option<&'a Path>,
}

impl Locator<'_> {
    /// The first span offset that stands for variable `index`.
    pub(crate) fn env_offset(&self, index: usize) -> usize {
        self.text.len().saturating_add(1).saturating_add(index)
    }

    /// The variable a span stands for, if any.
    pub(crate) fn var(&self, span: &Range<usize>) -> Option<&(String, String)> {
        let base = self.text.len().saturating_add(1);
        if span.start >= base {
            self.vars.get(span.start - base)
        } else {
            None
        }
    }

    /// The path `text` (the value at `span`) names. A relative path written
    /// in the file is read from the file's folder, so that a file and the
    /// files it names move together; one from the environment or the
    /// command line (a span past the text), or in a text read without a
    /// file, from the working directory, as any command line's.
    pub(crate) fn path(&self, text: &str, span: &Range<usize>) -> PathBuf {
        let path = Path::new(text);
        match self.base {
            Some(base) if path.is_relative() && span.end <= self.text.len() => base.join(path),
            _ => path.to_owned(),
        }
    }

    /// Where `span` is.
    pub(crate) fn locate(&self, span: Option<Range<usize>>) -> Location {
        let Some(span) = span else {
            return Location::Source {
                source: self.source.to_owned(),
            };
        };
        if span.start > self.text.len() {
            return match self.var(&span) {
                Some((name, _)) => Location::Env {
                    variable: name.clone(),
                },
                None => Location::Source {
                    source: self.source.to_owned(),
                },
            };
        }
        let mut offset = span.start.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        Location::File {
            source: self.source.to_owned(),
            line,
            column,
        }
    }

    /// An [`ConfigError::Invalid`] for `field` at `span`.
    pub(crate) fn invalid(
        &self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Invalid {
            location: self.locate(Some(span)),
            field: field.into(),
            message: message.into(),
        }
    }
}
