//! Keys: how one is made from several parts ([`compose`], the one rule the
//! tower layer and the service share, so that both count a client under the
//! same key in a shared store), and how stores and statistics keep them:
//! at most [`MAX_KEY_LEN`] bytes ([`bounded`]).
//!
//! A client chooses much of its key (a header value, a path), so whatever
//! keeps keys (a store's rows, the per-key denial counts, the heaviest keys)
//! would grow with what clients send. [`bounded`] keeps a short key as it is
//! and replaces a longer one with a readable prefix and a SHA-256 digest of
//! the whole key, so a row has a bounded size whatever arrives, and two long
//! keys share a row only if they share a 128-bit digest.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// The longest key kept as it is; longer keys are kept as [`bounded`] makes
/// them, which is exactly this long.
pub const MAX_KEY_LEN: usize = 64;

/// What separates a long key's readable prefix from its digest.
const DIGEST_MARK: &[u8] = b"~sha256:";

/// Hex digits of the digest kept (128 bits).
const DIGEST_HEX: usize = 32;

/// The readable start of a long key kept beside its digest.
const PREFIX_LEN: usize = MAX_KEY_LEN - DIGEST_MARK.len() - DIGEST_HEX;

/// What a [`global`](GLOBAL) key is: one count for every request.
pub const GLOBAL: &[u8] = b"*";

/// What separates the parts of a composed key.
pub const SEPARATOR: u8 = b'|';

/// What escapes a separator (or itself) inside a part.
const ESCAPE: u8 = b'\\';

/// `part` as one part of a key: itself, unless it holds a `|` or a `\`,
/// which are escaped with a `\`. A key of one part is this too, so a key
/// made of one value is the same whether or not it was composed.
///
/// ```
/// use ratekeeper::key::escape_part;
///
/// assert_eq!(&*escape_part(b"203.0.113.7"), b"203.0.113.7");
/// assert_eq!(&*escape_part(b"a|b"), br"a\|b");
/// ```
pub fn escape_part(part: &[u8]) -> Cow<'_, [u8]> {
    if !part.iter().any(|&byte| byte == SEPARATOR || byte == ESCAPE) {
        return Cow::Borrowed(part);
    }
    let mut escaped = Vec::with_capacity(part.len() + 4);
    push_escaped(&mut escaped, part);
    Cow::Owned(escaped)
}

/// The key of several parts: each [escaped](escape_part), joined by `|`.
/// Readable (`redis-cli` shows `203.0.113.7|GET /login`), and two lists of
/// parts never give the same key: `["a|b"]` is `a\|b`, `["a", "b"]` is
/// `a|b`.
///
/// ```
/// use ratekeeper::key::compose;
///
/// assert_eq!(compose(["203.0.113.7", "GET /login"]), b"203.0.113.7|GET /login");
/// assert_ne!(compose(["a|b"]), compose(["a", "b"]));
/// ```
pub fn compose<P: AsRef<[u8]>>(parts: impl IntoIterator<Item = P>) -> Vec<u8> {
    let mut key = Vec::with_capacity(32);
    for (index, part) in parts.into_iter().enumerate() {
        if index > 0 {
            key.push(SEPARATOR);
        }
        push_escaped(&mut key, part.as_ref());
    }
    key
}

fn push_escaped(key: &mut Vec<u8>, part: &[u8]) {
    for &byte in part {
        if byte == SEPARATOR || byte == ESCAPE {
            key.push(ESCAPE);
        }
        key.push(byte);
    }
}

/// `key` itself when it is at most [`MAX_KEY_LEN`] bytes; otherwise its
/// first bytes, `~sha256:` and 32 hex digits of the SHA-256 of the whole
/// key: [`MAX_KEY_LEN`] bytes in all.
///
/// ```
/// use ratekeeper::key::{bounded, MAX_KEY_LEN};
///
/// assert_eq!(&*bounded(b"203.0.113.7"), b"203.0.113.7");
/// let long = vec![b'a'; 100_000];
/// let kept = bounded(&long);
/// assert_eq!(kept.len(), MAX_KEY_LEN);
/// assert!(kept.starts_with(b"aaaaaaaaaaaaaaaaaaaaaaaa~sha256:"));
/// ```
pub fn bounded(key: &[u8]) -> Cow<'_, [u8]> {
    if key.len() <= MAX_KEY_LEN {
        return Cow::Borrowed(key);
    }
    let digest = Sha256::digest(key);
    let mut out = Vec::with_capacity(MAX_KEY_LEN);
    out.extend_from_slice(&key[..PREFIX_LEN]);
    out.extend_from_slice(DIGEST_MARK);
    for byte in &digest[..DIGEST_HEX / 2] {
        out.push(HEX[usize::from(byte >> 4)]);
        out.push(HEX[usize::from(byte & 0xf)]);
    }
    Cow::Owned(out)
}

/// [`bounded`] for text keys: the result is text too (a prefix cut inside a
/// character is cut back to the character's start, and the digest is
/// ASCII), so it is at most [`MAX_KEY_LEN`] bytes.
///
/// ```
/// use ratekeeper::key::bounded_str;
///
/// assert_eq!(bounded_str("per-client"), "per-client");
/// assert!(bounded_str(&"é".repeat(100)).len() <= 64);
/// ```
pub fn bounded_str(key: &str) -> Cow<'_, str> {
    if key.len() <= MAX_KEY_LEN {
        return Cow::Borrowed(key);
    }
    let mut cut = PREFIX_LEN;
    while !key.is_char_boundary(cut) {
        cut -= 1;
    }
    let whole = bounded(key.as_bytes());
    let digest = &whole[PREFIX_LEN..];
    let mut out = String::with_capacity(MAX_KEY_LEN);
    out.push_str(&key[..cut]);
    // The digest part is ASCII.
    out.extend(digest.iter().map(|&b| char::from(b)));
    Cow::Owned(out)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_stay_and_long_ones_are_digests_of_the_whole_key() {
        let at_cap = vec![b'k'; MAX_KEY_LEN];
        assert_eq!(&*bounded(&at_cap), &at_cap[..]);
        let mut a = vec![b'k'; MAX_KEY_LEN + 1];
        let b = a.clone();
        assert_eq!(bounded(&a), bounded(&b));
        *a.last_mut().unwrap() = b'j';
        assert_ne!(bounded(&a), bounded(&b), "the digest covers the key's end");
        assert_eq!(bounded(&a).len(), MAX_KEY_LEN);
        // SHA-256 of 65 'k's, first 16 bytes.
        let expected_digest: String = Sha256::digest(&b[..])[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            std::str::from_utf8(&bounded(&b)[PREFIX_LEN + DIGEST_MARK.len()..]).unwrap(),
            expected_digest
        );
    }

    proptest::proptest! {
        #[test]
        fn text_stays_text_and_bounded(key in ".{0,200}") {
            let kept = bounded_str(&key);
            proptest::prop_assert!(kept.len() <= MAX_KEY_LEN);
            if key.len() <= MAX_KEY_LEN {
                proptest::prop_assert_eq!(&*kept, key.as_str());
            } else {
                proptest::prop_assert!(key.starts_with(kept.split("~sha256:").next().unwrap()));
            }
        }
    }
}
