//! The Redis key of a limit's key: `{prefix}{length of the name}:{name}:{key}`,
//! with the client's key bounded and escaped.
//!
//! Three things are guarded against, since clients choose much of a key:
//!
//! - **Size**: a key over 64 bytes is kept as [`ratekeeper::key::bounded`]
//!   makes it (a readable prefix and a digest), so a 100 KB key costs Redis
//!   what a 64-byte one does.
//! - **Slot targeting**: a `{...}` in a key would choose the key's Redis
//!   Cluster slot, so one client could put all its keys on one master. The
//!   key's `{` and `}` are escaped (unless the store was told that no
//!   client chooses its keys), and neither the prefix nor a limit's name
//!   holds a brace, so the Redis key has no hash tag at all.
//! - **Ambiguity**: no two (prefix, limit name, key) give one Redis key, even
//!   under nested prefixes (prefix `rk:`, limit `x`, key `n:k` against
//!   prefix `rk:x:`, limit `n`, key `k`). The key's `:` is escaped, so
//!   reading from the end the key is what follows the last `:`, the name
//!   what lies between the two before, and the name's length, written
//!   before it, says where the prefix ends.
//!
//! The escape is percent-encoding of `%`, `:`, and (unless kept) `{` and
//! `}`: `%25`, `%3A`, `%7B`, `%7D`; every other byte stays as it is, so keys
//! stay readable in `redis-cli`.

use ratekeeper::key::bounded;

/// Whether a `{...}` in a key chooses its Redis Cluster slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum KeyTags {
    /// Braces in keys are escaped: no key chooses its slot.
    #[default]
    Escaped,
    /// Braces in keys are kept, so a hash tag in a key chooses its slot.
    Kept,
}

/// The Redis key of `key` under the limit named `name`, for a store whose
/// prefix is `prefix`.
pub(crate) fn redis_key(prefix: &[u8], name: &str, key: &[u8], tags: KeyTags) -> Vec<u8> {
    let key = bounded(key);
    let length = name.len().to_string();
    let mut out = Vec::with_capacity(prefix.len() + length.len() + name.len() + 2 + key.len() * 3);
    out.extend_from_slice(prefix);
    out.extend_from_slice(length.as_bytes());
    out.push(b':');
    out.extend_from_slice(name.as_bytes());
    out.push(b':');
    for &byte in key.iter() {
        let escaped = match byte {
            b'%' => Some(&b"%25"[..]),
            b':' => Some(&b"%3A"[..]),
            b'{' if tags == KeyTags::Escaped => Some(&b"%7B"[..]),
            b'}' if tags == KeyTags::Escaped => Some(&b"%7D"[..]),
            _ => None,
        };
        match escaped {
            Some(escape) => out.extend_from_slice(escape),
            None => out.push(byte),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(prefix: &str, name: &str, key: &str) -> String {
        String::from_utf8(redis_key(
            prefix.as_bytes(),
            name,
            key.as_bytes(),
            KeyTags::Escaped,
        ))
        .unwrap()
    }

    #[test]
    fn readable_and_escaped() {
        assert_eq!(
            key("ratekeeper:", "per-ip", "203.0.113.7"),
            "ratekeeper:6:per-ip:203.0.113.7"
        );
        assert_eq!(key("rk:", "l", "{a}1"), "rk:1:l:%7Ba%7D1");
        assert_eq!(
            key("rk:", "l", "2001:db8::/64"),
            "rk:1:l:2001%3Adb8%3A%3A/64"
        );
        assert_eq!(key("rk:", "l", "100%"), "rk:1:l:100%25");
        let kept = redis_key(b"rk:", "l", b"{a}:1", KeyTags::Kept);
        assert_eq!(kept, b"rk:1:l:{a}%3A1");
    }

    #[test]
    fn nested_prefixes_do_not_meet() {
        assert_ne!(key("rk:", "x", "n:k"), key("rk:x:", "n", "k"));
        assert_ne!(key("rk:", "x", "1:n:k"), key("rk:1:x:", "n", "k"));
        assert_ne!(key("rk:", "ab", "k"), key("rk:a", "b", "k"));
    }

    #[test]
    fn a_long_key_is_bounded() {
        let long = vec![b'{'; 100_000];
        let kept = redis_key(b"ratekeeper:", "per-ip", &long, KeyTags::Escaped);
        // The prefix and name, 24 escaped braces, and `~sha256%3A` with 32
        // hex digits.
        assert_eq!(kept.len(), "ratekeeper:6:per-ip:".len() + 24 * 3 + 42);
        assert!(!kept.contains(&b'{'), "no hash tag");
        let name = "n".repeat(ratekeeper::store::MAX_LIMIT_NAME);
        let worst = redis_key(b"", &name, &vec![b':'; 100_000], KeyTags::Escaped);
        assert!(worst.len() <= 260, "{}", worst.len());
    }

    /// Every string over `alphabet` up to `max` bytes long.
    fn strings(alphabet: &[u8], max: usize) -> Vec<Vec<u8>> {
        let mut all = vec![Vec::new()];
        let mut last = vec![Vec::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s| {
                    alphabet.iter().map(move |&c| {
                        let mut longer = s.clone();
                        longer.push(c);
                        longer
                    })
                })
                .collect();
            all.extend(last.iter().cloned());
        }
        all
    }

    /// Every small triple over the characters that matter: no two give one
    /// Redis key.
    #[test]
    fn distinct_triples_give_distinct_keys() {
        let mut seen = std::collections::HashMap::new();
        for prefix in strings(b"a1:", 4) {
            for name in strings(b"a1", 2).into_iter().skip(1) {
                for key in strings(b"a1:{", 3) {
                    let name = String::from_utf8(name.clone()).unwrap();
                    let made = redis_key(&prefix, &name, &key, KeyTags::Escaped);
                    let triple = (prefix.clone(), name, key);
                    if let Some(other) = seen.insert(made.clone(), triple.clone()) {
                        panic!("{other:?} and {triple:?} both give {made:?}");
                    }
                }
            }
        }
    }

    /// Undoes [`redis_key`] reading from the end, as the module's
    /// documentation says: `None` if `bytes` is not such a key.
    fn parse(bytes: &[u8]) -> Option<(Vec<u8>, String, Vec<u8>)> {
        let last = bytes.iter().rposition(|&b| b == b':')?;
        let escaped = &bytes[last + 1..];
        let before = bytes[..last].iter().rposition(|&b| b == b':')?;
        let name = std::str::from_utf8(&bytes[before + 1..last]).ok()?;
        let length = name.len().to_string();
        let start = before.checked_sub(length.len())?;
        if bytes[start..before] != *length.as_bytes() {
            return None;
        }
        let mut key = Vec::new();
        let mut i = 0;
        while i < escaped.len() {
            if escaped[i] == b'%' {
                let hex = std::str::from_utf8(escaped.get(i + 1..i + 3)?).ok()?;
                key.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                key.push(escaped[i]);
                i += 1;
            }
        }
        Some((bytes[..start].to_vec(), name.to_owned(), key))
    }

    proptest::proptest! {
        /// Every Redis key reads back as the one (prefix, name, key) that
        /// made it, so distinct triples never share one, and none has a hash
        /// tag.
        #[test]
        fn one_redis_key_per_triple(
            prefix in "[a-z0-9:%|]{0,12}",
            name in "[a-z0-9%|-]{1,12}",
            key in proptest::collection::vec(
                proptest::sample::select(b"ab1:%{}|".to_vec()), 0..40),
        ) {
            let made = redis_key(prefix.as_bytes(), &name, &key, KeyTags::Escaped);
            let parsed = parse(&made);
            proptest::prop_assert_eq!(parsed, Some((prefix.into_bytes(), name, key)));
            let braces = made.iter().filter(|&&b| b == b'{' || b == b'}').count();
            proptest::prop_assert_eq!(braces, 0, "no hash tag");
        }
    }
}
