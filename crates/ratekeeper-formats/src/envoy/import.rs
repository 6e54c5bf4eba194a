//! `ratekeeper import envoy DIR`: an envoyproxy/ratelimit configuration
//! written as native `[[limits]]`.
//!
//! Every descriptor with a `rate_limit` becomes one limit whose
//! `match.descriptors` are the entries of the path to it. The tree's
//! precedence (at each level the exact `KEY_VALUE` first, then the
//! wildcards in the file's order, then the bare key) becomes `except`
//! lists, since native limits all apply where they match: a bare key
//! gets its exact and wildcard siblings of the same key as `except`, a
//! wildcard its exact siblings and the wildcards before it. A node
//! without a limit still takes part, as the sibling its neighbours step
//! aside for.
//!
//! The output decides every request as `ratekeeper serve --envoy-config`
//! does on the same directory, or says where it would not: each
//! [`ImportNote`] of [`Imported::notes`], a [`NoteKind::Difference`] where
//! some request would be decided otherwise (`replaces`, `quota_mode`,
//! texts that meet across keys), a [`NoteKind::Warning`] where only what
//! is reported differs. Both are also written in the TOML, as `# differs:`
//! and `# note:` comments before the limit or level they concern. A
//! descriptor with `requests_per_unit: 0` becomes a ban
//! (`rate = "0/minute"`), and a limit's `key` names the entries counted
//! one value at a time (`descriptor:KEY`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use super::import_notes::{key_value_matters, level_notes, ImportNote, NoteKind};
use super::validate::{check_limit, DescriptorSpec, Reader};
use super::{
    limit_name, list_files, EnvoyConfig, EnvoyConfigError, EnvoyWarning, FileRateLimit,
    LoadOptions, Unit,
};
use crate::yaml::{self, Position};

/// What [`import_dir`] and [`import_files`] give: the native TOML, and
/// which limit of it came from which descriptor.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Imported {
    /// The `[[limits]]`, with a header and comments; it loads as
    /// ratekeeper's own configuration (`ratekeeper_server::Config::from_toml_str`).
    pub toml: String,
    /// Each `[[limits]]` written, in the output's order.
    pub limits: Vec<ImportedLimit>,
    /// What the files say that envoyproxy/ratelimit ignores (as
    /// [`EnvoyConfig::warnings`]).
    pub warnings: Vec<EnvoyWarning>,
    /// Where the output would decide, or report, otherwise than
    /// `serve --envoy-config` on the same files.
    pub notes: Vec<ImportNote>,
}

impl Imported {
    /// Whether some request would be decided otherwise than by
    /// `serve --envoy-config` on the same files (a
    /// [`NoteKind::Difference`]).
    pub fn differs(&self) -> bool {
        self.notes
            .iter()
            .any(|note| note.kind == NoteKind::Difference)
    }
}

/// One `[[limits]]` of an [`Imported`] configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImportedLimit {
    /// Its `name`.
    pub name: String,
    /// The place of the `rate_limit` block it was made from: the
    /// [`FileRateLimit::at`] that [`Domain::get_limit`](super::Domain::get_limit)
    /// answers with.
    pub at: Position,
    /// Whether it decides differently from `serve --envoy-config` (a
    /// `# differs:` comment of its own).
    pub differs: bool,
}

/// The native TOML of the directory [`EnvoyConfig::load_dir_with`] reads
/// with `options`.
///
/// # Errors
///
/// What [`EnvoyConfig::load_dir_with`] refuses; and
/// [`EnvoyConfigError::Read`] if a file cannot be read again (it changed
/// while being imported).
pub fn import_dir(
    path: impl AsRef<Path>,
    options: &LoadOptions,
) -> Result<Imported, EnvoyConfigError> {
    let path = path.as_ref();
    // Loaded first for its errors, which name the place (a file that is
    // not UTF-8 included); the files are then read again for the tree in
    // the files' order, which the loaded domains do not keep.
    let loaded = EnvoyConfig::load_dir_with(path, options)?;
    let mut ignored = Vec::new();
    let mut texts = Vec::new();
    for file in list_files(path, options, &mut ignored)? {
        let text = fs::read_to_string(&file).map_err(|source| EnvoyConfigError::Read {
            path: file.clone(),
            source,
        })?;
        texts.push((file.display().to_string(), text));
    }
    let mut imported = import_files(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())), options)?;
    imported.warnings = loaded.warnings().to_vec();
    Ok(imported)
}

/// The native TOML of the files `(name, text)`, loaded as
/// [`EnvoyConfig::from_files`] loads them.
///
/// # Errors
///
/// What [`EnvoyConfig::from_files`] refuses.
pub fn import_files<'a, I>(files: I, options: &LoadOptions) -> Result<Imported, EnvoyConfigError>
where
    I: IntoIterator<Item = (&'a str, &'a str)>,
{
    let files: Vec<(&str, &str)> = files.into_iter().collect();
    let loaded = EnvoyConfig::from_files(files.iter().copied(), options)?;
    // The domains in the order their first file gives them; with
    // `merge_domains`, a later file's descriptors after the earlier's, as
    // the loader adds them.
    let mut domains: Vec<(String, Vec<DescriptorSpec>)> = Vec::new();
    for (name, text) in &files {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let document = yaml::parse(text, name)?;
        let spec = Reader::new(name).file(document.root.as_ref())?;
        match domains
            .iter_mut()
            .find(|(domain, _)| *domain == spec.domain)
        {
            Some((_, descriptors)) => descriptors.extend(spec.descriptors),
            None => domains.push((spec.domain, spec.descriptors)),
        }
    }
    let mut nodes = Vec::new();
    let mut level_notes = Vec::new();
    for (domain, descriptors) in &domains {
        collect(
            domain,
            descriptors,
            &mut Vec::new(),
            &mut nodes,
            &mut level_notes,
        )?;
    }
    let names: Vec<&str> = domains.iter().map(|(name, _)| name.as_str()).collect();
    let mut imported = write(&nodes, &names, &loaded, level_notes);
    if domains
        .iter()
        .any(|(_, descriptors)| key_value_matters(descriptors))
    {
        imported.notes.push(ImportNote::new(
            NoteKind::Warning,
            "matching",
            "--envoy-config matches each request entry by its KEY_VALUE text, natively by its \
             key and value: the same for every request whose keys are the files' keys, not for \
             an entry whose key is a file's key with `_` and more, or a prefix of one (see the \
             output's header)"
                .to_owned(),
        ));
    }
    imported.warnings = loaded.warnings().to_vec();
    Ok(imported)
}

/// A descriptor entry of a limit's `match`.
#[derive(Debug, Clone)]
struct EntryOut<'s> {
    key: &'s str,
    /// Empty for none.
    value: &'s str,
    except: Vec<&'s str>,
    share_threshold: bool,
    value_to_metric: bool,
}

/// A descriptor with a `rate_limit`, and the path to it.
struct Node<'s> {
    domain: &'s str,
    path: Vec<EntryOut<'s>>,
    spec: &'s DescriptorSpec,
    limit: FileRateLimit,
}

impl EntryOut<'_> {
    /// `key_value`, or `key` without a value: its part of a path.
    fn name(&self) -> String {
        match self.value.is_empty() {
            true => self.key.to_owned(),
            false => format!("{}_{}", self.key, self.value),
        }
    }

    /// Whether each value it matches is counted on its own.
    fn counted_by_value(&self) -> bool {
        (self.value.is_empty() || self.value.contains('*')) && !self.share_threshold
    }
}

impl Node<'_> {
    /// `domain.key_value.key`: the path as envoyproxy/ratelimit writes a
    /// descriptor's place.
    fn path_name(&self) -> String {
        let mut name = self.domain.to_owned();
        for entry in &self.path {
            name.push('.');
            name.push_str(&entry.name());
        }
        name
    }
}

/// Adds the nodes with a limit under `level` (whose parents' entries are
/// `path`) to `nodes`, depth first in the files' order, and the level's
/// differences to `notes`.
fn collect<'s>(
    domain: &'s str,
    level: &'s [DescriptorSpec],
    path: &mut Vec<EntryOut<'s>>,
    nodes: &mut Vec<Node<'s>>,
    notes: &mut Vec<ImportNote>,
) -> Result<(), EnvoyConfigError> {
    let mut at = domain.to_owned();
    for entry in path.iter() {
        at.push('.');
        at.push_str(&entry.name());
    }
    level_notes(&at, level, notes);
    for (index, spec) in level.iter().enumerate() {
        path.push(EntryOut {
            key: &spec.key,
            value: &spec.value,
            except: except(level, index),
            share_threshold: spec.share_threshold,
            value_to_metric: spec.value_to_metric,
        });
        if let Some(limit) = &spec.rate_limit {
            // Checked when loaded; its warnings are the loader's too.
            let limit = check_limit(limit, spec, &mut Vec::new())?;
            nodes.push(Node {
                domain,
                path: path.clone(),
                spec,
                limit,
            });
        }
        collect(domain, &spec.descriptors, path, nodes, notes)?;
        path.pop();
    }
    Ok(())
}

/// The values that `level[index]`'s siblings of the same key take before
/// it: an exact value wins over every wildcard, a wildcard over the ones
/// after it, and any value over the bare key.
fn except(level: &[DescriptorSpec], index: usize) -> Vec<&str> {
    let me = &level[index];
    let wild = |value: &str| value.contains('*');
    let mut out: Vec<&str> = Vec::new();
    for (at, other) in level.iter().enumerate() {
        if at == index || other.key != me.key || other.value.is_empty() {
            continue;
        }
        let wins = if me.value.is_empty() {
            true
        } else if wild(&me.value) {
            !wild(&other.value) || at < index
        } else {
            false
        };
        if wins && !out.contains(&other.value.as_str()) {
            out.push(&other.value);
        }
    }
    out
}

/// The output, the nodes' names decided first so that `replaces` can
/// name them.
///
/// A limit is named as `ratekeeper serve --envoy-config` names the same
/// descriptor's (when no native limit has taken the name), in the same
/// order, so that its metrics keep their names after the move; the
/// descriptors the door counts nothing for (`requests_per_unit: 0`) are
/// named after those.
fn write(
    nodes: &[Node<'_>],
    domains: &[&str],
    loaded: &EnvoyConfig,
    level_notes: Vec<ImportNote>,
) -> Imported {
    let mut taken = HashSet::new();
    let mut door_names: HashMap<String, String> = HashMap::new();
    loaded.for_each_limit(|path, limit| {
        if !limit.unlimited && limit.requests_per_unit > 0 {
            door_names.insert(limit.at.to_string(), limit_name(path, &mut taken));
        }
    });
    let names: Vec<String> = nodes
        .iter()
        .map(|node| match door_names.remove(&node.limit.at.to_string()) {
            Some(name) => name,
            None => limit_name(&node.path_name(), &mut taken),
        })
        .collect();
    // envoyproxy/ratelimit's limit names, per domain, to the native names
    // of the nodes that carry them.
    let mut by_envoy_name: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
    for (node, name) in nodes.iter().zip(&names) {
        if let Some(envoy_name) = &node.limit.name {
            by_envoy_name
                .entry((node.domain, envoy_name))
                .or_default()
                .push(name);
        }
    }
    let mut toml = String::from(HEADER);
    for note in &level_notes {
        toml.push('\n');
        write_note(&mut toml, note);
    }
    let mut notes = level_notes;
    let mut limits = Vec::new();
    for (node, name) in nodes.iter().zip(&names) {
        let mine = differences(node, &by_envoy_name, nodes, &names);
        toml.push('\n');
        let _ = writeln!(
            toml,
            "# {} (rate_limit at {})",
            comment(&node.path_name()),
            comment(&node.limit.at.to_string())
        );
        for note in &mine {
            write_note(&mut toml, note);
        }
        let differs = mine.iter().any(|note| note.kind == NoteKind::Difference);
        notes.extend(mine);
        if node.limit.unlimited {
            // Nothing to write: no native limit lets everything through.
            continue;
        }
        write_limit(&mut toml, node, name);
        limits.push(ImportedLimit {
            name: name.clone(),
            at: node.limit.at.clone(),
            differs,
        });
    }
    // A domain the files define answers descriptor overrides there; a
    // native one only where a limit names it.
    for &domain in domains {
        let written = nodes
            .iter()
            .zip(&names)
            .any(|(node, name)| node.domain == domain && limits.iter().any(|l| l.name == *name));
        if !written {
            let note = ImportNote::new(
                NoteKind::Difference,
                domain,
                "no limit of this domain is written, so natively a descriptor's `limit` \
                 override in it is not honoured (ratekeeper honours overrides in a domain some \
                 limit names); --envoy-config honours them in every domain its files define"
                    .to_owned(),
            );
            toml.push('\n');
            write_note(&mut toml, &note);
            notes.push(note);
        }
    }
    if limits.is_empty() {
        // A native file needs a limit: say why this one has none rather
        // than invent one.
        toml.push_str(
            "\n# Nothing to write: no descriptor of these files has a rate limit\n\
             # that a native limit can express. ratekeeper refuses a file without\n\
             # [[limits]]; serve the directory with --envoy-config instead.\n",
        );
    }
    Imported {
        toml,
        limits,
        warnings: Vec::new(),
        notes,
    }
}

/// `note` as a comment: `# differs:` for a difference, `# note:` for a
/// warning.
fn write_note(toml: &mut String, note: &ImportNote) {
    let tag = match note.kind {
        NoteKind::Difference => "differs",
        NoteKind::Warning => "note",
    };
    wrap(toml, &format!("{tag}: {}", note.message));
}

const HEADER: &str = "\
# Limits imported from an envoyproxy/ratelimit configuration by
# `ratekeeper import envoy`: one [[limits]] per descriptor with a
# rate_limit, matching the requests that the files give that descriptor's
# limit (their precedence written as `except` lists), each counting what
# the files count (`key`: the entries counted one value at a time).
# They decide every request as `ratekeeper serve --envoy-config` decides it
# on the same files, except where a `# differs:` comment says otherwise;
# a `# note:` marks what only reports differently. Names are those
# `serve --envoy-config` gives the same limits.
#
# Either way, ratekeeper differs from envoyproxy/ratelimit itself:
# - it counts a request's descriptors all or nothing: a request one limit
#   refuses takes nothing from the others, where envoyproxy/ratelimit
#   counts every descriptor it matched. For its counts, set in the
#   [envoy] table:
#     counting = \"each_descriptor\"
# - envoyproxy/ratelimit adds refused hits to a window's count too;
#   ratekeeper counts only what it allows (the same answers while a window
#   stays over its limit, but more remaining after a large refused hit).
# - stats are per limit name here (ratekeeper_* metrics), not
#   envoyproxy/ratelimit's `ratelimit.service.rate_limit.DOMAIN.KEY_VALUE...`.
#
# Both envoyproxy/ratelimit and --envoy-config match each entry by the
# text KEY_VALUE (or KEY), so a request entry whose key and value join to
# the same text as a descriptor's, with another key, matches it there (key
# `a_b` and value `c` match key `a` with value `b_c`, and a wildcard `a` /
# `x*` matches any key starting `a_x`); native matching compares the key
# and the value. The two agree on every request whose keys are the files'
# own keys; where the files' keys themselves meet, a `# differs:` says so.
# A status's current_limit names the native limit, where they send the
# file's `name` (empty without one).
";

/// The notes of one node.
fn differences(
    node: &Node<'_>,
    by_envoy_name: &BTreeMap<(&str, &str), Vec<&str>>,
    nodes: &[Node<'_>],
    names: &[String],
) -> Vec<ImportNote> {
    let subject = node.path_name();
    let mut notes = Vec::new();
    let mut note = |kind, message: String| notes.push(ImportNote::new(kind, &subject, message));
    let limit = &node.limit;
    if limit.unlimited {
        note(
            NoteKind::Warning,
            "unlimited: --envoy-config answers this descriptor OK with limit_remaining \
             4294967295 and counts nothing. No native limit does that, so none is written: \
             natively no limit matches it (the siblings' `except` lists still step aside for \
             it), and it is answered OK with no current_limit and limit_remaining 0"
                .to_owned(),
        );
    }
    if matches!(limit.unit, Some(Unit::Month | Unit::Year))
        && !limit.unlimited
        && limit.requests_per_unit > 0
    {
        note(
            NoteKind::Warning,
            "a status's current_limit shows this rate per WEEK (rounded down, at least 1), \
             as ratekeeper reports a period longer than a week; --envoy-config shows it per \
             MONTH or YEAR. The decisions are the same"
                .to_owned(),
        );
    }
    // Only a `replaces` that names a limit of the domain drops anything.
    let targets: Vec<String> = limit
        .replaces
        .iter()
        .filter_map(|replaced| {
            let natives = by_envoy_name.get(&(node.domain, replaced.as_str()))?;
            Some(format!("{} ({})", comment(replaced), natives.join(", ")))
        })
        .collect();
    if !targets.is_empty() {
        note(
            NoteKind::Difference,
            format!(
                "replaces: in a request matching this, --envoy-config drops the limits named \
                 {}; natively every limit that matches applies",
                targets.join(", ")
            ),
        );
    } else if !limit.replaces.is_empty() {
        note(
            NoteKind::Warning,
            "replaces names no limit of this domain: it drops nothing".to_owned(),
        );
    }
    if let Some(envoy_name) = &limit.name {
        let replacers: Vec<&str> = nodes
            .iter()
            .zip(names)
            .filter(|(other, _)| {
                other.domain == node.domain && other.limit.replaces.iter().any(|r| r == envoy_name)
            })
            .map(|(_, name)| name.as_str())
            .collect();
        if !replacers.is_empty() {
            note(
                NoteKind::Difference,
                format!(
                    "named {} in the files, which {} `replaces`: under --envoy-config a \
                     request matching one of those does not apply this limit; natively it does",
                    comment(envoy_name),
                    replacers.join(", ")
                ),
            );
        }
    }
    if node.spec.quota_mode {
        note(
            NoteKind::Difference,
            "quota_mode: --envoy-config refuses a request over its quota descriptors only \
             when all of them are over; natively this refuses like any other limit"
                .to_owned(),
        );
    }
    if limit.detailed_metric || node.path.iter().any(|entry| entry.value_to_metric) {
        note(
            NoteKind::Warning,
            "detailed_metric/value_to_metric name envoyproxy/ratelimit's stats per value; \
             native stats are per limit"
                .to_owned(),
        );
    }
    if limit.metadata.is_some() {
        note(
            NoteKind::Warning,
            "metadata: envoyproxy/ratelimit returns it in the response's dynamic metadata; \
             ratekeeper (either way) does not"
                .to_owned(),
        );
    }
    notes
}

/// The `[[limits]]` table of `node`.
fn write_limit(toml: &mut String, node: &Node<'_>, name: &str) {
    let limit = &node.limit;
    let _ = writeln!(toml, "[[limits]]");
    let _ = writeln!(toml, "name = {}", quote(name));
    if limit.requests_per_unit == 0 {
        let _ = writeln!(
            toml,
            "# requests_per_unit 0: a ban, refusing every request it matches"
        );
    }
    let _ = writeln!(
        toml,
        "rate = {}",
        quote(&format!(
            "{}/{}",
            limit.requests_per_unit,
            unit_words(limit.unit)
        ))
    );
    // Spelled out even for the default, so that a reader sees
    // envoyproxy/ratelimit's fixed windows.
    let _ = writeln!(toml, "policy = {}", quote(limit.policy.name()));
    let _ = writeln!(toml, "key = [{}]", key_parts(node).join(", "));
    if limit.shadow_mode {
        let _ = writeln!(toml, "shadow = true");
    }
    let _ = writeln!(toml, "[limits.match]");
    let _ = writeln!(toml, "domain = {}", quote(node.domain));
    let _ = writeln!(toml, "descriptors = [");
    for entry in &node.path {
        let mut line = format!("  {{ key = {}", quote(entry.key));
        if !entry.value.is_empty() {
            let _ = write!(line, ", value = {}", quote(entry.value));
        }
        if !entry.except.is_empty() {
            let except: Vec<String> = entry.except.iter().map(|v| quote(v)).collect();
            let _ = write!(line, ", except = [{}]", except.join(", "));
        }
        if entry.share_threshold {
            line.push_str(", share_threshold = true");
        }
        line.push_str(" },");
        let _ = writeln!(toml, "{line}");
    }
    let _ = writeln!(toml, "]");
}

/// The quoted parts of `node`'s key: `descriptor:KEY` for each entry
/// counted one value at a time, as the files count it; `global` when
/// none is (one counter). An entry whose key an earlier entry of the path
/// has is counted by its position all the same (the matching adds it),
/// but `descriptor:KEY` would read the earlier one: it is left out.
fn key_parts(node: &Node<'_>) -> Vec<String> {
    let mut parts = Vec::new();
    for (index, entry) in node.path.iter().enumerate() {
        let first = node.path[..index].iter().all(|e| e.key != entry.key);
        // The key part trims its text: a key with spaces around it is
        // counted by position only.
        if entry.counted_by_value() && first && entry.key.trim() == entry.key {
            parts.push(quote(&format!("descriptor:{}", entry.key)));
        }
    }
    if parts.is_empty() {
        parts.push(quote("global"));
    }
    parts
}

/// The period of `unit` in the rate parser's words: it has no month or
/// year, and envoyproxy/ratelimit's are 30 and 365 days.
fn unit_words(unit: Option<Unit>) -> &'static str {
    match unit {
        Some(Unit::Second) => "second",
        // Only unlimited limits have no unit, and they are not written.
        Some(Unit::Minute) | None => "minute",
        Some(Unit::Hour) => "hour",
        Some(Unit::Day) => "day",
        Some(Unit::Week) => "week",
        Some(Unit::Month) => "30 days",
        Some(Unit::Year) => "365 days",
    }
}

/// `text` as comment lines of at most 76 characters where its words
/// allow, the lines after the first indented.
fn wrap(toml: &mut String, text: &str) {
    let mut line = String::from("#");
    for word in text.split(' ').filter(|word| !word.is_empty()) {
        if line.len() > 4 && line.len() + 1 + word.len() > 76 {
            toml.push_str(&line);
            toml.push('\n');
            line = String::from("#  ");
        }
        line.push(' ');
        line.push_str(word);
    }
    toml.push_str(&line);
    toml.push('\n');
}

/// `text` as a TOML basic string.
fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `text` fit for a comment: on one line, quoted when it has anything a
/// reader could mistake (spaces, controls).
fn comment(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_graphic() || (!c.is_ascii() && !c.is_control()))
    {
        text.to_owned()
    } else {
        format!("{text:?}")
    }
}
