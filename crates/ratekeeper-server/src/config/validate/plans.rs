//! `plan_from`, `plan_from_peers` and `[limits.plans]`: a limit's numbers
//! per plan, and where a request names its plan.

use ratekeeper::plan::Plans;

use super::limit::parse_rate;
use super::*;
use crate::config::{PlanConfig, PlanFrom, PlanTable, Reach, MAX_PLAN_TABLE_BYTES};

impl Checker<'_> {
    /// `limits[index]`'s plans, for `limit` (`ban`: a rate of 0), or `None`
    /// when it has none.
    pub(super) fn plans(
        &self,
        index: usize,
        file: &FileLimit,
        limit: &Limit,
        ban: bool,
    ) -> Result<Option<PlanConfig>, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let (table, from) = match (&file.plans, &file.plan_from) {
            (None, None) => {
                if let Some(peers) = &file.plan_from_peers {
                    return self.fail(
                        peers.span(),
                        field("plan_from_peers"),
                        "plan_from_peers goes with plan_from = \"header:NAME\"",
                    );
                }
                return Ok(None);
            }
            (Some(table), None) => {
                return self.fail(
                    table.span(),
                    field("plans"),
                    "plans need plan_from: where a request names its plan, such as \
                     \"header:x-plan\" (set by your edge) or \"descriptor:plan\" (Envoy's)",
                )
            }
            (None, Some(from)) => {
                return self.fail(
                    from.span(),
                    field("plan_from"),
                    "plan_from needs a [limits.plans] table: each plan's rate, \"unlimited\" or \"deny\"",
                )
            }
            (Some(table), Some(from)) => (table, from),
        };
        if ban {
            return self.fail(
                table.span(),
                field("plans"),
                "a rate of 0 refuses every request; give the limit the default plan's rate",
            );
        }
        let names: Vec<&str> = table.get_ref().keys().map(String::as_str).collect();
        let from = self.plan_from(index, file, from, &names)?;
        let kind = limit.policy().kind();
        let mut plans = Plans::new(limit.clone());
        let mut written = Vec::with_capacity(table.get_ref().len());
        let mut rates = Vec::new();
        for (name, value) in table.get_ref() {
            let plan_field = format!("limits[{index}].plans.{name}");
            let text = value.get_ref().trim();
            let added = match text {
                "unlimited" => plans.unlimited(name),
                "deny" => plans.deny(name),
                _ => match parse_rate(text) {
                    Ok((_, true)) => plans.deny(name),
                    Ok((rate, false)) => match Policy::new(kind, &rate) {
                        Ok(policy) => {
                            rates.push((name.clone(), rate));
                            plans.limited(name, policy)
                        }
                        Err(error) => {
                            return self.fail(value.span(), plan_field, error.to_string())
                        }
                    },
                    Err(error) => {
                        return self.fail(
                            value.span(),
                            plan_field,
                            format!("{error}; or \"unlimited\", or \"deny\""),
                        )
                    }
                },
            };
            plans = match added {
                Ok(plans) => plans,
                Err(error) => return self.fail(value.span(), plan_field, error.to_string()),
            };
            written.push((name.clone(), text.to_owned()));
        }
        Ok(Some(PlanConfig {
            from,
            plans,
            written,
            rates,
        }))
    }

    /// `plan_from` (with `plan_from_peers` for a header); `names` are the
    /// plans a table may name.
    fn plan_from(
        &self,
        index: usize,
        file: &FileLimit,
        from: &Spanned<String>,
        names: &[&str],
    ) -> Result<PlanFrom, ConfigError> {
        let field = |name: &str| format!("limits[{index}].{name}");
        let text = from.get_ref().trim();
        if let Some(path) = text.strip_prefix("table:") {
            if let Some(peers) = &file.plan_from_peers {
                return self.fail(
                    peers.span(),
                    field("plan_from_peers"),
                    "plan_from_peers is for a header; a table is read from its file",
                );
            }
            let written = Spanned::new(from.span(), path.trim().to_owned());
            let path = self.path(&written);
            return match read_plan_table(&path, names) {
                Ok(table) => Ok(PlanFrom::Table(std::sync::Arc::new(table))),
                Err(why) => self.fail(from.span(), field("plan_from"), why),
            };
        }
        if let Some(key) = text.strip_prefix("descriptor:") {
            let key = key.trim();
            if key.is_empty() {
                return self.fail(
                    from.span(),
                    field("plan_from"),
                    "the descriptor key after \"descriptor:\" must not be empty",
                );
            }
            if let Some(peers) = &file.plan_from_peers {
                return self.fail(
                    peers.span(),
                    field("plan_from_peers"),
                    "plan_from_peers is for a header; Envoy builds descriptors itself",
                );
            }
            return Ok(PlanFrom::Descriptor(key.to_owned()));
        }
        let Some(name) = text.strip_prefix("header:") else {
            return self.fail(
                from.span(),
                field("plan_from"),
                format!(
                    "unknown plan source {text:?}; expected header:NAME, descriptor:KEY or \
                     table:PATH"
                ),
            );
        };
        let Ok(name) = HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes()) else {
            return self.fail(
                from.span(),
                field("plan_from"),
                format!("invalid header name {name:?}"),
            );
        };
        let Some(peers) = &file.plan_from_peers else {
            return self.fail(
                from.span(),
                field("plan_from"),
                format!(
                    "any client can send {name}: say which peers set it with plan_from_peers \
                     (your edge's addresses, or [] when only the JSON API's callers state it), \
                     and have that edge overwrite or strip the client's own"
                ),
            );
        };
        let peers = self.networks(field("plan_from_peers"), peers)?;
        Ok(PlanFrom::Header { name, peers })
    }

    /// Refuses a plan source the limit's requests never have: a header on
    /// a limit for descriptors, a descriptor entry on one for HTTP
    /// requests.
    pub(super) fn plan_reach(
        &self,
        index: usize,
        written: &Spanned<String>,
        from: &PlanFrom,
        matcher: &Match,
    ) -> Result<(), ConfigError> {
        if let PlanFrom::Descriptor(key) = from {
            let named = matcher.descriptors.iter().any(|entry| entry.key == *key);
            if matcher.reach() == Reach::Descriptors && !named {
                return self.fail(
                    written.span(),
                    format!("limits[{index}].plan_from"),
                    format!(
                        "no entry of match.descriptors has the key {key:?}: descriptors match \
                         as a whole, so add {{ key = {key:?} }} to them (Envoy must always send \
                         it: have your edge set a plan, such as \"free\", on every request)"
                    ),
                );
            }
        }
        let why = match (from, matcher.reach()) {
            (PlanFrom::Header { .. }, Reach::Descriptors) => {
                "the limit matches Envoy descriptors, which have no headers; use descriptor:KEY"
            }
            (PlanFrom::Descriptor(_), Reach::Http) => {
                "the limit matches HTTP requests, which have no descriptors; use header:NAME"
            }
            _ => return Ok(()),
        };
        self.fail(written.span(), format!("limits[{index}].plan_from"), why)
    }
}

/// The plan table at `path` (see [`PlanTable::parse`]), read at most
/// [`MAX_PLAN_TABLE_BYTES`] of it.
pub(crate) fn read_plan_table(path: &std::path::Path, names: &[&str]) -> Result<PlanTable, String> {
    use std::io::Read;
    let cannot = |error: std::io::Error| format!("cannot read {}: {error}", path.display());
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut bytes = Vec::new();
    file.take(MAX_PLAN_TABLE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    PlanTable::parse(&bytes, path, names)
}
