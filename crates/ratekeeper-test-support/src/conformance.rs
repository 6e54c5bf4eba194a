//! What every [`Store`] must do, as one suite that each store's tests run
//! (the memory store, SQLite, Redis, Redis Cluster, a `WindowCounter`
//! store), the way limitador runs each storage test on every storage.
//!
//! A store's test file names a function that makes a fresh store (with
//! whatever must live as long as it, such as a `redis-server` process, or
//! `None` to skip when that cannot start) and what the store supports:
//!
//! ```
//! use ratekeeper::MemoryStore;
//! use ratekeeper_test_support::conformance::Supports;
//!
//! async fn memory() -> Option<((), MemoryStore)> {
//!     Some(((), MemoryStore::new()))
//! }
//!
//! ratekeeper_test_support::store_conformance!(memory, Supports::EVERYTHING);
//! # fn main() {}
//! ```
//!
//! Every test runs on limits of thirty days, so that nothing refills while
//! it runs, whatever clock the store decides on (its own process's, the
//! host's, Redis's).

use std::sync::Arc;
use std::time::Duration;

use ratekeeper::{
    plan::{Plan, Plans},
    policy::PolicyKind,
    store::{
        in_flight::{InFlight, Slot},
        reservation::{ReservationError, ReservationId, MAX_OPEN_RESERVATIONS},
        Check, Reservation, StoreError,
    },
    Limit, Outcome, Policy, Rate, RetryAfter, Store,
};

use crate::policies::every_kind;

/// What a store can do, so the suite asks only that.
#[derive(Clone, Copy, Debug)]
pub struct Supports {
    /// The policies it runs.
    pub kinds: &'static [PolicyKind],
    /// Whether it gives units back (`refund`, and so all-or-nothing checks
    /// of several limits).
    pub refunds: bool,
    /// Whether a denied request is counted too (a counter that can only go
    /// up adds before it knows).
    pub counts_denied: bool,
    /// Whether a key's state is carried across a change of a limit's
    /// numbers under the same name (a configuration reload), rather than
    /// read as if the new numbers had made it.
    pub carries_numbers: bool,
    /// Whether it charges units after the fact ([`Store::report`]), and may
    /// overdraw; one that does not says so with
    /// [`StoreError::UnsupportedOperation`].
    pub reports: bool,
    /// Whether it keeps reservations ([`Store::reserve`], `commit`,
    /// `cancel`); one that does not says so with
    /// [`StoreError::UnsupportedOperation`].
    pub reservations: bool,
    /// Whether it caps requests in flight ([`Store::acquire`], `release`);
    /// one that does not says so with [`StoreError::UnsupportedOperation`].
    pub in_flight: bool,
}

impl Supports {
    /// Every policy, refunds included: what a full store offers.
    pub const EVERYTHING: Supports = Supports {
        kinds: &PolicyKind::ALL,
        refunds: true,
        counts_denied: false,
        carries_numbers: true,
        reports: true,
        reservations: true,
        in_flight: true,
    };

    /// Fixed windows that only count up: what a `WindowCounter` offers.
    pub const COUNTING_WINDOWS: Supports = Supports {
        kinds: &[PolicyKind::FixedWindow],
        refunds: false,
        counts_denied: true,
        carries_numbers: false,
        reports: true,
        reservations: false,
        in_flight: false,
    };

    /// One policy of each kind the store runs, at `amount` per `period`.
    fn policies(&self, amount: u64, period: Duration) -> Vec<Policy> {
        let rate = Rate::new(amount, period).expect("a valid rate");
        every_kind(&rate)
            .into_iter()
            .filter(|policy| self.kinds.contains(&policy.kind()))
            .collect()
    }
}

/// The period of every limit: long, so that nothing refills while a test
/// runs, and so that a window aligned to Unix time (SQLite's, Redis's, a
/// `WindowCounter`'s) is almost never crossed by one.
const PERIOD: Duration = Duration::from_secs(30 * 24 * 3_600);

/// A limit named after the test and the policy, so that tests sharing a
/// store (a Redis server) never share a count.
fn limit(test: &str, policy: &Policy) -> Limit {
    Limit::new(format!("{test}-{}", policy.kind()), policy.clone()).expect("a valid limit name")
}

async fn check<S: Store>(store: &S, limit: &Limit, key: &[u8], cost: u64) -> Outcome {
    store
        .check(limit, key, cost)
        .await
        .unwrap_or_else(|error| panic!("{}: check failed: {error}", limit.name()))
}

async fn remaining<S: Store>(store: &S, limit: &Limit, key: &[u8]) -> u64 {
    store
        .peek(limit, key)
        .await
        .unwrap_or_else(|error| panic!("{}: peek failed: {error}", limit.name()))
        .remaining()
}

/// Each policy admits exactly its quota, counting `remaining` down, then
/// denies with a wait.
pub async fn admits_exactly_its_quota<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(5, PERIOD) {
        let limit = limit("quota", &policy);
        for left in (0..5).rev() {
            let outcome = check(store, &limit, b"k", 1).await;
            let decision = outcome.decision().expect("not saturated");
            assert!(decision.is_allowed(), "{policy:?}: {left} should be left");
            assert_eq!(decision.remaining(), left, "{policy:?}");
            assert_eq!(decision.limit(), 5, "{policy:?}");
        }
        let denied = check(store, &limit, b"k", 1).await;
        assert!(!denied.is_allowed(), "{policy:?}: the sixth request");
        match denied.retry_after() {
            RetryAfter::After(wait) => assert!(wait > Duration::ZERO, "{policy:?}"),
            RetryAfter::Never => {
                panic!("{policy:?}: a request within the quota is never refused forever")
            }
        }
    }
}

/// Keys and limits count apart: exhausting one leaves the others whole,
/// including keys that differ in one byte, binary keys and long keys.
pub async fn keys_and_limits_count_apart<S: Store>(store: &S, supports: &Supports) {
    let long = vec![b'x'; 4_096];
    let mut long_other = long.clone();
    *long_other.last_mut().unwrap() = b'y';
    let binary: Vec<u8> = (0..=255).collect();
    let keys: [&[u8]; 6] = [b"a", b"b", b"a\0", &binary, &long, &long_other];
    for policy in supports.policies(2, PERIOD) {
        let first = limit("apart-1", &policy);
        let second = limit("apart-2", &policy);
        for key in keys {
            for _ in 0..2 {
                assert!(
                    check(store, &first, key, 1).await.is_allowed(),
                    "{policy:?}"
                );
            }
            assert!(
                !check(store, &first, key, 1).await.is_allowed(),
                "{policy:?}"
            );
        }
        for key in keys {
            assert_eq!(remaining(store, &second, key).await, 2, "{policy:?}");
            assert!(
                check(store, &second, key, 1).await.is_allowed(),
                "{policy:?}"
            );
        }
    }
}

/// `peek` reports without taking.
pub async fn peek_takes_nothing<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(3, PERIOD) {
        let limit = limit("peek", &policy);
        for _ in 0..4 {
            assert_eq!(remaining(store, &limit, b"k").await, 3, "{policy:?}");
        }
        assert!(
            check(store, &limit, b"k", 2).await.is_allowed(),
            "{policy:?}"
        );
        for _ in 0..4 {
            assert_eq!(remaining(store, &limit, b"k").await, 1, "{policy:?}");
        }
    }
}

/// A cost above the whole quota is refused for good and takes nothing; a
/// cost of several units takes them all at once.
pub async fn costs_take_several_units<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(5, PERIOD) {
        let limit = limit("cost", &policy);
        let too_much = check(store, &limit, b"k", 6).await;
        assert!(!too_much.is_allowed(), "{policy:?}");
        assert_eq!(too_much.retry_after(), RetryAfter::Never, "{policy:?}");
        assert_eq!(remaining(store, &limit, b"k").await, 5, "{policy:?}");
        assert!(
            check(store, &limit, b"k", 4).await.is_allowed(),
            "{policy:?}"
        );
        assert!(
            !check(store, &limit, b"k", 2).await.is_allowed(),
            "{policy:?}"
        );
        if supports.counts_denied {
            // The refused 2 units were added before the store knew.
            assert_eq!(remaining(store, &limit, b"k").await, 0, "{policy:?}");
        } else {
            assert!(
                check(store, &limit, b"k", 1).await.is_allowed(),
                "{policy:?}"
            );
        }
    }
}

/// A refund gives units back, never past the whole quota; a store that
/// cannot refund says so with [`StoreError::UnsupportedOperation`].
pub async fn refunds_give_units_back<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(4, PERIOD) {
        let limit = limit("refund", &policy);
        for _ in 0..4 {
            assert!(
                check(store, &limit, b"k", 1).await.is_allowed(),
                "{policy:?}"
            );
        }
        let refunded = store.refund(&limit, b"k", 2).await;
        if !supports.refunds {
            assert!(
                matches!(refunded, Err(StoreError::UnsupportedOperation(_))),
                "{policy:?}: {refunded:?}"
            );
            continue;
        }
        refunded.unwrap_or_else(|error| panic!("{policy:?}: {error}"));
        assert_eq!(remaining(store, &limit, b"k").await, 2, "{policy:?}");
        // Past the whole quota it stays whole.
        store.refund(&limit, b"k", 100).await.unwrap();
        assert_eq!(remaining(store, &limit, b"k").await, 4, "{policy:?}");
        // An untracked key is already whole.
        store.refund(&limit, b"new", 1).await.unwrap();
        assert_eq!(remaining(store, &limit, b"new").await, 4, "{policy:?}");
    }
}

async fn report<S: Store>(store: &S, limit: &Limit, key: &[u8], units: u64) -> Outcome {
    store
        .report(limit, key, units)
        .await
        .unwrap_or_else(|error| panic!("{}: report failed: {error}", limit.name()))
}

/// A report counts its units whatever the limit says: within the quota as
/// a check would; past it, overdrawn, so that checks are refused (with a
/// wait, not for good) until the overdraft is paid off, here by refunds.
/// A report of 0 takes nothing; a huge one saturates.
pub async fn reports_count_past_the_quota<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(5, PERIOD) {
        let limit = limit("report", &policy);
        if !supports.reports {
            let refused = store.report(&limit, b"k", 1).await;
            assert!(
                matches!(refused, Err(StoreError::UnsupportedOperation(_))),
                "{policy:?}: {refused:?}"
            );
            continue;
        }
        let nothing = report(store, &limit, b"k", 0).await;
        assert!(nothing.is_allowed(), "{policy:?}");
        assert_eq!(remaining(store, &limit, b"k").await, 5, "{policy:?}");
        let fits = report(store, &limit, b"k", 3).await;
        assert!(fits.is_allowed(), "{policy:?}");
        assert_eq!(
            fits.decision().map(|d| d.remaining()),
            Some(2),
            "{policy:?}"
        );
        // 4 more than the 2 left: 7 of 5 used.
        let over = report(store, &limit, b"k", 4).await;
        assert!(!over.is_allowed(), "{policy:?}: an overdraft is told");
        assert_eq!(
            over.decision().map(|d| d.remaining()),
            Some(0),
            "{policy:?}"
        );
        assert!(
            matches!(over.retry_after(), RetryAfter::After(wait) if wait > Duration::ZERO),
            "{policy:?}: {:?}",
            over.retry_after()
        );
        assert!(
            !check(store, &limit, b"k", 1).await.is_allowed(),
            "{policy:?}: an overdrawn key is refused"
        );
        assert_eq!(remaining(store, &limit, b"k").await, 0, "{policy:?}");
        // A report past the whole quota is counted too.
        let past = report(store, &limit, b"other", 6).await;
        assert!(!past.is_allowed(), "{policy:?}");
        assert!(!past.retry_after().is_never(), "{policy:?}");
        assert!(
            !check(store, &limit, b"other", 1).await.is_allowed(),
            "{policy:?}"
        );
        if supports.refunds {
            // 7 used: 2 back leaves the key at its quota, still refused;
            // one more, and one unit fits.
            store.refund(&limit, b"k", 2).await.unwrap();
            assert!(
                !check(store, &limit, b"k", 1).await.is_allowed(),
                "{policy:?}: 5 of 5 used"
            );
            store.refund(&limit, b"k", 1).await.unwrap();
            assert!(
                check(store, &limit, b"k", 1).await.is_allowed(),
                "{policy:?}: 4 of 5 used"
            );
        }
        // No count overflows.
        let huge = report(store, &limit, b"huge", u64::MAX).await;
        assert!(!huge.is_allowed(), "{policy:?}");
        assert!(
            !check(store, &limit, b"huge", 1).await.is_allowed(),
            "{policy:?}"
        );
        let again = report(store, &limit, b"huge", u64::MAX).await;
        assert!(!again.is_allowed(), "{policy:?}");
    }
}

/// Reports racing for one key from many tasks at once are each counted
/// once: the key has exactly what they did not take.
pub async fn racing_reports_count_exactly<S: Store + 'static>(store: Arc<S>, supports: &Supports) {
    if !supports.reports {
        return;
    }
    const TASKS: u64 = 8;
    const EACH: u64 = 10;
    for policy in supports.policies(100, PERIOD) {
        let limit = Arc::new(limit("race-report", &policy));
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS as usize));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..TASKS {
            let (store, limit, barrier) = (store.clone(), limit.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                for _ in 0..EACH {
                    let outcome = report(&*store, &limit, b"hot", 1).await;
                    assert!(!outcome.is_saturated(), "{outcome:?}");
                }
            });
        }
        tasks.join_all().await;
        assert_eq!(
            remaining(&*store, &limit, b"hot").await,
            100 - TASKS * EACH,
            "{policy:?}"
        );
    }
}

/// The ttl of the suite's reservations: long enough never to pass while
/// a test runs.
const TTL: Duration = Duration::from_secs(3_000);

async fn reserve<S: Store>(
    store: &S,
    limit: &Limit,
    key: &[u8],
    estimate: u64,
) -> Option<Reservation> {
    let reserved = store
        .reserve(limit, key, estimate, TTL)
        .await
        .unwrap_or_else(|error| panic!("{}: reserve failed: {error}", limit.name()));
    assert_eq!(
        reserved.outcome.is_allowed(),
        reserved.reservation.is_some(),
        "{}: a reservation exactly when allowed",
        limit.name()
    );
    reserved.reservation
}

fn is_unknown(result: &Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(
        result.as_ref().map_err(StoreError::reservation),
        Err(Some(ReservationError::Unknown))
    )
}

/// A reservation holds its estimate as a check takes it; a commit charges
/// the actual units instead (giving back, or charging the excess past the
/// quota), a cancel gives all back, each once; a refused estimate holds
/// nothing; forged, foreign and badly timed reservations are refused.
pub async fn reservations_hold_then_settle<S: Store>(store: &S, supports: &Supports) {
    for policy in supports.policies(10, PERIOD) {
        let limit = limit("reserve", &policy);
        if !supports.reservations {
            let refused = store.reserve(&limit, b"k", 1, TTL).await;
            assert!(
                matches!(refused, Err(StoreError::UnsupportedOperation(_))),
                "{policy:?}: {refused:?}"
            );
            continue;
        }
        let held = reserve(store, &limit, b"k", 4).await.expect("4 of 10");
        assert_eq!(remaining(store, &limit, b"k").await, 6, "{policy:?}");
        let settled = store.commit(&limit, &held, 1).await.unwrap();
        assert!(settled.is_allowed(), "{policy:?}");
        assert_eq!(
            remaining(store, &limit, b"k").await,
            9,
            "{policy:?}: 3 back"
        );
        assert!(
            is_unknown(&store.commit(&limit, &held, 1).await),
            "{policy:?}"
        );
        assert!(is_unknown(&store.cancel(&limit, &held).await), "{policy:?}");
        assert_eq!(remaining(store, &limit, b"k").await, 9, "{policy:?}");

        // More than the estimate: the excess is charged.
        let held = reserve(store, &limit, b"k", 4).await.expect("4 of 9");
        assert!(store.commit(&limit, &held, 7).await.unwrap().is_allowed());
        assert_eq!(
            remaining(store, &limit, b"k").await,
            2,
            "{policy:?}: 7 more"
        );
        // Cancelled: all back.
        let held = reserve(store, &limit, b"k", 2).await.expect("2 of 2");
        assert_eq!(remaining(store, &limit, b"k").await, 0, "{policy:?}");
        store.cancel(&limit, &held).await.unwrap();
        assert_eq!(remaining(store, &limit, b"k").await, 2, "{policy:?}");
        // Refused: nothing held.
        assert!(
            reserve(store, &limit, b"k", 3).await.is_none(),
            "{policy:?}"
        );
        assert_eq!(remaining(store, &limit, b"k").await, 2, "{policy:?}");
        // Past the quota: counted, and the key refused.
        let held = reserve(store, &limit, b"k", 2).await.expect("2 of 2");
        let over = store.commit(&limit, &held, 20).await.unwrap();
        assert!(!over.is_allowed(), "{policy:?}: an overdraft is told");
        assert!(
            !check(store, &limit, b"k", 1).await.is_allowed(),
            "{policy:?}"
        );

        // Forged: the right limit and key, an id never given.
        let forged = Reservation::new(limit.name(), b"k", ReservationId::random());
        assert!(
            is_unknown(&store.commit(&limit, &forged, 1).await),
            "{policy:?}"
        );
        // Another key's id under this key.
        let other = reserve(store, &limit, b"other", 1).await.expect("1 of 10");
        let moved = Reservation::new(limit.name(), b"k", other.id());
        assert!(
            is_unknown(&store.cancel(&limit, &moved).await),
            "{policy:?}"
        );
        // Another limit.
        let elsewhere = Limit::new("elsewhere", policy.clone()).unwrap();
        assert!(matches!(
            store.cancel(&elsewhere, &other).await,
            Err(StoreError::Reservation(ReservationError::OtherLimit { .. }))
        ));
        store.cancel(&limit, &other).await.unwrap();
        // Ttls of nothing and of more than an hour.
        for ttl in [Duration::ZERO, Duration::from_secs(3_601)] {
            assert!(matches!(
                store.reserve(&limit, b"k2", 1, ttl).await,
                Err(StoreError::Reservation(ReservationError::Ttl { .. }))
            ));
        }
        assert_eq!(remaining(store, &limit, b"k2").await, 10, "{policy:?}");
    }
}

/// A key holds at most [`MAX_OPEN_RESERVATIONS`] open; settling one makes
/// room for another.
pub async fn reservations_per_key_are_bounded<S: Store>(store: &S, supports: &Supports) {
    if !supports.reservations {
        return;
    }
    let policy = supports.policies(10, PERIOD).remove(0);
    let limit = limit("reserve-bound", &policy);
    let mut open = Vec::new();
    for _ in 0..MAX_OPEN_RESERVATIONS {
        open.push(reserve(store, &limit, b"k", 0).await.expect("nothing held"));
    }
    let refused = store.reserve(&limit, b"k", 0, TTL).await;
    assert!(
        matches!(
            refused.as_ref().map_err(StoreError::without_store),
            Err(StoreError::Reservation(ReservationError::TooMany))
        ),
        "{refused:?}"
    );
    // Another key is not bound by this one's.
    assert!(reserve(store, &limit, b"j", 0).await.is_some());
    store.cancel(&limit, &open[0]).await.unwrap();
    assert!(reserve(store, &limit, b"k", 0).await.is_some());
}

/// Commits racing for one reservation from many tasks: exactly one
/// settles it.
pub async fn racing_commits_settle_once<S: Store + 'static>(store: Arc<S>, supports: &Supports) {
    if !supports.reservations {
        return;
    }
    const TASKS: usize = 8;
    for policy in supports.policies(100, PERIOD) {
        let limit = Arc::new(limit("race-commit", &policy));
        let held = reserve(&*store, &limit, b"hot", 50)
            .await
            .expect("50 of 100");
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..TASKS {
            let (store, limit, barrier, held) =
                (store.clone(), limit.clone(), barrier.clone(), held.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                let result = store.commit(&limit, &held, 10).await;
                assert!(result.is_ok() || is_unknown(&result), "{result:?}");
                result.is_ok()
            });
        }
        let settled = tasks.join_all().await.into_iter().filter(|ok| *ok).count();
        assert_eq!(settled, 1, "{policy:?}");
        assert_eq!(remaining(&*store, &limit, b"hot").await, 90, "{policy:?}");
    }
}

/// An in-flight cap of `max` slots a lease longer than any test.
fn cap(test: &str, max: u64) -> InFlight {
    InFlight::new(format!("{test}-cap"), max, TTL).expect("a valid cap")
}

async fn acquire<S: Store>(store: &S, limit: &InFlight, key: &[u8]) -> Option<Slot> {
    let acquired = store
        .acquire(limit, key)
        .await
        .unwrap_or_else(|error| panic!("{}: acquire failed: {error}", limit.name()));
    assert_eq!(
        acquired.outcome.is_allowed(),
        acquired.slot.is_some(),
        "a slot exactly when allowed: {acquired:?}"
    );
    acquired.slot
}

/// A key's requests in flight are capped: slots are taken up to the cap,
/// then refused; a release frees one, once; forged, moved and foreign
/// slots are refused; another key, and a rate limit of the same name,
/// count apart.
pub async fn in_flight_caps_hold_then_release<S: Store>(store: &S, supports: &Supports) {
    let limit = cap("in-flight", 3);
    if !supports.in_flight {
        let refused = store.acquire(&limit, b"k").await;
        assert!(
            matches!(refused, Err(StoreError::UnsupportedOperation(_))),
            "{refused:?}"
        );
        return;
    }
    let mut slots = Vec::new();
    for left in (0..3).rev() {
        let acquired = store.acquire(&limit, b"k").await.unwrap();
        let decision = acquired.outcome.decision().expect("not saturated");
        assert!(decision.is_allowed());
        assert_eq!((decision.limit(), decision.remaining()), (3, left));
        slots.push(acquired.slot.expect("taken"));
    }
    let full = store.acquire(&limit, b"k").await.unwrap();
    assert!(
        !full.outcome.is_allowed() && full.slot.is_none(),
        "{full:?}"
    );
    assert!(matches!(full.outcome.retry_after(), RetryAfter::After(wait) if wait > Duration::ZERO));
    // Another key has its own three.
    let other = acquire(store, &limit, b"j").await.expect("j's first");
    // A rate limit of the same name counts apart, and leaves the cap alone.
    let rate = Limit::new(limit.name(), supports.policies(1, PERIOD).remove(0)).unwrap();
    assert!(check(store, &rate, b"k", 1).await.is_allowed());
    assert!(acquire(store, &limit, b"k").await.is_none());

    // A release frees one place, once.
    store.release(&limit, &slots[0]).await.unwrap();
    assert!(is_unknown(&store.release(&limit, &slots[0]).await));
    let again = acquire(store, &limit, b"k").await.expect("a freed place");
    assert!(acquire(store, &limit, b"k").await.is_none());
    // Forged, moved to another key, or of another cap.
    let forged = Slot::new(limit.name(), b"k", ReservationId::random());
    assert!(is_unknown(&store.release(&limit, &forged).await));
    let moved = Slot::new(limit.name(), b"k", other.id());
    assert!(is_unknown(&store.release(&limit, &moved).await));
    let elsewhere = cap("elsewhere", 3);
    assert!(matches!(
        store.release(&elsewhere, &again).await,
        Err(StoreError::Reservation(ReservationError::OtherLimit { .. }))
    ));
    for slot in [&slots[1], &slots[2], &again, &other] {
        store.release(&limit, slot).await.unwrap();
    }
    for _ in 0..3 {
        assert!(acquire(store, &limit, b"k").await.is_some());
    }
    // A key too long for a slot's token.
    let long = vec![b'x'; 4_097];
    assert!(matches!(
        store.acquire(&limit, &long).await,
        Err(StoreError::Reservation(ReservationError::KeyTooLong))
    ));
}

/// Acquires racing from many tasks for one key: exactly the cap's slots
/// are taken; releases racing for one slot: exactly one frees it.
pub async fn racing_acquires_take_exactly_the_cap<S: Store + 'static>(
    store: Arc<S>,
    supports: &Supports,
) {
    if !supports.in_flight {
        return;
    }
    const TASKS: usize = 8;
    const EACH: usize = 10;
    let limit = Arc::new(cap("race-in-flight", 25));
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let (store, limit, barrier) = (store.clone(), limit.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let mut taken = Vec::new();
            for _ in 0..EACH {
                taken.extend(acquire(&*store, &limit, b"hot").await);
            }
            taken
        });
    }
    let taken: Vec<Slot> = tasks.join_all().await.into_iter().flatten().collect();
    assert_eq!(taken.len(), 25);
    let slot = taken[0].clone();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..TASKS {
        let (store, limit, barrier, slot) =
            (store.clone(), limit.clone(), barrier.clone(), slot.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            let result = store.release(&limit, &slot).await;
            assert!(result.is_ok() || is_unknown(&result), "{result:?}");
            result.is_ok()
        });
    }
    let freed = tasks.join_all().await.into_iter().filter(|ok| *ok).count();
    assert_eq!(freed, 1);
    assert!(acquire(&*store, &limit, b"hot").await.is_some());
    assert!(acquire(&*store, &limit, b"hot").await.is_none());
}

/// Several limits at once, all or nothing: a request refused by one limit
/// is counted by none, and the answer names which refused.
pub async fn several_limits_count_all_or_nothing<S: Store>(store: &S, supports: &Supports) {
    if !supports.refunds {
        return;
    }
    for policy in supports.policies(2, PERIOD) {
        let wide = limit("all-wide", &policy.clone());
        let tight = Limit::new(
            format!("all-tight-{}", policy.kind()),
            supports
                .policies(1, PERIOD)
                .into_iter()
                .find(|p| p.kind() == policy.kind())
                .unwrap(),
        )
        .unwrap();
        let checks = [Check::new(&wide, b"k", 1), Check::new(&tight, b"k", 1)];
        let first = store.check_all(&checks).await.unwrap();
        assert!(first.is_allowed(), "{policy:?}");
        let second = store.check_all(&checks).await.unwrap();
        assert!(!second.is_allowed(), "{policy:?}");
        assert_eq!(second.denied_by(), Some(1), "{policy:?}");
        assert_eq!(second.outcomes().len(), 2, "{policy:?}");
        // The wide limit kept the unit the refused request would have taken.
        assert_eq!(remaining(store, &wide, b"k").await, 1, "{policy:?}");
    }
}

/// Several limits at once, each with its own cost (Envoy's descriptors
/// carry their own hits): each takes its own, and a refusal by one gives
/// the others theirs back.
pub async fn several_limits_take_their_own_costs<S: Store>(store: &S, supports: &Supports) {
    if !supports.refunds {
        return;
    }
    for policy in supports.policies(10, PERIOD) {
        let requests = limit("costs-requests", &policy);
        let bytes = limit("costs-bytes", &policy);
        let first = [Check::new(&requests, b"k", 1), Check::new(&bytes, b"k", 7)];
        assert!(
            store.check_all(&first).await.unwrap().is_allowed(),
            "{policy:?}"
        );
        assert_eq!(remaining(store, &requests, b"k").await, 9, "{policy:?}");
        assert_eq!(remaining(store, &bytes, b"k").await, 3, "{policy:?}");

        let refused = [Check::new(&requests, b"k", 2), Check::new(&bytes, b"k", 4)];
        let outcome = store.check_all(&refused).await.unwrap();
        assert_eq!(outcome.denied_by(), Some(1), "{policy:?}");
        assert_eq!(remaining(store, &requests, b"k").await, 9, "{policy:?}");
        assert_eq!(remaining(store, &bytes, b"k").await, 3, "{policy:?}");

        let fits = [Check::new(&requests, b"k", 6), Check::new(&bytes, b"k", 3)];
        assert!(
            store.check_all(&fits).await.unwrap().is_allowed(),
            "{policy:?}"
        );
        assert_eq!(remaining(store, &requests, b"k").await, 3, "{policy:?}");
        assert_eq!(remaining(store, &bytes, b"k").await, 0, "{policy:?}");
    }
}

/// A limit whose numbers change under the same name (a configuration
/// reload) keeps what each key used: tightened from 5 to 4 after 3 were
/// taken, 1 is left; loosened to 8 after 4, 4 are left; moved to 10 over
/// twice the period, 6. A key never seen has the whole new quota.
pub async fn a_change_of_numbers_carries_each_key<S: Store>(store: &S, supports: &Supports) {
    if !supports.carries_numbers {
        return;
    }
    let numbers = |amount: u64, period: Duration| {
        let rate = Rate::new(amount, period).expect("a valid rate");
        every_kind(&rate)
    };
    let steps = [
        numbers(5, PERIOD),
        numbers(4, PERIOD),
        numbers(8, PERIOD),
        numbers(10, PERIOD * 2),
    ];
    for (index, kind) in PolicyKind::ALL.into_iter().enumerate() {
        if !supports.kinds.contains(&kind) {
            continue;
        }
        let at = |step: usize| limit("carry", &steps[step][index]);
        let (five, four, eight, ten) = (at(0), at(1), at(2), at(3));
        assert!(check(store, &five, b"k", 3).await.is_allowed(), "{kind}");
        assert_eq!(remaining(store, &four, b"k").await, 1, "{kind}: 5 to 4");
        assert!(check(store, &four, b"k", 1).await.is_allowed(), "{kind}");
        assert!(!check(store, &four, b"k", 1).await.is_allowed(), "{kind}");
        assert_eq!(remaining(store, &eight, b"k").await, 4, "{kind}: 4 to 8");
        assert_eq!(remaining(store, &ten, b"k").await, 6, "{kind}: 8 to 10/2p");
        assert!(!check(store, &ten, b"k", 7).await.is_allowed(), "{kind}");
        assert!(check(store, &ten, b"k", 6).await.is_allowed(), "{kind}");
        assert_eq!(remaining(store, &ten, b"other").await, 10, "{kind}");
    }
}

/// Requests racing for one key from many tasks at once take exactly the
/// quota between them.
pub async fn racing_requests_take_exactly_the_quota<S: Store + 'static>(
    store: Arc<S>,
    supports: &Supports,
) {
    const TASKS: u64 = 8;
    const EACH: u64 = 10;
    for policy in supports.policies(50, PERIOD) {
        let limit = Arc::new(limit("race", &policy));
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS as usize));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..TASKS {
            let (store, limit, barrier) = (store.clone(), limit.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                let mut allowed = 0;
                for _ in 0..EACH {
                    allowed += u64::from(check(&*store, &limit, b"hot", 1).await.is_allowed());
                }
                allowed
            });
        }
        let allowed: u64 = tasks.join_all().await.into_iter().sum();
        assert_eq!(allowed, 50, "{policy:?}: {} requests", TASKS * EACH);
    }
}

/// The limit of `plans` for `plan` (a limited one).
fn planned<'a>(plans: &'a Plans, plan: Option<&str>) -> &'a Limit {
    match plans.get(plan) {
        Plan::Limited(limit) => limit,
        other => panic!("{plan:?} is {other:?}, not limited"),
    }
}

/// A key's use is counted once over a limit's plans: 3 taken on the
/// default 5, a move to pro's 8 leaves 5; 2 more there, then tiny's 4
/// leaves none, and back on the default none either. Another key has the
/// whole of each plan.
pub async fn plans_carry_a_key_between_them<S: Store>(store: &S, supports: &Supports) {
    if !supports.carries_numbers {
        return;
    }
    let numbers = |amount: u64| every_kind(&Rate::new(amount, PERIOD).expect("a valid rate"));
    let (five, eight, four) = (numbers(5), numbers(8), numbers(4));
    for (index, kind) in PolicyKind::ALL.into_iter().enumerate() {
        if !supports.kinds.contains(&kind) {
            continue;
        }
        let plans = Plans::new(limit("plans", &five[index]))
            .limited("pro", eight[index].clone())
            .and_then(|plans| plans.limited("tiny", four[index].clone()))
            .expect("valid plans");
        let (default, pro, tiny) = (
            planned(&plans, None),
            planned(&plans, Some("pro")),
            planned(&plans, Some("tiny")),
        );
        assert!(check(store, default, b"k", 3).await.is_allowed(), "{kind}");
        assert_eq!(remaining(store, pro, b"k").await, 5, "{kind}: to pro");
        assert!(check(store, pro, b"k", 2).await.is_allowed(), "{kind}");
        assert!(!check(store, tiny, b"k", 1).await.is_allowed(), "{kind}");
        assert_eq!(remaining(store, default, b"k").await, 0, "{kind}: back");
        assert_eq!(remaining(store, pro, b"k").await, 3, "{kind}: pro again");
        assert_eq!(remaining(store, pro, b"other").await, 8, "{kind}");
        assert_eq!(remaining(store, tiny, b"another").await, 4, "{kind}");
    }
}

/// Requests of one key racing under two plans of the same numbers (its
/// plan changing back and forth) take exactly the quota between them: a
/// move between plans loses and adds nothing.
pub async fn racing_plan_changes_take_exactly_the_quota<S: Store + 'static>(
    store: Arc<S>,
    supports: &Supports,
) {
    const TASKS: u64 = 8;
    const EACH: u64 = 10;
    if !supports.carries_numbers {
        return;
    }
    for policy in supports.policies(50, PERIOD) {
        let plans = Plans::new(limit("plan-race", &policy))
            .limited("twin", policy.clone())
            .expect("valid plans");
        let plans = Arc::new(plans);
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS as usize));
        let mut tasks = tokio::task::JoinSet::new();
        for task in 0..TASKS {
            let (store, plans, barrier) = (store.clone(), plans.clone(), barrier.clone());
            tasks.spawn(async move {
                barrier.wait().await;
                let mut allowed = 0;
                for request in 0..EACH {
                    let plan = ((task + request) % 2 == 0).then_some("twin");
                    let limit = planned(&plans, plan);
                    allowed += u64::from(check(&*store, limit, b"hot", 1).await.is_allowed());
                }
                allowed
            });
        }
        let allowed: u64 = tasks.join_all().await.into_iter().sum();
        assert_eq!(allowed, 50, "{policy:?}: {} requests", TASKS * EACH);
    }
}

/// The runtime every conformance test runs on: several workers, so that
/// racing tasks run in parallel.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a test runtime")
}

/// Every test of the suite, one after another on one store: for stores
/// that are slow to make (a Redis Cluster), where a store per test would
/// cost more than the tests.
pub async fn all_on_one_store<S: Store + 'static>(store: Arc<S>, supports: &Supports) {
    admits_exactly_its_quota(&*store, supports).await;
    keys_and_limits_count_apart(&*store, supports).await;
    peek_takes_nothing(&*store, supports).await;
    costs_take_several_units(&*store, supports).await;
    refunds_give_units_back(&*store, supports).await;
    reports_count_past_the_quota(&*store, supports).await;
    racing_reports_count_exactly(store.clone(), supports).await;
    reservations_hold_then_settle(&*store, supports).await;
    reservations_per_key_are_bounded(&*store, supports).await;
    racing_commits_settle_once(store.clone(), supports).await;
    in_flight_caps_hold_then_release(&*store, supports).await;
    racing_acquires_take_exactly_the_cap(store.clone(), supports).await;
    several_limits_count_all_or_nothing(&*store, supports).await;
    several_limits_take_their_own_costs(&*store, supports).await;
    a_change_of_numbers_carries_each_key(&*store, supports).await;
    plans_carry_a_key_between_them(&*store, supports).await;
    racing_plan_changes_take_exactly_the_quota(store.clone(), supports).await;
    racing_requests_take_exactly_the_quota(store, supports).await;
}

/// The suite as `#[test]` functions in a module `conformance`, on stores
/// made by `$make` (an async function returning `Option<(guard, store)>`)
/// supporting `$supports` (a [`Supports`]): a store per test, or with
/// `one store` after them, all on one store in one test.
#[macro_export]
macro_rules! store_conformance {
    ($make:ident, $supports:expr, one store) => {
        #[test]
        fn conformance() {
            $crate::conformance::runtime().block_on(async {
                let Some((_guard, store)) = $make().await else {
                    return;
                };
                $crate::conformance::all_on_one_store(::std::sync::Arc::new(store), &$supports)
                    .await;
            });
        }
    };
    ($make:ident, $supports:expr) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;

            $crate::store_conformance!(@tests $make, $supports;
                admits_exactly_its_quota,
                keys_and_limits_count_apart,
                peek_takes_nothing,
                costs_take_several_units,
                refunds_give_units_back,
                reports_count_past_the_quota,
                reservations_hold_then_settle,
                reservations_per_key_are_bounded,
                in_flight_caps_hold_then_release,
                several_limits_count_all_or_nothing,
                several_limits_take_their_own_costs,
                a_change_of_numbers_carries_each_key,
                plans_carry_a_key_between_them,
            );

            #[test]
            fn racing_plan_changes_take_exactly_the_quota() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::racing_plan_changes_take_exactly_the_quota(
                        ::std::sync::Arc::new(store),
                        &$supports,
                    )
                    .await;
                });
            }

            #[test]
            fn racing_commits_settle_once() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::racing_commits_settle_once(
                        ::std::sync::Arc::new(store),
                        &$supports,
                    )
                    .await;
                });
            }

            #[test]
            fn racing_acquires_take_exactly_the_cap() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::racing_acquires_take_exactly_the_cap(
                        ::std::sync::Arc::new(store),
                        &$supports,
                    )
                    .await;
                });
            }

            #[test]
            fn racing_reports_count_exactly() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::racing_reports_count_exactly(
                        ::std::sync::Arc::new(store),
                        &$supports,
                    )
                    .await;
                });
            }

            #[test]
            fn racing_requests_take_exactly_the_quota() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::racing_requests_take_exactly_the_quota(
                        ::std::sync::Arc::new(store),
                        &$supports,
                    )
                    .await;
                });
            }
        }
    };
    (@tests $make:ident, $supports:expr; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                $crate::conformance::runtime().block_on(async {
                    let Some((_guard, store)) = super::$make().await else {
                        return;
                    };
                    $crate::conformance::$test(&store, &$supports).await;
                });
            }
        )*
    };
}
