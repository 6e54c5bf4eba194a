//! A domain's descriptor tree, and the lookup of a request's descriptor in
//! it with envoyproxy/ratelimit's rules.
//!
//! Each level keys its descriptors by `KEY_VALUE` (or `KEY` for one
//! without a value), in a hash map, as envoyproxy/ratelimit does; that
//! string is also what its duplicate check compares, so two descriptors
//! whose key and value join to the same text (`a` + `b_c` and `a_b` +
//! `c`) collide here as there. Values with a `*` are also kept in a list
//! per level, in the file's order, and tried in that order.

use std::collections::HashMap;

use super::error::{EnvoyConfigError, EnvoyWarning};
use super::model::FileRateLimit;
use super::validate::{check_limit, DescriptorSpec};
use super::Entry;
use crate::yaml::Position;
use crate::Glob;

/// One domain's descriptors.
#[derive(Debug)]
pub struct Domain {
    name: String,
    at: Position,
    root: Level,
}

#[derive(Debug, Default)]
struct Level {
    children: HashMap<String, Descriptor>,
    /// In the file's order, which decides between two that match.
    wildcards: Vec<Wildcard>,
    /// Positions in `wildcards` by the head of the wildcard's text (up to
    /// and including the first `_` before any `*`, such as `path_`): only
    /// those whose head starts a request's `KEY_VALUE` can match it, so a
    /// level of many keys' wildcards is not tried whole for each entry.
    by_head: HashMap<String, Vec<usize>>,
    /// Positions of the wildcards whose text has no `_` before its first
    /// `*` (a key with a `*` in it): tried for every entry.
    headless: Vec<usize>,
    /// The longest head: a request's `KEY_VALUE` is looked up at its `_`s
    /// up to this length only, so its work is bounded by the
    /// configuration, not by what a client sends.
    longest_head: usize,
}

#[derive(Debug)]
struct Descriptor {
    limit: Option<FileRateLimit>,
    share_threshold: bool,
    value_to_metric: bool,
    level: Level,
}

/// A `KEY_VALUE` with `*`s: the same glob as a native descriptor's value
/// ([`Glob`]), matched against the request's whole `KEY_VALUE`.
#[derive(Debug)]
struct Wildcard {
    glob: Glob,
}

impl Wildcard {
    fn new(composite: &str) -> Wildcard {
        Wildcard {
            glob: Glob::new(composite),
        }
    }

    /// The `KEY_VALUE` as written.
    fn composite(&self) -> &str {
        self.glob.pattern()
    }

    /// The text up to and including its first `_`, if that comes before
    /// the first `*` (see [`Level::by_head`]).
    fn head(&self) -> Option<&str> {
        let first = self.composite().split('*').next()?;
        first.find('_').map(|at| &first[..=at])
    }

    /// Each `*` stands for any run of characters, the empty one included.
    fn matches(&self, text: &str) -> bool {
        self.glob.matches(text)
    }
}

/// What a request's descriptor matched: the limit, and what its counter
/// is keyed by.
#[derive(Debug, Clone, PartialEq)]
pub struct Matched<'a> {
    /// The limit that applies.
    pub limit: &'a FileRateLimit,
    /// The counter's key.
    pub counter_key: CounterKey<'a>,
    /// Per entry, for [`Matched::stats_key`].
    metric: Vec<MetricPart<'a>>,
}

/// How one entry of the request shows in the stats key.
#[derive(Debug, Clone, PartialEq)]
struct MetricPart<'a> {
    /// The request's value.
    raw: &'a str,
    /// The value shown when the limit has no `detailed_metric`; empty for
    /// none.
    shown: &'a str,
    /// Matched by a `share_threshold` wildcard.
    shared: bool,
}

impl Matched<'_> {
    /// The name envoyproxy/ratelimit gives this limit's stats
    /// (`DOMAIN.KEY_VALUE.KEY...`, its counters then adding
    /// `.total_hits`, `.over_limit`...), so that dashboards built on its
    /// metrics keep working:
    ///
    /// - with `detailed_metric`, every entry as `KEY_VALUE` (the request's
    ///   value), except that a `share_threshold` wildcard shows as its
    ///   pattern;
    /// - without, each entry as `KEY` alone when it matched a descriptor
    ///   without a value, as `KEY_PATTERN` when it matched a wildcard, and
    ///   as `KEY_VALUE` when it matched an exact value, or when its
    ///   descriptor has `value_to_metric` (which a shared wildcard's
    ///   pattern still overrides).
    pub fn stats_key(&self) -> String {
        let mut key = String::from(self.counter_key.domain);
        let detailed = self.limit.detailed_metric;
        let any_shared = self.metric.iter().any(|part| part.shared);
        for ((name, counted), part) in self.counter_key.parts.iter().zip(&self.metric) {
            key.push('.');
            key.push_str(name);
            let value = match (detailed, any_shared) {
                (true, true) if part.shared => Some(*counted),
                (true, true) => (!part.raw.is_empty()).then_some(part.raw),
                // The detailed key keeps `KEY_` for an empty value.
                (true, false) => Some(part.raw),
                (false, _) => (!part.shown.is_empty()).then_some(part.shown),
            };
            if let Some(value) = value {
                key.push('_');
                key.push_str(value);
            }
        }
        key
    }
}

/// What envoyproxy/ratelimit keys a counter by: the domain and every entry
/// of the request's descriptor, in order, with its value, except where a
/// `share_threshold` wildcard matched it: there the wildcard's value
/// (`files/*`) stands instead, so that all the values it matches share one
/// counter. The window's start is not part of it: the engine adds it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CounterKey<'a> {
    /// The domain.
    pub domain: &'a str,
    /// `(key, value)` of each entry, the value replaced by its wildcard
    /// for a shared threshold.
    pub parts: Vec<(&'a str, &'a str)>,
}

impl CounterKey<'_> {
    /// The key as envoyproxy/ratelimit writes it before the window's start:
    /// `PREFIX` `DOMAIN_` then `KEY_VALUE_` per entry. With the window
    /// start appended, this is its cache key, byte for byte, so that the
    /// two can share a Redis during a migration.
    pub fn envoy_cache_key(&self, prefix: &str) -> String {
        let mut key = String::with_capacity(
            prefix.len()
                + self.domain.len()
                + 1
                + self
                    .parts
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 2)
                    .sum::<usize>(),
        );
        key.push_str(prefix);
        key.push_str(self.domain);
        key.push('_');
        for (k, v) in &self.parts {
            key.push_str(k);
            key.push('_');
            key.push_str(v);
            key.push('_');
        }
        key
    }
}

impl Domain {
    pub(crate) fn new(name: String, at: Position) -> Domain {
        Domain {
            name,
            at,
            root: Level::default(),
        }
    }

    /// The domain's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the (first) file defining it names it.
    pub fn position(&self) -> &Position {
        &self.at
    }

    /// Adds a file's top-level descriptors, checking each as
    /// envoyproxy/ratelimit does, in its order.
    pub(crate) fn insert(
        &mut self,
        descriptors: Vec<DescriptorSpec>,
        warnings: &mut Vec<EnvoyWarning>,
    ) -> Result<(), EnvoyConfigError> {
        let path = format!("{}.", self.name);
        self.root.insert(&path, descriptors, warnings)
    }

    /// The limit for a request's descriptor (its entries in order), or
    /// `None`.
    ///
    /// At each level, in order: the entry's exact `KEY_VALUE`, then the
    /// level's wildcards in the file's order, then the bare `KEY`. The
    /// walk stops where nothing matches or the matched descriptor has no
    /// children; a limit applies only if it is on the descriptor matched by
    /// the request's last entry. So a request shorter than the tree takes
    /// the limit of the node it ends on (if that has one), and a longer one
    /// matches nothing unless the tree goes as deep.
    pub fn get_limit<'a, E: Entry>(&'a self, entries: &'a [E]) -> Option<Matched<'a>> {
        let mut level = &self.root;
        let mut composite = String::new();
        // Grown on the first match only: most descriptors of a request
        // miss at the first level and should cost no allocation for it.
        let mut metric: Vec<MetricPart<'a>> = Vec::new();
        let mut found: Option<&'a FileRateLimit> = None;
        for (index, entry) in entries.iter().enumerate() {
            let (key, value) = (entry.key(), entry.value());
            composite.clear();
            composite.push_str(key);
            composite.push('_');
            composite.push_str(value);
            let mut next = level.children.get(composite.as_str());
            let mut wildcard = None;
            if next.is_none() {
                if let Some(w) = level.wildcard(&composite) {
                    next = level.children.get(w.composite());
                    wildcard = Some(w);
                }
            }
            let matched_value = next.is_some();
            if next.is_none() {
                next = level.children.get(key);
            }
            let Some(descriptor) = next else {
                break;
            };
            let mut part = MetricPart {
                raw: value,
                shown: "",
                shared: false,
            };
            match wildcard {
                Some(w) => {
                    // The wildcard's value part, as envoyproxy/ratelimit
                    // takes it: the composite without `KEY_` when it
                    // starts with it.
                    let pattern = w
                        .composite()
                        .strip_prefix(key)
                        .and_then(|rest| rest.strip_prefix('_'))
                        .unwrap_or(w.composite());
                    if descriptor.share_threshold {
                        part.shared = true;
                        part.shown = pattern;
                    } else if descriptor.value_to_metric {
                        part.shown = value;
                    } else {
                        part.shown = pattern;
                    }
                }
                None if matched_value => part.shown = value,
                None if descriptor.value_to_metric => part.shown = value,
                None => {}
            }
            metric.push(part);
            if index + 1 == entries.len() {
                found = descriptor.limit.as_ref();
            }
            if descriptor.level.children.is_empty() {
                break;
            }
            level = &descriptor.level;
        }
        let limit = found?;
        // A limit is found only on the last entry, so every entry has its
        // part.
        let parts = entries
            .iter()
            .zip(&metric)
            .map(|(entry, part)| {
                let value = if part.shared { part.shown } else { part.raw };
                (entry.key(), value)
            })
            .collect();
        Some(Matched {
            limit,
            counter_key: CounterKey {
                domain: &self.name,
                parts,
            },
            metric,
        })
    }
}

impl Domain {
    /// Numbers every limit of the domain from `*next` on, in the order of
    /// [`Domain::for_each_limit`], and moves `*next` past them.
    pub(crate) fn number_limits(&mut self, next: &mut usize) {
        self.root.number_limits(next);
    }

    /// Calls `f` with every descriptor that has a limit: its path
    /// (`DOMAIN.KEY_VALUE.KEY`, as envoyproxy/ratelimit names it in its
    /// duplicate errors) and the limit, depth first, each level's
    /// descriptors in the order of their `KEY_VALUE`.
    pub fn for_each_limit(&self, mut f: impl FnMut(&str, &FileRateLimit)) {
        let mut path = self.name.clone();
        self.root.for_each_limit(&mut path, &mut f);
    }
}

impl Level {
    /// The first wildcard, in the file's order, matching `composite`.
    fn wildcard(&self, composite: &str) -> Option<&Wildcard> {
        if self.wildcards.is_empty() {
            return None;
        }
        let mut best: Option<usize> = None;
        let mut consider = |positions: &[usize]| {
            for &at in positions {
                if best.is_some_and(|best| best < at) {
                    return;
                }
                if self.wildcards[at].matches(composite) {
                    best = Some(at);
                    return;
                }
            }
        };
        consider(&self.headless);
        let heads = composite
            .char_indices()
            .take_while(|&(at, _)| at < self.longest_head)
            .filter(|&(_, c)| c == '_');
        for (at, _) in heads {
            if let Some(positions) = self.by_head.get(&composite[..=at]) {
                consider(positions);
            }
        }
        best.map(|at| &self.wildcards[at])
    }

    /// Adds `wildcard`, last in the file's order.
    fn add_wildcard(&mut self, wildcard: Wildcard) {
        let at = self.wildcards.len();
        match wildcard.head() {
            Some(head) => {
                self.longest_head = self.longest_head.max(head.len());
                self.by_head.entry(head.to_owned()).or_default().push(at);
            }
            None => self.headless.push(at),
        }
        self.wildcards.push(wildcard);
    }

    /// The level's descriptors, in the order of their `KEY_VALUE`: a
    /// walk that is the same on every load, whatever the hash map's.
    fn sorted(&self) -> Vec<(&String, &Descriptor)> {
        let mut children: Vec<_> = self.children.iter().collect();
        children.sort_by(|a, b| a.0.cmp(b.0));
        children
    }

    fn number_limits(&mut self, next: &mut usize) {
        let mut composites: Vec<String> = self.children.keys().cloned().collect();
        composites.sort();
        for composite in composites {
            let Some(descriptor) = self.children.get_mut(&composite) else {
                continue;
            };
            if let Some(limit) = &mut descriptor.limit {
                limit.id = *next;
                *next += 1;
            }
            descriptor.level.number_limits(next);
        }
    }

    fn for_each_limit(&self, path: &mut String, f: &mut impl FnMut(&str, &FileRateLimit)) {
        for (composite, descriptor) in self.sorted() {
            let len = path.len();
            path.push('.');
            path.push_str(composite);
            if let Some(limit) = &descriptor.limit {
                f(path, limit);
            }
            descriptor.level.for_each_limit(path, f);
            path.truncate(len);
        }
    }

    fn insert(
        &mut self,
        path: &str,
        descriptors: Vec<DescriptorSpec>,
        warnings: &mut Vec<EnvoyWarning>,
    ) -> Result<(), EnvoyConfigError> {
        for spec in descriptors {
            if spec.key.is_empty() {
                return Err(EnvoyConfigError::EmptyKey { at: spec.at });
            }
            let composite = if spec.value.is_empty() {
                spec.key.clone()
            } else {
                format!("{}_{}", spec.key, spec.value)
            };
            let full = format!("{path}{composite}");
            if self.children.contains_key(&composite) {
                return Err(EnvoyConfigError::DuplicateDescriptor {
                    at: spec.key_at,
                    path: full,
                });
            }
            let limit = match &spec.rate_limit {
                Some(limit) => Some(check_limit(limit, &spec, warnings)?),
                None => None,
            };
            let wild = composite.contains('*');
            if spec.share_threshold && !wild {
                return Err(EnvoyConfigError::ShareThresholdWithoutWildcard {
                    at: spec.at,
                    key: composite,
                });
            }
            if wild {
                self.add_wildcard(Wildcard::new(&composite));
            }
            let mut descriptor = Descriptor {
                limit,
                share_threshold: spec.share_threshold,
                value_to_metric: spec.value_to_metric,
                level: Level::default(),
            };
            descriptor
                .level
                .insert(&format!("{full}."), spec.descriptors, warnings)?;
            self.children.insert(composite, descriptor);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wildcard(pattern: &str, text: &str) -> bool {
        Wildcard::new(pattern).matches(text)
    }

    /// The level's choice against trying every wildcard in order.
    #[test]
    fn the_head_index_finds_what_a_scan_finds() {
        let patterns = [
            "a_b*", "a_*", "a_b_*c", "ab*", "*_x", "a*_b", "k_v*", "a_b_c*", "_*", "a_bc*",
        ];
        let mut level = Level::default();
        for pattern in patterns {
            level.add_wildcard(Wildcard::new(pattern));
        }
        let texts = [
            "a_b", "a_bc", "a_b_c", "a_b_cc", "abx", "q_x", "a_q_b", "k_v", "k_w", "_", "a_", "ab",
            "a_b_x_c", "",
        ];
        for text in texts {
            let scan = level.wildcards.iter().find(|w| w.matches(text));
            let found = level.wildcard(text);
            assert_eq!(
                found.map(Wildcard::composite),
                scan.map(Wildcard::composite),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        /// Over words of `a`, `b`, `_` and `*`, where heads collide and
        /// nest, the index agrees with a scan in the file's order.
        #[test]
        fn the_head_index_agrees_with_a_scan(
            patterns in proptest::collection::vec("[ab_*]{0,6}", 0..12),
            texts in proptest::collection::vec("[ab_]{0,8}", 1..12),
        ) {
            let mut level = Level::default();
            for pattern in patterns.iter().filter(|p| p.contains('*')) {
                level.add_wildcard(Wildcard::new(pattern));
            }
            for text in &texts {
                let scan = level.wildcards.iter().find(|w| w.matches(text));
                proptest::prop_assert_eq!(
                    level.wildcard(text).map(Wildcard::composite),
                    scan.map(Wildcard::composite)
                );
            }
        }
    }

    #[test]
    fn wildcards_match_runs_in_order() {
        assert!(wildcard("k_foo*", "k_foo"));
        assert!(wildcard("k_foo*", "k_foobar"));
        assert!(!wildcard("k_foo*", "k_fo"));
        assert!(wildcard("k_bar*b", "k_barb"));
        assert!(wildcard("k_bar*b", "k_bar123b"));
        assert!(!wildcard("k_bar*b", "k_bara"));
        assert!(!wildcard("k_ab*ba", "k_aba"));
        assert!(wildcard("k_foo*bar*baz", "k_foo1bar2baz"));
        assert!(wildcard("k_foo*bar*baz", "k_foobarbaz"));
        assert!(!wildcard("k_foo*bar*baz", "k_foo123baz"));
        assert!(wildcard("k_*", "k_"));
        assert!(wildcard("k_**", "k_x"));
        assert!(wildcard("k_é*ü", "k_éaü"));
        assert!(!wildcard("k_é*ü", "k_é"));
    }
}
