//! A rule's `max_wait`: a request the limit refuses but will allow by
//! then is held and sent on, its units charged when it is held; a held
//! request that is dropped gives them back; the queue is bounded per key
//! and overall; a window policy cannot wait.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::common::Remote;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, Request, Response, StatusCode};
use http_body_util::Full;
use ratekeeper::clock::ManualClock;
use ratekeeper::{FixedWindow, Gcra, Limit, MemoryStore, Store, Timestamp};
use ratekeeper_tower::{Key, LayerError, RateLimitLayer, Rule, WaitQueue};
use tower::{service_fn, Layer, Service, ServiceExt};

type Store_ = MemoryStore<Arc<ManualClock>>;

fn store() -> Store_ {
    let clock = Arc::new(ManualClock::new(Timestamp::from_secs(100)));
    MemoryStore::builder().clock(clock).build().unwrap()
}

/// 1,000 a second, one at a time: a refused request's token is due in a
/// millisecond of the (still) manual clock, waited for on a real timer.
fn fast() -> Limit {
    Limit::new(
        "per-team",
        Gcra::new(1_000, Duration::from_secs(1), 1).unwrap(),
    )
    .unwrap()
}

/// One a minute: a held request waits a minute on a real timer, so a
/// test sees it waiting however slow the machine.
fn limit() -> Limit {
    Limit::new(
        "per-team",
        Gcra::new(1, Duration::from_secs(60), 1).unwrap(),
    )
    .unwrap()
}

fn team() -> Key {
    Key::header(HeaderName::from_static("x-team"))
}

fn rule(max_wait: Duration) -> Rule {
    Rule::new(limit(), team()).max_wait(max_wait)
}

fn request(team: &str) -> Request<String> {
    Request::builder()
        .header("x-team", team)
        .body(String::new())
        .unwrap()
}

fn ok() -> impl Service<
    Request<String>,
    Response = Response<Full<Bytes>>,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<Response<Full<Bytes>>, std::convert::Infallible>> + Send,
> + Clone
       + Send
       + 'static {
    service_fn(|_: Request<String>| async { Ok(Response::new(Full::new(Bytes::from("ok")))) })
}

/// Polls `future` once, without a runtime's waker: still waiting or done.
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
async fn a_refused_request_is_held_until_its_token_is_due() {
    let store = store();
    let rule = |wait| Rule::new(fast(), team()).max_wait(wait);
    let layer = RateLimitLayer::builder(store.clone())
        .rule(rule(Duration::from_millis(5)))
        .build()
        .unwrap();
    let service = layer.layer(ok());
    let first = service.clone().oneshot(request("a")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The second is due in 1 ms: held, then sent on.
    let second = service.clone().oneshot(request("a")).await.unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    let queue = layer.wait_queue().expect("a rule waits");
    assert_eq!((queue.waiting(), queue.waited()), (0, 1));
    // Both tokens are charged: a third, allowed to wait only 1 ms, would
    // be due in 2 ms (the clock stands still): refused at once, charging
    // nothing.
    let impatient = RateLimitLayer::builder(store.clone())
        .rule(rule(Duration::from_millis(1)))
        .build()
        .unwrap()
        .layer(ok());
    let refused = impatient.oneshot(request("a")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let due = store.check(&fast(), b"a", 1).await.unwrap().retry_after();
    assert_eq!(due.duration(), Some(Duration::from_millis(2)));
}

#[tokio::test]
async fn a_held_request_that_is_dropped_gives_its_token_back() {
    let store = store();
    let layer = RateLimitLayer::builder(store.clone())
        .rule(rule(Duration::from_secs(300)))
        .build()
        .unwrap();
    let service = layer.layer(ok());
    service.clone().oneshot(request("a")).await.unwrap();
    let mut held = Box::pin(service.clone().oneshot(request("a")));
    assert!(poll_once(&mut held).is_pending());
    // Its token is charged: the next is due in 2 minutes, not 1.
    let due = |store: Store_| async move {
        let outcome = store.check(&limit(), b"a", 1).await.unwrap();
        outcome.retry_after().duration()
    };
    assert_eq!(due(store.clone()).await, Some(Duration::from_secs(120)));
    // The client went away.
    drop(held);
    let queue = layer.wait_queue().unwrap();
    assert_eq!((queue.waiting(), queue.waited()), (0, 0));
    // Only the first request's token is used: due in a minute again.
    assert_eq!(due(store.clone()).await, Some(Duration::from_secs(60)));
}

#[tokio::test]
async fn the_queue_holds_a_bounded_number_per_key_and_overall() {
    let store = store();
    let queue = WaitQueue::new(2, 1);
    let layer = RateLimitLayer::builder(store.clone())
        .rule(rule(Duration::from_secs(300)))
        .wait_queue(queue.clone())
        .build()
        .unwrap();
    let service = layer.layer(ok());
    let mut held = Vec::new();
    for team in ["a", "b"] {
        service.clone().oneshot(request(team)).await.unwrap();
        let mut waiting = Box::pin(service.clone().oneshot(request(team)));
        assert!(poll_once(&mut waiting).is_pending());
        held.push(waiting);
    }
    assert_eq!(queue.waiting(), 2);
    // A's share is taken: refused at once, charging nothing.
    let answer = service.clone().oneshot(request("a")).await.unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    // The queue is full: c is refused too, though its share is free.
    service.clone().oneshot(request("c")).await.unwrap();
    let answer = service.clone().oneshot(request("c")).await.unwrap();
    assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(queue.turned_away(), 2);
    // Nothing was charged for them: c's next token is due in a minute.
    let due = store.check(&limit(), b"c", 1).await.unwrap().retry_after();
    assert_eq!(due.duration(), Some(Duration::from_secs(60)));
    drop(held);
    assert_eq!(queue.waiting(), 0);
}

#[tokio::test]
async fn on_a_store_across_a_network_a_dropped_wait_is_refunded_before_the_next_request() {
    let memory = store();
    let layer = RateLimitLayer::builder(Remote(memory.clone()))
        .rule(rule(Duration::from_secs(300)))
        .build()
        .unwrap();
    let service = layer.layer(ok());
    service.clone().oneshot(request("a")).await.unwrap();
    let mut held = Box::pin(service.clone().oneshot(request("a")));
    // Decided, charged, then waiting on its timer.
    while memory
        .check(&limit(), b"a", 1)
        .await
        .unwrap()
        .retry_after()
        .duration()
        != Some(Duration::from_secs(120))
    {
        assert!(poll_once(&mut held).is_pending());
        tokio::task::yield_now().await;
    }
    // Dropped: the refund must wait for the store, so the layer keeps it.
    drop(held);
    let due = memory.check(&limit(), b"a", 1).await.unwrap().retry_after();
    assert_eq!(due.duration(), Some(Duration::from_secs(120)));
    // The layer's next request gives it back first.
    let answer = service.clone().oneshot(request("b")).await.unwrap();
    assert_eq!(answer.status(), StatusCode::OK);
    let due = memory.check(&limit(), b"a", 1).await.unwrap().retry_after();
    assert_eq!(due.duration(), Some(Duration::from_secs(60)));
}

#[test]
fn a_window_cannot_hold_a_request() {
    let window = Limit::new("w", FixedWindow::new(5, Duration::from_secs(60)).unwrap()).unwrap();
    let error = RateLimitLayer::builder(MemoryStore::new())
        .rule(Rule::new(window, Key::global()).max_wait(Duration::from_secs(1)))
        .build()
        .unwrap_err();
    assert_eq!(error, LayerError::WaitOnWindow("w".to_owned()));
    // Without a max_wait, no queue.
    let layer = RateLimitLayer::builder(MemoryStore::new())
        .rule(Rule::new(limit(), Key::global()))
        .build()
        .unwrap();
    assert!(layer.wait_queue().is_none());
}
