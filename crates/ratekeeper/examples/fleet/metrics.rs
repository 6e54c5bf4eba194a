//! What a run measured: over-admission (by replay through the policy
//! alone), under-admission, store calls and decision latency.

use std::collections::BTreeMap;
use std::time::Duration;

use ratekeeper::policy::Algorithm;
use ratekeeper::{Policy, Timestamp};

use crate::scenario::{Record, Run, Scenario, START};

/// One row of the table.
#[derive(Clone, Debug)]
pub(crate) struct Report {
    /// Requests decided.
    pub(crate) requests: u64,
    /// Requests admitted by the fleet.
    pub(crate) admitted: u64,
    /// Requests the policy alone admits, fed every request at the moment
    /// it was asked: a single exact limiter at no distance.
    pub(crate) ideal: u64,
    /// Units the fleet admitted that the policy alone, fed the fleet's
    /// admissions at the moments they were counted, refuses: 0 when the
    /// fleet never admitted more than the limit.
    pub(crate) over: u64,
    /// For the keys whose demand exceeded the limit: what the ideal
    /// limiter admitted and the fleet did not, as a percentage of what the
    /// ideal admitted (the limit over the run). `None` when no key's
    /// demand exceeded its limit.
    pub(crate) under_pct: Option<f64>,
    /// The same from one window after the start on: without the bucket's
    /// initial burst, which a fleet of nodes each asking a little can
    /// leave to drain (see BENCHMARKS.md).
    pub(crate) under_later_pct: Option<f64>,
    /// Round trips to the store per decision.
    pub(crate) calls_per_decision: f64,
    /// Decisions from units held on the node, as a share of all.
    pub(crate) local_share: f64,
    /// The median time from asking to the answer.
    pub(crate) p50: Duration,
    /// The 99th percentile of it.
    pub(crate) p99: Duration,
}

/// The report of `run`, a run of `s`.
pub(crate) fn report(s: &Scenario, run: &Run) -> Report {
    let policy = s.policy();
    let mut by_key: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
    for r in &run.records {
        by_key.entry(r.key).or_default().push(*r);
    }
    let later = START.saturating_add(policy.window());
    let (mut over, mut ideal, mut admitted) = (0, 0, 0);
    let (mut under, mut under_later) = (Shortfall::default(), Shortfall::default());
    for records in by_key.values() {
        let admits: Vec<Timestamp> = records
            .iter()
            .filter(|r| r.allowed)
            .map(|r| r.counted)
            .collect();
        over += refused(&policy, admits.clone());
        let alone = admitted_at(&policy, records.iter().map(|r| r.asked).collect());
        ideal += alone.len() as u64;
        admitted += admits.len() as u64;
        if alone.len() < records.len() {
            under.add(&alone, &admits, START);
            under_later.add(&alone, &admits, later);
        }
    }
    let requests = run.records.len() as u64;
    let mut latencies: Vec<Duration> = run
        .records
        .iter()
        .map(|r| r.answered.duration_since(r.asked))
        .collect();
    latencies.sort_unstable();
    Report {
        requests,
        admitted,
        ideal,
        over,
        under_pct: under.pct(),
        under_later_pct: under_later.pct(),
        calls_per_decision: run.totals.round_trips as f64 / requests.max(1) as f64,
        local_share: run.totals.decided_here as f64 / requests.max(1) as f64,
        p50: percentile(&latencies, 50),
        p99: percentile(&latencies, 99),
    }
}

/// What the fleet admitted short of the policy alone, from a moment on,
/// summed over the keys whose demand exceeded their limit.
#[derive(Default)]
struct Shortfall {
    alone: u64,
    fleet: u64,
}

impl Shortfall {
    /// Adds a key's admissions by the policy alone and by the fleet, those
    /// counted from `from` on.
    fn add(&mut self, alone: &[Timestamp], fleet: &[Timestamp], from: Timestamp) {
        self.alone += alone.iter().filter(|&&t| t >= from).count() as u64;
        self.fleet += fleet.iter().filter(|&&t| t >= from).count() as u64;
    }

    /// The shortfall as a percentage of what the policy alone admitted
    /// (negative when the fleet admitted more in the span: a latency
    /// moves a store's decision past the span's start, never past the
    /// policy); `None` with no such key.
    fn pct(&self) -> Option<f64> {
        (self.alone > 0)
            .then(|| 100.0 * (self.alone as f64 - self.fleet as f64) / self.alone as f64)
    }
}

/// The units, each of cost 1 at its moment in `at`, that `policy` alone
/// refuses (each left out of its state).
pub(crate) fn refused(policy: &Policy, at: Vec<Timestamp>) -> u64 {
    let (allowed, total) = replay(policy, at);
    total - allowed.len() as u64
}

/// The moments, of the requests at the moments `at`, when the policy
/// alone admits one.
pub(crate) fn admitted_at(policy: &Policy, at: Vec<Timestamp>) -> Vec<Timestamp> {
    replay(policy, at).0
}

/// Feeds `policy` one unit at each moment of `at`, in time order: the
/// moments of the units allowed, and the units fed.
fn replay(policy: &Policy, mut at: Vec<Timestamp>) -> (Vec<Timestamp>, u64) {
    at.sort_unstable();
    let mut state = policy.fresh();
    let mut allowed = Vec::with_capacity(at.len());
    for &now in &at {
        let (decision, next) = policy.decide(&state, now, 1);
        if decision.is_allowed() {
            state = next;
            allowed.push(now);
        }
    }
    (allowed, at.len() as u64)
}

/// The `pct`th percentile of `sorted` (nearest rank).
fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = (sorted.len() * pct).div_ceil(100).max(1);
    sorted[rank - 1]
}
