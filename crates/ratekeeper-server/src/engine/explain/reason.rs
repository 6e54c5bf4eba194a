//! Why a limit does not apply to a request, in words a newcomer can act
//! on.

use std::fmt;

use serde::Serialize;

/// Why one limit does not apply to a request (or to one of its
/// descriptors).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The limit has no `match.domain` or `match.descriptors`: it is for
    /// HTTP requests, and the request is a descriptor.
    ForHttp,
    /// The limit names an Envoy domain or descriptors, and the request is
    /// an HTTP request, which has none.
    ForDescriptors,
    /// The limit names a domain without descriptors, or descriptors
    /// without a domain: no door's request matches it.
    Incomplete,
    /// The limit names HTTP methods or a path as well as descriptors: no
    /// door's request matches it.
    HttpConditions,
    /// The limit's domain is not the request's.
    Domain {
        /// The limit's.
        want: String,
        /// The request's.
        got: String,
    },
    /// The limit matches descriptors of another length.
    Length {
        /// The entries the limit's descriptor has.
        want: usize,
        /// The entries the request's descriptor has.
        got: usize,
    },
    /// An entry has another key than the limit's.
    Key {
        /// The entry's position, from 0.
        index: usize,
        /// The limit's key there.
        want: String,
        /// The request's.
        got: String,
    },
    /// An entry's value is not one the limit's entry matches.
    Value {
        /// The entry's position, from 0.
        index: usize,
        /// The entry's key.
        key: String,
        /// What the limit's entry matches (a value, or a pattern).
        want: String,
        /// The request's value.
        got: String,
    },
    /// An entry's value is one of the limit's entry's `except` values.
    Except {
        /// The entry's position, from 0.
        index: usize,
        /// The entry's key.
        key: String,
        /// The `except` value (or pattern) it matched.
        except: String,
        /// The request's value.
        got: String,
    },
    /// The request's method is not among the limit's `methods`.
    Method {
        /// The limit's methods.
        want: Vec<String>,
        /// The request's.
        got: String,
    },
    /// The request's path does not start with the limit's `path_prefix`.
    Path {
        /// The limit's prefix.
        prefix: String,
        /// The request's path.
        got: String,
    },
    /// envoyproxy/ratelimit's files define the domain, but no rule of
    /// theirs matches the descriptor as a whole.
    NoRuleInFiles {
        /// How many of the descriptor's first entries do lead to a rule
        /// with a limit (0: none), a hint at what was meant.
        rule_for_first: usize,
    },
    /// A condition of a Limitador limit does not hold.
    Condition {
        /// The condition, as written in the file.
        condition: String,
    },
    /// A variable of a Limitador limit is in none of the descriptors.
    Variable {
        /// The variable, as written in the file.
        variable: String,
    },
}

const WHOLE: &str = "descriptors match whole, as in envoyproxy/ratelimit";

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ForHttp => f.write_str(
                "it has no match.domain or match.descriptors, so it limits HTTP requests \
                 (the JSON API by method and path, nginx's auth_request, the proxy) and \
                 never an Envoy descriptor; give it match.domain and match.descriptors \
                 to limit gRPC requests",
            ),
            Reason::ForDescriptors => f.write_str(
                "it names an Envoy domain or descriptors, which an HTTP request does not \
                 have; it limits gRPC requests and the JSON API's \"descriptors\"",
            ),
            Reason::Incomplete => f.write_str(
                "it names a domain without descriptors, or descriptors without a domain: \
                 no request of any door matches it",
            ),
            Reason::HttpConditions => f.write_str(
                "it names HTTP methods or a path prefix beside descriptors: no request of \
                 any door has both, so nothing matches it",
            ),
            Reason::Domain { want, got } if want.eq_ignore_ascii_case(got) => write!(
                f,
                "its domain is {want:?}, the request's {got:?}: domains are compared \
                 exactly, case included, as envoyproxy/ratelimit compares them"
            ),
            Reason::Domain { want, got } => {
                write!(f, "its domain is {want:?}, the request's {got:?}")
            }
            Reason::Length { want, got } => write!(
                f,
                "it matches descriptors of {want} entr{}, this one has {got}: {WHOLE}; to \
                 limit this descriptor, give a limit its {got} entries \
                 (match.descriptors lists each, in order)",
                if *want == 1 { "y" } else { "ies" }
            ),
            Reason::Key { index, want, got } => write!(
                f,
                "entry {index} is {got:?}, the limit wants {want:?} there ({WHOLE}, entry \
                 by entry and in order)"
            ),
            Reason::Value {
                index,
                key,
                want,
                got,
            } => write!(
                f,
                "entry {index} ({key}) is {got:?}, the limit matches {want:?} (values match \
                 exactly, or by their `*` pattern; leave the value out to match any)"
            ),
            Reason::Except {
                index,
                key,
                except,
                got,
            } => write!(
                f,
                "entry {index} ({key}) is {got:?}, which the limit's except {except:?} leaves \
                 to more specific limits"
            ),
            Reason::Method { want, got } => {
                write!(f, "its methods are {}, the request's {got}", want.join(" "))
            }
            Reason::Path { prefix, got } => write!(
                f,
                "its path prefix is {prefix:?}, the request's path {got:?} (paths match by \
                 their start, case included)"
            ),
            Reason::NoRuleInFiles { rule_for_first: 0 } => write!(
                f,
                "no rule of the domain's files matches this descriptor ({WHOLE}: each \
                 entry must match a nested descriptor, and the last one must have a \
                 rate_limit)"
            ),
            Reason::NoRuleInFiles { rule_for_first } => write!(
                f,
                "no rule of the domain's files matches this descriptor, though one matches \
                 its first {rule_for_first} entr{} ({WHOLE}: the rule's nested \
                 descriptors must cover every entry)",
                if *rule_for_first == 1 { "y" } else { "ies" }
            ),
            Reason::Condition { condition } => {
                write!(f, "its condition {condition} does not hold")
            }
            Reason::Variable { variable } => write!(
                f,
                "its variable {variable} is in no descriptor of the request"
            ),
        }
    }
}
