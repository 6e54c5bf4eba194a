//! `[envoy] config_dir`: envoyproxy/ratelimit's files loaded beside the
//! native limits, each of their limits made a limit the engine can count.
//!
//! Every descriptor of the files that has a `rate_limit` becomes one
//! [`LimitConfig`]: requests per unit in the unit's window, a fixed window
//! aligned to the Unix epoch as envoyproxy/ratelimit counts (or the
//! `policy:` extension's), named by the descriptor's path
//! (`DOMAIN.KEY_VALUE.KEY`). Unlimited descriptors and those with
//! `requests_per_unit: 0` count nothing, so they get none: the gRPC door
//! answers them itself.

use std::collections::HashSet;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use ratekeeper::{Limit, Policy, Rate};
use ratekeeper_formats::envoy::{limit_name, EnvoyConfig, FileRateLimit, LoadOptions};

use super::error::ConfigError;
use super::validate::Checker;
use super::{EnvoyDoorConfig, KeyPart, LimitConfig, Match, OnSaturated};

/// envoyproxy/ratelimit's files as loaded, with a limit per descriptor
/// that counts.
#[derive(Clone, Debug)]
pub struct EnvoyFiles {
    config: Arc<EnvoyConfig>,
    /// By [`FileRateLimit::id`]: `None` where nothing is counted.
    limits: Arc<[Option<LimitConfig>]>,
}

impl PartialEq for EnvoyFiles {
    /// The same files hold the same limits: what was read decides.
    fn eq(&self, other: &Self) -> bool {
        self.config.fingerprint() == other.config.fingerprint()
            && self.limits.len() == other.limits.len()
    }
}

impl Eq for EnvoyFiles {}

impl EnvoyFiles {
    /// `config`'s limits, named so that none takes a name of `taken` (the
    /// native limits') or another's, counting every hit once in
    /// [`EnvoyDoorConfig::quota_mode`] as the door says.
    pub fn new(
        config: EnvoyConfig,
        taken: &HashSet<String>,
        door: &EnvoyDoorConfig,
    ) -> Result<EnvoyFiles, String> {
        let mut limits: Vec<Option<LimitConfig>> = vec![None; config.limit_count()];
        let mut names = taken.clone();
        let mut failed = None;
        config.for_each_limit(|path, limit| {
            if failed.is_some() {
                return;
            }
            match limit_config(path, limit, &mut names, door) {
                Ok(made) => {
                    if let Some(slot) = limits.get_mut(limit.id()) {
                        *slot = made;
                    }
                }
                Err(error) => failed = Some(error),
            }
        });
        if let Some(error) = failed {
            return Err(error);
        }
        Ok(EnvoyFiles {
            config: Arc::new(config),
            limits: limits.into(),
        })
    }

    /// The files' configuration.
    pub fn config(&self) -> &Arc<EnvoyConfig> {
        &self.config
    }

    /// The limit that counts `limit`'s hits; `None` for an unlimited one
    /// or one of zero requests.
    pub fn limit(&self, limit: &FileRateLimit) -> Option<&LimitConfig> {
        self.limits.get(limit.id())?.as_ref()
    }

    /// Every limit that counts, in [`FileRateLimit::id`] order.
    pub fn limits(&self) -> impl Iterator<Item = &LimitConfig> {
        self.limits.iter().flatten()
    }

    /// The options the files were loaded with.
    pub(crate) fn load_options(door: &EnvoyDoorConfig) -> LoadOptions {
        LoadOptions::default()
            .merge_domains(door.merge_domains)
            .ignore_dot_files(door.ignore_dot_files)
    }
}

/// The limit counting `limit`, found at `path`.
fn limit_config(
    path: &str,
    limit: &FileRateLimit,
    names: &mut HashSet<String>,
    door: &EnvoyDoorConfig,
) -> Result<Option<LimitConfig>, String> {
    let Some(unit) = limit.unit else {
        return Ok(None);
    };
    if limit.unlimited || limit.requests_per_unit == 0 {
        return Ok(None);
    }
    let at = &limit.at;
    let rate = Rate::new(u64::from(limit.requests_per_unit), unit.duration())
        .map_err(|error| format!("{at}: {error}"))?;
    let policy = Policy::new(limit.policy, &rate).map_err(|error| format!("{at}: {error}"))?;
    let name = limit_name(path, names);
    let named = Limit::new(name, policy).map_err(|error| format!("{at}: {error}"))?;
    Ok(Some(LimitConfig {
        limit: named,
        rate,
        ban: false,
        // The door keys each hit by the descriptor (its CounterKey).
        key: vec![KeyPart::Global],
        // A quota is decided after the enforced limits, each on its own,
        // as shadow limits are; the door makes its own status of it.
        shadow: limit.shadow_mode || limit.quota_mode || door.quota_mode,
        on_saturated: OnSaturated::Deny,
        allow_overrides: true,
        allow_refunds: true,
        allow_reports: true,
        count_refused: false,
        after_response: None,
        max_wait: None,
        penalty: None,
        plans: None,
        matcher: Match::default(),
    }))
}

impl Checker<'_> {
    /// Loads `door.config_dir`'s files (if any) into `door.files`; an
    /// error is placed at `config_dir` (`span`) and names the YAML file's
    /// own place.
    pub(super) fn envoy_files(
        &self,
        door: &mut EnvoyDoorConfig,
        span: Option<Range<usize>>,
        native: &[LimitConfig],
    ) -> Result<(), ConfigError> {
        let Some(dir) = door.config_dir.clone() else {
            return Ok(());
        };
        let span = span.unwrap_or(0..0);
        let options = EnvoyFiles::load_options(door);
        let config = match EnvoyConfig::load_dir_with(&dir, &options) {
            Ok(config) => config,
            Err(error) => return self.fail(span, "envoy.config_dir", error.to_string()),
        };
        let taken: HashSet<String> = native
            .iter()
            .map(|limit| limit.limit.name().to_owned())
            .collect();
        match EnvoyFiles::new(config, &taken, door) {
            Ok(files) => {
                door.files = Some(files);
                Ok(())
            }
            Err(error) => self.fail(span, "envoy.config_dir", error),
        }
    }
}

/// The directory a configuration reads envoyproxy/ratelimit's files from,
/// and how, for a reload to fingerprint.
pub(crate) fn watched(door: &EnvoyDoorConfig) -> Option<(PathBuf, LoadOptions)> {
    let dir = door.config_dir.clone()?;
    Some((dir, EnvoyFiles::load_options(door)))
}
