//! Property tests of the promises the five policies make, through the public
//! API only:
//!
//! 1. GCRA and the token bucket agree when the rate divides the period;
//! 2. a sliding log never admits more than its limit in any window;
//! 3. a fixed window admits at most its limit per aligned window, and at most
//!    twice it in any window-long interval;
//! 4. a clock going backwards never grants more;
//! 5. a cost of 0 never changes a state;
//! 6. a denied request returns the state unchanged;
//! 7. no input panics (constructors, extreme policies, arbitrary states,
//!    times and costs, the token bucket's reservations);
//! 8. retry-after is right: enough, and for all but the sliding window
//!    counter, not a nanosecond more than needed;
//! 9. refunds never bank quota past whole, and refunding an allowed
//!    request's cost gives back at least what it took;
//! 10. a state is fresh at its `expires_at`.

use std::time::Duration;

use proptest::prelude::*;
use proptest::sample::select;
use ratekeeper::{
    policy::{
        Algorithm, FixedWindowState, GcraState, Hit, PolicyError, PolicyKind, SlidingLogState,
        SlidingWindowState, State, TokenBucketState, MAX_PERIOD, MAX_QUOTA,
    },
    Decision, FixedWindow, Gcra, Policy, Rate, RetryAfter, SlidingLog, SlidingWindow, Timestamp,
    TokenBucket,
};

const SEC: u64 = 1_000_000_000;
const MAX_PERIOD_NANOS: u64 = 1 << 62;

/// `cases` cases, without writing regression files next to the tests.
pub(crate) fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn ts(nanos: u64) -> Timestamp {
    Timestamp::from_nanos(nanos)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

// ---------------------------------------------------------------------------
// Building policies
// ---------------------------------------------------------------------------

/// The policy of `kind` through [`Policy::new`] and a [`Rate`]: the token
/// bucket and GCRA with an explicit burst, the window policies without one.
fn via_rate(kind: PolicyKind, amount: u64, period: u64, burst: u64) -> Result<Policy, PolicyError> {
    let rate = Rate::new(amount, Duration::from_nanos(period))?;
    let rate = match kind {
        PolicyKind::TokenBucket | PolicyKind::Gcra => rate.with_burst(burst)?,
        _ => rate,
    };
    Policy::new(kind, &rate)
}

/// The same policy through the direct constructors.
fn direct(kind: PolicyKind, amount: u64, period: u64, burst: u64) -> Result<Policy, PolicyError> {
    let period = Duration::from_nanos(period);
    Ok(match kind {
        PolicyKind::TokenBucket => TokenBucket::new(amount, period, burst)?.into(),
        PolicyKind::Gcra => Gcra::new(amount, period, burst)?.into(),
        PolicyKind::FixedWindow => FixedWindow::new(amount, period)?.into(),
        PolicyKind::SlidingLog => SlidingLog::new(amount, period)?.into(),
        PolicyKind::SlidingWindow => SlidingWindow::new(amount, period)?.into(),
    })
}

pub(crate) fn any_kind() -> impl Strategy<Value = PolicyKind> {
    select(PolicyKind::ALL.to_vec())
}

/// Small policies whose histories reach every branch quickly: quotas up to
/// 8 or 10 over periods of a few thousand nanoseconds, some with a rate that
/// does not divide the period; and everyday ones (up to 100 per millisecond,
/// second or minute).
fn small_policy() -> impl Strategy<Value = Policy> {
    let tiny = (any_kind(), 1u64..=8, 1u64..=2_000, 0u64..8, 1u64..=10).prop_map(
        |(kind, amount, k, extra, burst)| {
            let period = amount * k + extra % amount;
            via_rate(kind, amount, period, burst).expect("small numbers are valid")
        },
    );
    let everyday = (
        any_kind(),
        1u64..=100,
        select(vec![1_000_000, SEC, 60 * SEC]),
        1u64..=100,
    )
        .prop_map(|(kind, amount, period, burst)| {
            via_rate(kind, amount, period, burst).expect("everyday numbers are valid")
        });
    prop_oneof![3 => tiny, 1 => everyday]
}

/// A quota at or near the documented bounds, or anywhere between.
fn edge_quota() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(2u64),
        Just(MAX_QUOTA),
        Just(MAX_QUOTA - 1),
        1u64..=16,
        1u64..=MAX_QUOTA,
    ]
}

/// A period at or near the documented bounds, in nanoseconds.
fn edge_period() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(1u64),
        Just(2u64),
        Just(MAX_PERIOD_NANOS),
        Just(MAX_PERIOD_NANOS - 1),
        Just(SEC),
        1u64..=1_000,
        1u64..=MAX_PERIOD_NANOS,
    ]
}

/// Valid policies with numbers at the documented bounds. Combinations a
/// constructor refuses (a token bucket too full for 2^62 units, a GCRA rate
/// finer than a nanosecond) fall back to a smaller burst, then to the
/// largest bucket there is: 1 per `MAX_PERIOD`.
pub(crate) fn extreme_policy() -> impl Strategy<Value = Policy> {
    (any_kind(), edge_quota(), edge_period(), edge_quota()).prop_map(
        |(kind, amount, period, burst)| {
            direct(kind, amount, period, burst)
                .or_else(|_| direct(kind, amount, period, 1))
                .or_else(|_| direct(kind, 1, period, burst))
                .or_else(|_| direct(kind, 1, MAX_PERIOD_NANOS, 1))
                .expect("1 per MAX_PERIOD is valid for every policy")
        },
    )
}

// ---------------------------------------------------------------------------
// Histories
// ---------------------------------------------------------------------------

/// A policy and a non-decreasing sequence of `(time, cost)` requests.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    pub(crate) policy: Policy,
    pub(crate) requests: Vec<(Timestamp, u64)>,
}

/// One request of a history: the state before it, the decision and the
/// state after it.
pub(crate) struct Step {
    now: Timestamp,
    cost: u64,
    before: State,
    decision: Decision,
    after: State,
}

impl Scenario {
    /// The time of the last request, or zero for an empty history.
    pub(crate) fn last(&self) -> Timestamp {
        self.requests.last().map_or(Timestamp::ZERO, |r| r.0)
    }

    /// Runs the history from a fresh state.
    pub(crate) fn run(&self) -> (Vec<Step>, State) {
        let mut state = self.policy.fresh();
        let mut steps = Vec::with_capacity(self.requests.len());
        for &(now, cost) in &self.requests {
            let (decision, after) = self.policy.decide(&state, now, cost);
            steps.push(Step {
                now,
                cost,
                before: state,
                decision,
                after: after.clone(),
            });
            state = after;
        }
        (steps, state)
    }
}

/// Gaps between requests, relative to `scale` (a window or a refill time):
/// often none, often a little, sometimes more than a window.
fn gap(scale: u64) -> impl Strategy<Value = u64> {
    let scale = scale.max(1);
    prop_oneof![
        3 => Just(0u64),
        3 => 0..=scale / 8 + 1,
        2 => 0..=scale,
        1 => Just(scale),
        1 => 0..=scale.saturating_mul(3),
    ]
}

/// A cost: mostly 1, else anything up to one more than the quota.
fn cost(quota: u64) -> impl Strategy<Value = u64> {
    prop_oneof![2 => Just(1u64), 3 => 0..=quota + 1, 1 => Just(quota)]
}

/// Where a history starts: zero, somewhere in the first 2^50 ns, or (when
/// `far` is set) near the end of `u64` time, where arithmetic saturates.
fn start(far: bool) -> BoxedStrategy<u64> {
    if far {
        prop_oneof![
            Just(0u64),
            0..=1u64 << 50,
            any::<u64>(),
            (u64::MAX - (1 << 20))..=u64::MAX,
        ]
        .boxed()
    } else {
        prop_oneof![Just(0u64), 1..=1_000u64, 0..=1u64 << 50].boxed()
    }
}

fn scenario_of(
    policies: impl Strategy<Value = Policy>,
    far: bool,
    max_len: usize,
) -> impl Strategy<Value = Scenario> {
    policies.prop_flat_map(move |policy| {
        let scale = nanos(policy.window());
        let quota = policy.quota();
        (
            Just(policy),
            start(far),
            proptest::collection::vec((gap(scale), cost(quota)), 0..=max_len),
        )
            .prop_map(|(policy, start, gaps)| {
                let mut now = start;
                let requests = gaps
                    .into_iter()
                    .map(|(gap, cost)| {
                        now = now.saturating_add(gap);
                        (ts(now), cost)
                    })
                    .collect();
                Scenario { policy, requests }
            })
    })
}

/// Histories of small and everyday policies, away from the end of time.
pub(crate) fn scenario() -> impl Strategy<Value = Scenario> {
    scenario_of(small_policy(), false, 40)
}

/// Histories of small, everyday and extreme policies, at any time.
pub(crate) fn wild_scenario() -> impl Strategy<Value = Scenario> {
    scenario_of(
        prop_oneof![2 => small_policy(), 1 => extreme_policy()],
        true,
        30,
    )
}

/// A time derived from `pick` that is strictly before `t` (which must be
/// positive): just before it, within a few windows of it, or anywhere.
fn earlier(t: u64, scale: u64, pick: u64) -> u64 {
    let near = scale.max(1).saturating_mul(3).min(t);
    match pick % 4 {
        0 => t - 1,
        1 | 2 => t - 1 - (pick / 4) % near,
        _ => (pick / 4) % t,
    }
}

/// The invariants every decision keeps, whatever the state: remaining at
/// most the limit, the limit is the quota, an allowed request waits for
/// nothing, and only a cost above the quota is never possible.
fn check_decision(policy: &Policy, d: &Decision, cost: u64) -> Result<(), TestCaseError> {
    prop_assert!(d.remaining() <= d.limit(), "{d:?}");
    prop_assert_eq!(d.limit(), policy.quota(), "{:?}", d);
    if d.is_allowed() {
        prop_assert_eq!(d.retry_after(), RetryAfter::NOW, "{:?}", d);
    }
    if cost > policy.quota() {
        prop_assert!(!d.is_allowed(), "cost {} > quota allowed: {:?}", cost, d);
        prop_assert_eq!(d.retry_after(), RetryAfter::Never, "{:?}", d);
    } else {
        prop_assert!(
            !d.retry_after().is_never(),
            "cost {} <= quota never: {:?}",
            cost,
            d
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// 0. The two ways of building a policy agree.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// `Policy::new(kind, &rate)` builds what the direct constructor builds,
    /// and refuses what it refuses.
    #[test]
    fn policy_new_matches_the_constructors(
        kind in any_kind(),
        amount in edge_quota(),
        period in edge_period(),
        burst in edge_quota(),
    ) {
        let expected = direct(kind, amount, period, burst);
        match via_rate(kind, amount, period, burst) {
            Ok(policy) => {
                prop_assert_eq!(policy.kind(), kind);
                prop_assert_eq!(Ok(policy), expected);
            }
            Err(_) => prop_assert!(expected.is_err()),
        }
    }
}

// ---------------------------------------------------------------------------
// 1. GCRA and the token bucket agree.
// ---------------------------------------------------------------------------

/// `(rate, period in ns, burst)` with `rate` dividing the period: `rate * k`
/// nanoseconds, or a second, minute, hour or day with a rate dividing 10^9.
fn dividing_numbers() -> impl Strategy<Value = (u64, u64, u64)> {
    let small = (1u64..=16, 1u64..=100_000, 1u64..=20).prop_map(|(r, k, b)| (r, r * k, b));
    let divisors = vec![
        1u64,
        2,
        3,
        4,
        5,
        8,
        10,
        16,
        20,
        25,
        40,
        50,
        100,
        125,
        200,
        250,
        500,
        1_000,
        1_000_000,
        1_000_000_000,
    ];
    let periods = vec![SEC, 60 * SEC, 3_600 * SEC, 86_400 * SEC];
    let everyday = (select(divisors), select(periods), 1u64..=1_000)
        .prop_filter("the rate divides the period", |(r, p, _)| p % r == 0);
    prop_oneof![small, everyday]
}

proptest! {
    #![proptest_config(config(256))]

    /// With a rate dividing the period GCRA's emission interval is exact,
    /// and it decides every request exactly as the token bucket does.
    #[test]
    fn gcra_and_token_bucket_agree(
        (rate, period, burst, requests) in dividing_numbers().prop_flat_map(|(rate, period, burst)| {
            let interval = period / rate;
            let gap = prop_oneof![
                3 => Just(0u64),
                3 => 0..=interval,
                2 => (0..=burst * 2).prop_map(move |n| n * interval),
                2 => 0..=interval.saturating_mul(burst).saturating_mul(2),
            ];
            (
                Just(rate),
                Just(period),
                Just(burst),
                (start(false), proptest::collection::vec((gap, 0..=burst + 1), 0..60)),
            )
        }).prop_map(|(rate, period, burst, (start, gaps))| {
            let mut now = start;
            let requests: Vec<(Timestamp, u64)> = gaps
                .into_iter()
                .map(|(gap, cost)| {
                    now += gap;
                    (ts(now), cost)
                })
                .collect();
            (rate, period, burst, requests)
        })
    ) {
        let period = Duration::from_nanos(period);
        let bucket = TokenBucket::new(rate, period, burst).unwrap();
        let gcra = Gcra::new(rate, period, burst).unwrap();
        prop_assert_eq!(Gcra::from_token_bucket(&bucket).unwrap(), gcra);
        let from_bucket = bucket.simulate(requests.iter().copied());
        let from_gcra = gcra.simulate(requests.iter().copied());
        for (i, (b, g)) in from_bucket.iter().zip(&from_gcra).enumerate() {
            prop_assert_eq!(b, g, "request {} {:?}", i, requests[i]);
        }
        prop_assert_eq!(bucket.quota(), gcra.quota());
        prop_assert_eq!(bucket.window(), gcra.window());
    }
}

// ---------------------------------------------------------------------------
// 2 and 3. Window bounds.
// ---------------------------------------------------------------------------

/// A limit, a window in nanoseconds and a non-decreasing history for it.
fn window_history() -> impl Strategy<Value = (u64, u64, Vec<(Timestamp, u64)>)> {
    let tiny = (1u64..=10, 1u64..=5_000);
    let everyday = (1u64..=100, select(vec![1_000_000, SEC, 60 * SEC]));
    prop_oneof![3 => tiny, 1 => everyday].prop_flat_map(|(limit, window)| {
        (
            Just(limit),
            Just(window),
            start(false),
            proptest::collection::vec((gap(window), cost(limit)), 0..60),
        )
            .prop_map(|(limit, window, start, gaps)| {
                let mut now = start;
                let requests = gaps
                    .into_iter()
                    .map(|(gap, cost)| {
                        now += gap;
                        (ts(now), cost)
                    })
                    .collect();
                (limit, window, requests)
            })
    })
}

/// The allowed requests of a history, as `(time, cost)` in nanoseconds.
fn allowed_hits(requests: &[(Timestamp, u64)], decisions: &[Decision]) -> Vec<(u64, u64)> {
    requests
        .iter()
        .zip(decisions)
        .filter(|(r, d)| d.is_allowed() && r.1 > 0)
        .map(|(r, _)| (r.0.as_nanos(), r.1))
        .collect()
}

/// Units allowed in the window-long interval `(t - window, t]`.
fn in_window_ending_at(hits: &[(u64, u64)], t: u64, window: u64) -> u64 {
    hits.iter()
        .filter(|h| h.0 <= t && h.0.saturating_add(window) > t)
        .map(|h| h.1)
        .sum()
}

proptest! {
    #![proptest_config(config(256))]

    /// No window-long interval holds more than the limit of allowed units:
    /// a hit at `a` counts in `[a, a + window)`.
    #[test]
    fn sliding_log_never_exceeds_its_limit((limit, window, requests) in window_history()) {
        let log = SlidingLog::new(limit, Duration::from_nanos(window)).unwrap();
        let decisions = log.simulate(requests.iter().copied());
        let hits = allowed_hits(&requests, &decisions);
        for &(t, _) in &hits {
            let used = in_window_ending_at(&hits, t, window);
            prop_assert!(used <= limit, "{} units in the window ending at {}", used, t);
        }
    }

    /// At most the limit in each aligned window, at most twice it in any
    /// window-long interval.
    #[test]
    fn fixed_window_bounds((limit, window, requests) in window_history()) {
        let policy = FixedWindow::new(limit, Duration::from_nanos(window)).unwrap();
        let decisions = policy.simulate(requests.iter().copied());
        let hits = allowed_hits(&requests, &decisions);
        for &(t, _) in &hits {
            let used = in_window_ending_at(&hits, t, window);
            prop_assert!(used <= 2 * limit, "{} units in the window ending at {}", used, t);
            let start = t - t % window;
            prop_assert_eq!(policy.window_start(ts(t)), ts(start));
            let aligned: u64 =
                hits.iter().filter(|h| h.0 >= start && h.0 - start < window).map(|h| h.1).sum();
            prop_assert!(aligned <= limit, "{} units in the window starting at {}", aligned, start);
        }
    }
}

// ---------------------------------------------------------------------------
// 4, 5 and 6. Time going back, cost 0, denials.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// At any `t1` before the last request's time, a request is allowed only
    /// if it would be at that last time, with no more remaining.
    #[test]
    fn clock_going_back_never_grants_more(
        scenario in wild_scenario(),
        picks in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..6),
    ) {
        let policy = &scenario.policy;
        let scale = nanos(policy.window());
        let (steps, last_state) = scenario.run();
        // The final state against the history's last time, and every earlier
        // state against the time of the request that produced it.
        let mut states = vec![(last_state, scenario.last())];
        states.extend(steps.into_iter().map(|s| (s.after, s.now)));
        for (state, last) in &states {
            let last = last.as_nanos();
            if last == 0 {
                continue;
            }
            for &(pick, c) in &picks {
                let t1 = earlier(last, scale, pick);
                let c = c % (policy.quota() + 2);
                let (back, _) = policy.decide(state, ts(t1), c);
                let (then, _) = policy.decide(state, ts(last), c);
                prop_assert!(
                    !back.is_allowed() || then.is_allowed(),
                    "cost {} allowed at {} but not at {}: {:?} / {:?}", c, t1, last, back, then
                );
                // `remaining` means "left after the request" when allowed and
                // "left now" when denied, so it is compared between decisions
                // of the same outcome, and always between the two peeks.
                if back.is_allowed() == then.is_allowed() {
                    prop_assert!(
                        back.remaining() <= then.remaining(),
                        "cost {} at {} leaves more than at {}: {:?} / {:?}", c, t1, last, back, then
                    );
                }
                let (back, then) = (policy.peek(state, ts(t1)), policy.peek(state, ts(last)));
                prop_assert!(
                    back.remaining() <= then.remaining(),
                    "peek at {} shows more than at {}: {:?} / {:?}", t1, last, back, then
                );
            }
        }
    }

    /// A cost of 0 returns the state it was given, at any time, from every
    /// state of a history.
    #[test]
    fn cost_zero_never_changes_a_state(
        scenario in wild_scenario(),
        times in proptest::collection::vec(any::<u64>(), 1..4),
    ) {
        let policy = &scenario.policy;
        let (steps, last_state) = scenario.run();
        let mut states: Vec<(State, u64)> =
            steps.into_iter().map(|s| (s.before, s.now.as_nanos())).collect();
        states.push((last_state, scenario.last().as_nanos()));
        for (state, at) in &states {
            let mut probes = vec![0, 1, *at, at.saturating_sub(1), at.saturating_add(1), u64::MAX];
            probes.extend(times.iter().copied());
            for t in probes {
                let (d, next) = policy.decide(state, ts(t), 0);
                prop_assert_eq!(&next, state, "at {}", t);
                // (Not asserted: that a cost of 0 is allowed. GCRA denies it
                // at a time before the history, where the TAT is more than
                // the burst tolerance ahead; the other policies allow it.)
                prop_assert_eq!(policy.peek(state, ts(t)), d);
                check_decision(policy, &d, 0)?;
            }
        }
    }

    /// Every denial of a history, and of later probes with any time and
    /// cost, returns the state unchanged.
    #[test]
    fn denied_requests_leave_the_state_unchanged(
        scenario in wild_scenario(),
        probes in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..6),
    ) {
        let policy = &scenario.policy;
        let (steps, state) = scenario.run();
        for step in &steps {
            check_decision(policy, &step.decision, step.cost)?;
            if !step.decision.is_allowed() {
                prop_assert_eq!(&step.after, &step.before, "denied at {:?}", step.now);
            }
        }
        let last = scenario.last().as_nanos();
        for (t, c) in probes {
            let quota = policy.quota();
            for (t, c) in [(t, c), (last.saturating_add(t % 1_000), c % (quota + 2)), (t, u64::MAX)] {
                let (d, next) = policy.decide(&state, ts(t), c);
                check_decision(policy, &d, c)?;
                if !d.is_allowed() {
                    prop_assert_eq!(&next, &state, "denied at {} cost {}", t, c);
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 7. No input panics.
// ---------------------------------------------------------------------------

pub(crate) fn any_u64() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(MAX_QUOTA),
        Just(MAX_QUOTA + 1),
        Just(1u64 << 62),
        Just(1u64 << 63),
        0u64..=64,
        any::<u64>(),
    ]
}

fn any_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        Just(0i64),
        Just(-1i64),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(1i64 << 62),
        Just(-(1i64 << 62)),
        any::<i64>(),
    ]
}

fn any_time() -> impl Strategy<Value = Timestamp> {
    prop_oneof![
        Just(0u64),
        Just(1u64),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(1u64 << 62),
        Just(1u64 << 63),
        0u64..=1 << 40,
        any::<u64>(),
    ]
    .prop_map(ts)
}

fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::from_nanos(1)),
        Just(MAX_PERIOD),
        Just(MAX_PERIOD - Duration::from_nanos(1)),
        Just(MAX_PERIOD + Duration::from_nanos(1)),
        Just(Duration::from_nanos(u64::MAX)),
        Just(Duration::MAX),
        any_u64().prop_map(Duration::from_nanos),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

fn any_token_bucket_state() -> impl Strategy<Value = TokenBucketState> {
    (any_i64(), any_time(), any::<u64>()).prop_map(|(level, at, unit)| TokenBucketState {
        level,
        at,
        unit,
    })
}

pub(crate) fn any_state_of(kind: PolicyKind) -> BoxedStrategy<State> {
    match kind {
        PolicyKind::TokenBucket => any_token_bucket_state()
            .prop_map(State::TokenBucket)
            .boxed(),
        PolicyKind::Gcra => any_time()
            .prop_map(|tat| State::Gcra(GcraState { tat }))
            .boxed(),
        PolicyKind::FixedWindow => (any_time(), any_u64())
            .prop_map(|(start, count)| State::FixedWindow(FixedWindowState { start, count }))
            .boxed(),
        PolicyKind::SlidingLog => proptest::collection::vec(
            (any_time(), any_u64()).prop_map(|(at, cost)| Hit { at, cost }),
            0..6,
        )
        .prop_map(|hits| State::SlidingLog(SlidingLogState { hits }))
        .boxed(),
        PolicyKind::SlidingWindow => (any_time(), any_u64(), any_u64())
            .prop_map(|(start, previous, current)| {
                State::SlidingWindow(SlidingWindowState {
                    start,
                    previous,
                    current,
                })
            })
            .boxed(),
    }
}

/// Which policy a state belongs to.
fn shape(state: &State) -> PolicyKind {
    match state {
        State::TokenBucket(_) => PolicyKind::TokenBucket,
        State::Gcra(_) => PolicyKind::Gcra,
        State::FixedWindow(_) => PolicyKind::FixedWindow,
        State::SlidingLog(_) => PolicyKind::SlidingLog,
        State::SlidingWindow(_) => PolicyKind::SlidingWindow,
    }
}

/// A policy and an arbitrary state: usually of its own shape, sometimes of
/// another policy's (which counts as fresh).
pub(crate) fn policy_and_any_state() -> impl Strategy<Value = (Policy, State)> {
    prop_oneof![2 => extreme_policy(), 1 => small_policy()].prop_flat_map(|policy| {
        let own = any_state_of(policy.kind());
        let other = any_kind().prop_flat_map(any_state_of);
        (Just(policy), prop_oneof![4 => own, 1 => other])
    })
}

/// An extreme or small token bucket.
fn any_token_bucket() -> impl Strategy<Value = TokenBucket> {
    let extreme = (edge_quota(), edge_period(), edge_quota()).prop_map(|(rate, period, burst)| {
        let p = |n| Duration::from_nanos(n);
        TokenBucket::new(rate, p(period), burst)
            .or_else(|_| TokenBucket::new(rate, p(period), 1))
            .or_else(|_| TokenBucket::new(1, p(period), burst))
            .or_else(|_| TokenBucket::new(1, MAX_PERIOD, 1))
            .unwrap()
    });
    let small = (1u64..=8, 1u64..=1_000, 1u64..=10).prop_map(|(rate, period, burst)| {
        TokenBucket::new(rate, Duration::from_nanos(period), burst).unwrap()
    });
    prop_oneof![2 => extreme, 1 => small]
}

/// What a step of the no-panic test does.
#[derive(Clone, Debug)]
enum Op {
    Decide(Timestamp, u64),
    Refund(Timestamp, u64),
}

fn any_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any_time(), any_u64()).prop_map(|(t, c)| Op::Decide(t, c)),
        1 => (any_time(), any_u64()).prop_map(|(t, u)| Op::Refund(t, u)),
    ]
}

proptest! {
    #![proptest_config(config(512))]

    /// Constructors answer Ok or Err for any numbers, and accept exactly the
    /// numbers within the documented bounds (when they fit).
    #[test]
    fn constructors_never_panic(
        amount in any_u64(),
        period in any_duration(),
        burst in any_u64(),
    ) {
        let quota_ok = |n: u64| (1..=MAX_QUOTA).contains(&n);
        let period_ok = !period.is_zero() && period <= MAX_PERIOD;
        let windows = [
            FixedWindow::new(amount, period).map(|p| p.quota()),
            SlidingLog::new(amount, period).map(|p| p.quota()),
            SlidingWindow::new(amount, period).map(|p| p.quota()),
        ];
        for window in windows {
            prop_assert_eq!(window.is_ok(), quota_ok(amount) && period_ok);
        }
        let bucket = TokenBucket::new(amount, period, burst);
        let gcra = Gcra::new(amount, period, burst);
        if !(quota_ok(amount) && quota_ok(burst) && period_ok) {
            prop_assert!(bucket.is_err() && gcra.is_err());
        }
        for policy in [bucket.map(Policy::from), gcra.map(Policy::from)].into_iter().flatten() {
            let _ = (policy.quota(), policy.window(), policy.fresh());
        }
        if let Ok(rate) = Rate::new(amount, period) {
            for rate in [Ok(rate), rate.with_burst(burst)] {
                let Ok(rate) = rate else { continue };
                for kind in PolicyKind::ALL {
                    if let Ok(policy) = Policy::new(kind, &rate) {
                        prop_assert_eq!(policy.quota(), match kind {
                            PolicyKind::TokenBucket | PolicyKind::Gcra => rate.burst(),
                            _ => rate.amount(),
                        });
                    }
                }
            }
        } else {
            prop_assert!(!(quota_ok(amount) && period_ok));
        }
        prop_assert_eq!(Rate::new(amount, period).is_ok(), quota_ok(amount) && period_ok);
    }

    /// Any valid policy, any state (of its shape or not), any times, costs
    /// and refunds: no panic, and every decision keeps its invariants.
    ///
    /// It found a fixed window that panicked on a count above its limit
    /// (`attempt to subtract with overflow` in `FixedWindow::decide`),
    /// fixed since; `fixed_window_peek_with_a_count_above_the_limit` keeps
    /// the minimized case.
    #[test]
    fn no_input_panics(
        (policy, state) in policy_and_any_state(),
        ops in proptest::collection::vec(any_op(), 1..8),
        probe in any_time(),
    ) {
        let mut state = state;
        for op in ops {
            let _ = policy.expires_at(&state);
            let d = policy.peek(&state, probe);
            check_decision(&policy, &d, 0)?;
            state = match op {
                Op::Decide(now, cost) => {
                    let (d, next) = policy.decide(&state, now, cost);
                    check_decision(&policy, &d, cost)?;
                    if !d.is_allowed() || cost == 0 {
                        // A state of another policy's shape counts as fresh:
                        // what comes back is the policy's own fresh state.
                        if shape(&state) == policy.kind() {
                            prop_assert_eq!(&next, &state);
                        } else {
                            prop_assert_eq!(&next, &policy.fresh());
                        }
                    }
                    next
                }
                Op::Refund(now, units) => {
                    let next = policy.refund(&state, now, units);
                    if units == 0 && shape(&state) == policy.kind() {
                        prop_assert_eq!(&next, &state);
                    }
                    next
                }
            };
        }
        let _ = policy.expires_at(&state);
    }

    /// The token bucket's extras (reserve, cancel, wait, tokens) on any
    /// bucket and state, with any times, costs and maximum waits.
    ///
    /// It found a reservation into full debt that overflowed
    /// (`attempt to subtract with overflow` in `state_with_deficit`), fixed
    /// since; `token_bucket_reserving_into_full_debt_does_not_overflow`
    /// keeps the minimized case.
    #[test]
    fn token_bucket_extras_never_panic(
        bucket in any_token_bucket(),
        // An empty bucket at time 0 is the edge of the debt arithmetic.
        state in prop_oneof![
            2 => any_token_bucket_state(),
            1 => Just(TokenBucketState { level: 0, at: Timestamp::ZERO, unit: 0 }),
        ],
        steps in proptest::collection::vec(
            (any_time(), any_u64(), any_duration(), any_time()),
            1..6,
        ),
        fresh in any::<bool>(),
    ) {
        let mut state = if fresh { bucket.fresh() } else { state };
        for (now, cost, max_wait, later) in steps {
            let cost = if cost % 2 == 0 { cost } else { cost % (bucket.burst() + 1) };
            let _ = bucket.tokens(&state, now);
            let wait = bucket.wait(&state, now, cost);
            prop_assert_eq!(wait.is_never(), cost > bucket.burst());
            match bucket.reserve(&state, now, cost, max_wait) {
                Ok((reservation, next)) => {
                    prop_assert!(cost <= bucket.burst());
                    prop_assert_eq!(reservation.cost(), cost);
                    prop_assert!(reservation.delay() <= max_wait);
                    prop_assert_eq!(wait, RetryAfter::After(reservation.delay()));
                    let _ = bucket.tokens(&next, later);
                    let _ = bucket.expires_at(&next);
                    let cancelled = bucket.cancel(&next, &reservation, later);
                    let d = bucket.peek(&cancelled, later);
                    prop_assert!(d.remaining() <= d.limit());
                    state = if later.as_nanos() % 2 == 0 { cancelled } else { next };
                }
                Err(_) => {
                    let (d, next) = bucket.decide(&state, now, cost);
                    prop_assert!(d.remaining() <= d.limit());
                    state = next;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 8. Retry-after.
// ---------------------------------------------------------------------------

/// If `cost` (at most the quota) is denied at `t` from `state` with a wait
/// `w`, it is allowed at `t + w`, and (when `exact`) still denied at
/// `t + w - 1 ns`.
fn check_retry(
    policy: &Policy,
    state: &State,
    t: u64,
    cost: u64,
    exact: bool,
) -> Result<(), TestCaseError> {
    let (d, _) = policy.decide(state, ts(t), cost);
    if d.is_allowed() || cost > policy.quota() {
        return Ok(());
    }
    let RetryAfter::After(wait) = d.retry_after() else {
        return Err(TestCaseError::fail(format!(
            "cost {cost} <= quota never: {d:?}"
        )));
    };
    let wait = nanos(wait);
    let Some(then) = t.checked_add(wait) else {
        return Ok(());
    };
    let (later, _) = policy.decide(state, ts(then), cost);
    prop_assert!(
        later.is_allowed(),
        "cost {} denied at {} with a wait of {} ns, denied again at {}: {:?}",
        cost,
        t,
        wait,
        then,
        later
    );
    if exact && wait > 0 {
        let (sooner, _) = policy.decide(state, ts(then - 1), cost);
        prop_assert!(
            !sooner.is_allowed(),
            "cost {} denied at {} with a wait of {} ns, but allowed 1 ns sooner at {}",
            cost,
            t,
            wait,
            then - 1
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    /// Every denial of a history, and of probes after it: waiting the
    /// retry-after is enough, and one nanosecond less is not.
    ///
    /// The sliding window counter is checked for the first half too. Its
    /// wait is computed exactly (the least elapsed time at which the
    /// rounded-up weighted count fits), so the second half holds for it as
    /// well, and is checked.
    #[test]
    fn retry_after_is_right(
        scenario in scenario(),
        probes in proptest::collection::vec((any::<u64>(), any::<u64>()), 1..6),
    ) {
        let policy = &scenario.policy;
        let exact = true;
        let (steps, state) = scenario.run();
        for step in &steps {
            check_retry(policy, &step.before, step.now.as_nanos(), step.cost, exact)?;
        }
        let last = scenario.last().as_nanos();
        let scale = nanos(policy.window()).max(1);
        for (gap, c) in probes {
            let t = last + gap % scale.saturating_mul(2);
            let c = 1 + c % policy.quota();
            check_retry(policy, &state, t, c, exact)?;
        }
    }
}

// ---------------------------------------------------------------------------
// 9. Refunds.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// Refunding what an allowed request took restores at least the
    /// remaining before it; no refund banks quota past whole: after any
    /// refund, the whole quota at once and then one more unit is too much.
    #[test]
    fn refunds_restore_but_never_bank(
        scenario in scenario(),
        probes in proptest::collection::vec((any::<u64>(), any::<u64>(), any_u64()), 1..6),
    ) {
        let policy = &scenario.policy;
        let quota = policy.quota();
        let scale = nanos(policy.window()).max(1);
        let (steps, state) = scenario.run();
        let last = scenario.last().as_nanos();
        // Every allowed request of the history, refunded at its own time.
        for step in steps.iter().filter(|s| s.decision.is_allowed() && s.cost > 0) {
            let before = policy.peek(&step.before, step.now);
            let refunded = policy.refund(&step.after, step.now, step.cost);
            let restored = policy.peek(&refunded, step.now);
            prop_assert!(
                restored.remaining() >= before.remaining(),
                "refunding {} at {:?}: {:?} before, {:?} after", step.cost, step.now, before, restored
            );
        }
        for (pick, c, units) in probes {
            // Any time: before the history's end, at it, or after it.
            let t = match pick % 3 {
                0 if last > 0 => earlier(last, scale, pick / 3),
                1 => last,
                _ => last + (pick / 3) % scale.saturating_mul(3),
            };
            let c = 1 + c % quota;
            let before = policy.peek(&state, ts(t));
            let (d, taken) = policy.decide(&state, ts(t), c);
            if d.is_allowed() {
                let refunded = policy.refund(&taken, ts(t), c);
                let restored = policy.peek(&refunded, ts(t));
                prop_assert!(
                    restored.remaining() >= before.remaining(),
                    "refunding {} at {}: {:?} before, {:?} after", c, t, before, restored
                );
            }
            let refunded = policy.refund(&state, ts(t), units);
            let d = policy.peek(&refunded, ts(t));
            prop_assert!(d.remaining() <= quota);
            let (whole, next) = policy.decide(&refunded, ts(t), quota);
            if whole.is_allowed() {
                let (more, _) = policy.decide(&next, ts(t), 1);
                prop_assert!(
                    !more.is_allowed(),
                    "after refunding {} at {}, the whole quota and one more were allowed", units, t
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// 10. Expiry.
// ---------------------------------------------------------------------------

proptest! {
    #![proptest_config(config(256))]

    /// At `max(expires_at, last)` every state of a history is whole again,
    /// and decides any request as a fresh state would.
    #[test]
    fn states_are_fresh_at_their_expiry(scenario in scenario(), cost in any::<u64>()) {
        let policy = &scenario.policy;
        let (steps, state) = scenario.run();
        let mut states: Vec<(State, Timestamp)> = steps.into_iter().map(|s| (s.after, s.now)).collect();
        states.push((state, scenario.last()));
        let fresh = policy.fresh();
        let cost = cost % (policy.quota() + 2);
        for (state, last) in &states {
            let at = policy.expires_at(state).max(*last);
            let d = policy.peek(state, at);
            prop_assert_eq!(d.remaining(), policy.quota(), "at {:?}: {:?} for {:?}", at, d, state);
            prop_assert_eq!(
                policy.decide(state, at, cost).0,
                policy.decide(&fresh, at, cost).0,
                "cost {} at {:?} for {:?}", cost, at, state
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Minimized counter-examples of the no-panic property (7).
// ---------------------------------------------------------------------------

/// Found by `token_bucket_extras_never_panic`. A bucket whose full level is
/// exactly 2^62 units (here 1 per `MAX_PERIOD`, burst 1) reserves its whole
/// burst twice at the same instant: the second reservation owes 2^62 units
/// (`owed <= MAX_SCALED` passes), and the next level, `full - (deficit +
/// need)` = 2^62 - 2^63, was computed as `full as i64 - (2^63 as i64)`,
/// which overflowed (`attempt to subtract with overflow` in
/// `state_with_deficit`, debug builds) until it was fixed. Expected: `Ok`
/// with a delay of 2^62 ns and level -2^62.
#[test]
fn token_bucket_reserving_into_full_debt_does_not_overflow() {
    let bucket = TokenBucket::new(1, MAX_PERIOD, 1).unwrap();
    let (first, state) = bucket
        .reserve(&bucket.fresh(), Timestamp::ZERO, 1, Duration::MAX)
        .unwrap();
    assert_eq!(first.delay(), Duration::ZERO);
    let (second, state) = bucket
        .reserve(&state, Timestamp::ZERO, 1, Duration::MAX)
        .unwrap();
    assert_eq!(second.delay(), MAX_PERIOD);
    assert_eq!(state.level, -(1i64 << 62));
}

/// Found by `no_input_panics`. A fixed-window state counting more than the
/// limit (written under a larger limit, or corrupt) panicked on a cost of 0
/// in its own window until it was fixed: `cost <= limit.saturating_sub(count)`
/// admits cost 0, and the remaining was then computed as `limit - count`
/// (`attempt to subtract with overflow`, `FixedWindow::decide`). Expected:
/// allowed with 0 remaining and the state unchanged.
#[test]
fn fixed_window_peek_with_a_count_above_the_limit() {
    let window = FixedWindow::new(1, Duration::from_nanos(10)).unwrap();
    let state = FixedWindowState {
        start: ts(10),
        count: 2,
    };
    let (d, next) = window.decide(&state, ts(15), 0);
    assert_eq!(next, state);
    assert_eq!(d.remaining(), 0);
    assert_eq!(window.peek(&state, ts(15)).remaining(), 0);
}

/// With the clock gone back before a state's time, waits are still told from
/// the caller's `now`: waiting the retry-after from there is enough.
#[test]
fn retry_after_is_enough_when_the_clock_went_back() {
    let rate = Rate::per_second(1).unwrap();
    for kind in PolicyKind::ALL {
        let policy = Policy::new(kind, &rate).unwrap();
        let (_, state) = policy.decide(&policy.fresh(), Timestamp::from_secs(10), 1);
        let now = Timestamp::from_millis(5_500);
        let (denied, _) = policy.decide(&state, now, 1);
        let wait = denied.retry_after().duration().unwrap();
        assert!(
            policy.decide(&state, now + wait, 1).0.is_allowed(),
            "{kind}: wait {wait:?}"
        );
    }
}

proptest! {
    /// Two different lists of key parts never make the same key, whatever
    /// separators and escapes the parts hold.
    #[test]
    fn composed_keys_never_meet(
        a in prop::collection::vec(prop::collection::vec(prop::sample::select(vec![b'a', b'|', b'\\', b'b']), 0..4), 1..4),
        b in prop::collection::vec(prop::collection::vec(prop::sample::select(vec![b'a', b'|', b'\\', b'b']), 0..4), 1..4),
    ) {
        let key = |parts: &Vec<Vec<u8>>| ratekeeper::key::compose(parts.iter());
        prop_assert_eq!(key(&a) == key(&b), a == b, "{:?} {:?}", a, b);
        // One part is its own escaped form, composed or not.
        prop_assert_eq!(&ratekeeper::key::compose([&a[0]]), &*ratekeeper::key::escape_part(&a[0]));
    }
}
