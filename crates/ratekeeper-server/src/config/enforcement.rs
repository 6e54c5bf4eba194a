//! `[enforcement]`: whether the limits refuse at all.
//!
//! `shadow_mode = true` turns every limit into a shadow limit, whatever
//! its source (`[[limits]]`, envoyproxy/ratelimit's files, a Limitador
//! file) and on every door: each request is decided, counted and reported
//! (statistics, metrics, the rate-limit headers, each limit's `allowed` in
//! the JSON answer, each descriptor's code at the gRPC door) as it would
//! be when enforced, but none is refused. It is what envoyproxy/ratelimit's
//! `SHADOW_MODE` does for its whole service, and it is meant for rollouts:
//! turn it on, watch `/metrics` and the dashboard for the limits that
//! would refuse, then turn it off, with a reload, to enforce. The gRPC
//! door answers as under `[envoy] shadow_mode` (an overall `OK`, every
//! limit that allows counted), which it implies.
//!
//! `RATEKEEPER_ENFORCEMENT__SHADOW_MODE=true` or `serve --shadow-mode`
//! (also `proxy --shadow-mode`) set it without editing the file.

use serde::Deserialize;
use toml::Spanned;

/// `[enforcement]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileEnforcement {
    pub(crate) shadow_mode: Option<Spanned<bool>>,
}

/// Whether `[enforcement]` turns shadow mode on.
pub(crate) fn shadow_mode(section: Option<Spanned<FileEnforcement>>) -> bool {
    section
        .and_then(|section| section.into_inner().shadow_mode)
        .is_some_and(Spanned::into_inner)
}
