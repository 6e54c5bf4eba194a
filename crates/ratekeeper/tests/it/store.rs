//! The store trait: the in-memory store, failure policies, and the
//! window-counter adapter for other databases.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{
    clock::ManualClock,
    store::{
        in_flight::InFlight, reservation::ReservationId, AnsweredBy, Check, CounterStore,
        FailureMode, FailurePolicy, LimitNameError, Resilient, StoreError, WindowCounter,
    },
    Decision, FixedWindow, Gcra, Limit, MemoryStore, Outcome, Store, Timestamp,
};

fn limit(name: &str, per_minute: u64) -> Limit {
    Limit::new(name, Gcra::per_minute(per_minute).unwrap()).unwrap()
}

fn manual_store() -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(Timestamp::from_secs(1_000));
    (
        MemoryStore::builder()
            .max_keys(1_000)
            .clock(clock.clone())
            .background_sweep(false)
            .build()
            .expect("a valid store"),
        clock,
    )
}

#[test]
fn memory_store_keeps_each_limit_apart() {
    block_on(async {
        let (store, _) = manual_store();
        let (a, b) = (limit("a", 2), limit("b", 2));
        assert!(store.check(&a, b"k", 2).await.unwrap().is_allowed());
        assert!(!store.check(&a, b"k", 1).await.unwrap().is_allowed());
        assert!(
            store.check(&b, b"k", 1).await.unwrap().is_allowed(),
            "same key, other limit"
        );
        assert_eq!(store.peek(&b, b"k").await.unwrap().remaining(), 1);
        store.refund(&a, b"k", 1).await.unwrap();
        assert_eq!(store.peek(&a, b"k").await.unwrap().remaining(), 1);
        assert_eq!(store.len(), 2);
    });
}

#[test]
fn memory_store_carries_each_key_when_a_limit_s_numbers_change() {
    block_on(async {
        let (store, clock) = manual_store();
        let one = limit("api", 1);
        assert!(store.check(&one, b"k", 1).await.unwrap().is_allowed());
        assert!(!store.check(&one, b"k", 1).await.unwrap().is_allowed());
        // A reload with other numbers under the same name: the unit taken
        // still counts (it comes back in 12 s at 5 a minute).
        let five = limit("api", 5);
        let decision = store.peek(&five, b"k").await.unwrap();
        assert_eq!((decision.limit(), decision.remaining()), (5, 4));
        // A request still carrying the old numbers (in flight during the
        // reload) is decided on the new table, and does not turn it back.
        assert!(store.check(&one, b"k", 1).await.unwrap().is_allowed());
        assert_eq!(store.peek(&five, b"k").await.unwrap().remaining(), 3);
        // Turned back on purpose (the file reverted), past the grace given
        // to requests in flight: carried again.
        clock.advance(Duration::from_secs(12));
        assert!(ratekeeper::store::RETIRED_GRACE < Duration::from_secs(12));
        let back = store.peek(&one, b"k").await.unwrap();
        assert_eq!((back.limit(), back.remaining()), (1, 0));
        // Another kind of policy starts the key over.
        let window =
            Limit::new("api", FixedWindow::new(3, Duration::from_secs(60)).unwrap()).unwrap();
        assert_eq!(store.peek(&window, b"k").await.unwrap().remaining(), 3);
    });
}

#[test]
fn a_prepared_limit_decides_on_the_store_s_own_state() {
    block_on(async {
        let (store, clock) = manual_store();
        let api = limit("api", 3);
        let prepared = store
            .immediate()
            .expect("the memory store decides at once")
            .prepare(&api)
            .unwrap();
        assert!(store.check(&api, b"k", 2).await.unwrap().is_allowed());
        // One unit left: the handle sees what the store took, and the store
        // what the handle takes.
        assert!(prepared.check(b"k", 1).is_allowed());
        assert!(!prepared.check(b"k", 1).is_allowed());
        assert_eq!(store.peek(&api, b"k").await.unwrap().remaining(), 0);
        assert!(prepared.check(b"other", 3).is_allowed());
        clock.advance(Duration::from_secs(20));
        assert!(prepared.check(b"k", 1).is_allowed());
        assert!(!prepared.check(b"k", 1).is_allowed());
    });
}

#[test]
fn a_prepared_limit_keeps_its_state_when_the_store_replaces_it() {
    block_on(async {
        let (store, _) = manual_store();
        let prepared = store
            .immediate()
            .unwrap()
            .prepare(&limit("api", 1))
            .unwrap();
        assert!(prepared.check(b"k", 1).is_allowed());
        // A reload with other numbers under the same name: the store's new
        // table carries the key's count over (it moves on the key's first
        // request there); the handle keeps deciding on the table it was
        // prepared on, for the keys that have not moved.
        let reloaded = limit("api", 5);
        assert_eq!(store.peek(&reloaded, b"k").await.unwrap().remaining(), 4);
        assert!(prepared.check(b"other", 1).is_allowed());
        assert!(!prepared.check(b"other", 1).is_allowed());
        assert_eq!(
            store.peek(&reloaded, b"other").await.unwrap().remaining(),
            4
        );
        let again = store.immediate().unwrap().prepare(&reloaded).unwrap();
        assert!(!again.check(b"k", 5).is_allowed());
        assert!(again.check(b"k", 4).is_allowed());
    });
}

/// A store that implements only the required methods (one that waits, or
/// may fail) is not immediate, and neither is a failure policy around one:
/// its callers keep the paths that report errors.
#[test]
fn stores_that_may_wait_or_fail_are_not_immediate() {
    assert!(Flaky::new().immediate().is_none());
    let resilient = Resilient::new(Flaky::new(), FailurePolicy::new(FailureMode::Closed));
    assert!(resilient.immediate().is_none());
}

#[test]
fn memory_store_checks_several_limits_all_or_nothing() {
    block_on(async {
        let (store, _) = manual_store();
        let (global, per_ip) = (limit("global", 100), limit("per-ip", 1));
        let checks = [
            Check::new(&global, b"all", 1),
            Check::new(&per_ip, b"192.0.2.1", 1),
        ];
        assert!(store.check_all(&checks).await.unwrap().is_allowed());
        let denied = store.check_all(&checks).await.unwrap();
        assert_eq!(denied.denied_by(), Some(1));
        assert_eq!(store.peek(&global, b"all").await.unwrap().remaining(), 99);
    });
}

/// A store whose backend can be switched off, counting calls: the fault
/// injection for the failure policies.
struct Flaky {
    inner: MemoryStore<ManualClock>,
    down: AtomicBool,
    calls: AtomicUsize,
}

impl Flaky {
    fn new() -> Self {
        Flaky {
            inner: manual_store().0,
            down: AtomicBool::new(false),
            calls: AtomicUsize::new(0),
        }
    }

    fn fail(&self) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Timeout(Duration::from_millis(50)))
        } else {
            Ok(())
        }
    }
}

impl Store for Flaky {
    async fn check(&self, limit: &Limit, key: &[u8], cost: u64) -> Result<Outcome, StoreError> {
        self.fail()?;
        self.inner.check(limit, key, cost).await
    }

    async fn peek(&self, limit: &Limit, key: &[u8]) -> Result<Decision, StoreError> {
        self.fail()?;
        self.inner.peek(limit, key).await
    }

    async fn refund(&self, limit: &Limit, key: &[u8], units: u64) -> Result<(), StoreError> {
        self.fail()?;
        self.inner.refund(limit, key, units).await
    }

    async fn take_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<Outcome, StoreError> {
        self.fail()?;
        self.inner.take_slot(limit, key, id).await
    }

    async fn free_slot(
        &self,
        limit: &InFlight,
        key: &[u8],
        id: ReservationId,
    ) -> Result<(), StoreError> {
        self.fail()?;
        self.inner.free_slot(limit, key, id).await
    }
}

#[test]
fn in_flight_caps_follow_the_failure_policy() {
    block_on(async {
        let cap = InFlight::new("exports", 1, Duration::from_secs(60)).unwrap();
        let retry = |mode| FailurePolicy::new(mode).with_retry_after(Duration::ZERO);
        // Closed: the error, and the store's slots intact once it is back.
        let closed = Resilient::new(Flaky::new(), retry(FailureMode::Closed));
        let taken = closed.acquire(&cap, b"k").await.unwrap().slot.unwrap();
        closed.inner().down.store(true, Ordering::SeqCst);
        assert!(matches!(
            closed.acquire(&cap, b"k").await,
            Err(StoreError::Timeout(_))
        ));
        assert!(closed.release(&cap, &taken).await.is_err());
        closed.inner().down.store(false, Ordering::SeqCst);
        assert!(!closed
            .acquire(&cap, b"k")
            .await
            .unwrap()
            .outcome
            .is_allowed());
        closed.release(&cap, &taken).await.unwrap();
        // Open: allowed, said so, and a release that cannot reach the
        // store is done (the store frees its slot at the lease's end).
        let open = Resilient::new(Flaky::new(), retry(FailureMode::Open));
        open.inner().down.store(true, Ordering::SeqCst);
        for _ in 0..3 {
            let acquired = open.acquire(&cap, b"k").await.unwrap();
            let decision = *acquired.outcome.decision().unwrap();
            assert!(decision.is_allowed());
            assert_eq!(decision.answered_by(), AnsweredBy::FailOpen);
            open.release(&cap, &acquired.slot.unwrap()).await.unwrap();
        }
        assert_eq!(open.stats().failed_open, 3);
        // Fallback: this process's memory caps meanwhile, and releases there.
        let policy = retry(FailureMode::Closed).with_fallback(true);
        let fallback = Resilient::with_fallback_store(Flaky::new(), policy, Some(manual_store().0));
        fallback.inner().down.store(true, Ordering::SeqCst);
        let first = fallback.acquire(&cap, b"k").await.unwrap();
        assert_eq!(
            first.outcome.decision().unwrap().answered_by(),
            AnsweredBy::Fallback
        );
        assert!(!fallback
            .acquire(&cap, b"k")
            .await
            .unwrap()
            .outcome
            .is_allowed());
        fallback.release(&cap, &first.slot.unwrap()).await.unwrap();
        assert!(fallback
            .acquire(&cap, b"k")
            .await
            .unwrap()
            .outcome
            .is_allowed());
    });
}

#[test]
fn fail_closed_returns_the_error_and_recovers() {
    block_on(async {
        let store = Resilient::new(
            Flaky::new(),
            FailurePolicy::new(FailureMode::Closed).with_retry_after(Duration::ZERO),
        );
        let l = limit("l", 1);
        assert!(store.check(&l, b"k", 1).await.unwrap().is_allowed());
        store.inner().down.store(true, Ordering::SeqCst);
        assert!(matches!(
            store.check(&l, b"k", 1).await,
            Err(StoreError::Timeout(_))
        ));
        assert_eq!(store.stats().failed_closed, 1);
        // Back up: the next call goes to the store and its state is intact.
        store.inner().down.store(false, Ordering::SeqCst);
        assert!(!store.check(&l, b"k", 1).await.unwrap().is_allowed());
        assert!(!store.is_down());
    });
}

#[test]
fn fail_open_allows_and_counts() {
    block_on(async {
        let store = Resilient::new(
            Flaky::new(),
            FailurePolicy::new(FailureMode::Open).with_retry_after(Duration::ZERO),
        );
        let l = limit("l", 1);
        store.inner().down.store(true, Ordering::SeqCst);
        for _ in 0..3 {
            let outcome = store.check(&l, b"k", 1).await.unwrap();
            assert!(outcome.is_allowed());
            assert_eq!(outcome.decision().unwrap().limit(), 1);
        }
        let stats = store.stats();
        assert_eq!((stats.failures, stats.failed_open), (3, 3));
        assert!(store.peek(&l, b"k").await.unwrap().is_allowed());
        store.refund(&l, b"k", 1).await.unwrap();
    });
}

#[test]
fn a_failed_store_is_skipped_until_the_retry_interval() {
    block_on(async {
        let store = Resilient::new(
            Flaky::new(),
            FailurePolicy::new(FailureMode::Closed).with_retry_after(Duration::from_secs(3_600)),
        );
        let l = limit("l", 5);
        store.inner().down.store(true, Ordering::SeqCst);
        assert!(matches!(
            store.check(&l, b"k", 1).await,
            Err(StoreError::Timeout(_))
        ));
        assert!(store.is_down());
        // Within the interval the store is not asked at all.
        for _ in 0..10 {
            assert!(matches!(
                store.check(&l, b"k", 1).await,
                Err(StoreError::Down { .. })
            ));
        }
        assert_eq!(store.inner().calls.load(Ordering::SeqCst), 1);
        assert_eq!(store.stats().failures, 1);
    });
}

#[test]
fn the_fallback_limits_in_memory_while_the_store_is_down() {
    block_on(async {
        let fallback = manual_store().0;
        let policy = FailurePolicy::new(FailureMode::Closed)
            .with_fallback(true)
            .with_retry_after(Duration::ZERO);
        let store = Resilient::with_fallback_store(Flaky::new(), policy, Some(fallback));
        let l = limit("l", 2);
        store.inner().down.store(true, Ordering::SeqCst);
        let mut allowed = 0;
        for _ in 0..4 {
            allowed += usize::from(store.check(&l, b"k", 1).await.unwrap().is_allowed());
        }
        assert_eq!(allowed, 2, "the fallback still limits");
        assert_eq!(store.stats().fallback, 4);
        let multi = store.check_all(&[Check::new(&l, b"k", 1)]).await.unwrap();
        assert!(!multi.is_allowed());
    });
}

/// seed 000's store shape: an atomic counter per key and window.
#[derive(Default)]
struct MapCounter {
    counts: Mutex<HashMap<(String, u64), u64>>,
    expiries: Mutex<Vec<Timestamp>>,
}

impl WindowCounter for MapCounter {
    async fn increment(
        &self,
        key: &str,
        window: u64,
        cost: u64,
        expires_at: Timestamp,
    ) -> Result<u64, StoreError> {
        self.expiries.lock().unwrap().push(expires_at);
        let mut counts = self.counts.lock().unwrap();
        let count = counts.entry((key.to_owned(), window)).or_default();
        *count += cost;
        Ok(*count)
    }
}

#[test]
fn a_window_counter_holds_fixed_windows() {
    block_on(async {
        let clock = ManualClock::new(Timestamp::from_millis(60_500));
        let store = CounterStore::with_clock(MapCounter::default(), clock.clone());
        let l = Limit::new(
            "per-ip",
            FixedWindow::new(3, Duration::from_secs(60)).unwrap(),
        )
        .unwrap();
        let mut seen = Vec::new();
        for _ in 0..4 {
            seen.push(
                store
                    .check(&l, b"192.0.2.1", 1)
                    .await
                    .unwrap()
                    .decision()
                    .copied()
                    .unwrap(),
            );
        }
        assert_eq!(seen.iter().filter(|d| d.is_allowed()).count(), 3);
        assert_eq!(seen[2].remaining(), 0);
        assert_eq!(
            seen[3].retry_after(),
            ratekeeper::RetryAfter::After(Duration::from_millis(59_500))
        );
        assert_eq!(store.peek(&l, b"192.0.2.1").await.unwrap().remaining(), 0);
        // The window's count can be forgotten when the window ends.
        assert!(store_expiries(&store)
            .iter()
            .all(|&t| t == Timestamp::from_secs(120)));
        // The next window starts over.
        clock.set(Timestamp::from_secs(120));
        assert!(store.check(&l, b"192.0.2.1", 1).await.unwrap().is_allowed());
        // Other policies and refunds are refused with typed errors.
        assert!(matches!(
            store.check(&limit("gcra", 5), b"k", 1).await,
            Err(StoreError::Unsupported(_))
        ));
        assert!(matches!(
            store.refund(&l, b"k", 1).await,
            Err(StoreError::UnsupportedOperation(_))
        ));
    });
}

fn store_expiries(store: &CounterStore<MapCounter, ManualClock>) -> Vec<Timestamp> {
    store.counter().expiries.lock().unwrap().clone()
}

#[test]
fn limit_names_are_checked() {
    let policy = Gcra::per_second(1).unwrap();
    assert_eq!(Limit::new("", policy), Err(LimitNameError::Empty));
    assert!(matches!(
        Limit::new("x".repeat(65), policy),
        Err(LimitNameError::TooLong { len: 65, .. })
    ));
    assert!(matches!(
        Limit::new("a b", policy),
        Err(LimitNameError::BadCharacter { character: ' ', .. })
    ));
    assert!(matches!(
        Limit::new("{tag}", policy),
        Err(LimitNameError::BadCharacter { character: '{', .. })
    ));
    assert!(matches!(
        Limit::new("a:b", policy),
        Err(LimitNameError::BadCharacter { character: ':', .. })
    ));
    assert!(Limit::new("per-ip.v2", policy).is_ok());
}

/// A key over 64 bytes reaches the counter as a 64-byte digest: what the
/// counter keeps does not grow with what a client sends.
#[test]
fn a_window_counter_gets_long_keys_bounded() {
    block_on(async {
        let clock = ManualClock::new(Timestamp::from_millis(60_500));
        let store = CounterStore::with_clock(MapCounter::default(), clock);
        let l = Limit::new(
            "per-key",
            FixedWindow::new(3, Duration::from_secs(60)).unwrap(),
        )
        .unwrap();
        let long = vec![b'k'; 100_000];
        for _ in 0..2 {
            assert!(store.check(&l, &long, 1).await.unwrap().is_allowed());
        }
        let counts = store.counter().counts.lock().unwrap();
        let names: Vec<&String> = counts.keys().map(|(name, _)| name).collect();
        assert_eq!(names.len(), 1);
        assert_eq!(
            names[0].len(),
            "per-key:".len() + ratekeeper::key::MAX_KEY_LEN
        );
        assert_eq!(counts.values().copied().collect::<Vec<_>>(), [2]);
    });
}

#[test]
fn answers_say_who_made_them() {
    use ratekeeper::store::AnsweredBy;
    block_on(async {
        let l = limit("l", 1);
        let checks = [Check::new(&l, b"k", 1)];
        for (policy, failover) in [
            (FailurePolicy::new(FailureMode::Open), AnsweredBy::FailOpen),
            (
                FailurePolicy::new(FailureMode::Closed).with_fallback(true),
                AnsweredBy::Fallback,
            ),
        ] {
            let policy = policy.with_retry_after(Duration::ZERO);
            let store =
                Resilient::with_fallback_store(Flaky::new(), policy, Some(manual_store().0));
            // Up: the store answers.
            assert_eq!(
                store.check_all(&checks).await.unwrap().answered_by(),
                AnsweredBy::Store
            );
            let answered = |outcome: Outcome| outcome.decision().unwrap().answered_by();
            assert_eq!(
                answered(store.check(&l, b"j", 1).await.unwrap()),
                AnsweredBy::Store
            );
            assert_eq!(
                store.peek(&l, b"j").await.unwrap().answered_by(),
                AnsweredBy::Store
            );
            // Down: the policy does, and says so on every kind of call.
            store.inner().down.store(true, Ordering::SeqCst);
            assert_eq!(
                store.check_all(&checks).await.unwrap().answered_by(),
                failover
            );
            let multi = store.check_all(&checks).await.unwrap();
            assert!(multi
                .outcomes()
                .iter()
                .all(|outcome| answered(*outcome) == failover));
            assert_eq!(answered(store.check(&l, b"k", 1).await.unwrap()), failover);
            assert_eq!(store.peek(&l, b"k").await.unwrap().answered_by(), failover);
            // Back up.
            store.inner().down.store(false, Ordering::SeqCst);
            assert_eq!(
                store
                    .check_all(&[Check::new(&l, b"other", 1)])
                    .await
                    .unwrap()
                    .answered_by(),
                AnsweredBy::Store
            );
        }
    });
}

#[test]
fn a_full_fallback_table_says_it_was_the_fallback() {
    use ratekeeper::store::AnsweredBy;
    block_on(async {
        let clock = ManualClock::new(Timestamp::from_secs(1_000));
        let one_key = MemoryStore::builder()
            .max_keys(1)
            .clock(clock.clone())
            .background_sweep(false)
            .build()
            .expect("a valid store");
        let policy = FailurePolicy::new(FailureMode::Closed)
            .with_fallback(true)
            .with_retry_after(Duration::ZERO);
        let store = Resilient::with_fallback_store(Flaky::new(), policy, Some(one_key));
        let l = limit("l", 2);
        store.inner().down.store(true, Ordering::SeqCst);
        let first = store.check(&l, b"a", 1).await.unwrap();
        assert!(first.is_allowed());
        assert_eq!(first.answered_by(), AnsweredBy::Fallback);
        // The fallback's table holds one key: the next is saturated, and
        // it was still the fallback that answered, not the store.
        let second = store.check(&l, b"b", 1).await.unwrap();
        assert!(second.is_saturated(), "{second:?}");
        assert_eq!(second.answered_by(), AnsweredBy::Fallback);
        let multi = store.check_all(&[Check::new(&l, b"c", 1)]).await.unwrap();
        assert!(multi.outcomes()[0].is_saturated());
        assert_eq!(multi.outcomes()[0].answered_by(), AnsweredBy::Fallback);
    });
}

#[test]
fn errors_name_the_store_and_repeat_the_failure_while_it_is_skipped() {
    block_on(async {
        let store = Resilient::new(
            Flaky::new(),
            FailurePolicy::new(FailureMode::Closed).with_retry_after(Duration::from_secs(3_600)),
        )
        .at("redis://10.0.0.5:6379");
        let l = limit("l", 5);
        store.inner().down.store(true, Ordering::SeqCst);
        let first = store.check(&l, b"k", 1).await.unwrap_err();
        assert_eq!(
            first.to_string(),
            "the rate-limit store did not answer within 50ms (store: redis://10.0.0.5:6379)"
        );
        assert!(matches!(first.without_store(), StoreError::Timeout(_)));
        let skipped = store.check(&l, b"k", 1).await.unwrap_err();
        assert!(matches!(skipped.without_store(), StoreError::Down { .. }));
        let text = skipped.to_string();
        assert!(
            text.starts_with("the rate-limit store did not answer within 50ms"),
            "{text}"
        );
        assert_eq!(
            text.matches("(store: redis://10.0.0.5:6379)").count(),
            1,
            "{text}"
        );
        assert!(text.contains("tried again within 3600s"), "{text}");
    });
}
