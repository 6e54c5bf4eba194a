//! Keys as fingerprints.
//!
//! The tables keep a 64-bit keyed hash of each key instead of the key, so a
//! row has the same size whatever the key's length. The hash is seeded at
//! random for each limiter, so nobody can choose two keys that collide. Two
//! keys that collide by chance (about one pair in 2^64 / n^2) share one
//! state: each is then denied earlier, never allowed more.

use std::hash::{BuildHasher, Hasher};

use super::slot_table::MIN_FINGERPRINT;

/// Hashes keys with a per-limiter random seed.
#[derive(Clone, Debug)]
pub(crate) struct KeyHasher(ahash::RandomState);

impl KeyHasher {
    pub(crate) fn new() -> Self {
        KeyHasher(ahash::RandomState::new())
    }

    /// The key's fingerprint; never one of the values that mark free slots.
    /// Always inlined: a call would cost a check a tenth of its
    /// instructions, and a limiter used with two clocks made LLVM keep one.
    #[inline(always)]
    pub(crate) fn fingerprint(&self, key: &[u8]) -> u64 {
        // The bytes alone, without `Hash for [u8]`'s length prefix: ahash
        // mixes the length into its state anyway, and the prefix costs
        // every check another multiply.
        let mut hasher = self.0.build_hasher();
        hasher.write(key);
        hasher.finish().max(MIN_FINGERPRINT)
    }
}
