//! docs/configuration.md, the configuration reference: every key the
//! built-in defaults print is there with the same default, every key the
//! file takes is there, and every commented line still loads once
//! uncommented (one key per line).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ratekeeper_server::config::{Config, DEFAULT_TOML};
use toml::{Table, Value};

const REFERENCE: &str = include_str!("../../../../docs/configuration.md");

/// The ```toml blocks of a markdown page.
pub(crate) fn toml_blocks(markdown: &str) -> Vec<String> {
    markdown
        .split("```toml\n")
        .skip(1)
        .map(|block| block[..block.find("```").expect("a closed block")].to_owned())
        .collect()
}

/// The TOML blocks of `page` (a file under docs/) in its section `heading`
/// (a `## ` heading), up to the next `## ` heading.
pub(crate) fn section_toml(page: &str, heading: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{page}: {e}"));
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("{page} has a {heading:?} section"));
    let section = &text[start + 1..];
    let section = &section[..section[1..]
        .find("\n## ")
        .map_or(section.len(), |end| end + 1)];
    toml_blocks(section)
}

/// Where the comment of a TOML line starts (a `#` outside strings).
fn comment_at(line: &str) -> Option<usize> {
    let mut quote = None;
    let mut escaped = false;
    for (at, c) in line.char_indices() {
        match quote {
            Some('"') if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' => return Some(at),
            None => {}
        }
    }
    None
}

/// What a line of a TOML block is.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Line {
    /// A table header; `true` when commented out.
    Header(bool),
    /// `key = value`; `true` when commented out.
    Key(bool),
    /// A comment of prose, a blank line, or the rest of a value.
    Other,
}

fn starts_with_key(text: &str) -> bool {
    let key_end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
        .unwrap_or(text.len());
    key_end > 0 && text[key_end..].trim_start().starts_with('=')
}

fn is_header(text: &str) -> bool {
    let text = match comment_at(text) {
        Some(at) => text[..at].trim_end(),
        None => text.trim_end(),
    };
    text.starts_with('[') && text.ends_with(']') && !text.contains('=')
}

fn kind(line: &str) -> Line {
    let text = line.trim_start();
    if let Some(commented) = text.strip_prefix('#') {
        let commented = commented.trim_start();
        if is_header(commented) {
            Line::Header(true)
        } else if starts_with_key(commented) {
            Line::Key(true)
        } else {
            Line::Other
        }
    } else if is_header(text) {
        Line::Header(false)
    } else if starts_with_key(text) {
        Line::Key(false)
    } else {
        Line::Other
    }
}

fn uncomment(line: &str) -> String {
    let text = line.trim_start();
    let text = text.strip_prefix('#').expect("a commented line");
    text.trim_start().to_owned()
}

/// Each commented `key = value` line of `block`, uncommented within its
/// table: alone in a table that is written, or with its whole table (the
/// header and its commented keys) in a table that is commented out, since
/// a table's keys may need each other (a certificate and its key).
fn uncommented_variants(block: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = block.lines().collect();
    let kinds: Vec<Line> = lines.iter().map(|line| kind(line)).collect();
    let mut variants = Vec::new();
    let mut header: Option<(usize, bool)> = None;
    for (at, kind) in kinds.iter().enumerate() {
        match kind {
            Line::Header(commented) => header = Some((at, *commented)),
            Line::Key(true) => {
                let mut chosen = BTreeSet::from([at]);
                if let Some((start, true)) = header {
                    chosen.insert(start);
                    let end = (start + 1..lines.len())
                        .find(|&i| matches!(kinds[i], Line::Header(_)))
                        .unwrap_or(lines.len());
                    chosen.extend((start + 1..end).filter(|&i| kinds[i] == Line::Key(true)));
                }
                let text: Vec<String> = lines
                    .iter()
                    .enumerate()
                    .map(|(i, line)| {
                        if chosen.contains(&i) {
                            uncomment(line)
                        } else {
                            (*line).to_owned()
                        }
                    })
                    .collect();
                variants.push((at + 1, text.join("\n") + "\n"));
            }
            _ => {}
        }
    }
    variants
}

/// The files and variables the documents name, made to exist, and the
/// text with each quoted path replaced by the file of the same name.
pub(crate) struct Files {
    dir: tempfile::TempDir,
    names: Vec<&'static str>,
}

/// The environment the documents' `token_env` names.
pub(crate) const ENV: [(&str, &str); 1] =
    [("RATEKEEPER_ADMIN_TOKEN", "another-token-of-32-characters!!")];

impl Files {
    pub(crate) fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = (certified.cert.pem(), certified.signing_key.serialize_pem());
        let files: Vec<(&'static str, String)> = vec![
            ("decisions", "a-token-of-thirty-two-characters\n".to_owned()),
            ("server.pem", cert.clone()),
            ("server.key", key.clone()),
            ("clients.pem", cert.clone()),
            ("redis-ca.pem", cert.clone()),
            ("client.pem", cert),
            ("client.key", key),
            // [limitador]'s file.
            (
                "limits.yaml",
                "- {namespace: ns, max_value: 1, seconds: 1, conditions: [], variables: []}\n"
                    .to_owned(),
            ),
        ];
        let mut names = Vec::new();
        for (name, text) in &files {
            std::fs::write(dir.path().join(name), text).unwrap();
            names.push(*name);
        }
        // [envoy] config_dir: envoyproxy/ratelimit's directory of files.
        std::fs::create_dir(dir.path().join("config")).unwrap();
        std::fs::write(
            dir.path().join("config/edge.yaml"),
            "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: minute\n      requests_per_unit: 10\n",
        )
        .unwrap();
        names.push("config");
        Files { dir, names }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `text` with each quoted path whose last part is one of the files'
    /// names (`"/etc/ratekeeper/server.pem"`, `"limits.yaml"`) replaced by
    /// that file.
    pub(crate) fn substitute(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('"') {
            out.push_str(&rest[..open]);
            let Some(close) = rest[open + 1..].find('"') else {
                rest = &rest[open..];
                break;
            };
            let quoted = &rest[open + 1..open + 1 + close];
            let last = quoted.rsplit('/').next().unwrap_or(quoted);
            if self.names.contains(&last) && (quoted.contains('/') || quoted.contains('.')) {
                out.push_str(&format!("{:?}", self.path(last).display().to_string()));
            } else {
                out.push('"');
                out.push_str(quoted);
                out.push('"');
            }
            rest = &rest[open + 2 + close..];
        }
        out.push_str(rest);
        out
    }

    /// Loads `text` as a configuration file, its paths substituted; a
    /// fragment without a limit is given one.
    pub(crate) fn load(&self, text: &str, place: &str) -> Result<Config, String> {
        let mut text = self.substitute(text);
        if !text.contains("[[limits]]") {
            text.push_str("\n[[limits]]\nname = \"a\"\nrate = \"1/s\"\nkey = [\"global\"]\n");
        }
        Config::from_toml_str_with_env(&text, place, ENV)
            .map_err(|error| format!("{error}\n{text}"))
    }
}

/// Every key of `table`, by its path (`listen.connections.backlog`,
/// `limits[].name`), with its value.
fn leaves(prefix: &str, table: &Table, out: &mut Vec<(String, Value)>) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Table(inner) => leaves(&path, inner, out),
            Value::Array(items) if items.iter().all(Value::is_table) && !items.is_empty() => {
                for item in items {
                    leaves(&format!("{path}[]"), item.as_table().unwrap(), out);
                }
            }
            _ => out.push((path, value.clone())),
        }
    }
}

fn parse(text: &str, place: &str) -> Table {
    text.parse::<Table>()
        .unwrap_or_else(|error| panic!("{place}: {error}\n{text}"))
}

/// Every key path a document's blocks name, written or commented out.
fn documented_paths(blocks: &[String]) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for (n, block) in blocks.iter().enumerate() {
        let mut texts = vec![block.clone()];
        texts.extend(
            uncommented_variants(block)
                .into_iter()
                .map(|(_, text)| text),
        );
        for text in texts {
            let mut out = Vec::new();
            leaves("", &parse(&text, &format!("block {}", n + 1)), &mut out);
            paths.extend(out.into_iter().map(|(path, _)| path));
        }
    }
    paths
}

#[test]
fn every_default_is_in_the_reference_with_its_value() {
    let blocks = toml_blocks(REFERENCE);
    assert!(blocks.len() >= 10, "{} blocks", blocks.len());
    // The keys as written (uncommented lines show the defaults).
    let mut written = Vec::new();
    let mut limits = Vec::new();
    for (n, block) in blocks.iter().enumerate() {
        let table = parse(block, &format!("docs/configuration.md block {}", n + 1));
        leaves("", &table, &mut written);
        if let Some(Value::Array(items)) = table.get("limits") {
            limits.extend(items.iter().filter_map(Value::as_table).cloned());
        }
    }
    let defaults = parse(DEFAULT_TOML, "DEFAULT_TOML");
    let mut printed = Vec::new();
    leaves("", &defaults, &mut printed);
    assert!(printed.len() >= 40, "{printed:#?}");
    let mut wrong = Vec::new();
    for (path, value) in &printed {
        if path.starts_with("limits[].") {
            continue;
        }
        let shown: Vec<&Value> = written
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, v)| v)
            .collect();
        if !shown.contains(&value) {
            wrong.push(format!("{path} = {value} (the reference shows {shown:?})"));
        }
    }
    assert!(
        wrong.is_empty(),
        "defaults missing from docs/configuration.md, or shown with another value:\n{}",
        wrong.join("\n")
    );
    // The built-in limit, key for key.
    let Some(Value::Array(builtin)) = defaults.get("limits") else {
        panic!("DEFAULT_TOML has a limit");
    };
    for limit in builtin {
        let limit = limit.as_table().unwrap();
        assert!(
            limits
                .iter()
                .any(|shown| limit.iter().all(|(k, v)| shown.get(k) == Some(v))),
            "the built-in limit, key for key, is in docs/configuration.md: {limit:#?}"
        );
    }
    // The keys the defaults print commented out ([access], config_dir).
    let paths = documented_paths(&blocks);
    let missing: Vec<String> = documented_paths(&[DEFAULT_TOML.to_owned()])
        .into_iter()
        .filter(|path| !paths.contains(path))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/configuration.md: {missing:?}"
    );
}

/// The fields of the configuration file's serde structs (`struct File...`
/// in src/config/ and its folders), by name.
fn file_fields() -> BTreeSet<String> {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src/config")];
    let mut fields = BTreeSet::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            // The foreign formats' folders hold YAML readers, not the TOML's.
            let foreign = path.ends_with("envoy") || path.ends_with("limitador");
            if path.is_dir() {
                if !foreign {
                    dirs.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let mut inside = false;
            let mut rename = None;
            for line in text.lines() {
                let line = line.trim();
                if line.starts_with("pub(crate) struct File") || line.starts_with("struct File") {
                    inside = line.ends_with('{');
                    continue;
                }
                if !inside {
                    continue;
                }
                if line == "}" {
                    inside = false;
                } else if let Some(name) = line
                    .strip_prefix("#[serde(rename = \"")
                    .and_then(|rest| rest.split('"').next())
                {
                    rename = Some(name.to_owned());
                } else if !line.starts_with("//") && !line.starts_with('#') {
                    let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
                    if let Some((name, _)) = line.split_once(": ") {
                        fields.insert(rename.take().unwrap_or_else(|| name.to_owned()));
                    }
                }
            }
        }
    }
    fields
}

#[test]
fn every_key_the_file_takes_is_in_the_reference() {
    let fields = file_fields();
    // The scan can fail: it finds the sections and their keys.
    for known in [
        "store",
        "max_keys",
        "backlog",
        "match",
        "token_env",
        "client_ca",
    ] {
        assert!(fields.contains(known), "{known} in {fields:?}");
    }
    let blocks = toml_blocks(REFERENCE);
    let mut names = BTreeSet::new();
    for path in documented_paths(&blocks) {
        names.extend(
            path.split('.')
                .map(|part| part.trim_end_matches("[]").to_owned()),
        );
    }
    for block in &blocks {
        // Keys inside inline tables (a descriptor's `except`).
        for line in block.lines() {
            let code = comment_at(line).map_or(line, |at| &line[..at]);
            for part in code.split(['{', ',']) {
                if let Some((key, _)) = part.split_once(" = ") {
                    names.insert(key.trim().to_owned());
                }
            }
        }
    }
    // `token` is read only to be refused with the fix.
    let missing: Vec<&String> = fields
        .iter()
        .filter(|field| *field != "token")
        .filter(|field| !names.contains(*field) && !REFERENCE.contains(&format!(".{field}]`")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys the configuration file takes that docs/configuration.md does not show: {missing:?}"
    );
}

#[test]
fn every_commented_line_of_the_reference_loads_uncommented() {
    let files = Files::new();
    let mut tried = 0;
    let mut failures = Vec::new();
    for (n, block) in toml_blocks(REFERENCE).iter().enumerate() {
        for (line, text) in uncommented_variants(block) {
            tried += 1;
            let place = format!("docs/configuration.md block {} line {line}", n + 1);
            if let Err(error) = files.load(&text, &place) {
                failures.push(format!("{place}: {error}"));
            }
        }
    }
    assert!(tried >= 6, "only {tried} commented lines");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn the_reference_has_one_key_per_line() {
    let mut crowded = Vec::new();
    for (n, block) in toml_blocks(REFERENCE).iter().enumerate() {
        for line in block.lines() {
            // A commented key line's own key is not in its comment.
            let text = match kind(line) {
                Line::Key(true) | Line::Header(true) => uncomment(line),
                _ => line.to_owned(),
            };
            let Some(at) = comment_at(&text) else {
                continue;
            };
            let comment = text[at + 1..].trim_start();
            let words: Vec<&str> = comment.split_whitespace().collect();
            if words.windows(2).any(|pair| {
                pair[1] == "="
                    && pair[0]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            }) {
                crowded.push(format!("block {}: {line}", n + 1));
            }
        }
    }
    assert!(
        crowded.is_empty(),
        "a second key in a comment breaks when the line is uncommented; one key per line:\n{}",
        crowded.join("\n")
    );
}

#[test]
fn uncommenting_finds_the_lines_and_their_tables() {
    let block = "[store]\nkind = \"memory\"\n# max_keys = 5   # a comment\n\
                 # [store.tls]   # a table\n# ca = \"a.pem\"\n# cert = \"b.pem\"\n# prose, not a key\n";
    let variants = uncommented_variants(block);
    let lines: Vec<usize> = variants.iter().map(|(line, _)| *line).collect();
    assert_eq!(lines, [3, 5, 6]);
    assert!(variants[0]
        .1
        .contains("\nmax_keys = 5   # a comment\n# [store.tls]"));
    // A key of a commented table comes with its table and its siblings.
    assert!(variants[1]
        .1
        .contains("\n[store.tls]   # a table\nca = \"a.pem\"\ncert = \"b.pem\"\n"));
    // A crowded line is caught by the parser once uncommented.
    let crowded = "[[limits]]\n# ipv4_prefix = 32   ipv6_prefix = 64\n";
    let (_, text) = &uncommented_variants(crowded)[0];
    assert!(text.parse::<Table>().is_err(), "{text}");
}
