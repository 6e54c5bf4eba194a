//! envoyproxy/ratelimit's YAML configuration, as its users write it: a
//! loader and the lookup of a request's descriptor.
//!
//! ```yaml
//! domain: edge                 # one domain per file
//! descriptors:
//!   - key: remote_address      # a descriptor entry's key...
//!     rate_limit:              # ...any value: one counter per value
//!       unit: minute           # second, minute, hour, day, week, month, year (any case)
//!       requests_per_unit: 100
//!   - key: path
//!     value: /api/*            # `*`: any run of characters, anywhere in the value
//!     share_threshold: true    # every matching value shares one counter
//!     rate_limit:
//!       unit: second
//!       requests_per_unit: 10
//!       policy: sliding_window # ratekeeper's extension, see below
//!   - key: client
//!     value: internal
//!     rate_limit:
//!       unlimited: true        # never limited
//!       name: internal
//!       replaces:              # in a request matching this, a limit named
//!         - name: per-client   # `per-client` is not applied
//!     shadow_mode: true        # counted, never refused
//!     descriptors: []          # nested descriptors: the next entry of the request
//! ```
//!
//! [`EnvoyConfig::from_yaml_str`] reads one file; [`EnvoyConfig::load_dir`]
//! reads a directory as envoyproxy/ratelimit reads its app directory
//! (`RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, with
//! `RUNTIME_WATCH_ROOT=false`): every file in it and in its
//! subdirectories, whatever its extension (its README says `*.yaml`, its
//! code reads them all), dot files included unless
//! [`LoadOptions::ignore_dot_files`] (its `RUNTIME_IGNOREDOTFILES`).
//! [`EnvoyConfig::load_runtime`] selects files as its default
//! `RUNTIME_WATCH_ROOT=true` does. A domain in two files is refused unless
//! [`LoadOptions::merge_domains`] (its `MERGE_DOMAIN_CONFIG`), which adds
//! the second file's top-level descriptors to the first's, a descriptor
//! defined in both still being a duplicate.
//!
//! # The `policy` extension
//!
//! envoyproxy/ratelimit counts in fixed windows aligned to the Unix epoch,
//! and so does a limit here unless its `rate_limit` says otherwise with
//! `policy:` `fixed_window` (the default), `sliding_window`,
//! `token_bucket`, `gcra` or `sliding_log`: the names of ratekeeper's own
//! configuration. envoyproxy/ratelimit itself refuses a file with
//! `policy`, as an unknown field.
//!
//! # Differences from envoyproxy/ratelimit
//!
//! The same files load and the same files fail, for the same reasons; the
//! messages differ (they name the file, line and column). Beyond that:
//!
//! - what it accepts and silently ignores loads here too, each with an
//!   [`EnvoyWarning`]: a field name in the wrong place (`unit` beside
//!   `key`, `shadow_mode` inside `rate_limit`), a repeated name (the last
//!   wins, as in yaml.v2), documents after the first, the `unit` or
//!   `requests_per_unit` of an unlimited limit;
//! - a file or directory that cannot be read fails the load, where its
//!   runtime loader logs and skips it;
//! - files are taken in a fixed order (see [`EnvoyConfig::load_dir_with`]),
//!   where it takes them in a Go map's order;
//! - files larger than [`MAX_ENVOY_FILE_BYTES`], collections nested deeper than
//!   [`MAX_DEPTH`](crate::yaml::MAX_DEPTH), and trees of more than
//!   [`MAX_NODES`](crate::yaml::MAX_NODES) nodes or (aliases expanded)
//!   twice the file's length are refused ([`YamlError`]);
//! - the parser is a YAML 1.2 one with YAML 1.1's scalars (see [`crate::yaml`]):
//!   syntax where the two versions differ may be read differently, and a
//!   syntax error may be placed elsewhere (at an unterminated quote's
//!   start, where yaml.v2 names the end of the stream).
//!
//! # Matching
//!
//! [`Domain::get_limit`] follows envoyproxy/ratelimit's `GetLimit`. It
//! gives the limit, the counter's key ([`CounterKey`]) and the stats name
//! ([`Matched::stats_key`]). Left to the caller (the service's gRPC
//! door), as in envoyproxy/ratelimit they are outside the tree:
//!
//! - a descriptor's own limit (`RateLimitDescriptor.limit` in the request)
//!   replaces the tree's answer whenever the domain exists, with the
//!   request's entries as the key and no shadow mode;
//! - counting: a fixed window is `Unit::seconds` long and starts at a
//!   multiple of it from the Unix epoch (the window's start, in seconds,
//!   ends its cache key); every hit is added, refused ones included, and a
//!   hit is refused once the count after it passes `requests_per_unit`;
//!   a hit weighs the descriptor's `hits_addend` when set (0 then only
//!   checks), else the request's, 0 counting as 1;
//! - across one request's descriptors: a limit whose `name` is in any
//!   matched limit's `replaces` is dropped (an unlimited limit's
//!   `replaces` count too); unlimited ones answer OK without counting;
//!   `shadow_mode` ones count but answer OK; with `quota_mode`, the
//!   request is refused only if every quota descriptor is over.

mod error;
mod model;
#[cfg(test)]
mod tests;
mod tree;
mod validate;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

mod import;
mod import_notes;
mod names;
pub use crate::yaml::{Position, YamlError};
pub use error::{EnvoyConfigError, EnvoyWarning};
pub use import::{import_dir, import_files, Imported, ImportedLimit};
pub use import_notes::{ImportNote, NoteKind};
pub use model::{FileRateLimit, Metadata, Unit};
pub use names::limit_name;
pub use tree::{CounterKey, Domain, Matched};

/// The largest file read: far above any real configuration, low enough
/// that a mistaken path (a log, a dump) is refused before it is parsed.
pub const MAX_ENVOY_FILE_BYTES: usize = 16 * 1024 * 1024;

/// How a set of files is loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Files with the same domain add their descriptors to it instead of
    /// being refused (envoyproxy/ratelimit's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Files and directories whose names start with `.` are skipped
    /// (envoyproxy/ratelimit's `RUNTIME_IGNOREDOTFILES`; off by default,
    /// as there).
    pub ignore_dot_files: bool,
}

impl LoadOptions {
    /// With [`merge_domains`](Self::merge_domains) set to `merge`.
    pub fn merge_domains(mut self, merge: bool) -> LoadOptions {
        self.merge_domains = merge;
        self
    }

    /// With [`ignore_dot_files`](Self::ignore_dot_files) set to `ignore`.
    pub fn ignore_dot_files(mut self, ignore: bool) -> LoadOptions {
        self.ignore_dot_files = ignore;
        self
    }
}

/// A loaded envoyproxy/ratelimit configuration: its domains.
#[derive(Debug, Default)]
pub struct EnvoyConfig {
    domains: HashMap<String, Domain>,
    warnings: Vec<EnvoyWarning>,
    /// How many limits the domains hold ([`FileRateLimit::id`]s are below).
    limit_count: usize,
    /// What the files held ([`EnvoyConfig::fingerprint`]).
    fingerprint: [u8; 32],
}

/// One entry of a request's descriptor: a key and its value. Implemented
/// for `(key, value)` pairs and for the doors' own entry types, which are
/// read without copying.
pub trait Entry {
    /// The entry's key, such as `remote_address`.
    fn key(&self) -> &str;
    /// Its value.
    fn value(&self) -> &str;
}

impl<K: AsRef<str>, V: AsRef<str>> Entry for (K, V) {
    fn key(&self) -> &str {
        self.0.as_ref()
    }
    fn value(&self) -> &str {
        self.1.as_ref()
    }
}

impl EnvoyConfig {
    /// One file's text; `file_name` is what errors call it.
    pub fn from_yaml_str(text: &str, file_name: &str) -> Result<EnvoyConfig, EnvoyConfigError> {
        EnvoyConfig::from_files([(file_name, text)], &LoadOptions::default())
    }

    /// Several files' `(name, text)`, in the order given (which decides
    /// which of two files with one domain is the duplicate).
    ///
    /// As envoyproxy/ratelimit does, every file is parsed and typed before
    /// any is added, so a malformed file is reported before a conflict
    /// between well-formed ones.
    pub fn from_files<'a, I>(
        files: I,
        options: &LoadOptions,
    ) -> Result<EnvoyConfig, EnvoyConfigError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut config = EnvoyConfig::default();
        let mut specs = Vec::new();
        for (name, text) in files {
            if text.len() > MAX_ENVOY_FILE_BYTES {
                return Err(EnvoyConfigError::TooLarge {
                    file: name.to_owned(),
                    size: text.len() as u64,
                    max: MAX_ENVOY_FILE_BYTES,
                });
            }
            let text = text.strip_prefix('\u{feff}').unwrap_or(text);
            let document = crate::yaml::parse(text, name)?;
            let mut reader = validate::Reader::new(name);
            let spec = reader.file(document.root.as_ref())?;
            config.warnings.append(&mut reader.warnings);
            for (line, column, key) in &document.repeated {
                config.warnings.push(EnvoyWarning {
                    at: Position::new(name, *line, *column),
                    message: format!("`{key}` is repeated in its map: this last one is used"),
                });
            }
            if let Some((line, column)) = document.extra_document {
                config.warnings.push(EnvoyWarning {
                    at: Position::new(name, line, column),
                    message:
                        "a second document: ignored, as envoyproxy/ratelimit reads only the first"
                            .to_owned(),
                });
            }
            specs.push(spec);
        }
        for spec in specs {
            if spec.domain.is_empty() {
                return Err(EnvoyConfigError::EmptyDomain { at: spec.domain_at });
            }
            if let Some(domain) = config.domains.get_mut(&spec.domain) {
                if !options.merge_domains {
                    return Err(EnvoyConfigError::DuplicateDomain {
                        at: spec.domain_at,
                        domain: spec.domain,
                        first: domain.position().clone(),
                    });
                }
                domain.insert(spec.descriptors, &mut config.warnings)?;
                continue;
            }
            let mut domain = Domain::new(spec.domain.clone(), spec.domain_at);
            domain.insert(spec.descriptors, &mut config.warnings)?;
            config.domains.insert(spec.domain, domain);
        }
        let mut names: Vec<String> = config.domains.keys().cloned().collect();
        names.sort();
        for name in names {
            if let Some(domain) = config.domains.get_mut(&name) {
                domain.number_limits(&mut config.limit_count);
            }
        }
        Ok(config)
    }

    /// Every file of a directory and its subdirectories, with the default
    /// [`LoadOptions`].
    pub fn load_dir(path: impl AsRef<Path>) -> Result<EnvoyConfig, EnvoyConfigError> {
        EnvoyConfig::load_dir_with(path, &LoadOptions::default())
    }

    /// Every file of a directory and its subdirectories, in lexical order
    /// (as Go's `filepath.Walk` visits them). A symbolic link to a file is
    /// read; one to a directory is not followed (`filepath.Walk` does not
    /// either), with a warning.
    pub fn load_dir_with(
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<EnvoyConfig, EnvoyConfigError> {
        let mut warnings = Vec::new();
        let files = list_files(path.as_ref(), options, &mut warnings)?;
        EnvoyConfig::load_files(&files, options, warnings)
    }

    /// The files envoyproxy/ratelimit reads with its default
    /// `RUNTIME_WATCH_ROOT=true`: it watches
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY`, names each file under it by its
    /// relative path with `/` turned into `.`, and keeps those whose name
    /// starts with `RUNTIME_APPDIRECTORY.`. That is every file under the
    /// app directory, and also any file or directory beside it whose name
    /// starts with the app directory's and a dot (`config.yaml` next to
    /// `config/`). With `RUNTIME_WATCH_ROOT=false` it reads the app
    /// directory alone: [`EnvoyConfig::load_dir_with`] on it.
    pub fn load_runtime(
        runtime_root: impl AsRef<Path>,
        subdirectory: impl AsRef<Path>,
        app_directory: &str,
        options: &LoadOptions,
    ) -> Result<EnvoyConfig, EnvoyConfigError> {
        let watched = runtime_root.as_ref().join(subdirectory);
        let mut warnings = Vec::new();
        let prefix = format!("{app_directory}.");
        let files: Vec<PathBuf> = list_files(&watched, options, &mut warnings)?
            .into_iter()
            .filter(|file| {
                let Ok(relative) = file.strip_prefix(&watched) else {
                    return false;
                };
                let name: Vec<String> = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                name.join(".").starts_with(&prefix)
            })
            .collect();
        EnvoyConfig::load_files(&files, options, warnings)
    }

    /// Reads `files` and loads them, `warnings` first.
    fn load_files(
        files: &[PathBuf],
        options: &LoadOptions,
        mut warnings: Vec<EnvoyWarning>,
    ) -> Result<EnvoyConfig, EnvoyConfigError> {
        let read = read_files(files)?;
        let mut texts = Vec::with_capacity(read.len());
        for (name, bytes) in &read {
            let text = match std::str::from_utf8(bytes) {
                Ok(text) => text,
                Err(error) => {
                    let valid = &bytes[..error.valid_up_to()];
                    let valid = std::str::from_utf8(valid).unwrap_or_default();
                    let line = valid.matches('\n').count() + 1;
                    let column = valid.rsplit('\n').next().unwrap_or("").chars().count() + 1;
                    return Err(EnvoyConfigError::Yaml(YamlError::Syntax {
                        at: Position::new(name, line, column),
                        message: "the file is not UTF-8".to_owned(),
                    }));
                }
            };
            texts.push((name.as_str(), text));
        }
        let mut config = EnvoyConfig::from_files(texts, options)?;
        warnings.append(&mut config.warnings);
        config.warnings = warnings;
        config.fingerprint = fingerprint(&read);
        Ok(config)
    }

    /// A digest of what [`EnvoyConfig::load_dir_with`] would read now:
    /// every file's path and contents. It changes when a file is edited,
    /// added or removed, and when a symbolic link is swapped to point
    /// elsewhere (a Kubernetes ConfigMap update), whatever the files'
    /// times say; a reload compares it with [`EnvoyConfig::fingerprint`].
    pub fn fingerprint_dir(
        path: impl AsRef<Path>,
        options: &LoadOptions,
    ) -> Result<[u8; 32], EnvoyConfigError> {
        let mut warnings = Vec::new();
        let files = list_files(path.as_ref(), options, &mut warnings)?;
        Ok(fingerprint(&read_files(&files)?))
    }

    /// The digest of the files this was loaded from (see
    /// [`EnvoyConfig::fingerprint_dir`]); zeros for a configuration made
    /// from text.
    pub fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }

    /// A domain by name.
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// Every domain, in no particular order.
    pub fn domains(&self) -> impl Iterator<Item = &Domain> {
        self.domains.values()
    }

    /// Whether no file defined a domain.
    pub fn is_empty(&self) -> bool {
        self.domains.is_empty()
    }

    /// The limit for a request's descriptor in `domain`: see
    /// [`Domain::get_limit`]. `None` for an unknown domain.
    pub fn get_limit<'a, E: Entry>(
        &'a self,
        domain: &str,
        entries: &'a [E],
    ) -> Option<Matched<'a>> {
        self.domains.get(domain)?.get_limit(entries)
    }

    /// How many descriptors have a limit, in every domain.
    pub fn limit_count(&self) -> usize {
        self.limit_count
    }

    /// Calls `f` with every limit of every domain and its path (see
    /// [`Domain::for_each_limit`]), domains by name: ids in order.
    pub fn for_each_limit(&self, mut f: impl FnMut(&str, &FileRateLimit)) {
        let mut domains: Vec<&Domain> = self.domains.values().collect();
        domains.sort_by(|a, b| a.name().cmp(b.name()));
        for domain in domains {
            domain.for_each_limit(&mut f);
        }
    }

    /// What was accepted but ignored.
    pub fn warnings(&self) -> &[EnvoyWarning] {
        &self.warnings
    }
}

/// Every file's name and bytes, each at most [`MAX_ENVOY_FILE_BYTES`].
fn read_files(files: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, EnvoyConfigError> {
    let mut read = Vec::with_capacity(files.len());
    for file in files {
        let failed = |source| EnvoyConfigError::Read {
            path: file.clone(),
            source,
        };
        let size = fs::metadata(file).map_err(failed)?.len();
        if size > MAX_ENVOY_FILE_BYTES as u64 {
            return Err(EnvoyConfigError::TooLarge {
                file: file.display().to_string(),
                size,
                max: MAX_ENVOY_FILE_BYTES,
            });
        }
        // The size read may be stale (the file grows between the two
        // calls): the cap holds on what is read too.
        let mut bytes = Vec::new();
        fs::File::open(file)
            .and_then(|opened| {
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(opened, MAX_ENVOY_FILE_BYTES as u64 + 1),
                    &mut bytes,
                )
            })
            .map_err(failed)?;
        if bytes.len() > MAX_ENVOY_FILE_BYTES {
            return Err(EnvoyConfigError::TooLarge {
                file: file.display().to_string(),
                size: bytes.len() as u64,
                max: MAX_ENVOY_FILE_BYTES,
            });
        }
        read.push((file.display().to_string(), bytes));
    }
    Ok(read)
}

/// SHA-256 over each file's name and contents, lengths first so that no
/// two different sets of files give the same stream.
fn fingerprint(files: &[(String, Vec<u8>)]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    for (name, bytes) in files {
        hasher.update((name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hasher.finalize().into()
}

/// The files `load_dir` reads, depth first in lexical order, a
/// subdirectory's files where the subdirectory stands among its siblings
/// (`filepath.Walk`'s order). envoyproxy/ratelimit then takes them from a
/// Go map, in no fixed order; a fixed one makes the file named in a
/// duplicate-domain error, and the merge order, the same on every load.
fn list_files(
    root: &Path,
    options: &LoadOptions,
    warnings: &mut Vec<EnvoyWarning>,
) -> Result<Vec<PathBuf>, EnvoyConfigError> {
    enum Item {
        Dir(PathBuf),
        File(PathBuf),
    }
    let mut files = Vec::new();
    // An explicit stack, the next item on top: a deep tree costs memory,
    // not the thread's stack.
    let mut pending = vec![Item::Dir(root.to_path_buf())];
    while let Some(item) = pending.pop() {
        let dir = match item {
            Item::File(path) => {
                files.push(path);
                continue;
            }
            Item::Dir(dir) => dir,
        };
        let read = |source| EnvoyConfigError::Read {
            path: dir.clone(),
            source,
        };
        let mut entries = Vec::new();
        for entry in fs::read_dir(&dir).map_err(read)? {
            let entry = entry.map_err(read)?;
            let kind = entry.file_type().map_err(read)?;
            entries.push((entry.file_name(), entry.path(), kind));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut items = Vec::with_capacity(entries.len());
        for (name, path, kind) in entries {
            if options.ignore_dot_files && name.to_string_lossy().starts_with('.') {
                continue;
            }
            if kind.is_dir() {
                items.push(Item::Dir(path));
            } else if kind.is_symlink() && fs::metadata(&path).is_ok_and(|m| m.is_dir()) {
                warnings.push(EnvoyWarning {
                    at: Position::new(&path.display().to_string(), 1, 1),
                    message: "a link to a directory: not followed".to_owned(),
                });
            } else {
                items.push(Item::File(path));
            }
        }
        pending.extend(items.into_iter().rev());
    }
    Ok(files)
}
