//! A small seeded random source (SplitMix64): the same seed gives the same
//! arrivals on every machine, with no dependency for it.

use std::time::Duration;

/// A SplitMix64 generator.
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A generator started from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        // The top 53 bits: every value a double holds exactly.
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in 0..n (n > 0); the tiny bias of a modulo does not matter
    /// for picking a node or a key.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// The gap to the next arrival of a Poisson process of `per_second`.
    pub(crate) fn gap(&mut self, per_second: f64) -> Duration {
        // 1 - unit() is in (0, 1]: its logarithm is finite.
        let secs = -(1.0 - self.unit()).ln() / per_second;
        Duration::from_secs_f64(secs)
    }
}
