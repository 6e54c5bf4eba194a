//! A limit with plans on the in-memory store ([`ratekeeper::plan`]): each
//! plan's keys in a table of its own, a key in one table at a time, moved
//! (carried) on its first request under a new plan, also after a plan's
//! numbers change.

use std::time::Duration;

use futures_executor::block_on;
use ratekeeper::{
    clock::ManualClock,
    plan::{Plan, Plans},
    Limit, MemoryStore, Store, Timestamp, TokenBucket,
};

const MINUTE: Duration = Duration::from_secs(60);

fn store(max_keys: usize) -> MemoryStore<ManualClock> {
    MemoryStore::builder()
        .max_keys(max_keys)
        .clock(ManualClock::new(Timestamp::from_secs(1_000)))
        .background_sweep(false)
        .build()
        .unwrap()
}

fn limited<'a>(plans: &'a Plans, plan: Option<&str>) -> &'a Limit {
    match plans.get(plan) {
        Plan::Limited(limit) => limit,
        other => panic!("{plan:?} is {other:?}"),
    }
}

fn plans(pro: u64) -> Plans {
    Plans::new(Limit::new("api", TokenBucket::new(5, MINUTE, 5).unwrap()).unwrap())
        .limited("pro", TokenBucket::new(pro, MINUTE, pro).unwrap())
        .unwrap()
}

#[test]
fn a_key_is_kept_once_over_the_plans_tables() {
    let store = store(100);
    let plans = plans(10);
    let (free, pro) = (limited(&plans, None), limited(&plans, Some("pro")));
    block_on(async {
        assert!(store.check(free, b"k", 4).await.unwrap().is_allowed());
        assert!(store.check(pro, b"k", 1).await.unwrap().is_allowed());
        // Moved, not copied: one key, in pro's table.
        assert_eq!((store.len(), store.keys_of("api")), (1, 1));
        assert_eq!(store.peek(pro, b"k").await.unwrap().remaining(), 5);
        // Back to free: 5 used of 5.
        assert!(!store.check(free, b"k", 1).await.unwrap().is_allowed());
        assert_eq!(store.len(), 1);
        assert!(store.check(free, b"j", 1).await.unwrap().is_allowed());
        assert_eq!(store.keys_of("api"), 2);
    });
}

#[test]
fn a_plans_new_numbers_still_share_the_keys() {
    let store = store(100);
    let before = plans(10);
    let after = plans(8);
    block_on(async {
        assert!(store
            .check(limited(&before, Some("pro")), b"k", 6)
            .await
            .unwrap()
            .is_allowed());
        // pro tightened from 10 to 8 (a reload): 6 used, 2 left.
        let pro = limited(&after, Some("pro"));
        assert_eq!(store.peek(pro, b"k").await.unwrap().remaining(), 2);
        // The key downgrades to free after the reload: 6 used of 5.
        let free = limited(&after, None);
        assert!(!store.check(free, b"k", 1).await.unwrap().is_allowed());
        // And an upgrade of a key first seen under free reaches the new
        // pro table.
        assert!(store.check(free, b"j", 5).await.unwrap().is_allowed());
        assert_eq!(store.peek(pro, b"j").await.unwrap().remaining(), 3);
    });
}

#[test]
fn a_full_plan_table_leaves_a_moving_key_where_it_was() {
    let store = store(1);
    let plans = plans(10);
    let (free, pro) = (limited(&plans, None), limited(&plans, Some("pro")));
    block_on(async {
        assert!(store.check(pro, b"other", 1).await.unwrap().is_allowed());
        assert!(store.check(free, b"k", 5).await.unwrap().is_allowed());
        // pro's table is full: k cannot move there, and keeps its use.
        let moved = store.check(pro, b"k", 1).await.unwrap();
        assert!(!moved.is_allowed(), "saturated: {moved:?}");
        assert!(!store.check(free, b"k", 1).await.unwrap().is_allowed());
    });
}

#[test]
fn unlimited_and_denied_plans_never_reach_the_store() {
    let plans = plans(10)
        .unlimited("internal")
        .unwrap()
        .deny("suspended")
        .unwrap();
    assert_eq!(plans.get(Some("internal")), &Plan::Unlimited);
    assert_eq!(plans.get(Some("suspended")), &Plan::Deny);
    assert_eq!(plans.len(), 3);
    let mut names: Vec<_> = plans.iter().map(|(name, _)| name).collect();
    names.sort_unstable();
    assert_eq!(names, ["internal", "pro", "suspended"]);
}
