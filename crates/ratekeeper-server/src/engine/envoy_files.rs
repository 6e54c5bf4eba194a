//! The limits of envoyproxy/ratelimit's files (`[envoy] config_dir`) in
//! force: the files' descriptor trees, and an [`ActiveLimit`] for each of
//! their limits that counts.

use std::sync::Arc;

use ratekeeper::stats::Stats;
use ratekeeper_formats::envoy::{Domain, FileRateLimit};

use super::limits::active_with_stats;
use super::ActiveLimit;
use crate::config::EnvoyFiles;

/// envoyproxy/ratelimit's files, ready to decide.
#[derive(Debug)]
pub struct EnvoyLimits {
    files: EnvoyFiles,
    /// By [`FileRateLimit::id`]; `None` for a limit that counts nothing.
    active: Vec<Option<Arc<ActiveLimit>>>,
}

impl EnvoyLimits {
    /// `files`' limits, each recording its decisions in `stats` under its
    /// name.
    pub(super) fn new(files: &EnvoyFiles, stats: &Stats) -> EnvoyLimits {
        let config = files.config();
        let mut active = vec![None; config.limit_count()];
        config.for_each_limit(|_, limit| {
            if let (Some(made), Some(slot)) = (files.limit(limit), active.get_mut(limit.id())) {
                *slot = Some(active_with_stats(made, stats));
            }
        });
        EnvoyLimits {
            files: files.clone(),
            active,
        }
    }

    /// The files as loaded.
    pub fn files(&self) -> &EnvoyFiles {
        &self.files
    }

    /// The descriptor tree of `domain`, if a file defines it.
    pub fn domain(&self, domain: &str) -> Option<&Domain> {
        self.files.config().domain(domain)
    }

    /// The limit counting `limit`'s hits: `None` for an unlimited one or
    /// one of zero requests per unit.
    pub fn limit(&self, limit: &FileRateLimit) -> Option<&Arc<ActiveLimit>> {
        self.active.get(limit.id())?.as_ref()
    }

    /// Every limit that counts.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ActiveLimit>> {
        self.active.iter().flatten()
    }
}
