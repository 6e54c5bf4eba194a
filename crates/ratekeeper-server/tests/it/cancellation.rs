//! A request whose caller stops waiting (its connection closed, its
//! timeout passed, its client reset the stream) is still decided all or
//! nothing: a limit charged before another refused gets its units back.

use std::future::Future;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, Instant};

use ratekeeper::clock::UnixClock;
use ratekeeper_redis::internals::hash_slot;
use ratekeeper_server::engine::{ActiveLimit, AnyStore, Engine, LimitCheck};
use ratekeeper_server::Config;
use ratekeeper_test_support::redis::RedisCluster;

/// Limits whose Redis keys are in different hash slots of a Redis Cluster
/// are decided one slot at a time: `wide`'s slot is charged before
/// `narrow`'s refuses, and `wide` must get its units back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_request_across_cluster_slots_still_gives_back_what_it_took() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let urls: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| format!("{url:?}"))
        .collect();
    let config = Config::from_toml_str(
        &format!(
            "[store]\nkind = \"redis-cluster\"\nurls = [{}]\n\n\
             [[limits]]\nname = \"wide\"\nrate = \"5/day\"\npolicy = \"gcra\"\nkey = [\"global\"]\n\n\
             [[limits]]\nname = \"narrow\"\nrate = \"1/day\"\npolicy = \"gcra\"\nkey = [\"global\"]\n",
            urls.join(", ")
        ),
        "test.toml",
    )
    .unwrap();
    let engine = Engine::builder(&config)
        .clock(Arc::new(UnixClock))
        .start()
        .await
        .unwrap();
    let limits = engine.limits();
    let (wide, narrow) = (limits.get("wide").unwrap(), limits.get("narrow").unwrap());
    let AnyStore::Redis(store) = engine.store() else {
        panic!("a Redis Cluster store");
    };
    let slot = |limit: &Arc<ActiveLimit>| {
        hash_slot(
            &store
                .inner()
                .store()
                .get()
                .expect("connected")
                .key(limit.limit(), b"all"),
        )
    };
    assert_ne!(slot(wide), slot(narrow), "the test needs two slots");
    assert!(!engine.store().decides_in_one_step());

    let check = |limit: &Arc<_>, cost| LimitCheck::new(Arc::clone(limit), b"all".to_vec(), cost);
    let remaining =
        |verdict: ratekeeper_server::engine::Verdict| verdict.results[0].decision().remaining();

    // `narrow` has nothing left.
    assert!(engine
        .check(vec![check(narrow, 1)])
        .await
        .unwrap()
        .is_allowed());

    // `wide` is charged 2 in its slot, `narrow` refuses in its own, and
    // `wide` must get its 2 back. The caller gives up after the first
    // poll, while the store is still working.
    let mut request = Box::pin(engine.check(vec![check(wide, 2), check(narrow, 1)]));
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    // Almost always pending; a thread descheduled between the spawn and
    // the poll may find the detached task done already, and the counts
    // below must hold either way.
    let _ = request.as_mut().poll(&mut cx);
    drop(request);

    // The request goes on without its caller: it has finished when
    // `narrow` has counted its refusal (decisions are counted last). Wait
    // for that, bounded: cut short, it never comes.
    let narrow_stats = engine.stats().get("narrow").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while narrow_stats.denied() == 0 {
        assert!(
            Instant::now() < deadline,
            "the request was never finished: wide has {} left of 5",
            remaining(engine.peek(vec![check(wide, 0)]).await.unwrap())
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        remaining(engine.peek(vec![check(wide, 0)]).await.unwrap()),
        5
    );
}

/// On one SQLite file, limits of different costs are decided in one
/// transaction: a request dropped by its caller takes nothing, whenever
/// it is dropped.
#[tokio::test]
async fn a_dropped_request_on_sqlite_takes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("counts.db");
    let config = Config::from_toml_str(
        &format!(
            "[store]\nkind = \"sqlite\"\npath = {path:?}\n\n\
             [[limits]]\nname = \"wide\"\nrate = \"5/day\"\npolicy = \"gcra\"\nkey = [\"global\"]\n\n\
             [[limits]]\nname = \"narrow\"\nrate = \"1/day\"\npolicy = \"gcra\"\nkey = [\"global\"]\n"
        ),
        "test.toml",
    )
    .unwrap();
    let engine = Engine::builder(&config)
        .clock(Arc::new(UnixClock))
        .start()
        .await
        .unwrap();
    assert!(engine.store().decides_in_one_step());
    let limits = engine.limits();
    let (wide, narrow) = (limits.get("wide").unwrap(), limits.get("narrow").unwrap());
    let check = |limit: &Arc<_>, cost| LimitCheck::new(Arc::clone(limit), b"all".to_vec(), cost);
    assert!(engine
        .check(vec![check(narrow, 1)])
        .await
        .unwrap()
        .is_allowed());
    for polls in 0..3 {
        let mut request = Box::pin(engine.check(vec![check(wide, 2), check(narrow, 1)]));
        let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
        for _ in 0..polls {
            if request.as_mut().poll(&mut cx).is_ready() {
                break;
            }
        }
        drop(request);
    }
    // A request of the same limits, awaited: refused, and `wide` whole.
    let verdict = engine
        .check(vec![check(wide, 2), check(narrow, 1)])
        .await
        .unwrap();
    assert!(!verdict.is_allowed());
    assert_eq!(verdict.results[0].decision().remaining(), 5);
}
