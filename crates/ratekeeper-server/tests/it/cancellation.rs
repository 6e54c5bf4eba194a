//! A request whose caller stops waiting (its connection closed, its
//! timeout passed, its client reset the stream) is still decided all or
//! nothing: a limit charged before another refused gets its units back.

use std::future::Future;
use std::sync::Arc;
use std::task::Context;
use std::time::{Duration, Instant};

use ratekeeper::clock::UnixClock;
use ratekeeper_server::engine::{Check, Engine};
use ratekeeper_server::Config;

#[tokio::test]
async fn a_dropped_request_of_several_costs_still_gives_back_what_it_took() {
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
    let engine = Engine::start(&config, Arc::new(UnixClock)).await.unwrap();
    let limits = engine.limits();
    let (wide, narrow) = (limits.get("wide").unwrap(), limits.get("narrow").unwrap());
    let check = |limit: &Arc<_>, cost| Check::new(Arc::clone(limit), b"all".to_vec(), cost);
    let remaining =
        |verdict: ratekeeper_server::engine::Verdict| verdict.results[0].decision().remaining();

    // `narrow` has nothing left.
    assert!(engine
        .check(vec![check(narrow, 1)])
        .await
        .unwrap()
        .is_allowed());

    // Costs differ (Envoy's per-descriptor hits): `wide` is charged 2,
    // `narrow` refuses, and `wide` must get its 2 back. The caller gives
    // up after the first poll, while the store is still working.
    let mut request = Box::pin(engine.check(vec![check(wide, 2), check(narrow, 1)]));
    let mut cx = Context::from_waker(futures_util::task::noop_waker_ref());
    assert!(request.as_mut().poll(&mut cx).is_pending());
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
