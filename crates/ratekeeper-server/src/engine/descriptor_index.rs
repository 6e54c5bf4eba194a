//! The index [`matching::applicable`](super::matching::applicable) finds a
//! descriptor's native limits through, so that a request's matching cost
//! does not grow with the number of `[[limits]]`.
//!
//! Only limits whose `match` is for descriptors
//! ([`Reach::Descriptors`]) are indexed; a request's descriptor looks up:
//!
//! 1. its **group**: the limits of its domain whose descriptors have the
//!    same keys, in the same order (so the same number of entries), one
//!    hash look-up;
//! 2. in the group, the limits with at least one exact `value`, by their
//!    **shape** (which of their entries are exact): per shape, one hash
//!    look-up of the descriptor's values at those entries. A group holds at
//!    most one shape per subset of its entries, and in practice one or two;
//! 3. in the group, the limits whose every entry is a wildcard (no value,
//!    `*`, a pattern), by the **literal prefix** of the first entry's
//!    pattern (the text before its first `*`), or its literal suffix when
//!    it starts with `*`: one hash look-up per distinct length of the
//!    prefixes (suffixes) configured.
//!
//! What the look-ups find are the **candidates**; the full rule
//! ([`matching::matches`](super::matching::matches)) then keeps those that
//! apply, in the configuration's order. So a value that matches nothing
//! costs a few hash look-ups whatever the number of limits, and a value that
//! matches costs about the number of limits it could match.
//!
//! What stays linear: candidates that the look-ups cannot tell apart. The
//! limits of one group and shape with the same exact values differ only by
//! their wildcard entries, and are all candidates (`[user = "alice", path =
//! "/a*"]`, `[user = "alice", path = "/b*"]`…). All-wildcard limits whose
//! first entry has the same prefix (or, starting with `*`, the same
//! suffix) are too: every bare key (`[{ key = "k" }]`, with or without
//! `except`) and every `*x*` pattern of a group is a candidate of every
//! descriptor of the group. Configurations have few of each.
//!
//! Groups and value sets are keyed by a hash of their texts (seeded at
//! random per [`LimitSet`](super::LimitSet), as std's maps are): two texts
//! of one hash only give more candidates, which the full rule filters, so
//! a collision costs time, never a wrong answer.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;

use super::matching::Entry;
use super::ActiveLimit;
use crate::config::{DescriptorMatch, Reach, ValueMatch};

/// Positions of limits in the configuration's order, as
/// [`DescriptorIndex::candidates`] gives them.
pub(super) type Candidates = SmallVec<[usize; 8]>;

/// The native limits for descriptors, by domain, keys and values (see
/// the [module](self)). Built with the [`LimitSet`](super::LimitSet), and
/// replaced whole with it on a reload.
#[derive(Debug, Default)]
pub(super) struct DescriptorIndex {
    /// The seed of every hash below.
    hasher: RandomState,
    /// By the hash of a domain and a descriptor's keys in order.
    groups: HashMap<u64, Group, AlreadyHashed>,
}

/// The maps keyed by a hash that `DescriptorIndex::hasher` made: the
/// key is already a secret-seeded hash, so it is its own hash (a second
/// SipHash of it cost a fifth of a lookup).
#[derive(Clone, Copy, Debug, Default)]
struct AlreadyHashed;

impl BuildHasher for AlreadyHashed {
    type Hasher = OwnHash;

    fn build_hasher(&self) -> OwnHash {
        OwnHash(0)
    }
}

/// A `u64` key as its own hash.
#[derive(Debug)]
struct OwnHash(u64);

impl Hasher for OwnHash {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed here; any other input still hashes
        // whole, if slowly.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The limits of one domain whose descriptors have the same keys.
#[derive(Debug, Default)]
struct Group {
    /// The limits with an exact value, by which of their entries are
    /// exact.
    shapes: Vec<Shape>,
    /// The limits whose first entry's pattern has a literal prefix, and
    /// those with neither prefix nor suffix (the prefix "") — of limits
    /// whose every entry is a wildcard.
    prefixes: Affixes,
    /// Those whose first entry's pattern starts with `*` and ends with a
    /// literal suffix — of limits whose every entry is a wildcard.
    suffixes: Affixes,
}

/// The limits of a group with exact values at the same entries.
#[derive(Debug)]
struct Shape {
    /// The positions of the exact entries, ascending (at least one).
    exact: Box<[usize]>,
    /// By the hash of the exact values at those positions: the limits'
    /// positions in the configuration, ascending.
    by_values: HashMap<u64, Vec<usize>, AlreadyHashed>,
}

/// Limits by the literal start (or end) of their first entry's pattern.
#[derive(Debug, Default)]
struct Affixes {
    /// The limits whose text is empty (a pattern of wildcards only, such
    /// as a key with no value): they fit every value, without a look-up.
    empty: Vec<usize>,
    /// The distinct lengths of the texts below, ascending: the look-ups
    /// a value costs.
    lengths: Vec<usize>,
    /// By the literal text: the limits' positions, ascending.
    by_text: HashMap<Box<str>, Vec<usize>>,
}

impl Affixes {
    fn insert(&mut self, text: &str, position: usize) {
        if text.is_empty() {
            self.empty.push(position);
            return;
        }
        if let Err(at) = self.lengths.binary_search(&text.len()) {
            self.lengths.insert(at, text.len());
        }
        self.by_text.entry(text.into()).or_default().push(position);
    }

    /// Adds to `found` the limits whose text starts (`from_end`: ends)
    /// `value`.
    fn find(&self, value: &str, from_end: bool, found: &mut Candidates) {
        found.extend_from_slice(&self.empty);
        for &length in &self.lengths {
            if length > value.len() {
                break;
            }
            let text = match from_end {
                false => value.get(..length),
                true => value.get(value.len() - length..),
            };
            // `None`: not on a character boundary, so no text of that
            // length is there.
            if let Some(list) = text.and_then(|text| self.by_text.get(text)) {
                found.extend_from_slice(list);
            }
        }
    }
}

/// Where an all-wildcard limit is indexed, by its first entry.
enum Affix<'a> {
    Prefix(&'a str),
    Suffix(&'a str),
}

fn affix(first: &DescriptorMatch) -> Affix<'_> {
    match &first.value {
        ValueMatch::Glob(glob) => {
            let pattern = glob.pattern();
            let prefix = pattern.split('*').next().unwrap_or_default();
            let suffix = pattern.rsplit('*').next().unwrap_or_default();
            match prefix.is_empty() && !suffix.is_empty() {
                true => Affix::Suffix(suffix),
                false => Affix::Prefix(prefix),
            }
        }
        // Any value (and an exact one, which a limit indexed here does not
        // have): tried for every value.
        _ => Affix::Prefix(""),
    }
}

impl DescriptorIndex {
    /// The index of `limits`, the configuration's in its order.
    pub(super) fn new(limits: &[Arc<ActiveLimit>]) -> DescriptorIndex {
        let mut index = DescriptorIndex::default();
        for (position, limit) in limits.iter().enumerate() {
            let matcher = &limit.config().matcher;
            let (Reach::Descriptors, Some(domain)) = (matcher.reach(), matcher.domain.as_deref())
            else {
                continue;
            };
            let descriptors = &matcher.descriptors;
            let keys = descriptors.iter().map(|want| want.key.as_str());
            let hash = index.group_hash(domain, keys);
            let group = index.groups.entry(hash).or_default();
            let exact: Box<[usize]> = descriptors
                .iter()
                .enumerate()
                .filter(|(_, want)| !want.is_wildcard())
                .map(|(at, _)| at)
                .collect();
            if exact.is_empty() {
                match affix(&descriptors[0]) {
                    Affix::Prefix(prefix) => group.prefixes.insert(prefix, position),
                    Affix::Suffix(suffix) => group.suffixes.insert(suffix, position),
                }
                continue;
            }
            let values = exact.iter().map(|&at| match &descriptors[at].value {
                ValueMatch::Exact(value) => value.as_str(),
                _ => unreachable!("only exact entries are hashed"),
            });
            let hash = hash_values(&index.hasher, values);
            let shape = match group.shapes.iter().position(|shape| shape.exact == exact) {
                Some(at) => &mut group.shapes[at],
                None => {
                    group.shapes.push(Shape {
                        exact,
                        by_values: HashMap::default(),
                    });
                    group.shapes.last_mut().expect("just pushed")
                }
            };
            shape.by_values.entry(hash).or_default().push(position);
        }
        index
    }

    /// The positions of the limits that may apply to the descriptor
    /// `entries` of a request in `domain`, ascending: every limit that
    /// applies, and others that [`matching::matches`](super::matching::matches)
    /// must still check.
    pub(super) fn candidates<E: Entry>(&self, domain: &str, entries: &[E]) -> Candidates {
        let mut found = Candidates::new();
        if self.groups.is_empty() {
            return found;
        }
        let keys = entries.iter().map(Entry::key);
        let Some(group) = self.groups.get(&self.group_hash(domain, keys)) else {
            return found;
        };
        for shape in &group.shapes {
            // A group shared by a hash collision may have shapes longer
            // than the descriptor.
            if shape
                .exact
                .last()
                .is_some_and(|&last| last >= entries.len())
            {
                continue;
            }
            let values = shape.exact.iter().map(|&at| entries[at].value());
            if let Some(list) = shape.by_values.get(&hash_values(&self.hasher, values)) {
                found.extend_from_slice(list);
            }
        }
        if let Some(first) = entries.first() {
            group.prefixes.find(first.value(), false, &mut found);
            group.suffixes.find(first.value(), true, &mut found);
        }
        // Each list is in order; several are merged.
        found.sort_unstable();
        found
    }

    fn group_hash<'k>(&self, domain: &str, keys: impl ExactSizeIterator<Item = &'k str>) -> u64 {
        let mut hasher = self.hasher.build_hasher();
        domain.hash(&mut hasher);
        keys.len().hash(&mut hasher);
        for key in keys {
            key.hash(&mut hasher);
        }
        hasher.finish()
    }
}

fn hash_values<'v>(seed: &RandomState, values: impl Iterator<Item = &'v str>) -> u64 {
    let mut hasher = seed.build_hasher();
    for value in values {
        value.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::engine::matching::{applicable, applicable_by_walking};
    use crate::engine::LimitSet;
    use crate::Config;

    /// One limit per `match` table given (TOML inline tables).
    fn limits(matches: &[String]) -> LimitSet {
        let mut toml = String::new();
        for (index, matcher) in matches.iter().enumerate() {
            toml.push_str(&format!(
                "[[limits]]\nname = \"l{index}\"\nrate = \"10/minute\"\nkey = [\"global\"]\nmatch = {matcher}\n"
            ));
        }
        let config = Config::from_toml_str(&toml, "test.toml")
            .unwrap_or_else(|error| panic!("{error}\n{toml}"));
        LimitSet::new(&config.limits)
    }

    fn by_index(set: &LimitSet, domain: &str, entries: &[(String, String)]) -> Vec<String> {
        applicable(set, domain, entries)
            .map(|limit| limit.name().to_owned())
            .collect()
    }

    fn by_walking(set: &LimitSet, domain: &str, entries: &[(String, String)]) -> Vec<String> {
        applicable_by_walking(set, domain, entries)
            .map(|limit| limit.name().to_owned())
            .collect()
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|&(key, value)| (key.to_owned(), value.to_owned()))
            .collect()
    }

    #[test]
    fn exact_values_prefixes_suffixes_and_bare_keys_are_found_in_order() {
        let set = limits(&[
            r#"{ domain = "d", descriptors = [{ key = "f", value = "*.png" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "f", value = "a.png" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "f", value = "a*" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "f" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "f", value = "*.*" }] }"#.into(),
            r#"{ domain = "e", descriptors = [{ key = "f", value = "a.png" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "g", value = "a.png" }] }"#.into(),
            r#"{ domain = "d", descriptors = [{ key = "f" }, { key = "g", value = "x" }] }"#.into(),
        ]);
        let names = |domain, entries: &[(&str, &str)]| by_index(&set, domain, &pairs(entries));
        assert_eq!(
            names("d", &[("f", "a.png")]),
            ["l0", "l1", "l2", "l3", "l4"]
        );
        assert_eq!(names("d", &[("f", "b.png")]), ["l0", "l3", "l4"]);
        assert_eq!(names("d", &[("f", "ab")]), ["l2", "l3"]);
        assert_eq!(names("e", &[("f", "a.png")]), ["l5"]);
        assert_eq!(names("d", &[("f", "é"), ("g", "x")]), ["l7"]);
        assert!(names("d", &[("f", "a.png"), ("g", "y")]).is_empty());
        assert!(names("x", &[("f", "a.png")]).is_empty());
        assert!(names("d", &[]).is_empty());
    }

    #[test]
    fn a_value_that_matches_nothing_finds_no_candidate_among_many_limits() {
        let matches: Vec<String> = (0..1000)
            .map(|n| match n % 3 {
                0 => format!(r#"{{ domain = "d", descriptors = [{{ key = "k", value = "v{n}" }}] }}"#),
                1 => format!(r#"{{ domain = "d", descriptors = [{{ key = "k", value = "p{n}/*" }}] }}"#),
                _ => format!(
                    r#"{{ domain = "d", descriptors = [{{ key = "ip" }}, {{ key = "path", value = "/{n}" }}] }}"#
                ),
            })
            .collect();
        let set = limits(&matches);
        let candidates = |entries: &[(&str, &str)]| {
            set.descriptor_candidates("d", &pairs(entries))
                .map(|limit| limit.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert!(candidates(&[("k", "nothing")]).is_empty());
        assert!(candidates(&[("k", "p1000/x")]).is_empty());
        assert!(candidates(&[("ip", "10.0.0.1"), ("path", "/0")]).is_empty());
        assert_eq!(candidates(&[("k", "v300")]), ["l300"]);
        assert_eq!(candidates(&[("k", "p301/x")]), ["l301"]);
        assert_eq!(
            candidates(&[("ip", "10.0.0.1"), ("path", "/302")]),
            ["l302"]
        );
    }

    /// A descriptor entry of a limit, as TOML.
    fn entry() -> impl Strategy<Value = String> {
        let key = prop_oneof![3 => Just("k"), 1 => Just("j")];
        let exact = prop_oneof![Just("a"), Just("b"), Just("ab"), Just("é")];
        let pattern = prop_oneof![
            Just("*"),
            Just("a*"),
            Just("*b"),
            Just("a*b"),
            Just("*a*"),
            Just("ab*"),
            Just("*ab"),
            Just("é*"),
        ];
        let except = proptest::collection::vec(
            prop_oneof![Just("a"), Just("b*"), Just("*a"), Just("ab")],
            0..3,
        );
        prop_oneof![
            (key.clone(), exact)
                .prop_map(|(key, value)| format!(r#"{{ key = "{key}", value = "{value}" }}"#)),
            (key, proptest::option::of(pattern), except, any::<bool>()).prop_map(
                |(key, value, except, shared)| {
                    let mut text = format!(r#"{{ key = "{key}""#);
                    if let Some(value) = value {
                        text.push_str(&format!(r#", value = "{value}""#));
                    }
                    if !except.is_empty() {
                        let list: Vec<String> = except.iter().map(|e| format!("{e:?}")).collect();
                        text.push_str(&format!(", except = [{}]", list.join(", ")));
                    }
                    if shared {
                        text.push_str(", share_threshold = true");
                    }
                    text.push_str(" }");
                    text
                }
            ),
        ]
    }

    /// A limit's `match`, as TOML: mostly for descriptors, some for
    /// nothing or for HTTP requests.
    fn matcher() -> impl Strategy<Value = String> {
        let domain = prop_oneof![
            4 => Just(Some("d")),
            2 => Just(Some("e")),
            1 => Just(None),
        ];
        (
            domain,
            prop_oneof![
                6 => proptest::collection::vec(entry(), 1..3),
                1 => proptest::collection::vec(entry(), 0..4),
            ],
            proptest::bool::weighted(0.1),
        )
            .prop_map(|(domain, entries, http)| {
                let mut parts = Vec::new();
                if let Some(domain) = domain {
                    parts.push(format!(r#"domain = "{domain}""#));
                }
                if !entries.is_empty() {
                    parts.push(format!("descriptors = [{}]", entries.join(", ")));
                }
                if http {
                    parts.push(r#"methods = ["GET"]"#.to_owned());
                }
                format!("{{ {} }}", parts.join(", "))
            })
    }

    /// A request's descriptor.
    fn descriptor() -> impl Strategy<Value = Vec<(String, String)>> {
        let key = prop_oneof![3 => Just("k"), 1 => Just("j")];
        let value = prop_oneof![
            Just(""),
            Just("a"),
            Just("b"),
            Just("ab"),
            Just("ba"),
            Just("aab"),
            Just("abb"),
            Just("é"),
            Just("éb"),
        ];
        let entry = (key, value).prop_map(|(k, v)| (k.to_owned(), v.to_owned()));
        prop_oneof![
            6 => proptest::collection::vec(entry.clone(), 1..3),
            1 => proptest::collection::vec(entry, 0..4),
        ]
    }

    proptest! {
        #[test]
        fn the_index_finds_what_a_walk_over_every_limit_finds(
            matches in proptest::collection::vec(matcher(), 0..12),
            requests in proptest::collection::vec(
                (prop_oneof![4 => Just("d"), 2 => Just("e"), 1 => Just("f")], descriptor()),
                1..12,
            ),
        ) {
            let set = limits(&matches);
            for (domain, entries) in &requests {
                prop_assert_eq!(
                    by_index(&set, domain, entries),
                    by_walking(&set, domain, entries),
                    "{:?} in {} against {:#?}", entries, domain, matches
                );
            }
        }
    }
}
