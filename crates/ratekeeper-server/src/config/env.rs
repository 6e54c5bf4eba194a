//! Environment overrides, applied to the parsed document before it is
//! deserialized and validated.
//!
//! `RATEKEEPER_<SECTION>__<FIELD>` sets `<field>` of `[<section>]`, and
//! `RATEKEEPER_LIMITS__<NAME>__<FIELD>` sets `<field>` of the limit called
//! `<NAME>` (compared case-insensitively, with every character other than a
//! letter or a digit read as `_`, so `per-ip` is `PER_IP`). Deeper paths such
//! as `RATEKEEPER_LIMITS__PER_IP__MATCH__DOMAIN` work the same way. Field
//! names are lower-cased. Variables without `__` after `RATEKEEPER_` (such as
//! `RATEKEEPER_CONFIG` or `RATEKEEPER_LOG`) are not overrides and are
//! ignored.
//!
//! Values are text for fields that hold text; lists (`key`, `urls`,
//! `trusted_proxies`, `methods`) are either a TOML array or words separated
//! by commas (`trusted_proxies` takes the word `private` in its list); other fields (numbers, booleans, `descriptors`) are TOML
//! values, such as `100000`, `true` or `[{ key = "path" }]`.
//!
//! Each inserted value gets a span past the end of the text, one offset per
//! variable, so that any later error names the variable.

use std::borrow::Cow;
use std::ops::Range;

use toml::de::{DeArray, DeTable, DeValue};
use toml::Spanned;

use super::error::{ConfigError, Location};

/// The prefix of every override.
pub(crate) const PREFIX: &str = "RATEKEEPER_";

/// Fields whose values are taken as text, whatever they look like.
const TEXT_FIELDS: [&str; 28] = [
    "kind",
    "master_name",
    "master_username",
    "master_password",
    "path",
    "url",
    "prefix",
    "on_failure",
    "on_saturated",
    "http",
    "grpc",
    "admin",
    "name",
    "rate",
    "policy",
    "domain",
    "path_prefix",
    "client_ip_from",
    "token_file",
    "token_env",
    "response_headers",
    "limit_header",
    "remaining_header",
    "reset_header",
    "counting",
    "config_dir",
    "config_file",
    // Refused whatever it holds; as text, no number or boolean in it is
    // ever parsed or shown.
    "token",
];

/// Fields that hold lists of text.
const LIST_FIELDS: [&str; 5] = ["urls", "sentinels", "key", "trusted_proxies", "methods"];

/// The overrides among `vars`, in order: `(name, value, path segments)`.
pub(crate) fn overrides<I, K, V>(vars: I) -> Vec<(String, String, Vec<String>)>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<String>,
{
    let mut found: Vec<(String, String, Vec<String>)> = Vec::new();
    for (name, value) in vars {
        let name = name.into();
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if !rest.contains("__") {
            continue;
        }
        let segments = rest.split("__").map(str::to_owned).collect();
        found.push((name, value.into(), segments));
    }
    found
}

/// `name` as it appears in a variable: upper case, with everything but
/// letters and digits as `_`.
fn env_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Applies override `index` (`var` set to `value`, with `segments`) to `doc`,
/// returning the field path it set (such as `limits[0].rate`).
pub(crate) fn apply<'a>(
    doc: &mut DeTable<'a>,
    var: &str,
    value: &'a str,
    segments: &[String],
    span: Range<usize>,
) -> Result<String, ConfigError> {
    let fail = |field: &str, message: String| ConfigError::Invalid {
        location: Location::Env {
            variable: var.to_owned(),
        },
        field: field.to_owned(),
        message,
    };
    if segments.iter().any(String::is_empty) {
        return Err(fail(
            "",
            "empty name between \"__\" separators; expected RATEKEEPER_SECTION__FIELD".to_owned(),
        ));
    }
    let mut path = String::new();
    let mut table = doc;
    let mut rest = segments;
    while let [first, tail @ ..] = rest {
        let key = first.to_ascii_lowercase();
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(&key);
        if tail.is_empty() {
            let new = make_value(&key, &path, value, span.clone());
            table.insert(Spanned::new(span.clone(), Cow::Owned(key)), new);
            return Ok(path);
        }
        if key == "limits" && path == "limits" {
            let [wanted, after @ ..] = tail else {
                return Err(fail(
                    &path,
                    "a limit's name must follow LIMITS__".to_owned(),
                ));
            };
            let Some(limits) = table.get_mut("limits") else {
                return Err(fail(
                    &path,
                    format!("there is no limit named {wanted:?} to override; the file defines no limits"),
                ));
            };
            let DeValue::Array(array) = limits.get_mut() else {
                return Err(fail(&path, "limits is not a list of tables".to_owned()));
            };
            let wanted_upper = wanted.to_ascii_uppercase();
            let mut chosen = None;
            for (i, element) in array.iter_mut().enumerate() {
                let DeValue::Table(limit) = element.get_mut() else {
                    continue;
                };
                let matches = limit
                    .get("name")
                    .and_then(|n| n.get_ref().as_str())
                    .is_some_and(|n| env_name(n) == wanted_upper);
                if matches {
                    if chosen.is_some() {
                        return Err(fail(
                            &path,
                            format!("more than one limit's name reads as {wanted:?} in a variable"),
                        ));
                    }
                    chosen = Some((i, limit));
                }
            }
            let Some((index, limit)) = chosen else {
                return Err(fail(
                    &path,
                    format!("there is no limit named {wanted:?} to override"),
                ));
            };
            path = format!("limits[{index}]");
            if after.is_empty() {
                return Err(fail(
                    &path,
                    "a field must follow the limit's name".to_owned(),
                ));
            }
            table = limit;
            rest = after;
            continue;
        }
        let entry = table
            .entry(Spanned::new(span.clone(), Cow::Owned(key)))
            .or_insert_with(|| Spanned::new(span.clone(), DeValue::Table(DeTable::new())));
        let DeValue::Table(inner) = entry.get_mut() else {
            return Err(fail(
                &path,
                format!("{path} is not a table, so it has no fields"),
            ));
        };
        table = inner;
        rest = tail;
    }
    Ok(path)
}

/// The value for field `key` (at `path`) from the variable's text.
fn make_value<'a>(
    key: &str,
    path: &str,
    text: &'a str,
    span: Range<usize>,
) -> Spanned<DeValue<'a>> {
    let string = |s: &'a str| Spanned::new(span.clone(), DeValue::String(Cow::Borrowed(s)));
    // store.tls's and listen.tls's fields are paths; their `key` is not a
    // limit's key list.
    if TEXT_FIELDS.contains(&key)
        || path.starts_with("store.tls.")
        || path.starts_with("listen.tls.")
    {
        return string(text);
    }
    let trimmed = text.trim();
    if LIST_FIELDS.contains(&key) && !trimmed.starts_with('[') {
        let mut array = DeArray::new();
        for word in trimmed.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            array.push(string(word));
        }
        return Spanned::new(span, DeValue::Array(array));
    }
    match DeValue::parse(text) {
        Ok(value) => respan(value.into_inner(), &span),
        Err(_) => string(text),
    }
}

/// `value` with every span, nested ones too, set to `span`.
fn respan<'a>(value: DeValue<'a>, span: &Range<usize>) -> Spanned<DeValue<'a>> {
    let value = match value {
        DeValue::Array(array) => {
            let mut new = DeArray::new();
            for element in array.iter() {
                new.push(respan(element.get_ref().clone(), span));
            }
            DeValue::Array(new)
        }
        DeValue::Table(table) => {
            let mut new = DeTable::new();
            for (key, element) in table {
                new.insert(
                    Spanned::new(span.clone(), key.into_inner()),
                    respan(element.into_inner(), span),
                );
            }
            DeValue::Table(new)
        }
        other => other,
    };
    Spanned::new(span.clone(), value)
}
