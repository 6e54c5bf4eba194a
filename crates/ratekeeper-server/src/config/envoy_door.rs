//! `[envoy]`: what the Envoy gRPC door asks Envoy to add to the responses
//! it proxies (`response_headers_to_add`).
//!
//! By default the door sends the IETF draft's `RateLimit-Policy` and
//! `RateLimit` fields. Teams coming from envoyproxy/ratelimit, whose
//! clients read its `RateLimit-Limit`, `RateLimit-Remaining` and
//! `RateLimit-Reset` (switched on there by `LIMIT_RESPONSE_HEADERS_ENABLED`,
//! named by `LIMIT_LIMIT_HEADER` and its siblings), choose those, or both.

use serde::Deserialize;
use toml::Spanned;

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
}

impl Checker<'_> {
    /// `[envoy]`, checked.
    pub(super) fn envoy(
        &self,
        envoy: Option<Spanned<FileEnvoy>>,
    ) -> Result<EnvoyDoorConfig, ConfigError> {
        let mut config = EnvoyDoorConfig::default();
        let Some(envoy) = envoy.map(Spanned::into_inner) else {
            return Ok(config);
        };
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
        Ok(config)
    }
}
