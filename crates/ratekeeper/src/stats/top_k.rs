//! The keys denied most: a Space-Saving summary (Metwally, Agrawal and El
//! Abbadi, 2005).
//!
//! `k` counters, whatever the number of keys. A denial of a key that has a
//! counter adds one to it. A key without one takes a free counter, or,
//! when all `k` are taken, replaces the key with the smallest count: it
//! inherits that count plus one, and records the inherited part as its
//! error. So for every key in the summary,
//!
//! - `count` is at least its true number of denials, and
//! - `count - error` is at most that number;
//!
//! and every key denied more than `N / k` times of `N` denials holds a
//! counter. Memory is `k` rows (each with its key), and an update is a
//! hash lookup plus, for a replacement, a scan of the `k` counts, which
//! sit together in one array.

use std::collections::HashMap;
use std::sync::Arc;

use super::snapshot::TopKey;

/// A Space-Saving summary of `k` counters.
#[derive(Debug)]
pub(crate) struct SpaceSaving {
    k: usize,
    /// Counter `i`'s key, count and error, in three parallel arrays.
    keys: Vec<Arc<[u8]>>,
    counts: Vec<u64>,
    errors: Vec<u64>,
    /// Each key's counter.
    index: HashMap<Arc<[u8]>, usize, ahash::RandomState>,
}

impl SpaceSaving {
    /// An empty summary of `k` counters (none for zero: it then tracks
    /// nothing).
    pub(crate) fn new(k: usize) -> Self {
        SpaceSaving {
            k,
            keys: Vec::with_capacity(k),
            counts: Vec::with_capacity(k),
            errors: Vec::with_capacity(k),
            index: HashMap::with_capacity_and_hasher(k, ahash::RandomState::new()),
        }
    }

    /// Counts one occurrence of `key`.
    pub(crate) fn offer(&mut self, key: &[u8]) {
        if let Some(&i) = self.index.get(key) {
            self.counts[i] = self.counts[i].saturating_add(1);
            return;
        }
        if self.keys.len() < self.k {
            let key: Arc<[u8]> = key.into();
            self.index.insert(Arc::clone(&key), self.keys.len());
            self.keys.push(key);
            self.counts.push(1);
            self.errors.push(0);
            return;
        }
        // Full: replace the key with the smallest count.
        let Some((i, &min)) = self
            .counts
            .iter()
            .enumerate()
            .min_by_key(|&(_, count)| *count)
        else {
            return; // k == 0
        };
        let key: Arc<[u8]> = key.into();
        self.index.remove(&self.keys[i]);
        self.index.insert(Arc::clone(&key), i);
        self.keys[i] = key;
        self.counts[i] = min.saturating_add(1);
        self.errors[i] = min;
    }

    /// The bytes of the keys held.
    #[cfg(test)]
    pub(crate) fn key_bytes(&self) -> usize {
        self.keys.iter().map(|key| key.len()).sum()
    }

    /// The keys held, most counted first (ties by key, for a stable order).
    pub(crate) fn top(&self) -> Vec<TopKey> {
        let mut top: Vec<TopKey> = (0..self.keys.len())
            .map(|i| TopKey {
                key: self.keys[i].to_vec(),
                count: self.counts[i],
                error: self.errors[i],
            })
            .collect();
        top.sort_unstable_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_minimum_and_carries_its_count() {
        let mut summary = SpaceSaving::new(2);
        for key in [b"a", b"a", b"a", b"b", b"c"] {
            summary.offer(key);
        }
        let top = summary.top();
        assert_eq!(top.len(), 2);
        assert_eq!(
            (top[0].key.as_slice(), top[0].count, top[0].error),
            (&b"a"[..], 3, 0)
        );
        // c replaced b (count 1) and inherits it as error.
        assert_eq!(
            (top[1].key.as_slice(), top[1].count, top[1].error),
            (&b"c"[..], 2, 1)
        );
    }

    #[test]
    fn zero_counters_hold_nothing() {
        let mut summary = SpaceSaving::new(0);
        summary.offer(b"a");
        assert!(summary.top().is_empty());
    }
}
