//! Small fleets through the fleet simulation's own engine
//! (`examples/fleet`): leasing nodes never admit more than the policy
//! alone would, and leave little of the limit unused. Time is virtual, so
//! nothing here depends on the machine's speed.

// The example's modules, shared rather than copied; the table and the
// chart stay in the example, and what only they read is unused here.
#[allow(dead_code)]
#[path = "../examples/fleet/metrics.rs"]
mod metrics;
#[allow(dead_code)]
#[path = "../examples/fleet/remote.rs"]
mod remote;
#[allow(dead_code)]
#[path = "../examples/fleet/rng.rs"]
mod rng;
#[allow(dead_code)]
#[path = "../examples/fleet/scenario.rs"]
mod scenario;
#[allow(dead_code)]
#[path = "../examples/fleet/sim.rs"]
mod sim;

use std::time::Duration;

use ratekeeper::policy::PolicyKind;
use ratekeeper::Timestamp;

use metrics::Report;
use scenario::{Scenario, Shape};

/// `shape` on 4 nodes, a store 250 µs away, at 1,000 a second for 2 s: a
/// few thousand requests, enough for two whole windows.
fn small(shape: Shape, kind: PolicyKind) -> Scenario {
    let mut s = Scenario::new(shape, kind, 4, Duration::from_micros(250));
    s.per_second = 1_000;
    s.duration = Duration::from_secs(2);
    if s.cold_keys > 0 {
        s.cold_keys = 50;
    }
    if s.death.is_some() {
        // 0.2 s into the second window, while its quota is being taken.
        s.death = Some(Duration::from_millis(1_200));
    }
    s
}

fn run(s: &Scenario) -> Report {
    metrics::report(s, &scenario::run(s))
}

/// Under-admission, when the hot key's demand exceeded its limit.
fn under(s: &Scenario, r: &Report) -> f64 {
    r.under_pct
        .unwrap_or_else(|| panic!("{}: the hot key was over its limit", s.label()))
}

#[test]
fn steady_demand_above_the_limit_is_never_over_admitted_and_barely_under() {
    for kind in PolicyKind::ALL {
        let s = small(Shape::Steady, kind);
        let r = run(&s);
        assert_eq!(r.over, 0, "{}: {r:?}", s.label());
        assert!(under(&s, &r) <= 1.0, "{}: {r:?}", s.label());
        assert!(r.under_later_pct <= Some(1.0), "{}: {r:?}", s.label());
        assert!(r.admitted > 0 && r.requests > r.admitted, "{r:?}");
    }
}

#[test]
fn bursts_many_keys_and_a_dead_node_are_never_over_admitted() {
    for shape in [Shape::Bursts, Shape::ManyKeys, Shape::NodeDies] {
        for kind in [
            PolicyKind::FixedWindow,
            PolicyKind::Gcra,
            PolicyKind::SlidingWindow,
        ] {
            let s = small(shape, kind);
            let r = run(&s);
            assert_eq!(r.over, 0, "{}: {r:?}", s.label());
            // A dead node strands at most two chunks: a few percent of a
            // limit shared by four nodes.
            let bound = if shape == Shape::NodeDies { 5.0 } else { 2.0 };
            assert!(under(&s, &r) <= bound, "{}: {r:?}", s.label());
        }
    }
}

#[test]
fn a_bucket_emptied_by_a_burst_is_whole_for_the_next() {
    // Two nodes between bursts at half the rate once took every unit the
    // refill gave back and dropped half of them: the next burst found the
    // bucket empty, a quarter of the limit under-admitted.
    let mut s = Scenario::new(Shape::Bursts, PolicyKind::Gcra, 2, Duration::from_millis(1));
    s.duration = Duration::from_secs(2);
    let r = run(&s);
    assert_eq!(r.over, 0, "{r:?}");
    assert!(under(&s, &r) <= 1.0, "{r:?}");
}

#[test]
fn leasing_keeps_most_decisions_on_the_nodes() {
    // Below the limit (half of it), where a busy key leases freely.
    let mut s = small(Shape::Steady, PolicyKind::FixedWindow);
    s.load = scenario::Load::Steady { times: 0.5 };
    let r = run(&s);
    assert_eq!(r.admitted, r.requests, "{r:?}");
    assert!(r.calls_per_decision < 0.1, "{r:?}");
    // A decision from held units takes no time; one at the store, a round
    // trip.
    assert_eq!(r.p50, Duration::ZERO, "{r:?}");
}

#[test]
fn a_run_is_the_same_run_every_time() {
    let s = small(Shape::NodeDies, PolicyKind::Gcra);
    let (a, b) = (scenario::run(&s), scenario::run(&s));
    let key = |r: &scenario::Record| (r.key, r.asked, r.counted, r.answered, r.allowed);
    assert_eq!(
        a.records.iter().map(key).collect::<Vec<_>>(),
        b.records.iter().map(key).collect::<Vec<_>>()
    );
    assert_eq!(a.totals.round_trips, b.totals.round_trips);
}

#[test]
fn the_replay_catches_admissions_over_the_limit() {
    // The check the other tests rely on: 1,001 units in one window of a
    // limit of 1,000, and in a bucket of 1,000 at once.
    let at = vec![Timestamp::from_secs(1_000); 1_001];
    for kind in [PolicyKind::FixedWindow, PolicyKind::Gcra] {
        let policy = small(Shape::Steady, kind).policy();
        assert_eq!(metrics::refused(&policy, at.clone()), 1, "{kind}");
        assert_eq!(metrics::refused(&policy, at[1..].to_vec()), 0, "{kind}");
    }
}
