//! [`Glob`]: the `*` patterns of envoyproxy/ratelimit's descriptor values,
//! which ratekeeper's own `match.descriptors` values share.

/// A value pattern with `*`s, each any run of characters (the empty one
/// too): `/api/*`, `*.png`, `a*b*c`.
///
/// Matching is linear in the value's length: with `*` as the only
/// operator, taking the leftmost occurrence of each fixed piece in turn
/// never loses a match a later occurrence would give, so there is no
/// backtracking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Glob {
    pattern: String,
    /// The pattern split on `*`: at least two pieces, as it has a `*`.
    pieces: Vec<String>,
    /// The pieces' total length: a shorter text cannot match.
    fixed: usize,
}

impl Glob {
    /// The pattern `pattern`; without a `*`, it matches only itself.
    pub fn new(pattern: &str) -> Glob {
        let pieces: Vec<String> = pattern.split('*').map(str::to_owned).collect();
        Glob {
            pattern: pattern.to_owned(),
            fixed: pieces.iter().map(String::len).sum(),
            pieces,
        }
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// Whether `text` matches: it starts with the first piece, ends with
    /// the last, and holds the others in order, without overlaps, between
    /// them.
    pub fn matches(&self, text: &str) -> bool {
        let (first, last) = match (self.pieces.first(), self.pieces.last()) {
            (Some(first), Some(last)) if self.pieces.len() > 1 => (first, last),
            _ => return self.pattern == text,
        };
        if self.fixed > text.len()
            || !text.starts_with(first.as_str())
            || !text.ends_with(last.as_str())
        {
            return false;
        }
        // `fixed <= len` keeps the first and last pieces from overlapping,
        // and both end on character boundaries, being matched text.
        let mut rest = &text[first.len()..text.len() - last.len()];
        for piece in &self.pieces[1..self.pieces.len() - 1] {
            match rest.find(piece.as_str()) {
                Some(found) => rest = &rest[found + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::Glob;

    /// Whether `text` matches `pattern`, by trying every split: slow, and
    /// plainly right.
    fn by_search(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => (0..=text.len()).any(|skip| by_search(rest, &text[skip..])),
            Some((c, rest)) => text.first() == Some(c) && by_search(rest, &text[1..]),
        }
    }

    #[test]
    fn pieces_match_in_order_without_overlap() {
        assert!(Glob::new("/api/*").matches("/api/"));
        assert!(Glob::new("/api/*").matches("/api/v1"));
        assert!(!Glob::new("/api/*").matches("/ap"));
        assert!(Glob::new("*.png").matches("a.png"));
        assert!(!Glob::new("ab*ba").matches("aba"));
        assert!(Glob::new("a*b*c").matches("abc"));
        assert!(Glob::new("é*ü").matches("éü"));
        assert!(Glob::new("plain").matches("plain"));
        assert!(!Glob::new("plain").matches("plains"));
        assert_eq!(Glob::new("a*b").pattern(), "a*b");
    }

    proptest::proptest! {
        /// Over words of `a`, `b` and `*`, where pieces repeat and
        /// overlap, the leftmost-piece match agrees with a full search.
        #[test]
        fn agrees_with_a_search(pattern in "[ab*]{0,8}", text in "[ab]{0,10}") {
            let p: Vec<char> = pattern.chars().collect();
            let t: Vec<char> = text.chars().collect();
            proptest::prop_assert_eq!(Glob::new(&pattern).matches(&text), by_search(&p, &t));
        }
    }
}
