//! Counts in what the service prints: "1 limit", "2 limits", "0 limits".

use std::fmt;

/// A count and its noun, written `1 limit` or `2 limits`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Count<'a> {
    n: u64,
    one: &'a str,
    /// The plural, when it is not `one` and an `s`.
    many: Option<&'a str>,
}

/// `n` `noun`s, the plural made with an `s`: `count(2, "limit")` is
/// `2 limits`.
pub(crate) fn count<N: TryInto<u64>>(n: N, noun: &str) -> Count<'_> {
    Count {
        n: n.try_into().unwrap_or(u64::MAX),
        one: noun,
        many: None,
    }
}

/// `n` of a noun whose plural is not an `s` away: `entry`, `entries`.
pub(crate) fn count_as<'a, N: TryInto<u64>>(n: N, one: &'a str, many: &'a str) -> Count<'a> {
    Count {
        n: n.try_into().unwrap_or(u64::MAX),
        one,
        many: Some(many),
    }
}

impl fmt::Display for Count<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.n, self.many) {
            (1, _) => write!(f, "1 {}", self.one),
            (n, Some(many)) => write!(f, "{n} {many}"),
            (n, None) => write!(f, "{n} {}s", self.one),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{count, count_as};

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(count(1_usize, "limit").to_string(), "1 limit");
        assert_eq!(count(2_u64, "limit").to_string(), "2 limits");
        assert_eq!(count(0_u32, "limit").to_string(), "0 limits");
        assert_eq!(count_as(1_usize, "entry", "entries").to_string(), "1 entry");
        assert_eq!(
            count_as(3_usize, "entry", "entries").to_string(),
            "3 entries"
        );
    }
}
