//! `[envoy]`: envoyproxy/ratelimit's configuration files the Envoy gRPC
//! door also decides by, how it counts, and what it asks Envoy to add to
//! the responses it proxies (`response_headers_to_add`).
//!
//! `config_dir` names a directory of envoyproxy/ratelimit's YAML files
//! (see [`ratekeeper_formats::envoy`]), read as its `RUNTIME_WATCH_ROOT=false`
//! reads its app directory, beside the native `[[limits]]`; `merge_domains`
//! is its `MERGE_DOMAIN_CONFIG`, and `ignore_dot_files` its
//! `RUNTIME_IGNOREDOTFILES`, on by default here (see
//! [`EnvoyDoorConfig::ignore_dot_files`]). `shadow_mode` and `quota_mode`
//! are its `SHADOW_MODE` and `QUOTA_MODE`.
//!
//! By default the door sends the IETF draft's `RateLimit-Policy` and
//! `RateLimit` fields. Teams coming from envoyproxy/ratelimit, whose
//! clients read its `RateLimit-Limit`, `RateLimit-Remaining` and
//! `RateLimit-Reset` (switched on there by `LIMIT_RESPONSE_HEADERS_ENABLED`,
//! named by `LIMIT_LIMIT_HEADER` and its siblings), choose those, or both.

use std::path::PathBuf;

use serde::Deserialize;
use toml::Spanned;

use super::envoy_files::EnvoyFiles;

use super::error::ConfigError;
use super::validate::Checker;

/// `[envoy]`, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct EnvoyDoorConfig {
    /// `envoy.response_headers`: which fields the door adds.
    pub response_headers: ResponseHeaders,
    /// `envoy.limit_header`: envoyproxy/ratelimit's limit field, the quota
    /// of the descriptor closest to its limit.
    pub limit_header: String,
    /// `envoy.remaining_header`: what that descriptor has left.
    pub remaining_header: String,
    /// `envoy.reset_header`: whole seconds until its quota is whole again
    /// (the end of its window, for a fixed window).
    pub reset_header: String,
    /// `envoy.counting`: whether a request's descriptors are counted all or
    /// nothing, or each on its own.
    pub counting: Counting,
    /// `envoy.config_dir`: envoyproxy/ratelimit's configuration files, if
    /// any (also `serve --envoy-config DIR`).
    pub config_dir: Option<PathBuf>,
    /// `envoy.ignore_dot_files`: files and directories whose names start
    /// with `.` are skipped. On by default, where envoyproxy/ratelimit's
    /// `RUNTIME_IGNOREDOTFILES` is off: a Kubernetes ConfigMap volume
    /// holds every file twice, once under a `..2024_...` directory, and
    /// reading both would make every domain a duplicate.
    pub ignore_dot_files: bool,
    /// `envoy.merge_domains`: files naming the same domain add to it
    /// (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// `envoy.shadow_mode`: every limit the gRPC door applies is counted
    /// and shown in the descriptors' statuses, but the request's
    /// `overall_code` is always `OK` (envoyproxy/ratelimit's
    /// `SHADOW_MODE`), for a rollout. Each limit that allows is charged
    /// even when another would refuse, so the counts are those enforcing
    /// would see.
    pub shadow_mode: bool,
    /// `envoy.quota_mode`: every limit of the files is in quota mode, as
    /// a descriptor's `quota_mode` (envoyproxy/ratelimit's `QUOTA_MODE`).
    pub quota_mode: bool,
    /// The files of `config_dir`, loaded when the configuration was
    /// checked.
    pub files: Option<EnvoyFiles>,
}

/// How the enforced limits of one request are charged (`envoy.counting`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Counting {
    /// `"all_or_nothing"`: a request one limit refuses takes nothing from
    /// the others (the default, and what every other door does).
    #[default]
    AllOrNothing,
    /// `"each_descriptor"`: each limit on its own, so a descriptor whose
    /// limit allows is counted even when another descriptor's refuses the
    /// request, as envoyproxy/ratelimit counts every descriptor it
    /// matched: identical counts while migrating from it.
    EachDescriptor,
}

impl Default for EnvoyDoorConfig {
    fn default() -> Self {
        EnvoyDoorConfig {
            response_headers: ResponseHeaders::default(),
            limit_header: "RateLimit-Limit".to_owned(),
            remaining_header: "RateLimit-Remaining".to_owned(),
            reset_header: "RateLimit-Reset".to_owned(),
            counting: Counting::default(),
            config_dir: None,
            ignore_dot_files: true,
            merge_domains: false,
            shadow_mode: false,
            quota_mode: false,
            files: None,
        }
    }
}

/// `envoy.response_headers`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResponseHeaders {
    /// `"draft"`: `RateLimit-Policy` (every limit that applied) and
    /// `RateLimit` (the tightest).
    #[default]
    Draft,
    /// `"envoy_ratelimit"`: envoyproxy/ratelimit's three fields, of the
    /// descriptor closest to its limit (one over its limit, if any).
    EnvoyRatelimit,
    /// `"both"`.
    Both,
    /// `"none"`.
    None,
}

impl ResponseHeaders {
    /// The words of the file, in the order of the variants.
    const WORDS: [(&'static str, ResponseHeaders); 4] = [
        ("draft", ResponseHeaders::Draft),
        ("envoy_ratelimit", ResponseHeaders::EnvoyRatelimit),
        ("both", ResponseHeaders::Both),
        ("none", ResponseHeaders::None),
    ];

    /// The word the file writes.
    pub fn as_str(self) -> &'static str {
        Self::WORDS
            .iter()
            .find(|(_, value)| *value == self)
            .map_or("draft", |(word, _)| word)
    }

    /// Whether the draft's fields are sent.
    pub fn draft(self) -> bool {
        matches!(self, ResponseHeaders::Draft | ResponseHeaders::Both)
    }

    /// Whether envoyproxy/ratelimit's fields are sent.
    pub fn envoy_ratelimit(self) -> bool {
        matches!(
            self,
            ResponseHeaders::EnvoyRatelimit | ResponseHeaders::Both
        )
    }
}

/// `[envoy]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileEnvoy {
    response_headers: Option<Spanned<String>>,
    limit_header: Option<Spanned<String>>,
    remaining_header: Option<Spanned<String>>,
    reset_header: Option<Spanned<String>>,
    counting: Option<Spanned<String>>,
    config_dir: Option<Spanned<String>>,
    ignore_dot_files: Option<Spanned<bool>>,
    merge_domains: Option<Spanned<bool>>,
    shadow_mode: Option<Spanned<bool>>,
    quota_mode: Option<Spanned<bool>>,
}

impl Checker<'_> {
    /// `[envoy]`, checked, with the span of `config_dir` (its files are
    /// loaded once the native limits are known, by
    /// [`Checker::envoy_files`]).
    pub(super) fn envoy(
        &self,
        envoy: Option<Spanned<FileEnvoy>>,
    ) -> Result<(EnvoyDoorConfig, Option<std::ops::Range<usize>>), ConfigError> {
        let mut config = EnvoyDoorConfig::default();
        let Some(envoy) = envoy.map(Spanned::into_inner) else {
            return Ok((config, None));
        };
        let flag = |value: Option<Spanned<bool>>, default| value.map_or(default, |v| *v.get_ref());
        config.ignore_dot_files = flag(envoy.ignore_dot_files, true);
        config.merge_domains = flag(envoy.merge_domains, false);
        config.shadow_mode = flag(envoy.shadow_mode, false);
        config.quota_mode = flag(envoy.quota_mode, false);
        let mut dir_span = None;
        if let Some(dir) = envoy.config_dir {
            if dir.get_ref().trim().is_empty() {
                return self.fail(
                    dir.span(),
                    "envoy.config_dir",
                    "an empty path; leave config_dir out to read no files",
                );
            }
            dir_span = Some(dir.span());
            config.config_dir = Some(self.path(&dir));
        }
        if let Some(word) = envoy.response_headers {
            let found = ResponseHeaders::WORDS
                .iter()
                .find(|(known, _)| *known == word.get_ref());
            config.response_headers = match found {
                Some((_, value)) => *value,
                None => {
                    return self.fail(
                        word.span(),
                        "envoy.response_headers",
                        format!(
                            "unknown response_headers {:?}; expected draft, envoy_ratelimit, both or none",
                            word.get_ref()
                        ),
                    )
                }
            };
        }
        if let Some(word) = envoy.counting {
            config.counting = match word.get_ref().as_str() {
                "all_or_nothing" => Counting::AllOrNothing,
                "each_descriptor" => Counting::EachDescriptor,
                other => {
                    return self.fail(
                        word.span(),
                        "envoy.counting",
                        format!(
                            "unknown counting {other:?}; expected all_or_nothing or each_descriptor"
                        ),
                    )
                }
            };
        }
        let names = [
            (envoy.limit_header, "limit_header", &mut config.limit_header),
            (
                envoy.remaining_header,
                "remaining_header",
                &mut config.remaining_header,
            ),
            (envoy.reset_header, "reset_header", &mut config.reset_header),
        ];
        for (written, field, slot) in names {
            let Some(name) = written else { continue };
            if http::HeaderName::from_bytes(name.get_ref().as_bytes()).is_err() {
                return self.fail(
                    name.span(),
                    format!("envoy.{field}"),
                    format!("{:?} is not a header name", name.get_ref()),
                );
            }
            *slot = name.into_inner();
        }
        Ok((config, dir_span))
    }
}
