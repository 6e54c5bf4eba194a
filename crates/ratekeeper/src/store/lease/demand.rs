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
        // A sample still open counts once it shows a repeat (a key asked
        // for once is not busy, however short the time or large the cost),
        // at its rate so far: over the time it has been open, but at least
        // a tenth of a sample, so that two requests at one instant do not
        // make a key look infinitely busy.
        let open = if self.requests_in_sample >= 2 {
            let open_for = now
                .duration_since(self.sample_start)
                .max(SAMPLE / 10)
                .as_nanos();
            let rate = u128::from(self.in_sample) * 1_000_000_000 / open_for;
            u64::try_from(rate).unwrap_or(u64::MAX)
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

/// How many nodes share a key, as this node sees it from the store's
/// answers: between two answers, the units the others took against the
/// units this node asked for. A bucket's first takes on many nodes at once
/// would otherwise each take the bucket's refill over `chunk_for` (see
/// [`draining_floor`]) and hold its whole burst while it drains.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sharing {
    /// The last answer: when this node asked, and what the store had left
    /// after it.
    last: Option<(Timestamp, u64)>,
    /// Units this node asked for since (spent here or taken at the store).
    asked_since: u64,
    /// Nodes sharing the key, counting this one; `None` before two answers.
    nodes: Option<u64>,
}

impl Sharing {
    /// Counts `units` this node asked for.
    pub(crate) fn asked(&mut self, units: u64) {
        self.asked_since = self.asked_since.saturating_add(units);
    }

    /// Reads a store answer for a request asked at `at`: `took` units were
    /// taken by it and `left` remain after. `policy` says how much its
    /// refill gave back meanwhile.
    pub(crate) fn answered(&mut self, policy: &Policy, at: Timestamp, took: u64, left: u64) {
        if let Some((before, left_before)) = self.last {
            let quota = policy.quota();
            let window = policy.window().as_nanos().max(1);
            let refill = u128::from(quota) * at.duration_since(before).as_nanos() / window;
            let refill = u64::try_from(refill).unwrap_or(u64::MAX);
            // Had nobody taken anything, the store would have this left.
            let untouched = left_before.saturating_add(refill).min(quota);
            let others = untouched.saturating_sub(left).saturating_sub(took);
            let ours = self.asked_since.max(1);
            self.nodes = Some(1 + others / ours);
        }
        self.last = Some((at, left));
        self.asked_since = 0;
    }

    /// Nodes sharing the key, this one included; `None` until known.
    pub(crate) fn nodes(&self) -> Option<u64> {
        self.nodes
    }
}

/// The most a node takes for a draining policy's floor when `nodes` share
/// the key and `left` remain: its share of half, and nothing before the
/// sharing is known (a key's first take on a node is only what its own
/// rate needs).
pub(crate) fn shared_floor(floor: u64, left: Option<u64>, nodes: Option<u64>) -> u64 {
    match (nodes, left) {
        (Some(nodes), Some(left)) => floor.min(left / (2 * nodes.max(1))),
        _ => 0,
    }
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
        // Two at one instant: counted over a tenth of a sample (10 ms).
        assert_eq!(demand.per_second(Timestamp::from_secs(1)), 200);
        // Ten more over the next 40 ms: 12 in 40 ms.
        for ms in 1..=10 {
            demand.record(Timestamp::from_millis(1_000 + 4 * ms), 1);
        }
        assert_eq!(demand.per_second(Timestamp::from_millis(1_040)), 300);
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
    fn sharing_is_learned_from_what_the_others_took_between_two_answers() {
        let bucket = Policy::from(crate::Gcra::per_second(10_000).unwrap());
        let mut sharing = Sharing::default();
        let t0 = Timestamp::from_secs(1);
        sharing.asked(1);
        sharing.answered(&bucket, t0, 1, 9_999);
        assert_eq!(sharing.nodes(), None);
        assert_eq!(shared_floor(1_000, Some(9_999), sharing.nodes()), 0);
        // 10 ms later: refilled to full (100 units, at most the quota), this
        // node asked for 10 and took 10; the store has 8,989 left, so the
        // others took 1,001, a hundred times this node's share.
        sharing.asked(10);
        sharing.answered(
            &bucket,
            t0.saturating_add(Duration::from_millis(10)),
            10,
            8_989,
        );
        assert_eq!(sharing.nodes(), Some(101));
        assert_eq!(shared_floor(1_000, Some(8_989), sharing.nodes()), 44);
        // Alone: the store has what this node left it, refilled.
        let mut alone = Sharing::default();
        alone.asked(1);
        alone.answered(&bucket, t0, 1, 9_000);
        alone.asked(500);
        alone.answered(
            &bucket,
            t0.saturating_add(Duration::from_millis(50)),
            500,
            9_000,
        );
        assert_eq!(alone.nodes(), Some(1));
        assert_eq!(shared_floor(1_000, Some(9_000), alone.nodes()), 1_000);
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
