//! `[access]`: the bearer tokens of the decision doors and of the admin
//! port, as written and as checked. Tokens are read from a file or an
//! environment variable when the configuration is, never from its text.
//!
//! The tokens as read (`tokens`: [`TokenSet`], their sources, files and
//! digests) are the configuration's model; the doors' guard that asks for
//! them is the top-level `access` module, which re-exports them under its
//! own path.

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

mod tokens;

use super::error::{ConfigError, Locator};

pub(crate) use tokens::fingerprint;
pub use tokens::{
    parse_tokens, TokenError, TokenSet, TokenSource, MAX_TOKENS, MAX_TOKEN_FILE_BYTES,
    MIN_TOKEN_LEN,
};

/// Which tokens each door takes; `None` leaves a door open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AccessConfig {
    /// The HTTP decision API, `/v1/auth` and the gRPC door
    /// (`[access.decisions]`).
    pub decisions: Option<TokenSet>,
    /// The admin port but `/healthz`, `/readyz` and the dashboard's page
    /// (`[access.admin]`).
    pub admin: Option<TokenSet>,
}

/// `[access]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileAccess {
    decisions: Option<Spanned<FileDoor>>,
    admin: Option<Spanned<FileDoor>>,
}

/// `[access.decisions]` or `[access.admin]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoor {
    token_file: Option<Spanned<String>>,
    token_env: Option<Spanned<String>>,
    /// Only to refuse it with the fix; its value is never read, so no
    /// message can show it.
    token: Option<Spanned<IgnoredAny>>,
}

/// Checks `[access]` and reads its tokens; `vars` is the environment
/// `token_env` names a variable of.
pub(crate) fn check(
    at: &Locator<'_>,
    access: Option<Spanned<FileAccess>>,
    vars: &[(String, String)],
) -> Result<AccessConfig, ConfigError> {
    let Some(access) = access else {
        return Ok(AccessConfig::default());
    };
    let access = access.into_inner();
    Ok(AccessConfig {
        decisions: door(at, "access.decisions", access.decisions, vars)?,
        admin: door(at, "access.admin", access.admin, vars)?,
    })
}

fn door(
    at: &Locator<'_>,
    field: &str,
    door: Option<Spanned<FileDoor>>,
    vars: &[(String, String)],
) -> Result<Option<TokenSet>, ConfigError> {
    let Some(door) = door else {
        return Ok(None);
    };
    let span = door.span();
    let door = door.into_inner();
    if let Some(token) = &door.token {
        return Err(at.invalid(
            token.span(),
            format!("{field}.token"),
            "tokens are never read from the configuration (it is shown, copied and kept in \
             version control); put them in a file, one per line, and set token_file, or put \
             one in an environment variable and set token_env",
        ));
    }
    let (source, span, name) =
        match (door.token_file, door.token_env) {
            (Some(_), Some(env)) => {
                return Err(at.invalid(
                    env.span(),
                    format!("{field}.token_env"),
                    "give token_file or token_env, not both",
                ))
            }
            (None, None) => return Err(at.invalid(
                span,
                field,
                "give token_file (a file of tokens, one per line) or token_env (an environment \
                 variable holding one token)",
            )),
            (Some(file), None) => {
                let path = file.get_ref().trim();
                if path.is_empty() {
                    return Err(at.invalid(
                        file.span(),
                        format!("{field}.token_file"),
                        "the token file's path must not be empty",
                    ));
                }
                (
                    TokenSource::File(at.path(path, &file.span())),
                    file.span(),
                    format!("{field}.token_file"),
                )
            }
            (None, Some(env)) => {
                let name = env.get_ref().trim();
                if name.is_empty() || name.contains(['=', '\0']) {
                    return Err(at.invalid(
                        env.span(),
                        format!("{field}.token_env"),
                        format!("{name:?} is not the name of an environment variable"),
                    ));
                }
                (
                    TokenSource::Env(name.to_owned()),
                    env.span(),
                    format!("{field}.token_env"),
                )
            }
        };
    TokenSet::load(source.clone(), vars)
        .map(Some)
        .map_err(|error| at.invalid(span, name, format!("{source} {error}")))
}
