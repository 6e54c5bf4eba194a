//! How fast a key is asked for on this node, and the chunk to take for it.

use std::time::Duration;

use crate::Timestamp;

/// The period demand is counted over.
const SAMPLE: Duration = Duration::from_millis(100);

/// Units asked for per second on this node, as a moving average of 100 ms
/// samples (each new sample weighs half), so a key that goes quiet stops
/// leasing within a few samples and one that heats up starts within one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Demand {
    sample_start: Timestamp,
    in_sample: u64,
    requests_in_sample: u64,
    per_second: u64,
}

impl Demand {
    /// Counts `units` asked for at `now`.
    pub(crate) fn record(&mut self, now: Timestamp, units: u64) {
        self.roll(now);
        self.in_sample = self.in_sample.saturating_add(units);
        self.requests_in_sample += 1;
    }

    /// Closes the samples that ended before `now`.
    fn roll(&mut self, now: Timestamp) {
        let elapsed = now.duration_since(self.sample_start);
        if elapsed < SAMPLE {
            return;
        }
        let samples = elapsed.as_nanos() / SAMPLE.as_nanos();
        let rate = self.in_sample.saturating_mul(10);
        self.per_second = self.per_second / 2 + rate / 2;
        // Samples with nothing in them halve it each.
        let quiet = u32::try_from(samples - 1).unwrap_or(u32::MAX).min(63);
        self.per_second >>= quiet;
        self.in_sample = 0;
        self.requests_in_sample = 0;
        self.sample_start = now;
    }

    /// Units per second, as of `now`.
    pub(crate) fn per_second(&mut self, now: Timestamp) -> u64 {
        self.roll(now);
        // A sample still open counts once it shows a repeat: a key asked
        // for once is not busy, however short the time or large the cost.
        let open = if self.requests_in_sample >= 2 {
            self.in_sample.saturating_mul(10)
        } else {
            0
        };
        self.per_second.max(open)
    }
}

/// The units to ask the store for: enough for `target` at the key's rate,
/// at most `max`, at most half of what the store last said was left
/// (`left`, when known), so that near the limit takes shrink to the
/// request's own cost; and never less than `cost`.
pub(crate) fn chunk(
    per_second: u64,
    target: Duration,
    max: u64,
    left: Option<u64>,
    cost: u64,
) -> u64 {
    let want = (u128::from(per_second) * target.as_nanos() / 1_000_000_000) as u64;
    let mut cap = max;
    if let Some(left) = left {
        cap = cap.min(left / 2);
    }
    want.min(cap).max(cost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_asked_for_once_has_no_rate_worth_a_lease() {
        let mut demand = Demand::default();
        demand.record(Timestamp::from_secs(1), 1);
        assert_eq!(demand.per_second(Timestamp::from_secs(1)), 0);
        demand.record(Timestamp::from_secs(1), 1);
        assert_eq!(demand.per_second(Timestamp::from_secs(1)), 20);
    }

    #[test]
    fn a_steady_rate_is_learned_and_a_quiet_key_forgets_it() {
        let mut demand = Demand::default();
        let mut now = Timestamp::from_secs(1);
        for _ in 0..50 {
            for _ in 0..100 {
                demand.record(now, 1);
            }
            now = now.saturating_add(SAMPLE);
        }
        let rate = demand.per_second(now);
        assert!((900..=1_000).contains(&rate), "{rate}");
        assert_eq!(
            chunk(rate, Duration::from_millis(100), 1_000, None, 1),
            rate / 10
        );
        let later = now.saturating_add(Duration::from_secs(2));
        assert_eq!(demand.per_second(later), 0);
    }

    #[test]
    fn near_the_limit_the_chunk_is_the_cost() {
        assert_eq!(
            chunk(1_000_000, Duration::from_secs(1), 10_000, Some(10_000), 1),
            5_000
        );
        assert_eq!(
            chunk(1_000_000, Duration::from_secs(1), 10_000, Some(3), 2),
            2
        );
        assert_eq!(
            chunk(1_000_000, Duration::from_secs(1), 10_000, Some(0), 1),
            1
        );
    }
}
