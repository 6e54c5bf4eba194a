//! Who may ask: optional bearer tokens for the decision doors (the HTTP
//! API, nginx's `/v1/auth` and the gRPC door) and, separately, the admin
//! port.
//!
//! ```toml
//! [access.decisions]           # /v1/* on the HTTP port, and the gRPC door
//! token_file = "/run/secrets/ratekeeper/decisions"   # tokens, one per line
//! [access.admin]               # the admin port but /healthz and /readyz
//! token_env = "RATEKEEPER_ADMIN_TOKEN"                # or one token in a variable
//! ```
//!
//! A door with tokens answers a request without one of them with `401`
//! (`application/problem+json`, `WWW-Authenticate: Bearer`), or the gRPC
//! status `UNAUTHENTICATED`, and counts it in
//! `ratekeeper_unauthenticated_requests_total{door}`. A request shows its
//! token as `Authorization: Bearer TOKEN` (gRPC: the `authorization`
//! metadata); `/v1/auth` also takes `X-RateKeeper-Token: TOKEN`, since
//! nginx's subrequest carries the client's own `Authorization`. On the
//! admin port `/healthz` and `/readyz` stay open for probes, and so does
//! the dashboard's page `/`, which holds no data: it asks for the token
//! and sends it with its requests. On the gRPC port the standard health
//! service (`grpc.health.v1.Health`) stays open for the same reason.
//!
//! The tokens are read when the configuration is (a reload re-reads them,
//! and the service reloads when a token file changes), kept only as
//! SHA-256 digests ([`TokenSet`]), and never logged.
//!
//! The pieces: [`TokenSet`] (token files, digests, comparison: the tokens
//! as configured, kept with the configuration in `config/access/` and
//! re-exported here), [`Access`] (the tokens in force at each door) and
//! [`RequireToken`], the tower layer on each door's router or service.

mod layer;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::HeaderMap;

pub use layer::{Challenge, Guarded, RequireToken, RequireTokenService};
// The tokens as configured live with the configuration (`config/access/`),
// below this module; their public path is here, beside the guard.
pub use crate::config::access::{
    parse_tokens, TokenError, TokenSet, TokenSource, MAX_TOKENS, MAX_TOKEN_FILE_BYTES,
    MIN_TOKEN_LEN,
};

use crate::config::AccessConfig;

/// The header `/v1/auth` also takes its token from.
pub(crate) const TOKEN_HEADER: &str = "x-ratekeeper-token";

/// The paths of the admin port open without a token: the probes, and the
/// dashboard's page (its data comes from `/v1/stats`, which needs one).
pub(crate) const OPEN_ADMIN_PATHS: [&str; 3] = ["/healthz", "/readyz", "/"];

/// The gRPC methods open without a token: the standard health service's
/// (probes carry no token).
pub(crate) const OPEN_GRPC_PREFIX: &str = "/grpc.health.v1.Health/";

/// A door whose callers may need a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Door {
    /// The HTTP decision API and `/v1/auth` (`[access.decisions]`).
    Http,
    /// Envoy's rate limit service over gRPC (`[access.decisions]`).
    Grpc,
    /// The admin port (`[access.admin]`).
    Admin,
}

impl Door {
    /// Every door, in the order of the metric's samples.
    pub const ALL: [Door; 3] = [Door::Http, Door::Grpc, Door::Admin];

    /// Its name, as in `[listen]` and the metric's `door` label.
    pub fn name(self) -> &'static str {
        match self {
            Door::Http => "http",
            Door::Grpc => "grpc",
            Door::Admin => "admin",
        }
    }

    fn index(self) -> usize {
        match self {
            Door::Http => 0,
            Door::Grpc => 1,
            Door::Admin => 2,
        }
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// It showed no bearer token.
    Missing,
    /// It showed a token that is not one of the door's.
    Wrong,
}

impl Refused {
    /// What the answer says, naming where the token goes but never a
    /// token.
    pub fn message(self, door: Door) -> &'static str {
        match (self, door) {
            (Refused::Missing, Door::Grpc) => {
                "this service needs a bearer token: send the metadata authorization: Bearer TOKEN"
            }
            (Refused::Missing, _) => {
                "this endpoint needs a bearer token: send Authorization: Bearer TOKEN"
            }
            (Refused::Wrong, _) => "the bearer token is not one this service accepts",
        }
    }
}

/// The tokens in force at each door, replaced on reload, and the requests
/// each door refused. Shared by the engine and every door's layer.
#[derive(Debug, Default)]
pub struct Access {
    config: ArcSwap<AccessConfig>,
    refused: [AtomicU64; 3],
}

impl Access {
    /// The doors' tokens as `config` says.
    pub fn new(config: &AccessConfig) -> Access {
        Access {
            config: ArcSwap::from_pointee(config.clone()),
            refused: Default::default(),
        }
    }

    /// Puts `config`'s tokens in force: requests from now on are checked
    /// against them.
    pub fn replace(&self, config: &AccessConfig) {
        self.config.store(Arc::new(config.clone()));
    }

    /// The tokens in force.
    pub fn config(&self) -> Arc<AccessConfig> {
        self.config.load_full()
    }

    /// The token files in force, for the reloader to watch.
    pub(crate) fn files(&self) -> Vec<std::path::PathBuf> {
        let config = self.config.load();
        [&config.decisions, &config.admin]
            .into_iter()
            .flatten()
            .filter_map(|set| match set.source() {
                TokenSource::File(path) => Some(path.clone()),
                _ => None,
            })
            .collect()
    }

    /// Whether a request to `path` at `door` with `headers` may pass;
    /// a refusal is counted.
    pub fn check(&self, door: Door, path: &str, headers: &HeaderMap) -> Result<(), Refused> {
        let config = self.config.load();
        let tokens = match door {
            Door::Http | Door::Grpc => &config.decisions,
            Door::Admin => &config.admin,
        };
        let Some(tokens) = tokens else {
            return Ok(());
        };
        if door == Door::Admin && OPEN_ADMIN_PATHS.contains(&path) {
            return Ok(());
        }
        if door == Door::Grpc && path.starts_with(OPEN_GRPC_PREFIX) {
            return Ok(());
        }
        let result = verdict(tokens, door, path, headers);
        if result.is_err() {
            self.refused[door.index()].fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// The requests `door` refused so far.
    pub fn refused(&self, door: Door) -> u64 {
        self.refused[door.index()].load(Ordering::Relaxed)
    }

    /// The layer that checks `door`'s requests against these tokens.
    pub fn layer(self: &Arc<Self>, door: Door) -> RequireToken {
        RequireToken::new(Arc::clone(self), door)
    }
}

/// Whether the request shows one of `tokens`: in `Authorization: Bearer`,
/// or, at `/v1/auth`, in [`TOKEN_HEADER`].
fn verdict(tokens: &TokenSet, door: Door, path: &str, headers: &HeaderMap) -> Result<(), Refused> {
    let mut shown = false;
    if door == Door::Http && path == "/v1/auth" {
        for value in headers.get_all(TOKEN_HEADER) {
            shown = true;
            if tokens.accepts(trim(value.as_bytes())) {
                return Ok(());
            }
        }
    }
    for value in headers.get_all(http::header::AUTHORIZATION) {
        if let Some(token) = bearer(value.as_bytes()) {
            shown = true;
            if tokens.accepts(token) {
                return Ok(());
            }
        }
    }
    Err(if shown {
        Refused::Wrong
    } else {
        Refused::Missing
    })
}

/// The token of an `Authorization: Bearer TOKEN` value (the scheme in any
/// case, RFC 7235).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let value = trim(value);
    let scheme = value.get(..6)?;
    let rest = value.get(6..)?;
    if !scheme.eq_ignore_ascii_case(b"bearer") || !rest.first()?.is_ascii_whitespace() {
        return None;
    }
    Some(trim(rest))
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    const TOKEN: &str = "0123456789abcdef";

    fn access() -> Access {
        let set = TokenSet::new(TokenSource::File("/t".into()), [TOKEN]);
        Access::new(&AccessConfig {
            decisions: Some(set.clone()),
            admin: Some(set),
        })
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn bearer_tokens_pass_and_others_are_counted() {
        let access = access();
        let ok = headers(&[("authorization", &format!("bearer  {TOKEN} "))]);
        assert_eq!(access.check(Door::Http, "/v1/check", &ok), Ok(()));
        let none = headers(&[]);
        assert_eq!(access.check(Door::Grpc, "/x", &none), Err(Refused::Missing));
        let wrong = headers(&[("authorization", "Bearer 0123456789abcdeg")]);
        assert_eq!(
            access.check(Door::Http, "/v1/check", &wrong),
            Err(Refused::Wrong)
        );
        let basic = headers(&[("authorization", &format!("Basic {TOKEN}"))]);
        assert_eq!(
            access.check(Door::Http, "/v1/check", &basic),
            Err(Refused::Missing)
        );
        assert_eq!(
            (access.refused(Door::Http), access.refused(Door::Grpc)),
            (2, 1)
        );
        assert_eq!(access.refused(Door::Admin), 0);
    }

    #[test]
    fn the_token_header_counts_only_at_v1_auth() {
        let access = access();
        let shown = headers(&[
            (TOKEN_HEADER, TOKEN),
            ("authorization", "Bearer client-own"),
        ]);
        assert_eq!(access.check(Door::Http, "/v1/auth", &shown), Ok(()));
        assert_eq!(
            access.check(Door::Http, "/v1/check", &shown),
            Err(Refused::Wrong)
        );
    }

    #[test]
    fn probes_and_the_page_stay_open() {
        let access = access();
        for path in OPEN_ADMIN_PATHS {
            assert_eq!(access.check(Door::Admin, path, &headers(&[])), Ok(()));
        }
        assert_eq!(
            access.check(Door::Admin, "/metrics", &headers(&[])),
            Err(Refused::Missing)
        );
        // gRPC's health service too, but not the rate limit service.
        for method in ["Check", "Watch"] {
            let path = format!("{OPEN_GRPC_PREFIX}{method}");
            assert_eq!(access.check(Door::Grpc, &path, &headers(&[])), Ok(()));
        }
        assert_eq!(
            access.check(
                Door::Grpc,
                "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                &headers(&[])
            ),
            Err(Refused::Missing)
        );
    }

    #[test]
    fn a_door_without_tokens_is_open_and_replacing_closes_it() {
        let access = Access::new(&AccessConfig::default());
        assert_eq!(access.check(Door::Http, "/v1/check", &headers(&[])), Ok(()));
        let set = TokenSet::new(TokenSource::File("/t".into()), [TOKEN]);
        access.replace(&AccessConfig {
            decisions: None,
            admin: Some(set),
        });
        assert_eq!(access.files(), [std::path::PathBuf::from("/t")]);
        assert_eq!(access.check(Door::Http, "/v1/check", &headers(&[])), Ok(()));
        assert!(access
            .check(Door::Admin, "/v1/stats", &headers(&[]))
            .is_err());
    }
}
