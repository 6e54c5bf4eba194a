//! Carrying a key's state across a change of a policy's numbers
//! ([`Policy::carry`]), against the pure policies.
//!
//! For random old and new policies of one kind, a random history decided
//! by the old one, and random requests after the change:
//!
//! 1. **the used units stay used**: at the change, the new policy's
//!    remaining quota on the carried state is at most its quota less the
//!    units the old state had used (so no key gets a fresh quota);
//! 2. **tightening never grants more than the old limit**: when the new
//!    numbers are no looser, every request the carried state admits, the
//!    old policy continuing from its own state admits too, replayed alone;
//! 3. the same numbers carry the state unchanged, another kind carries
//!    nothing, and no numbers or state make it panic.

use std::time::Duration;

use proptest::prelude::*;
use ratekeeper::{
    policy::{Algorithm, PolicyKind, State},
    FixedWindow, Gcra, Policy, SlidingLog, SlidingWindow, Timestamp, TokenBucket,
};

use super::properties::{any_kind, any_state_of, extreme_policy};

const MS: u64 = 1_000_000;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Small numbers for `kind`, so that histories fill and drain quotas:
/// amounts 1..=12, periods from 300 ms to 5 s (odd ones included, whose
/// GCRA intervals round), and for fixed windows either alignment.
fn small(kind: PolicyKind) -> impl Strategy<Value = Policy> {
    let periods = prop_oneof![
        Just(1_000 * MS),
        Just(2_000 * MS),
        Just(300 * MS),
        Just(700 * MS),
        Just(5_000 * MS)
    ];
    (1u64..=12, periods, 1u64..=12, any::<bool>()).prop_map(
        move |(amount, period, burst, first_hit)| {
            let period = Duration::from_nanos(period);
            match kind {
                PolicyKind::TokenBucket => TokenBucket::new(amount, period, burst).unwrap().into(),
                PolicyKind::Gcra => Gcra::new(amount, period, burst).unwrap().into(),
                PolicyKind::FixedWindow if first_hit => {
                    FixedWindow::from_first_hit(amount, period).unwrap().into()
                }
                PolicyKind::FixedWindow => FixedWindow::new(amount, period).unwrap().into(),
                PolicyKind::SlidingLog => SlidingLog::new(amount, period).unwrap().into(),
                PolicyKind::SlidingWindow => SlidingWindow::new(amount, period).unwrap().into(),
            }
        },
    )
}

/// Requests as gaps (ms) after the one before, with their costs.
fn requests(max_cost: u64) -> impl Strategy<Value = Requests> {
    proptest::collection::vec((0u64..1_500, 0u64..=max_cost), 0..40)
}

/// Requests as `(gap in ms, cost)`.
type Requests = Vec<(u64, u64)>;

/// An old and a new policy of one kind, a history, the gap to the change
/// and the requests after it.
fn change() -> impl Strategy<Value = (Policy, Policy, Requests, u64, Requests)> {
    any_kind().prop_flat_map(|kind| {
        (
            small(kind),
            small(kind),
            requests(4),
            0u64..3_000,
            requests(4),
        )
    })
}

/// Runs `requests` (gaps in ms from `start`) on `policy` from `state`: the
/// allowed ones at their times, and the state after.
fn run(
    policy: &Policy,
    mut state: State,
    start: u64,
    requests: &[(u64, u64)],
) -> (Vec<(Timestamp, u64)>, State) {
    let mut now = start;
    let mut allowed = Vec::new();
    for &(gap, cost) in requests {
        now += gap * MS;
        let at = Timestamp::from_nanos(now);
        let (decision, next) = policy.decide(&state, at, cost);
        if decision.is_allowed() && cost > 0 {
            allowed.push((at, cost));
        }
        state = next;
    }
    (allowed, state)
}

fn nanos(d: Duration) -> u128 {
    d.as_nanos()
}

/// Whether `new` is no looser than `old`, in the sense under which the
/// carried state promises never to admit what `old` would refuse.
fn no_looser(old: &Policy, new: &Policy) -> bool {
    match (old, new) {
        (Policy::TokenBucket(o), Policy::TokenBucket(n)) => {
            n.burst() <= o.burst()
                && u128::from(n.rate()) * nanos(o.period())
                    <= u128::from(o.rate()) * nanos(n.period())
        }
        (Policy::Gcra(o), Policy::Gcra(n)) => {
            n.burst() <= o.burst() && n.emission_interval() >= o.emission_interval()
        }
        (Policy::FixedWindow(o), Policy::FixedWindow(n)) => {
            n.limit() <= o.limit()
                && n.window() == o.window()
                && n.is_from_first_hit() == o.is_from_first_hit()
        }
        (Policy::SlidingLog(o), Policy::SlidingLog(n)) => {
            n.limit() <= o.limit() && n.window() >= o.window()
        }
        (Policy::SlidingWindow(o), Policy::SlidingWindow(n)) => {
            n.limit() <= o.limit() && n.window() == o.window()
        }
        _ => false,
    }
}

proptest! {
    #![proptest_config(config(4_000))]

    #[test]
    fn a_carried_state_keeps_the_used_units_and_never_beats_a_tightened_limit(
        (old, new, history, gap, after) in change()
    ) {
        let (_, state) = run(&old, old.fresh(), 0, &history);
        let last: u64 = history.iter().map(|r| r.0).sum::<u64>() * MS;
        let change = last + gap * MS;
        let at = Timestamp::from_nanos(change);
        let carried = new.carry(&old, &state, at).expect("the same kind carries");

        // 1. The units used under the old numbers are used under the new.
        let used = old.quota() - old.peek(&state, at).remaining();
        let remaining = new.peek(&carried, at).remaining();
        prop_assert!(
            remaining <= new.quota().saturating_sub(used),
            "{used} used under {old:?}, yet {remaining} left under {new:?} from {carried:?}"
        );

        // 2. Tightened: nothing the old policy, continuing, would refuse.
        if no_looser(&old, &new) {
            let (admitted, _) = run(&new, carried.clone(), change, &after);
            let mut continuing = state.clone();
            for &(t, cost) in &admitted {
                let (decision, next) = old.decide(&continuing, t, cost);
                prop_assert!(
                    decision.is_allowed(),
                    "{new:?} admitted {cost} at {t:?} from {carried:?}, which {old:?} refuses from {continuing:?}"
                );
                continuing = next;
            }
        }
    }

    #[test]
    fn the_same_numbers_carry_the_state_unchanged_and_another_kind_nothing(
        (old, _new, history, gap, _after) in change(),
        other in any_kind(),
    ) {
        let (_, state) = run(&old, old.fresh(), 0, &history);
        let at = Timestamp::from_nanos(history.iter().map(|r| r.0).sum::<u64>() * MS + gap * MS);
        prop_assert_eq!(old.carry(&old, &state, at), Some(state.clone()));
        if other != old.kind() {
            let elsewhere = Policy::new(other, &"3/second".parse().unwrap()).unwrap();
            prop_assert_eq!(elsewhere.carry(&old, &state, at), None);
        }
    }

    #[test]
    fn carrying_never_panics(
        old in extreme_policy(),
        new in extreme_policy(),
        state in any_kind().prop_flat_map(any_state_of),
        now in any::<u64>(),
    ) {
        let now = Timestamp::from_nanos(now);
        if let Some(carried) = new.carry(&old, &state, now) {
            let _ = new.decide(&carried, now, 1);
            let _ = new.expires_at(&carried);
        }
    }
}

/// The example: tightening 5 a minute to 4 keeps the count, and
/// a bucket tightened keeps its used tokens (not the fraction).
#[test]
fn tightening_keeps_what_each_key_used() {
    let minute = Duration::from_secs(60);
    let old = Policy::from(FixedWindow::new(5, minute).unwrap());
    let new = Policy::from(FixedWindow::new(4, minute).unwrap());
    let t = Timestamp::from_secs(600);
    let (_, state) = run(
        &old,
        old.fresh(),
        600_000 * MS,
        &[(0, 1), (0, 1), (0, 1), (0, 1)],
    );
    let carried = new.carry(&old, &state, t).unwrap();
    assert_eq!(new.peek(&carried, t).remaining(), 0);
    assert_eq!(new.peek(&new.fresh(), t).remaining(), 4);

    let old = Policy::from(TokenBucket::new(10, minute, 10).unwrap());
    let new = Policy::from(TokenBucket::new(5, minute, 5).unwrap());
    let (_, state) = run(&old, old.fresh(), 600_000 * MS, &[(0, 4)]);
    let carried = new.carry(&old, &state, t).unwrap();
    assert_eq!(new.peek(&carried, t).remaining(), 1);

    let old = Policy::from(Gcra::new(500, Duration::from_secs(86_400), 500).unwrap());
    let new = Policy::from(Gcra::new(600, Duration::from_secs(86_400), 600).unwrap());
    let (_, state) = run(&old, old.fresh(), 600_000 * MS, &[(0, 450)]);
    let carried = new.carry(&old, &state, t).unwrap();
    assert_eq!(new.peek(&carried, t).remaining(), 150);
}
