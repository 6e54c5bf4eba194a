//! Which configured limits apply to one descriptor (Envoy's, or the JSON
//! API's), in the model of Envoy's own rate limit service, and where their
//! keys come from.
//!
//! A limit applies to a descriptor of a request in domain `D` when:
//!
//! - its `match.domain` is `D` (a limit without a domain never applies to
//!   gRPC requests: Envoy always sends one);
//! - its `match.descriptors` has as many entries as the descriptor, and
//!   they match entry by entry, in order: the same key, and a value that
//!   [matches](crate::config::DescriptorMatch::matches) (no value: any value; a value
//!   with `*`s: as a pattern, each `*` any run of characters; otherwise
//!   exactly) and none of the entry's `except` values. So `[remote_address]` applies to
//!   `[("remote_address", "10.0.0.1")]` but not to
//!   `[("remote_address", "10.0.0.1"), ("path", "/login")]`, which needs a
//!   limit of its own, as nested descriptors do in Envoy's service;
//! - it names no HTTP methods or path prefix, which a descriptor does not
//!   have.
//!
//! A limit without `match.descriptors` never applies to a descriptor.
//!
//! Each value matched by a wildcard (no value, or a pattern) is counted
//! separately, as Envoy's service does, unless the entry has
//! `share_threshold`: the entry's value is added to the limit's key, by
//! its position, unless the key already holds it ([`key_parts`]). The parts of the key come from the descriptor
//! ([`DescriptorSource`]): `descriptor:KEY` from the entry with that key,
//! `peer` and `client_ip` from the `remote_address` entry Envoy's
//! `remote_address` action sends, and `global` from nothing.

use std::borrow::Cow;
use std::sync::Arc;

use super::{ActiveLimit, KeySource, LimitSet};
use crate::config::{KeyPart, LimitConfig, Match, Reach, Unreachable};

/// One entry of a descriptor, as a door received it: the door's own type
/// (Envoy's protobuf entry, the JSON API's), read without copying; the
/// same trait envoyproxy/ratelimit's files are matched by.
pub use ratekeeper_formats::envoy::Entry;

/// The descriptor key of the client's address, as Envoy's
/// `remote_address` rate limit action sends it.
pub const REMOTE_ADDRESS: &str = "remote_address";

/// Whether a limit's `matcher` applies to the descriptor `entries` of a
/// request in `domain` (see the module's documentation).
#[inline]
pub fn matches<E: Entry>(matcher: &Match, domain: &str, entries: &[E]) -> bool {
    mismatch(matcher, domain, entries).is_none()
}

/// Why a limit does not apply to a descriptor: the first rule of the
/// module's documentation it fails. Indices point into the limit's
/// `match.descriptors` and the descriptor, which hold the text, so that
/// finding it costs no allocation on the request path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mismatch {
    /// The limit names neither a domain nor descriptors: it is for HTTP
    /// requests.
    ForHttp,
    /// It names a domain but no descriptors, or descriptors but no
    /// domain: no request of any door matches it.
    Incomplete,
    /// It names HTTP methods or a path prefix as well as descriptors: no
    /// request of any door matches it.
    HttpConditions,
    /// Its domain is not the request's (domains are compared exactly).
    Domain,
    /// It matches descriptors of another number of entries (descriptors
    /// match as a whole).
    Length,
    /// The entry at this index has another key than the limit's.
    Key(usize),
    /// The entry at this index has a value the limit's entry does not
    /// match.
    Value(usize),
    /// The entry at this index has a value the limit's entry matches, but
    /// also one of its `except` values (the second index).
    Except(usize, usize),
}

/// The first reason a limit's `matcher` does not apply to the descriptor
/// `entries` of a request in `domain`; `None` when it applies. The rule
/// [`matches()`] and every explanation share.
#[inline]
pub fn mismatch<E: Entry>(matcher: &Match, domain: &str, entries: &[E]) -> Option<Mismatch> {
    match matcher.reach() {
        Reach::Descriptors => {}
        Reach::Http => return Some(Mismatch::ForHttp),
        Reach::Nowhere(Unreachable::HttpAndDescriptors) => return Some(Mismatch::HttpConditions),
        Reach::Nowhere(_) => return Some(Mismatch::Incomplete),
    }
    if matcher.domain.as_deref() != Some(domain) {
        return Some(Mismatch::Domain);
    }
    if matcher.descriptors.len() != entries.len() {
        return Some(Mismatch::Length);
    }
    for (index, (want, entry)) in matcher.descriptors.iter().zip(entries).enumerate() {
        if want.key != entry.key() {
            return Some(Mismatch::Key(index));
        }
        let value = entry.value();
        if !want.value.matches(value) {
            return Some(Mismatch::Value(index));
        }
        if let Some(except) = want.except.iter().position(|except| except.matches(value)) {
            return Some(Mismatch::Except(index, except));
        }
    }
    None
}

/// Why a limit does not apply to an HTTP request (the JSON API's, nginx's
/// `auth_request`, the proxy's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpMismatch {
    /// The limit names an Envoy domain or descriptors: it is for
    /// descriptors, which an HTTP request does not have.
    ForDescriptors,
    /// Its `methods` do not hold the request's method.
    Method,
    /// It names methods and the request gave none (the JSON API's
    /// `method` is optional).
    NoMethod,
    /// The request's path does not start with its `path_prefix`.
    Path,
    /// It names a path prefix and the request gave no path.
    NoPath,
}

/// The first reason a limit's `matcher` does not apply to an HTTP request
/// with `method` and `path`, either of which may be unknown (a condition
/// on something unknown does not hold); `None` when it applies.
pub fn http_mismatch(
    matcher: &Match,
    method: Option<&http::Method>,
    path: Option<&str>,
) -> Option<HttpMismatch> {
    if matcher.reach() != Reach::Http {
        return Some(HttpMismatch::ForDescriptors);
    }
    if !matcher.methods.is_empty() {
        match method {
            None => return Some(HttpMismatch::NoMethod),
            Some(method) if !matcher.methods.contains(method) => return Some(HttpMismatch::Method),
            Some(_) => {}
        }
    }
    match (&matcher.path_prefix, path) {
        (None, _) => None,
        (Some(_), None) => Some(HttpMismatch::NoPath),
        (Some(prefix), Some(path)) => {
            (!path.starts_with(prefix.as_str())).then_some(HttpMismatch::Path)
        }
    }
}

/// The limits among `limits` that apply to the descriptor `entries` of a
/// request in `domain`, in the configuration's order.
///
/// The limits are found through an index built with the set (by domain,
/// keys and values), so the cost does not grow with the number of limits,
/// only with the number that could apply (see the engine's
/// `descriptor_index` for the cases that stay linear); each is then
/// checked by [`matches()`].
pub fn applicable<'a, E: Entry>(
    limits: &'a LimitSet,
    domain: &'a str,
    entries: &'a [E],
) -> impl Iterator<Item = &'a Arc<ActiveLimit>> + 'a {
    limits
        .descriptor_candidates(domain, entries)
        .filter(move |limit| matches(&limit.config().matcher, domain, entries))
}

/// [`applicable`] by a walk over every limit: what the index must give.
#[cfg(test)]
pub(crate) fn applicable_by_walking<'a, E: Entry>(
    limits: &'a LimitSet,
    domain: &'a str,
    entries: &'a [E],
) -> impl Iterator<Item = &'a Arc<ActiveLimit>> + 'a {
    limits
        .iter()
        .filter(move |limit| matches(&limit.config().matcher, domain, entries))
}

/// Whether any limit of `limits` is in `domain`: Envoy's service only
/// honours a descriptor's limit override in a domain it knows.
pub fn knows_domain(limits: &LimitSet, domain: &str) -> bool {
    limits.has_native_domain(domain)
}

/// The parts of `limit`'s key for a descriptor: its configured key, then
/// a part for each entry it matches by a wildcard (any value or a
/// pattern), so that each value is counted separately, unless the entry
/// has `share_threshold` or the key already holds that entry's value
/// (`descriptor:KEY` holds the first entry with the key; `peer` and
/// `client_ip` the first `remote_address`, by its network).
///
/// The added parts are positional ([`KeyPart::Entry`]): with
/// `descriptor:KEY`, two wildcard entries of one key (`[k = "a*", k]`)
/// would both be keyed by the first one's value, and every value of the
/// second would share a counter. A key's bytes are made of its parts'
/// values only, so an entry keyed by position has the key it had when it
/// was keyed by name.
///
/// The entry that names a limit's plan (`plan_from = "descriptor:KEY"`) is
/// not part of the key: a key keeps its count when its plan changes.
pub fn key_parts(limit: &LimitConfig) -> Cow<'_, [KeyPart]> {
    let plan_entry = limit.plans.as_ref().and_then(|plans| match &plans.from {
        crate::config::PlanFrom::Descriptor(key) => Some(key.as_str()),
        crate::config::PlanFrom::Header { .. } | crate::config::PlanFrom::Table(_) => None,
    });
    key_parts_without(&limit.matcher, &limit.key, plan_entry)
}

/// [`key_parts`] of a `matcher` and configured `key`: a limit's, or a cap
/// on requests in flight's.
pub fn key_parts_of<'a>(matcher: &Match, parts: &'a [KeyPart]) -> Cow<'a, [KeyPart]> {
    key_parts_without(matcher, parts, None)
}

/// [`key_parts_of`], without the entries of key `skip`.
fn key_parts_without<'a>(
    matcher: &Match,
    parts: &'a [KeyPart],
    skip: Option<&str>,
) -> Cow<'a, [KeyPart]> {
    let descriptors = &matcher.descriptors;
    let covered = |index: usize, key: &str| {
        if skip == Some(key) {
            return true;
        }
        // Parts by name read the first entry with their key: they hold no
        // later one.
        let first = descriptors.iter().position(|want| want.key == key) == Some(index);
        first
            && parts.iter().any(|part| match part {
                KeyPart::Descriptor(have) => have == key,
                KeyPart::Peer(_) | KeyPart::ClientIp(..) => key == REMOTE_ADDRESS,
                _ => false,
            })
    };
    let mut extra = descriptors
        .iter()
        .enumerate()
        .filter(|(index, want)| {
            want.is_wildcard() && !want.share_threshold && !covered(*index, &want.key)
        })
        .map(|(index, _)| KeyPart::Entry(index))
        .peekable();
    if extra.peek().is_none() {
        return Cow::Borrowed(parts);
    }
    let mut parts = parts.to_vec();
    parts.extend(extra);
    Cow::Owned(parts)
}

/// The key parts a descriptor gives: `descriptor:KEY` from the first entry
/// with that key, [`KeyPart::Entry`] from the entry at its position, `peer`
/// and `client_ip` from its `remote_address` entry, `global` always;
/// routes and headers never.
#[derive(Clone, Copy, Debug)]
pub struct DescriptorSource<'a, E>(pub &'a [E]);

impl<E: Entry> DescriptorSource<'_, E> {
    fn value(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|entry| entry.key() == key)
            .map(Entry::value)
    }
}

impl<E: Entry> KeySource for DescriptorSource<'_, E> {
    fn part(&self, part: &KeyPart) -> Option<Cow<'_, [u8]>> {
        match part {
            KeyPart::Descriptor(key) => self.value(key).map(|v| Cow::Borrowed(v.as_bytes())),
            KeyPart::Entry(index) => self
                .0
                .get(*index)
                .map(|entry| Cow::Borrowed(entry.value().as_bytes())),
            // Keyed by its network, as at every door: an IPv6 client by its /64.
            KeyPart::Peer(prefixes) | KeyPart::ClientIp(_, prefixes) => self
                .value(REMOTE_ADDRESS)
                .map(|value| super::key::text(prefixes.key_of_text(value))),
            KeyPart::Global => Some(Cow::Borrowed(b"*")),
            KeyPart::Route | KeyPart::Header(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{compose_key, OrUnknown};
    use crate::Config;

    /// A descriptor entry of the tests.
    #[derive(Debug)]
    struct Pair(String, String);

    impl Entry for Pair {
        fn key(&self) -> &str {
            &self.0
        }
        fn value(&self) -> &str {
            &self.1
        }
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<Pair> {
        pairs
            .iter()
            .map(|&(key, value)| Pair(key.to_owned(), value.to_owned()))
            .collect()
    }

    /// One limit per `match` table given (TOML inline tables).
    fn limits(matches: &[&str]) -> LimitSet {
        LimitSet::new(&configs(matches))
    }

    fn configs(matches: &[&str]) -> Vec<LimitConfig> {
        let mut toml = String::new();
        for (index, matcher) in matches.iter().enumerate() {
            toml.push_str(&format!(
                "[[limits]]\nname = \"l{index}\"\nrate = \"10/minute\"\nkey = [\"global\"]\nmatch = {matcher}\n"
            ));
        }
        Config::from_toml_str(&toml, "test.toml").unwrap().limits
    }

    fn names(limits: &LimitSet, domain: &str, pairs: &[(&str, &str)]) -> Vec<String> {
        let entries = entries(pairs);
        applicable(limits, domain, &entries)
            .map(|limit| limit.name().to_owned())
            .collect()
    }

    #[test]
    fn the_domain_must_be_the_requests() {
        let set = limits(&[
            r#"{ domain = "edge", descriptors = [{ key = "k" }] }"#,
            r#"{ descriptors = [{ key = "k" }] }"#,
        ]);
        assert_eq!(names(&set, "edge", &[("k", "v")]), ["l0"]);
        assert!(names(&set, "other", &[("k", "v")]).is_empty());
    }

    #[test]
    fn limits_without_descriptors_or_with_http_conditions_never_apply() {
        let set = limits(&[
            r#"{ domain = "edge" }"#,
            r#"{ domain = "edge", descriptors = [{ key = "k" }], methods = ["GET"] }"#,
            r#"{ domain = "edge", descriptors = [{ key = "k" }], path_prefix = "/a" }"#,
        ]);
        assert!(names(&set, "edge", &[("k", "v")]).is_empty());
        assert!(names(&set, "edge", &[]).is_empty());
        let all = LimitSet::new(&[]);
        assert!(names(&all, "edge", &[("k", "v")]).is_empty());
    }

    #[test]
    fn values_match_exactly_by_prefix_or_any() {
        let set = limits(&[
            r#"{ domain = "d", descriptors = [{ key = "path", value = "/login" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "path", value = "/api/*" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "path" }] }"#,
        ]);
        assert_eq!(names(&set, "d", &[("path", "/login")]), ["l0", "l2"]);
        assert_eq!(names(&set, "d", &[("path", "/api/users")]), ["l1", "l2"]);
        assert_eq!(names(&set, "d", &[("path", "/api/")]), ["l1", "l2"]);
        assert_eq!(names(&set, "d", &[("path", "/api")]), ["l2"]);
        assert_eq!(names(&set, "d", &[("path", "/login2")]), ["l2"]);
        assert!(names(&set, "d", &[("other", "/login")]).is_empty());
    }

    #[test]
    fn nested_descriptors_match_entry_by_entry_with_the_same_length() {
        let set = limits(&[
            r#"{ domain = "d", descriptors = [{ key = "remote_address" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }] }"#,
        ]);
        assert_eq!(names(&set, "d", &[("remote_address", "10.0.0.1")]), ["l0"]);
        assert_eq!(
            names(
                &set,
                "d",
                &[("remote_address", "10.0.0.1"), ("path", "/login")]
            ),
            ["l1"]
        );
        // Order matters, and every entry must match.
        assert!(names(
            &set,
            "d",
            &[("path", "/login"), ("remote_address", "10.0.0.1")]
        )
        .is_empty());
        assert!(names(&set, "d", &[("remote_address", "10.0.0.1"), ("path", "/")]).is_empty());
        assert!(names(
            &set,
            "d",
            &[("remote_address", "1"), ("path", "/login"), ("x", "y")]
        )
        .is_empty());
    }

    #[test]
    fn the_domain_is_known_when_a_limit_names_it() {
        let set = limits(&[r#"{ domain = "edge", descriptors = [{ key = "k" }] }"#]);
        assert!(knows_domain(&set, "edge"));
        assert!(!knows_domain(&set, "other"));
    }

    fn key(limit: &LimitConfig, pairs: &[(&str, &str)]) -> String {
        let entries = entries(pairs);
        let parts = key_parts(limit);
        let key = compose_key(&parts, &OrUnknown(DescriptorSource(&entries))).unwrap();
        String::from_utf8(key).unwrap()
    }

    #[test]
    fn wildcard_values_are_counted_separately() {
        let set = configs(&[
            r#"{ domain = "d", descriptors = [{ key = "remote_address" }, { key = "path", value = "/login" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "path", value = "/api/*" }] }"#,
        ]);
        assert_eq!(
            key_parts(&set[0]).as_ref(),
            [KeyPart::Global, KeyPart::Entry(0)]
        );
        assert_eq!(
            key(
                &set[0],
                &[("remote_address", "10.0.0.1"), ("path", "/login")]
            ),
            "*|10.0.0.1"
        );
        assert_eq!(key(&set[1], &[("path", "/api/a")]), "*|/api/a");
        assert_ne!(
            key(&set[1], &[("path", "/api/a")]),
            key(&set[1], &[("path", "/api/b")])
        );
    }

    #[test]
    fn keys_come_from_the_descriptor() {
        let toml = r#"
[[limits]]
name = "per-user"
rate = "10/minute"
key = ["descriptor:user", "client_ip"]
match = { domain = "d", descriptors = [{ key = "user" }, { key = "remote_address" }] }

[[limits]]
name = "by-header"
rate = "10/minute"
key = ["header:x-api-key"]
match = { domain = "d", descriptors = [{ key = "plan", value = "free" }] }
"#;
        let set = Config::from_toml_str(toml, "test.toml").unwrap().limits;
        // Already in the key: not added twice.
        assert_eq!(key_parts(&set[0]).len(), 2);
        assert_eq!(
            key(
                &set[0],
                &[("user", "alice"), ("remote_address", "10.0.0.1")]
            ),
            "alice|10.0.0.1"
        );
        // An IPv6 remote_address is keyed by its /64, as at every door.
        assert_eq!(
            key(
                &set[0],
                &[("user", "alice"), ("remote_address", "2001:db8:1:2::7")]
            ),
            "alice|2001:db8:1:2::/64"
        );
        // A part the descriptor cannot give is shared by all as "unknown".
        assert_eq!(key(&set[1], &[("plan", "free")]), "unknown");
        let entries = entries(&[("user", "bob")]);
        let source = DescriptorSource(&entries);
        assert_eq!(source.part(&KeyPart::Route), None);
        assert_eq!(source.part(&KeyPart::Peer(Default::default())), None);
        assert_eq!(
            source.part(&KeyPart::Descriptor("user".into())).as_deref(),
            Some(&b"bob"[..])
        );
    }

    #[test]
    fn a_star_anywhere_is_any_run_of_characters() {
        let set = limits(&[
            r#"{ domain = "d", descriptors = [{ key = "file", value = "*.png" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "file", value = "img/*/v*.jpg" }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "file", value = "**" }] }"#,
        ]);
        assert_eq!(names(&set, "d", &[("file", "a.png")]), ["l0", "l2"]);
        assert_eq!(names(&set, "d", &[("file", ".png")]), ["l0", "l2"]);
        assert_eq!(names(&set, "d", &[("file", "a.png.gz")]), ["l2"]);
        assert_eq!(
            names(&set, "d", &[("file", "img/a/b/v2.jpg")]),
            ["l1", "l2"]
        );
        assert_eq!(names(&set, "d", &[("file", "img//v.jpg")]), ["l1", "l2"]);
        // A `*` inside the value was a literal before: it is a pattern now.
        assert_eq!(names(&set, "d", &[("file", "img/a/x.jpg")]), ["l2"]);
        assert_eq!(names(&set, "d", &[("file", "")]), ["l2"]);
    }

    #[test]
    fn globs_match_without_backtracking() {
        let glob = crate::config::Glob::new("a*ab*b");
        assert!(glob.matches("aabb"));
        assert!(!glob.matches("aab"));
        assert!(glob.matches("aXabYb"));
        assert!(!glob.matches("ab"));
        assert!(!glob.matches("aba"));
        // Overlapping first and last pieces are not one character twice.
        assert!(!crate::config::Glob::new("ab*ba").matches("aba"));
        assert!(crate::config::Glob::new("é*ü").matches("éü"));
        assert!(!crate::config::Glob::new("é*ü").matches("é"));
        // The classic exponential case for a backtracking matcher: each
        // piece is looked for once, left to right.
        let pattern = format!("{}b", "a*".repeat(64));
        let text = "a".repeat(100_000);
        assert!(!crate::config::Glob::new(&pattern).matches(&text));
        assert!(crate::config::Glob::new(&pattern).matches(&format!("{text}b")));
    }

    #[test]
    fn except_values_are_not_matched() {
        let set = limits(&[
            r#"{ domain = "d", descriptors = [{ key = "path", except = ["/login", "/api/*"] }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "path", value = "/api/*", except = ["/api/health"] }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "path", value = "*", except = ["*"] }] }"#,
        ]);
        assert_eq!(names(&set, "d", &[("path", "/home")]), ["l0"]);
        assert!(names(&set, "d", &[("path", "/login")]).is_empty());
        assert_eq!(names(&set, "d", &[("path", "/api/users")]), ["l1"]);
        assert!(names(&set, "d", &[("path", "/api/health")]).is_empty());
        assert_eq!(names(&set, "d", &[("path", "/login2")]), ["l0"]);
    }

    #[test]
    fn a_shared_threshold_is_one_counter_for_every_value() {
        let set = configs(&[
            r#"{ domain = "d", descriptors = [{ key = "user" }, { key = "file", value = "*.png", share_threshold = true }] }"#,
            r#"{ domain = "d", descriptors = [{ key = "file", value = "*.png" }] }"#,
        ]);
        assert_eq!(
            key_parts(&set[0]).as_ref(),
            [KeyPart::Global, KeyPart::Entry(0)]
        );
        assert_eq!(
            key(&set[0], &[("user", "al"), ("file", "a.png")]),
            key(&set[0], &[("user", "al"), ("file", "b.png")])
        );
        assert_ne!(
            key(&set[0], &[("user", "al"), ("file", "a.png")]),
            key(&set[0], &[("user", "bo"), ("file", "a.png")])
        );
        assert_ne!(
            key(&set[1], &[("file", "a.png")]),
            key(&set[1], &[("file", "b.png")])
        );
    }

    #[test]
    fn a_key_given_twice_is_counted_by_position() {
        let toml = r#"
[[limits]]
name = "twice"
rate = "10/minute"
key = ["global"]
match = { domain = "d", descriptors = [{ key = "k", value = "a" }, { key = "k" }] }

[[limits]]
name = "named"
rate = "10/minute"
key = ["descriptor:k"]
match = { domain = "d", descriptors = [{ key = "k" }, { key = "k" }] }

[[limits]]
name = "by-address"
rate = "10/minute"
key = ["peer"]
match = { domain = "d", descriptors = [{ key = "remote_address" }, { key = "remote_address" }] }
"#;
        let set = Config::from_toml_str(toml, "test.toml").unwrap().limits;
        // With `descriptor:k`, the second entry would be keyed by the
        // first's value, `a`, and every value of it would share a counter.
        assert_ne!(
            key(&set[0], &[("k", "a"), ("k", "x")]),
            key(&set[0], &[("k", "a"), ("k", "y")])
        );
        // The key's `descriptor:k` holds the first entry only.
        assert_eq!(
            key_parts(&set[1]).as_ref(),
            [KeyPart::Descriptor("k".into()), KeyPart::Entry(1)]
        );
        assert_ne!(
            key(&set[1], &[("k", "a"), ("k", "x")]),
            key(&set[1], &[("k", "a"), ("k", "y")])
        );
        assert_eq!(
            key_parts(&set[2]).as_ref(),
            [KeyPart::Peer(Default::default()), KeyPart::Entry(1)]
        );
        assert_ne!(
            key(
                &set[2],
                &[
                    ("remote_address", "10.0.0.1"),
                    ("remote_address", "10.0.0.2")
                ]
            ),
            key(
                &set[2],
                &[
                    ("remote_address", "10.0.0.1"),
                    ("remote_address", "10.0.0.3")
                ]
            )
        );
    }

    #[test]
    fn bad_extensions_are_refused_where_they_are() {
        // The error for `matcher`, and the place it should name: line 5,
        // the column of `at` in it.
        let check = |matcher: &str, at: &str, field: &str| {
            let toml = format!(
                "[[limits]]\nname = \"l\"\nrate = \"10/minute\"\nkey = [\"global\"]\nmatch = {matcher}\n"
            );
            let text = Config::from_toml_str(&toml, "test.toml")
                .unwrap_err()
                .to_string();
            let column = "match = ".len() + matcher.find(at).unwrap() + 1;
            let place = format!("test.toml:5:{column}: limits[0].match.descriptors[0].{field}:");
            assert!(text.starts_with(&place), "{text} (expected {place})");
        };
        check(
            r#"{ domain = "d", descriptors = [{ key = "k", value = "v", except = ["w"] }] }"#,
            r#"["w"]"#,
            "except",
        );
        check(
            r#"{ domain = "d", descriptors = [{ key = "k", except = ["w", ""] }] }"#,
            r#""""#,
            "except[1]",
        );
        check(
            r#"{ domain = "d", descriptors = [{ key = "k", value = "v", share_threshold = true }] }"#,
            "true",
            "share_threshold",
        );
        check(
            r#"{ domain = "d", descriptors = [{ key = "k", value = "" }] }"#,
            r#""" }"#,
            "value",
        );
    }
}
