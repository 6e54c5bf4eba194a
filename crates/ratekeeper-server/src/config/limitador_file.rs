//! `[limitador]`: a Kuadrant Limitador limits file, served beside the
//! native limits (see [`ratekeeper_formats::limitador`] for the file).
//!
//! ```toml
//! [limitador]
//! config_file = "limits.yaml"  # relative to this file's folder
//! ```
//!
//! `RATEKEEPER_LIMITADOR__CONFIG_FILE` overrides it, and `ratekeeper serve
//! --limitador-config FILE` sets it. The file is read with the TOML file,
//! at start and at every reload, and a reload happens when either changes.

use std::path::PathBuf;
use std::sync::Arc;

use ratekeeper_formats::limitador::{LimitadorConfig, LimitadorConfigError};
use serde::Deserialize;
use toml::Spanned;

use super::error::ConfigError;
use super::validate::Checker;

/// `[limitador]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileLimitador {
    config_file: Option<Spanned<String>>,
}

/// `[limitador]`, checked: the limits file and what it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitadorSource {
    /// `limitador.config_file`: relative to the configuration file's
    /// folder when written there, to the working directory when given by
    /// the environment or `--limitador-config`.
    pub path: PathBuf,
    /// The file's limits, as loaded when the configuration was.
    pub limits: Arc<LimitadorConfig>,
    /// Whether every limit of the file decides and reports but never
    /// refuses (`[enforcement] shadow_mode`).
    pub shadow: bool,
}

impl Checker<'_> {
    /// `[limitador]`, its file read and checked; `None` without a file.
    pub(super) fn limitador(
        &self,
        section: Option<Spanned<FileLimitador>>,
    ) -> Result<Option<LimitadorSource>, ConfigError> {
        let Some(file) = section.and_then(|s| s.into_inner().config_file) else {
            return Ok(None);
        };
        let path = self.path(&file);
        match LimitadorConfig::load(&path) {
            Ok(limits) => Ok(Some(LimitadorSource {
                path,
                limits: Arc::new(limits),
                shadow: false,
            })),
            // Where the TOML names the file is the place to fix a path.
            Err(LimitadorConfigError::Read { source, .. }) => self.fail(
                file.span(),
                "limitador.config_file",
                format!("cannot read {}: {source}", path.display()),
            ),
            Err(error) => Err(ConfigError::Limitador(error)),
        }
    }
}
