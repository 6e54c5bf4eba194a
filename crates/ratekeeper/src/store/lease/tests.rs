//! Several leasing nodes on one store, replayed through the policy alone.

use std::time::Duration;

use futures_executor::block_on;
use proptest::prelude::*;

use super::{Hold, LeaseSettings, Leased};
use crate::clock::{Clock, ManualClock};
use crate::policy::{Algorithm, PolicyKind};
use crate::store::{Limit, MemoryStore, Store};
use crate::{Policy, Rate, Timestamp};

/// What happened on the nodes, in the order it happened.
#[derive(Clone, Debug)]
enum Step {
    /// Time passes on every node and in the store.
    Wait(Duration),
    /// A request of `cost` on node `node`.
    Check { node: usize, cost: u64 },
    /// Node `node` gives back `units` of what it admitted (a failed request).
    Refund { node: usize, units: u64 },
    /// Node `node` gives back its idle units.
    Sweep { node: usize },
}

fn step(nodes: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..400).prop_map(|ms| Step::Wait(Duration::from_millis(ms))),
        1 => (0u64..3).prop_map(|us| Step::Wait(Duration::from_micros(us * 337))),
        12 => (0..nodes, 1u64..4).prop_map(|(node, cost)| Step::Check { node, cost }),
        1 => (0..nodes, 1u64..3).prop_map(|(node, units)| Step::Refund { node, units }),
        1 => (0..nodes).prop_map(|node| Step::Sweep { node }),
    ]
}

/// `steps` for `nodes` nodes, keeping those `keep` picks.
fn on_nodes(steps: Vec<Step>, nodes: usize, keep: impl Fn(&Step) -> bool) -> Vec<Step> {
    steps
        .into_iter()
        .filter(keep)
        .map(|s| match s {
            Step::Check { node, cost } => Step::Check {
                node: node % nodes,
                cost,
            },
            Step::Refund { node, units } => Step::Refund {
                node: node % nodes,
                units,
            },
            Step::Sweep { node } => Step::Sweep { node: node % nodes },
            wait => wait,
        })
        .collect()
}

/// A manual clock at 1 s and an in-memory store on it.
fn manual_store() -> (ManualClock, MemoryStore<ManualClock>) {
    let clock = ManualClock::new(Timestamp::from_secs(1));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap();
    (clock, store)
}

fn settings() -> LeaseSettings {
    LeaseSettings {
        max_chunk: 40,
        chunk_for: Duration::from_millis(300),
        lifetime: Duration::from_secs(2),
        max_keys: 64,
        idle: Duration::from_millis(500),
        ..LeaseSettings::default()
    }
}

/// Runs `steps` on `nodes` leasing nodes over one in-memory store, and
/// returns what they admitted: `(time, cost)` for each check allowed and
/// `(time, units)` refunds, as the true history of the key.
fn run(policy: &Policy, nodes: usize, steps: &[Step]) -> Vec<(Timestamp, Event)> {
    run_counting(policy, nodes, steps).0
}

/// [`run`], and the units the nodes refunded at the store itself.
fn run_counting(policy: &Policy, nodes: usize, steps: &[Step]) -> (Vec<(Timestamp, Event)>, u64) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    let store = MemoryStore::builder()
        .clock(clock.clone())
        .background_sweep(false)
        .build()
        .unwrap();
    let leased: Vec<_> = (0..nodes)
        .map(|_| {
            Leased::builder(store.clone())
                .clock(clock.clone())
                .settings(settings())
                .build()
        })
        .collect();
    let limit = Limit::new("leased", policy.clone()).unwrap();
    let mut admitted_per_node = vec![0u64; nodes];
    let mut history = Vec::new();
    block_on(async {
        for step in steps {
            let now = clock.now();
            match *step {
                Step::Wait(by) => clock.advance(by),
                Step::Check { node, cost } => {
                    let outcome = leased[node].check(&limit, b"k", cost).await.unwrap();
                    if outcome.is_allowed() {
                        admitted_per_node[node] += cost;
                        history.push((now, Event::Admit(cost)));
                    }
                }
                Step::Refund { node, units } => {
                    // Only what this node admitted: a refund gives back a
                    // request that was counted.
                    let units = units.min(admitted_per_node[node]);
                    if units > 0 {
                        leased[node].refund(&limit, b"k", units).await.unwrap();
                        admitted_per_node[node] -= units;
                        history.push((now, Event::Refund(units)));
                    }
                }
                Step::Sweep { node } => {
                    leased[node].sweep().await;
                }
            }
        }
    });
    let at_store = leased.iter().map(|l| l.stats().refunded_at_store).sum();
    (history, at_store)
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Admit(u64),
    Refund(u64),
}

/// Whether the policy alone, given the nodes' admissions at the moments
/// they were made (and the refunds), admits every one of them.
fn replay(policy: &Policy, history: &[(Timestamp, Event)]) -> Result<(), String> {
    match over_admitted(policy, history) {
        0 => Ok(()),
        over => Err(format!(
            "{over} units admitted over the limit in {history:?}"
        )),
    }
}

/// The units the nodes admitted that the policy alone, fed the same
/// history, refuses (each counted, then left out of the state).
fn over_admitted(policy: &Policy, history: &[(Timestamp, Event)]) -> u64 {
    let mut state = policy.fresh();
    let mut over = 0;
    for &(at, event) in history {
        match event {
            Event::Admit(cost) => {
                let (decision, next) = policy.decide(&state, at, cost);
                if decision.is_allowed() {
                    state = next;
                } else {
                    over += cost;
                }
            }
            Event::Refund(units) => state = policy.refund(&state, at, units),
        }
    }
    over
}

fn policies() -> impl Strategy<Value = Policy> {
    let kinds = prop::sample::select(PolicyKind::ALL.to_vec());
    (kinds, 5u64..60, prop::sample::select(vec![1u64, 2, 5])).prop_map(|(kind, amount, secs)| {
        let rate = Rate::new(amount, Duration::from_secs(secs)).unwrap();
        Policy::new(kind, &rate).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The promise: whatever the nodes do, the policy alone, fed what
    /// they admitted when they admitted it, admits all of it.
    #[test]
    fn nodes_leasing_from_one_store_never_admit_more_than_the_policy(
        policy in policies(),
        nodes in 1usize..5,
        steps in prop::collection::vec(step(4), 1..400),
    ) {
        let steps = on_nodes(steps, nodes, |s| !matches!(s, Step::Refund { .. }));
        let history = run(&policy, nodes, &steps);
        prop_assert!(replay(&policy, &history).is_ok(), "{:?}", replay(&policy, &history));
    }

    /// With refunds, a refund may give back more than the policy alone
    /// would (units of a window or a debt that has passed, counted off the
    /// current one), but never more than it names.
    #[test]
    fn refunds_credit_no_more_than_they_name(
        policy in policies(),
        nodes in 1usize..5,
        steps in prop::collection::vec(step(4), 1..400),
    ) {
        let steps = on_nodes(steps, nodes, |_| true);
        let history = run(&policy, nodes, &steps);
        let refunded: u64 = history
            .iter()
            .map(|(_, e)| match e {
                Event::Refund(units) => *units,
                Event::Admit(_) => 0,
            })
            .sum();
        let over = over_admitted(&policy, &history);
        prop_assert!(over <= refunded, "{over} over, {refunded} refunded: {history:?}");
    }

    /// Buckets refunded on the node that decided never refund at the
    /// store, and are exact.
    #[test]
    fn buckets_refunded_where_they_were_decided_admit_exactly(
        policy in policies().prop_filter("a bucket", |p| matches!(p.kind(), PolicyKind::TokenBucket | PolicyKind::Gcra)),
        nodes in 1usize..5,
        steps in prop::collection::vec(step(4), 1..400),
    ) {
        // Refunds made only on the node that admitted, never swept away.
        let steps = on_nodes(steps, nodes, |s| !matches!(s, Step::Sweep { .. }));
        let (history, at_store) = run_counting(&policy, nodes, &steps);
        // A node keeps the record of what it decided while it is counted.
        prop_assert_eq!(at_store, 0);
        prop_assert!(replay(&policy, &history).is_ok(), "{:?}", replay(&policy, &history));
    }
}

/// Demand above the limit from several nodes, for a whole window: the
/// nodes admit the limit less at most what leases left unused, and most
/// decisions are taken on the nodes.
#[test]
fn a_busy_key_is_decided_on_its_nodes_and_admits_nearly_the_limit() {
    for kind in [
        PolicyKind::FixedWindow,
        PolicyKind::SlidingWindow,
        PolicyKind::TokenBucket,
        PolicyKind::Gcra,
    ] {
        let rate = Rate::new(3_000, Duration::from_secs(60)).unwrap();
        let policy = Policy::new(kind, &rate).unwrap();
        // Three times the limit over one minute, from four nodes in turn.
        let mut steps = Vec::new();
        for _ in 0..600 {
            for node in 0..4 {
                for _ in 0..4 {
                    steps.push(Step::Check { node, cost: 1 });
                }
            }
            steps.push(Step::Wait(Duration::from_millis(100)));
        }
        let history = run(&policy, 4, &steps);
        replay(&policy, &history).unwrap();
        let admitted: u64 = history
            .iter()
            .map(|(_, e)| match e {
                Event::Admit(c) => *c,
                Event::Refund(_) => 0,
            })
            .sum();
        let quota = policy.quota();
        assert!(
            admitted >= quota * 98 / 100,
            "{kind}: {admitted} of {quota}"
        );
    }
}

#[test]
fn the_sliding_log_never_holds_units() {
    let rate = Rate::new(10, Duration::from_secs(1)).unwrap();
    let policy = Policy::new(PolicyKind::SlidingLog, &rate).unwrap();
    assert!(!Hold::possible(&policy));
    let d = crate::Decision::allowed(10, 5, Duration::from_secs(1));
    assert_eq!(Hold::after(&policy, &d).safe(5, Duration::ZERO), 0);
}

#[test]
fn held_token_bucket_units_drain_as_the_store_refills() {
    let policy = Policy::from(crate::Gcra::per_second(10).unwrap());
    // 4 units taken, the bucket 900 ms from full: each unit refills in
    // 100 ms, the top 4 of the 9 in debt are ours.
    let d = crate::Decision::allowed(10, 1, Duration::from_millis(900));
    let hold = Hold::after(&policy, &d);
    assert_eq!(hold.safe(4, Duration::ZERO), 4);
    assert_eq!(hold.safe(4, Duration::from_millis(499)), 4);
    assert_eq!(hold.safe(4, Duration::from_millis(650)), 2);
    assert_eq!(hold.safe(4, Duration::from_millis(800)), 0);
    assert_eq!(hold.deadline(4), Some(Duration::from_nanos(499_999_999)));
}

#[test]
fn a_cold_key_takes_only_its_cost_and_a_flood_of_keys_holds_nothing() {
    let (clock, store) = manual_store();
    let leased = Leased::builder(store.clone())
        .clock(clock.clone())
        .settings(settings())
        .build();
    let limit = Limit::new(
        "flood",
        crate::FixedWindow::new(1_000, Duration::from_secs(3_600)).unwrap(),
    )
    .unwrap();
    block_on(async {
        for n in 0..5_000u32 {
            let key = n.to_be_bytes();
            assert!(leased.check(&limit, &key, 1).await.unwrap().is_allowed());
            clock.advance(Duration::from_millis(1));
        }
    });
    assert_eq!(leased.stats().leases, 0);
    assert_eq!(leased.held(), 0);
    // Each of them took exactly one unit in the store.
    let peek = block_on(store.peek(&limit, &7u32.to_be_bytes())).unwrap();
    assert_eq!(peek.remaining(), 999);
}

#[test]
fn units_given_back_are_there_for_the_next_node() {
    let (clock, store) = manual_store();
    let node = Leased::builder(store.clone())
        .clock(clock.clone())
        .settings(settings())
        .build();
    let limit = Limit::new(
        "back",
        crate::FixedWindow::new(1_000, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    block_on(async {
        for _ in 0..200 {
            assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        assert!(node.stats().leases > 0);
        let held = node.held();
        assert!(held > 0);
        let before = store.peek(&limit, b"k").await.unwrap().remaining();
        assert_eq!(before + held + 200, 1_000);
        assert_eq!(node.give_back_all().await, held);
        assert_eq!(store.peek(&limit, b"k").await.unwrap().remaining(), 800);
        assert_eq!(node.held(), 0);
    });
}

#[test]
fn a_report_spends_what_the_node_holds_and_counts_the_rest_at_the_store() {
    let (clock, store) = manual_store();
    let node = Leased::builder(store.clone())
        .clock(clock.clone())
        .settings(settings())
        .build();
    let limit = Limit::new(
        "reported",
        crate::FixedWindow::new(1_000, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    block_on(async {
        for _ in 0..200 {
            assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        let held = node.held();
        assert!(held > 0);
        // What the node holds: spent here, no store call.
        let calls = node.stats().store_calls;
        assert!(node.report(&limit, b"k", held).await.unwrap().is_allowed());
        assert_eq!(node.stats().store_calls, calls);
        assert_eq!(node.held(), 0);
        // Nothing held: counted at the store.
        assert!(node.report(&limit, b"k", 50).await.unwrap().is_allowed());
        assert_eq!(node.stats().store_calls, calls + 1);
        // Every unit counted once: 200 checks and held + 50 reported.
        node.give_back_all().await;
        let left = store.peek(&limit, b"k").await.unwrap().remaining();
        assert_eq!(left, 1_000 - 200 - held - 50);
        // Past what is left: counted all the same, and then refused.
        let over = node.report(&limit, b"k", left + 10).await.unwrap();
        assert!(!over.is_allowed());
        assert!(!node.check(&limit, b"k", 1).await.unwrap().is_allowed());
    });
}

/// A store whose calls wait until a gate opens.
struct Gated {
    store: MemoryStore<ManualClock>,
    open: std::sync::atomic::AtomicBool,
    /// Calls fail while this is set.
    failing: std::sync::atomic::AtomicBool,
    opened: event_listener::Event,
    calls: std::sync::atomic::AtomicU64,
}

impl Gated {
    fn new(clock: &ManualClock) -> std::sync::Arc<Gated> {
        std::sync::Arc::new(Gated {
            store: MemoryStore::builder()
                .clock(clock.clone())
                .background_sweep(false)
                .build()
                .unwrap(),
            open: true.into(),
            failing: false.into(),
            opened: event_listener::Event::new(),
            calls: 0.into(),
        })
    }

    async fn pass(&self) -> Result<(), crate::store::StoreError> {
        use std::sync::atomic::Ordering;
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(crate::store::StoreError::Timeout(Duration::from_millis(1)));
        }
        while !self.open.load(Ordering::SeqCst) {
            let listener = self.opened.listen();
            if self.open.load(Ordering::SeqCst) {
                break;
            }
            listener.await;
        }
        Ok(())
    }
}

impl Store for Gated {
    async fn check(
        &self,
        limit: &Limit,
        key: &[u8],
        cost: u64,
    ) -> Result<crate::Outcome, crate::store::StoreError> {
        self.pass().await?;
        self.store.check(limit, key, cost).await
    }

    async fn peek(
        &self,
        limit: &Limit,
        key: &[u8],
    ) -> Result<crate::Decision, crate::store::StoreError> {
        self.store.peek(limit, key).await
    }

    async fn refund(
        &self,
        limit: &Limit,
        key: &[u8],
        units: u64,
    ) -> Result<(), crate::store::StoreError> {
        self.store.refund(limit, key, units).await
    }
}

#[test]
fn requests_arriving_while_a_take_is_on_its_way_wait_for_it_instead_of_asking_the_store() {
    use std::future::Future;
    use std::sync::atomic::Ordering;
    use std::task::{Context, Waker};

    let clock = ManualClock::new(Timestamp::from_secs(1));
    let gated = Gated::new(&clock);
    let node = Leased::builder(gated.clone())
        .clock(clock.clone())
        .settings(settings())
        .build();
    let limit = Limit::new(
        "gated",
        crate::FixedWindow::new(1_000, Duration::from_secs(60)).unwrap(),
    )
    .unwrap();
    // One request: the key is cold, one call of its own cost.
    assert!(block_on(node.check(&limit, b"k", 1)).unwrap().is_allowed());
    assert_eq!(gated.calls.load(Ordering::SeqCst), 1);

    // The second, with the gate closed, takes a chunk and waits at the store.
    gated.open.store(false, Ordering::SeqCst);
    let mut cx = Context::from_waker(Waker::noop());
    let mut taker = std::pin::pin!(node.check(&limit, b"k", 1));
    assert!(taker.as_mut().poll(&mut cx).is_pending());
    assert_eq!(gated.calls.load(Ordering::SeqCst), 2);
    assert_eq!(node.stats().leases, 0);
    // Two more arrive meanwhile: they wait for it, asking nothing.
    let mut second = std::pin::pin!(node.check(&limit, b"k", 1));
    let mut third = std::pin::pin!(node.check(&limit, b"k", 1));
    assert!(second.as_mut().poll(&mut cx).is_pending());
    assert!(third.as_mut().poll(&mut cx).is_pending());
    assert_eq!(gated.calls.load(Ordering::SeqCst), 2);

    gated.open.store(true, Ordering::SeqCst);
    gated.opened.notify(usize::MAX);
    for request in [taker, second, third] {
        assert!(block_on(request).unwrap().is_allowed());
    }
    assert_eq!(
        gated.calls.load(Ordering::SeqCst),
        2,
        "the two waiting asked nothing"
    );
    let stats = node.stats();
    assert_eq!(stats.leases, 1);
    assert_eq!(stats.decided_here, 2);
    // One unit each, and the chunk's rest held: nothing taken twice.
    let left = block_on(gated.store.peek(&limit, b"k"))
        .unwrap()
        .remaining();
    assert_eq!(left + node.held() + 4, 1_000);
}

/// A node that took a chunk of `limit`'s key `k` by 200 requests.
fn busy_node(
    clock: &ManualClock,
    store: MemoryStore<ManualClock>,
    limits: &[&Limit],
) -> Leased<MemoryStore<ManualClock>> {
    // Room for every key in its shard: with one key a shard, two keys
    // would share one a time in 64.
    let node = Leased::builder(store)
        .clock(clock.clone())
        .settings(LeaseSettings {
            max_keys: 64 * 16,
            ..settings()
        })
        .build();
    block_on(async {
        for limit in limits {
            for _ in 0..200 {
                assert!(node.check(limit, b"k", 1).await.unwrap().is_allowed());
            }
        }
    });
    node
}

fn window(name: &str, quota: u64) -> Limit {
    Limit::new(
        name,
        crate::FixedWindow::new(quota, Duration::from_secs(60)).unwrap(),
    )
    .unwrap()
}

#[test]
fn each_limit_is_counted_on_its_own_and_a_limit_is_given_back_alone() {
    let (clock, store) = manual_store();
    let (one, two) = (window("one", 1_000), window("two", 1_000));
    let node = busy_node(&clock, store.clone(), &[&one, &two]);
    let by_limit = node.stats_by_limit();
    let names: Vec<&str> = by_limit.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, ["one", "two"]);
    let mut total = super::LeaseStats::default();
    for (_, stats) in &by_limit {
        assert_eq!(stats.decisions(), 200, "{stats:?}");
        assert!(stats.leases > 0 && stats.decided_here > 100, "{stats:?}");
        assert_eq!(
            stats.calls_saved(),
            stats.decided_here - stats.prefetches,
            "{stats:?}"
        );
        total += *stats;
    }
    assert_eq!(total, node.stats());

    let held = node.held();
    let left = |limit| block_on(store.peek(limit, b"k")).unwrap().remaining();
    let one_held = 1_000 - 200 - left(&one);
    assert!(one_held > 0 && one_held < held);
    assert_eq!(block_on(node.give_back_limit("one")), one_held);
    assert_eq!(left(&one), 800);
    assert_eq!(node.held(), held - one_held);
    assert_eq!(node.stats_by_limit()[0].1.units_returned, one_held);
    assert_eq!(node.stats_by_limit()[1].1.units_returned, 0);
}

#[test]
fn units_held_under_numbers_that_changed_go_back_at_the_next_sweep() {
    let (clock, store) = manual_store();
    let before = window("renumbered", 1_000);
    let node = busy_node(&clock, store.clone(), &[&before]);
    let held = node.held();
    assert!(held > 0);
    // The same limit with other numbers (a reload): the units held were
    // counted under the old ones; none is spent under the new.
    let after = window("renumbered", 2_000);
    block_on(async {
        assert!(node.check(&after, b"k", 1).await.unwrap().is_allowed());
        // (The key is busy: that request took a chunk under the new numbers.)
        let held_now = node.held();
        assert_eq!(node.sweep().await, held);
        // What the store counts is what was spent, 200 and the one since,
        // and what is held under the new numbers.
        let left = store.peek(&after, b"k").await.unwrap().remaining();
        assert_eq!(left, 2_000 - 201 - held_now);
    });
    assert_eq!(node.stats().units_returned, held);
    assert_eq!(node.stats().units_expired, 0);
}

#[test]
fn units_held_are_spent_while_the_store_fails_unless_told_otherwise() {
    use std::sync::atomic::Ordering;
    for spend_while_down in [true, false] {
        let clock = ManualClock::new(Timestamp::from_secs(1));
        let gated = Gated::new(&clock);
        let node = Leased::builder(gated.clone())
            .clock(clock.clone())
            .settings(LeaseSettings {
                spend_while_down,
                ..settings()
            })
            .build();
        let limit = window("down", 1_000);
        block_on(async {
            for _ in 0..50 {
                assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
            }
            assert!(node.held() > 1);
            gated.failing.store(true, Ordering::SeqCst);
            // A key of nothing held goes to the store, which fails.
            assert!(node.check(&limit, b"cold", 1).await.is_err());
            let answer = node.check(&limit, b"k", 1).await;
            assert_eq!(answer.is_ok(), spend_while_down, "{answer:?}");
            // The store answers again: so do the units held.
            gated.failing.store(false, Ordering::SeqCst);
            assert!(node.check(&limit, b"cold", 1).await.is_ok());
            let calls = gated.calls.load(Ordering::SeqCst);
            assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
            assert_eq!(gated.calls.load(Ordering::SeqCst), calls);
        });
    }
}

/// A bucket emptied by a burst refills while its demand is below its rate,
/// even when its nodes prefetch: small takes (two nodes sharing what the
/// refill gives back) must not pile up past the slices a key keeps, the
/// oldest dropped unspent while the node goes on taking.
#[test]
fn a_bucket_in_debt_refills_under_demand_below_its_rate_while_prefetching() {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    type Request = Pin<Box<dyn Future<Output = bool>>>;
    let (clock, store) = manual_store();
    let pending: Arc<Mutex<Vec<(Timestamp, super::Background)>>> = Arc::default();
    let nodes: Vec<_> = (0..2)
        .map(|_| {
            let (queue, spawned_at) = (Arc::clone(&pending), clock.clone());
            Leased::builder(store.clone())
                .clock(clock.clone())
                .settings(LeaseSettings::default())
                .spawn_with(move |task| queue.lock().unwrap().push((spawned_at.now(), task)))
                .build()
        })
        .collect();
    // 10 units a millisecond, a burst of 10,000.
    let limit = Limit::new("debt", crate::Gcra::per_second(10_000).unwrap()).unwrap();
    let round_trip = Duration::from_millis(2);
    let mut cx = Context::from_waker(Waker::noop());
    let (mut in_flight, mut refused_after) = (Vec::<Request>::new(), 0);
    // A burst of 8 times the rate for 250 ms empties the bucket; then half
    // the rate for 1 s, a request every 200 µs. Requests go to each node
    // in turn; a prefetch takes its units a round trip after it was
    // started, and requests that came meanwhile wait for it (polled at
    // each step).
    let burst = std::iter::repeat_n(Duration::from_nanos(12_500), 20_000);
    let calm = std::iter::repeat_n(Duration::from_micros(200), 5_000);
    for (step, gap) in burst.chain(calm).enumerate() {
        clock.advance(gap);
        let (node, limit) = (nodes[step % 2].clone(), limit.clone());
        let calm = step >= 20_000 + 10;
        in_flight.push(Box::pin(async move {
            let allowed = node.check(&limit, b"k", 1).await.unwrap().is_allowed();
            allowed || !calm
        }));
        let now = clock.now();
        let landed: Vec<_> = {
            let mut pending = pending.lock().unwrap();
            let (landed, flying) = pending
                .drain(..)
                .partition(|(at, _)| now.duration_since(*at) >= round_trip);
            *pending = flying;
            landed
        };
        for (_, take) in landed {
            block_on(take);
        }
        in_flight.retain_mut(|request| match request.as_mut().poll(&mut cx) {
            Poll::Ready(allowed) => {
                refused_after += u32::from(!allowed);
                false
            }
            Poll::Pending => true,
        });
    }
    let left = block_on(store.peek(&limit, b"k")).unwrap().remaining();
    let held: u64 = nodes.iter().map(|n| n.held()).sum();
    let expired: u64 = nodes.iter().map(|n| n.stats().units_expired).sum();
    // After the burst the policy alone admits every request, and its
    // bucket refills by 5 units a millisecond: 5,000 units after 1 s.
    // With the nodes, the store has them less what they hold.
    assert_eq!(refused_after, 0, "refused below the rate");
    assert!(
        left + held >= 4_900,
        "{left} left in the store, {held} held, {expired} expired"
    );
}

#[test]
fn a_refused_key_is_refused_here_until_the_store_would_allow_it_again() {
    use std::sync::atomic::Ordering;
    let clock = ManualClock::new(Timestamp::from_secs(60));
    let gated = Gated::new(&clock);
    let node = Leased::builder(gated.clone())
        .clock(clock.clone())
        .settings(settings())
        .build();
    // 10 a minute, in windows starting on the minute; leases live 2 s.
    let limit = window("full", 10);
    let calls = || gated.calls.load(Ordering::SeqCst);
    block_on(async {
        let mut allowed = 0;
        for _ in 0..10 {
            allowed += u32::from(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        assert_eq!(allowed + node.held() as u32, 10);
        // Spend what is held, then the store refuses once.
        while node.held() > 0 {
            assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        }
        let before = calls();
        let refused = *node
            .check(&limit, b"k", 1)
            .await
            .unwrap()
            .decision()
            .unwrap();
        assert!(!refused.is_allowed());
        assert_eq!(calls(), before + 1);
        // The next ones are refused here, with the waits shortened.
        clock.advance(Duration::from_millis(500));
        let here = *node
            .check(&limit, b"k", 1)
            .await
            .unwrap()
            .decision()
            .unwrap();
        assert!(!here.is_allowed());
        assert_eq!(calls(), before + 1);
        assert_eq!(here.remaining(), refused.remaining());
        assert_eq!(
            here.retry_after().duration().unwrap(),
            refused.retry_after().duration().unwrap() - Duration::from_millis(500)
        );
        assert_eq!(node.stats().refused_here, 1);
        // A smaller cost than the one refused is not known to fail.
        // (None is: every cost here is 1.) After the lease lifetime (2 s,
        // shorter than the window's 60 s), the store is asked again.
        clock.advance(Duration::from_millis(1_500));
        assert!(!node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        assert_eq!(calls(), before + 2);
        // A refund gives units back: the next request asks the store.
        node.refund(&limit, b"k", 1).await.unwrap();
        assert!(node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        assert_eq!(calls(), before + 3);
        // A larger cost than one refused is refused here too.
        assert!(!node.check(&limit, b"k", 1).await.unwrap().is_allowed());
        assert!(!node.check(&limit, b"k", 3).await.unwrap().is_allowed());
        assert_eq!(calls(), before + 4);
    });
}

/// Answers to requests sent to the store before a take landed each keep
/// a record (for their refunds); they make room among a key's slices by
/// dropping an older record, not the take's units unspent.
#[test]
fn records_of_requests_decided_at_the_store_never_push_out_units_held() {
    use super::allotment::{Allotment, Slice};
    let now = Timestamp::from_secs(1);
    let hold = Hold::Until {
        for_: Duration::from_secs(60),
    };
    let slice = |units, spent| Slice {
        asked_at: now,
        store_at: Some(now),
        hold,
        units,
        spent,
    };
    let mut a = Allotment::new(now);
    a.add(slice(1, 1));
    a.add(slice(500, 1));
    for _ in 0..10 {
        a.add(slice(1, 1));
    }
    assert_eq!(a.usable(now), 499);
    assert_eq!(a.take_dropped(), 0);
    // Only slices with units unspent: the oldest goes.
    let mut b = Allotment::new(now);
    for units in [10, 20, 30, 40, 50] {
        b.add(slice(units, 0));
    }
    assert_eq!(b.usable(now), 140);
    assert_eq!(b.take_dropped(), 10);
}
