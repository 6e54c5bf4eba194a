//! [`check_all`]: several in-memory limiters at once, all or nothing, by
//! the one algorithm of several limits ([`Store::check_all`]'s, in
//! `store/multi.rs`, where the rest of the family lives: [`Check`],
//! [`MultiOutcome`], [`check_shadow`]), run here without waiting.
//!
//! [`Store::check_all`]: crate::store::Store::check_all
//! [`Check`]: crate::store::Check
//! [`check_shadow`]: crate::store::check_shadow

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use crate::store::multi::{all_or_nothing, Steps};
use crate::store::MultiOutcome;
use crate::{Clock, MemoryLimiter, Outcome};

/// In-memory limiters, each with its key and cost: they decide without
/// waiting.
struct LimiterSteps<'a, C, K> {
    limits: &'a [(&'a MemoryLimiter<C>, K, u64)],
}

impl<C: Clock, K: AsRef<[u8]> + Sync> Steps for LimiterSteps<'_, C, K> {
    type Error = std::convert::Infallible;

    fn len(&self) -> usize {
        self.limits.len()
    }

    fn charge(&self, i: usize) -> impl Future<Output = Result<Outcome, Self::Error>> + Send {
        let (limiter, key, cost) = &self.limits[i];
        std::future::ready(Ok(limiter.check(key, *cost)))
    }

    fn give_back(&self, i: usize) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let (limiter, key, cost) = &self.limits[i];
        limiter.refund(key, *cost);
        std::future::ready(Ok(()))
    }

    fn preview(&self, i: usize) -> impl Future<Output = Result<Outcome, Self::Error>> + Send {
        let (limiter, key, cost) = &self.limits[i];
        let now = limiter.clock().now();
        std::future::ready(Ok(limiter.preview_at(key.as_ref(), now, *cost)))
    }
}

/// Runs a future that never waits (every step in memory) to its end, here.
fn without_waiting<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    let mut context = Context::from_waker(Waker::noop());
    loop {
        // In-memory steps are ready at once; a pending poll would only mean
        // a step yielded, and polling again goes on with it.
        if let Poll::Ready(output) = future.as_mut().poll(&mut context) {
            return output;
        }
        std::hint::spin_loop();
    }
}

/// Checks a request against every `(limiter, key, cost)`, all or nothing:
/// it is counted in every limit if each allows it, and in none otherwise.
///
/// ```
/// use std::time::Duration;
/// use ratekeeper::{FixedWindow, MemoryLimiter, Timestamp, clock::ManualClock, memory::check_all};
///
/// let clock = ManualClock::new(Timestamp::ZERO);
/// let build = |limit| {
///     MemoryLimiter::builder(FixedWindow::new(limit, Duration::from_secs(60)).unwrap())
///         .clock(clock.clone())
///         .background_sweep(false)
///         .build()
///         .unwrap()
/// };
/// let (global, per_ip) = (build(1_000), build(2));
///
/// for _ in 0..2 {
///     assert!(check_all(&[(&global, "all", 1), (&per_ip, "192.0.2.1", 1)]).is_allowed());
/// }
/// let third = check_all(&[(&global, "all", 1), (&per_ip, "192.0.2.1", 1)]);
/// assert_eq!(third.denied_by(), Some(1));
/// // The denied request took nothing from the global limit.
/// assert_eq!(global.peek("all").remaining(), 998);
/// ```
pub fn check_all<C, K>(limits: &[(&MemoryLimiter<C>, K, u64)]) -> MultiOutcome
where
    C: Clock,
    K: AsRef<[u8]> + Sync,
{
    match without_waiting(all_or_nothing(&LimiterSteps { limits })) {
        Ok(outcome) => outcome,
        Err(never) => match never {},
    }
}
