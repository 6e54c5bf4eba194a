//! How fast a key is asked for on this node, and the chunk to take for it.

use std::time::Duration;

use crate::policy::Algorithm;
use crate::{Policy, Timestamp};

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

/// The units to ask the store for, for a key asked for `per_second` here:
/// enough for `target` at that rate (and, for a busy key, at least
/// `floor`: see [`draining_floor`]), at most `max`, at most half of what
/// the store last said was left (`left`, when known), so that near the
/// limit takes shrink to the request's own cost; and never less than
/// `cost`.
pub(crate) fn chunk(
    per_second: u64,
    target: Duration,
    max: u64,
    left: Option<u64>,
    cost: u64,
    floor: u64,
) -> u64 {
    let mut want = (u128::from(per_second) * target.as_nanos() / 1_000_000_000) as u64;
    if per_second > 0 {
        want = want.max(floor);
    }
    let mut cap = max;
    if let Some(left) = left {
        cap = cap.min(left / 2);
    }
    want.min(cap).max(cost)
}

/// For a policy whose held units drain (token bucket, GCRA: see
/// [`Hold`](super::Hold)), the units a take needs for its last ones to
/// stay safe for `target`: the policy's refill over `target`, less the
/// debt already below them (the quota less what the store last said was
/// left). Held units drain at the policy's rate, not at the node's: a node
/// asking for a tenth of the rate spends a tenth of what it takes, and the
/// rest goes back to the store as it refills. 0 for the other policies.
pub(crate) fn draining_floor(policy: &Policy, target: Duration, left: Option<u64>) -> u64 {
    if !matches!(policy, Policy::TokenBucket(_) | Policy::Gcra(_)) {
        return 0;
    }
    let quota = policy.quota();
    let window = policy.window().as_nanos().max(1);
    let refill = u128::from(quota) * target.as_nanos() / window;
    let below = quota - left.unwrap_or(quota).min(quota);
    u64::try_from(refill)
        .unwrap_or(u64::MAX)
        .saturating_sub(below)
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
            chunk(rate, Duration::from_millis(100), 1_000, None, 1, 0),
            rate / 10
        );
        let later = now.saturating_add(Duration::from_secs(2));
        assert_eq!(demand.per_second(later), 0);
    }

    #[test]
    fn near_the_limit_the_chunk_is_the_cost() {
        assert_eq!(
            chunk(
                1_000_000,
                Duration::from_secs(1),
                10_000,
                Some(10_000),
                1,
                0
            ),
            5_000
        );
        assert_eq!(
            chunk(1_000_000, Duration::from_secs(1), 10_000, Some(3), 2, 0),
            2
        );
        assert_eq!(
            chunk(1_000_000, Duration::from_secs(1), 10_000, Some(0), 1, 0),
            1
        );
    }

    #[test]
    fn a_busy_bucket_takes_what_lasts_at_its_refill_rate() {
        let bucket = Policy::from(crate::Gcra::per_second(1_000_000).unwrap());
        let target = Duration::from_millis(100);
        // Full: 100 ms of refill is 100,000 units.
        let floor = draining_floor(&bucket, target, Some(1_000_000));
        assert_eq!(floor, 100_000);
        // 950,000 below: the take sits on a debt that lasts longer.
        assert_eq!(draining_floor(&bucket, target, Some(50_000)), 0);
        // A node asking 1,000 a second takes the floor, capped.
        assert_eq!(
            chunk(1_000, target, 10_000, Some(1_000_000), 1, floor),
            10_000
        );
        // A key not asked for again takes its cost.
        assert_eq!(chunk(0, target, 10_000, Some(1_000_000), 1, floor), 1);
        let window = Policy::from(crate::FixedWindow::new(100, Duration::from_secs(1)).unwrap());
        assert_eq!(draining_floor(&window, target, None), 0);
    }
}
