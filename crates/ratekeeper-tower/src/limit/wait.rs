//! Holding a refused request until its units are due, instead of
//! refusing it: a rule's [`max_wait`](super::Rule::max_wait), in a queue
//! bounded per key and overall.
//!
//! A request that a token bucket or GCRA refuses, but will allow within
//! the rule's `max_wait`, is charged at once by a report (into the key's
//! debt, so the requests after it see its units taken), then held until
//! they are due, then sent on. The count stays exact whatever the waits.
//! A held request whose client goes away is dropped, and its units are
//! given back: at once on a store that answers at once (the in-memory
//! store), otherwise before the layer's next request that waits for its
//! store.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ratekeeper::store::{Check, MultiOutcome, StoreError};
use ratekeeper::{Limit, Outcome, RetryAfter, Store};

use super::layer::Shared;
use super::rule::Applied;

/// The requests held waiting for their units, bounded overall and per
/// key, and what became of them. Shared by the clones of a layer, and by
/// layers that are given the same queue
/// ([`RateLimitLayerBuilder::wait_queue`](super::RateLimitLayerBuilder::wait_queue)),
/// as a service that rebuilds its layer on reload does.
///
/// Past either bound, a request is refused as it would have been without
/// a wait, and counted in [`turned_away`](WaitQueue::turned_away).
#[derive(Clone)]
pub struct WaitQueue {
    inner: Arc<QueueInner>,
}

struct QueueInner {
    max: usize,
    max_per_key: usize,
    /// The requests held, per key (a key leaves when its last does).
    keys: Mutex<HashMap<Vec<u8>, usize>>,
    waiting: AtomicUsize,
    waited: AtomicU64,
    turned_away: AtomicU64,
}

impl fmt::Debug for WaitQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitQueue")
            .field("max", &self.inner.max)
            .field("max_per_key", &self.inner.max_per_key)
            .field("waiting", &self.waiting())
            .finish_non_exhaustive()
    }
}

impl Default for WaitQueue {
    /// [`WaitQueue::DEFAULT_MAX`] requests,
    /// [`WaitQueue::DEFAULT_MAX_PER_KEY`] of one key.
    fn default() -> Self {
        WaitQueue::new(WaitQueue::DEFAULT_MAX, WaitQueue::DEFAULT_MAX_PER_KEY)
    }
}

impl WaitQueue {
    /// The default bound on the requests held at once.
    pub const DEFAULT_MAX: usize = 1024;

    /// The default bound on the requests of one key held at once.
    pub const DEFAULT_MAX_PER_KEY: usize = 16;

    /// A queue holding at most `max` requests, and `max_per_key` of one
    /// key (a key of the limit that refused it).
    pub fn new(max: usize, max_per_key: usize) -> WaitQueue {
        WaitQueue {
            inner: Arc::new(QueueInner {
                max,
                max_per_key,
                keys: Mutex::new(HashMap::new()),
                waiting: AtomicUsize::new(0),
                waited: AtomicU64::new(0),
                turned_away: AtomicU64::new(0),
            }),
        }
    }

    /// The requests held now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// The requests that waited, then were sent on.
    pub fn waited(&self) -> u64 {
        self.inner.waited.load(Ordering::Relaxed)
    }

    /// The requests refused because the queue, or their key's share of
    /// it, was full.
    pub fn turned_away(&self) -> u64 {
        self.inner.turned_away.load(Ordering::Relaxed)
    }

    /// A place for a request of `key`, unless the queue or the key's
    /// share is full.
    fn enter(&self, key: Vec<u8>) -> Option<Place> {
        let inner = &self.inner;
        let mut keys = inner.keys.lock().unwrap_or_else(PoisonError::into_inner);
        let held = keys.get(&key).copied().unwrap_or(0);
        if inner.waiting.load(Ordering::Relaxed) >= inner.max || held >= inner.max_per_key {
            drop(keys);
            inner.turned_away.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        keys.insert(key.clone(), held + 1);
        inner.waiting.fetch_add(1, Ordering::Relaxed);
        Some(Place {
            queue: self.clone(),
            key,
        })
    }
}

/// A request's place in the queue, left when dropped.
struct Place {
    queue: WaitQueue,
    key: Vec<u8>,
}

impl Drop for Place {
    fn drop(&mut self) {
        let inner = &self.queue.inner;
        let mut keys = inner.keys.lock().unwrap_or_else(PoisonError::into_inner);
        match keys.get_mut(&self.key) {
            Some(held) if *held > 1 => *held -= 1,
            _ => {
                keys.remove(&self.key);
            }
        }
        inner.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Units charged to a held request: given back when dropped before
/// [`Charged::keep`].
pub(super) struct Charged<S: Store + 'static> {
    shared: Arc<Shared<S>>,
    units: Vec<(Limit, Vec<u8>, u64)>,
    kept: bool,
}

impl<S: Store + 'static> Charged<S> {
    /// The request was sent on: its units stay charged.
    pub(super) fn keep(mut self) {
        self.kept = true;
        if let Some(queue) = &self.shared.wait_queue {
            queue.inner.waited.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<S: Store + 'static> Drop for Charged<S> {
    /// Given back at once where the store answers at once; otherwise
    /// before the layer's next request that waits for its store.
    fn drop(&mut self) {
        if self.kept {
            return;
        }
        for (limit, key, units) in std::mem::take(&mut self.units) {
            let answered = {
                let mut refund = pin!(self.shared.store.refund(&limit, &key, units));
                matches!(
                    refund
                        .as_mut()
                        .poll(&mut Context::from_waker(Waker::noop())),
                    Poll::Ready(_)
                )
            };
            if !answered {
                self.shared
                    .unrefunded
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((limit, key, units));
            }
        }
    }
}

/// Gives back the units of held requests that were dropped while the
/// store could not answer at once.
pub(super) async fn refund_dropped<S: Store>(shared: &Shared<S>) {
    let pending = std::mem::take(
        &mut *shared
            .unrefunded
            .lock()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for (limit, key, units) in pending {
        if let Err(error) = shared.store.refund(&limit, &key, units).await {
            tracing::warn!(%error, limit = limit.name(), "a held request's units could not be given back");
        }
    }
}

/// The longest a request refused by `decided` may be held: the shortest
/// `max_wait` of the rules that refused it, when each has one and
/// reserves ahead; `None` when it may not wait.
fn allowed_wait(rules: &[Applied<'_>], decided: &MultiOutcome) -> Option<Duration> {
    let mut allowed: Option<Duration> = None;
    for (rule, outcome) in rules.iter().zip(decided.outcomes()) {
        if outcome.is_allowed() || rule.is_shadow() {
            continue;
        }
        if outcome.is_saturated() || !rule.limit().policy().reserves_ahead() {
            return None;
        }
        let wait = rule.longest_wait()?;
        allowed = Some(allowed.map_or(wait, |shortest| shortest.min(wait)));
    }
    allowed
}

/// Holds a request that `decided` refused until its units are due, when
/// its rules allow: charged now, then waited for. `None`, charging
/// nothing, when it may not wait (no `max_wait`, a window policy, due
/// later than allowed or never, the queue full, the store failing).
pub(super) async fn hold<S: Store + 'static>(
    shared: &Arc<Shared<S>>,
    rules: &[Applied<'_>],
    checks: &[Check<'_>],
    decided: &MultiOutcome,
) -> Option<Charged<S>> {
    let queue = shared.wait_queue.as_ref()?;
    if rules.iter().any(|rule| rule.is_shadow()) || rules.len() != checks.len() {
        return None;
    }
    let allowed = allowed_wait(rules, decided)?;
    match decided.retry_after() {
        RetryAfter::After(due) if due <= allowed => {}
        _ => return None,
    }
    // Queued by the first refusing limit's key, with its name: one key
    // of one limit can hold only its share.
    let refused = decided
        .outcomes()
        .iter()
        .position(|outcome| !outcome.is_allowed())?;
    let mut place_key = checks[refused].limit.name().as_bytes().to_vec();
    place_key.push(0);
    place_key.extend_from_slice(checks[refused].key);
    let place = queue.enter(place_key)?;
    let mut charged = Charged {
        shared: Arc::clone(shared),
        units: Vec::with_capacity(checks.len()),
        kept: false,
    };
    let mut delay = Duration::ZERO;
    for check in checks {
        let outcome: Result<Outcome, StoreError> = shared
            .store
            .report(check.limit, check.key, check.cost)
            .await;
        let Ok(Outcome::Decided(decision)) = outcome else {
            // Dropped: what was charged goes back.
            return None;
        };
        charged
            .units
            .push((check.limit.clone(), check.key.to_vec(), check.cost));
        let due =
            check
                .limit
                .policy()
                .reserved_delay(&decision)
                .unwrap_or(if decision.is_allowed() {
                    Duration::ZERO
                } else {
                    Duration::MAX
                });
        delay = delay.max(due);
    }
    if delay > allowed {
        return None;
    }
    futures_timer::Delay::new(delay).await;
    drop(place);
    Some(charged)
}
