//! One run of the fleet: its nodes, its load, and what each request got.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ratekeeper::clock::ManualClock;
use ratekeeper::policy::PolicyKind;
use ratekeeper::store::lease::{LeaseSettings, Leased};
use ratekeeper::{Limit, MemoryStore, Policy, Rate, Store, Timestamp};

use crate::remote::Remote;
use crate::rng::Rng;
use crate::sim::{self, Handle, Sim};

/// The store every node leases from.
type Shared = Remote<MemoryStore<ManualClock>>;
/// One node.
type Node = Leased<Shared>;

/// When the simulation starts: a whole number of seconds, so that fixed
/// windows start with it.
pub(crate) const START: Timestamp = Timestamp::from_secs(1_000);

/// The hot key's index in [`Record::key`]; cold keys are 1 and up.
pub(crate) const HOT: u32 = 0;

/// The demand on the hot key, in multiples of the limit's rate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Load {
    /// `times` the rate, all the time.
    Steady {
        /// Multiple of the rate.
        times: f64,
    },
    /// `base` times the rate, and `peak` times it for `length` from
    /// `offset` into each `period`.
    Bursts {
        /// Multiple of the rate between bursts.
        base: f64,
        /// Multiple of the rate during a burst.
        peak: f64,
        /// From one burst's start to the next.
        period: Duration,
        /// From the period's start to the burst's.
        offset: Duration,
        /// How long a burst lasts.
        length: Duration,
    },
}

impl Load {
    /// The multiple of the rate asked for `since` the start.
    pub(crate) fn times_at(&self, since: Duration) -> f64 {
        match *self {
            Load::Steady { times } => times,
            Load::Bursts {
                base,
                peak,
                period,
                offset,
                length,
            } => {
                let into =
                    Duration::from_nanos((since.as_nanos() % period.as_nanos().max(1)) as u64);
                if into >= offset && into < offset + length {
                    peak
                } else {
                    base
                }
            }
        }
    }

    /// The largest multiple it ever asks.
    pub(crate) fn peak(&self) -> f64 {
        match *self {
            Load::Steady { times } => times,
            Load::Bursts { base, peak, .. } => base.max(peak),
        }
    }
}

/// What a row of the table varies beyond nodes, latency and policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One hot key at three times its limit.
    Steady,
    /// One hot key at 80% of its limit: what leasing saves where it is
    /// not refusing.
    Below,
    /// One hot key: half its limit, and eight times it a quarter of each
    /// second.
    Bursts,
    /// The steady hot key, and 1,000 cold keys asked 5 times a second each.
    ManyKeys,
    /// The steady hot key; one node dies 0.2 s into the third window,
    /// holding what it holds, and its clients go to the others.
    NodeDies,
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Shape::Steady => "steady 3x",
            Shape::Below => "steady 0.8x (below the limit)",
            Shape::Bursts => "bursts",
            Shape::ManyKeys => "hot + 1,000 cold keys",
            Shape::NodeDies => "steady 3x, a node dies",
        })
    }
}

/// Everything a run depends on: two runs of equal scenarios are the same
/// run.
#[derive(Clone, Debug)]
pub(crate) struct Scenario {
    /// What the row varies.
    pub(crate) shape: Shape,
    /// The limit's algorithm.
    pub(crate) kind: PolicyKind,
    /// Units per second the limit allows each key (over one-second
    /// windows, or a bucket of one second's worth).
    pub(crate) per_second: u64,
    /// How many nodes lease from the store.
    pub(crate) nodes: usize,
    /// The store's latency each way.
    pub(crate) one_way: Duration,
    /// The hot key's demand.
    pub(crate) load: Load,
    /// How many cold keys, each asked `cold_rate` a second in all.
    pub(crate) cold_keys: usize,
    /// Requests a second for each cold key.
    pub(crate) cold_rate: f64,
    /// When a node dies (node 0), after the start.
    pub(crate) death: Option<Duration>,
    /// How long clients send requests.
    pub(crate) duration: Duration,
    /// The nodes' lease settings.
    pub(crate) settings: LeaseSettings,
    /// The random arrivals' seed.
    pub(crate) seed: u64,
}

impl Scenario {
    /// `shape` on `nodes` nodes of the default lease settings, a store
    /// `one_way` away, a limit of `kind` at 10,000 a second, for 5 s.
    pub(crate) fn new(shape: Shape, kind: PolicyKind, nodes: usize, one_way: Duration) -> Self {
        let steady = Load::Steady { times: 3.0 };
        let (load, cold_keys, death) = match shape {
            Shape::Steady => (steady, 0, None),
            Shape::Below => (Load::Steady { times: 0.8 }, 0, None),
            Shape::Bursts => (
                Load::Bursts {
                    base: 0.5,
                    peak: 8.0,
                    period: Duration::from_secs(1),
                    offset: Duration::from_millis(500),
                    length: Duration::from_millis(250),
                },
                0,
                None,
            ),
            Shape::ManyKeys => (steady, 1_000, None),
            Shape::NodeDies => (steady, 0, Some(Duration::from_millis(2_200))),
        };
        Scenario {
            shape,
            kind,
            per_second: 10_000,
            nodes,
            one_way,
            load,
            cold_keys,
            cold_rate: 5.0,
            death,
            duration: Duration::from_secs(5),
            settings: LeaseSettings::default(),
            seed: 0x5EED ^ nodes as u64,
        }
    }

    /// What the scenario is, in a line: `bursts gcra n=16 one-way 1ms`.
    pub(crate) fn label(&self) -> String {
        format!(
            "{} {} n={} one-way {:?}",
            self.shape, self.kind, self.nodes, self.one_way
        )
    }

    /// The limit's policy.
    pub(crate) fn policy(&self) -> Policy {
        let rate = Rate::new(self.per_second, Duration::from_secs(1)).expect("a valid rate");
        Policy::new(self.kind, &rate).expect("a valid policy")
    }
}

/// One request, as its client saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Record {
    /// Which key: [`HOT`], or a cold one.
    pub(crate) key: u32,
    /// When the client asked.
    pub(crate) asked: Timestamp,
    /// When its unit was counted: the store's moment of decision if it
    /// went to the store, else the node's when it answered.
    pub(crate) counted: Timestamp,
    /// When the client had its answer.
    pub(crate) answered: Timestamp,
    /// Whether it was admitted.
    pub(crate) allowed: bool,
}

/// The nodes' lease statistics, summed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    /// Decisions the nodes made without the store: from units they held,
    /// or refusing what the store had just refused.
    pub(crate) decided_here: u64,
    /// `LeaseStats::store_calls`: checks, takes and prefetches.
    pub(crate) store_calls: u64,
    /// Round trips to the store of every kind, give-backs included.
    pub(crate) round_trips: u64,
    /// Units leased beyond the requests that asked.
    pub(crate) units_leased: u64,
    /// Units given back before they were spent.
    pub(crate) units_returned: u64,
    /// Units that stopped being safe unspent.
    pub(crate) units_expired: u64,
}

impl Totals {
    fn add(&mut self, node: &Node) {
        let s = node.stats();
        self.decided_here += s.decided_here + s.refused_here;
        self.store_calls += s.store_calls;
        self.units_leased += s.units_leased;
        self.units_returned += s.units_returned;
        self.units_expired += s.units_expired;
    }
}

/// What a run produced.
pub(crate) struct Run {
    /// Every request, in the order they were answered.
    pub(crate) records: Vec<Record>,
    /// The nodes' statistics.
    pub(crate) totals: Totals,
}

/// The nodes, of which the dead one is `None`.
type Fleet = Arc<Mutex<Vec<Option<Node>>>>;

fn fleet_lock(fleet: &Fleet) -> std::sync::MutexGuard<'_, Vec<Option<Node>>> {
    fleet.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `s` to its end, and until every request has its answer.
pub(crate) fn run(s: &Scenario) -> Run {
    let mut sim = Sim::new(START);
    let h = sim.handle();
    let end = START.saturating_add(s.duration);
    let memory = MemoryStore::builder()
        .clock(h.clock())
        .background_sweep(false)
        .build()
        .expect("the default key count is valid");
    let store = Remote::new(memory, s.one_way, h.clone());
    let fleet: Fleet = Arc::new(Mutex::new(
        (0..s.nodes)
            .map(|_| {
                Some(
                    Leased::builder(store.clone())
                        .clock(h.clock())
                        .settings(s.settings.clone())
                        .spawn_with(h.spawner())
                        .build(),
                )
            })
            .collect(),
    ));
    let limit = Limit::new("fleet", s.policy()).expect("a valid name");
    let records = Arc::new(Mutex::new(Vec::new()));
    let dead = Arc::new(Mutex::new(Totals::default()));

    let client = Client {
        h: h.clone(),
        fleet: Arc::clone(&fleet),
        limit,
        records: Arc::clone(&records),
        end,
        death: s.death.map(|d| START.saturating_add(d)),
    };
    let per_second = s.per_second as f64;
    let load = s.load;
    h.spawn(client.clone().send(
        Rng::new(s.seed),
        per_second * load.peak(),
        move |since| per_second * load.times_at(since),
        |_| HOT,
    ));
    if s.cold_keys > 0 {
        let (keys, rate) = (s.cold_keys, s.cold_rate * s.cold_keys as f64);
        h.spawn(client.clone().send(
            Rng::new(s.seed.wrapping_add(1)),
            rate,
            move |_| rate,
            move |rng| 1 + rng.below(keys) as u32,
        ));
    }
    for n in 0..s.nodes {
        h.spawn(sweep(h.clone(), Arc::clone(&fleet), n, end));
    }
    if let Some(at) = client.death {
        let (h2, fleet, dead) = (h.clone(), Arc::clone(&fleet), Arc::clone(&dead));
        h.spawn(async move {
            h2.sleep_until(at).await;
            // Gone without a word: no give_back_all, its units stay counted
            // in the store until they would have expired.
            if let Some(node) = fleet_lock(&fleet)[0].take() {
                dead.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .add(&node);
            }
        });
    }
    // Long enough for every request, and any take, sent before the end.
    sim.run_until(end.saturating_add(Duration::from_secs(5)));

    let mut totals = *dead.lock().unwrap_or_else(PoisonError::into_inner);
    for node in fleet_lock(&fleet).iter().flatten() {
        totals.add(node);
    }
    totals.round_trips = store.calls();
    drop(sim);
    let records = std::mem::take(&mut *records.lock().unwrap_or_else(PoisonError::into_inner));
    Run { records, totals }
}

/// What sends requests: a load balancer in front of the nodes.
#[derive(Clone)]
struct Client {
    h: Handle,
    fleet: Fleet,
    limit: Limit,
    records: Arc<Mutex<Vec<Record>>>,
    end: Timestamp,
    death: Option<Timestamp>,
}

impl Client {
    /// Sends requests until the end, as a Poisson process of `rate(since
    /// the start)` a second (thinned from one of `max`), each for the key
    /// `key` picks, to a live node picked at random.
    async fn send(
        self,
        mut rng: Rng,
        max: f64,
        rate: impl Fn(Duration) -> f64,
        key: impl Fn(&mut Rng) -> u32,
    ) {
        loop {
            let at = self.h.now().saturating_add(rng.gap(max));
            if at >= self.end {
                return;
            }
            self.h.sleep_until(at).await;
            if rng.unit() * max >= rate(at.duration_since(START)) {
                continue;
            }
            let key = key(&mut rng);
            let node = {
                let fleet = fleet_lock(&self.fleet);
                let first_alive = usize::from(self.death.is_some_and(|d| at >= d));
                let n = first_alive + rng.below(fleet.len() - first_alive);
                fleet[n].clone().expect("only node 0 dies")
            };
            let (h, limit, records) = (
                self.h.clone(),
                self.limit.clone(),
                Arc::clone(&self.records),
            );
            self.h.spawn(async move {
                let name = key_name(key);
                let outcome = node.check(&limit, &name, 1).await;
                let answered = h.now();
                let record = Record {
                    key,
                    asked: at,
                    counted: sim::noted().unwrap_or(answered),
                    answered,
                    allowed: outcome.expect("the memory store never fails").is_allowed(),
                };
                records
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(record);
            });
        }
    }
}

/// The key's bytes in the store.
fn key_name(key: u32) -> Vec<u8> {
    if key == HOT {
        b"hot".to_vec()
    } else {
        format!("cold-{key}").into_bytes()
    }
}

/// Node `n`'s sweep, every second as the service runs it, while it lives.
async fn sweep(h: Handle, fleet: Fleet, n: usize, end: Timestamp) {
    loop {
        h.sleep(Duration::from_secs(1)).await;
        if h.now() >= end {
            return;
        }
        let Some(node) = fleet_lock(&fleet)[n].clone() else {
            return;
        };
        node.sweep().await;
    }
}
