//! HTTP/2 streams served inside their connection's task, so that the
//! responses ready at one moment leave in one write.
//!
//! hyper hands every HTTP/2 stream (one gRPC call) to an executor. With
//! tokio's, each becomes a task of its own, and on the multi-thread runtime
//! the connection's task, woken by a finished call, runs next in the
//! worker's LIFO slot: it writes that one response and flushes, once per
//! call. Measured on the gRPC door at 64 calls in flight, that was one
//! `writev` per response, and the kernel's TCP send path was a third of the
//! service's CPU. Here the connection keeps its streams in a
//! [`FuturesUnordered`] it polls itself: it reads every request that has
//! arrived, runs their calls, and only then lets hyper write, so every
//! response that is ready goes out in one write. It also saves a task per
//! call.
//!
//! A connection's calls then share one core, as its HTTP/2 framing already
//! did; connections still spread over the runtime's workers. The calls of
//! the decision doors are short (a decision, or a Redis round trip that
//! waits without holding the core), so a connection's core is spent on
//! framing, not on calls waiting their turn.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use futures_util::stream::{FuturesUnordered, StreamExt};
use pin_project_lite::pin_project;

/// How many times one poll of a connection goes round (read, run the calls,
/// write) before it lets other connections have the core.
const ROUNDS_PER_POLL: usize = 4;

type Call = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The executor hyper is given for one HTTP/2 connection: it queues the
/// connection's streams for [`WithStreams`] to run.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamExecutor {
    queued: Arc<Queued>,
}

#[derive(Default)]
struct Queued(Mutex<Vec<Call>>);

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").finish_non_exhaustive()
    }
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, call: F) {
        // hyper calls this from inside the connection's poll, which
        // drains the queue as soon as that poll returns: no wake needed.
        self.queued
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::pin(call));
    }
}

pin_project! {
    /// An HTTP/2 connection with its streams: resolves when the connection
    /// ends (streams still running then are dropped, as their responses
    /// could no longer be sent).
    pub(crate) struct WithStreams<C> {
        #[pin]
        conn: C,
        queued: Arc<Queued>,
        calls: FuturesUnordered<Call>,
    }
}

impl<C> WithStreams<C> {
    /// `conn`, whose executor is `executor`.
    pub(crate) fn new(conn: C, executor: &StreamExecutor) -> WithStreams<C> {
        WithStreams {
            conn,
            queued: Arc::clone(&executor.queued),
            calls: FuturesUnordered::new(),
        }
    }

    /// The connection, to start its graceful shutdown.
    pub(crate) fn conn(self: Pin<&mut Self>) -> Pin<&mut C> {
        self.project().conn
    }
}

impl<C: Future> Future for WithStreams<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let mut this = self.project();
        for _ in 0..ROUNDS_PER_POLL {
            // Reads what has arrived, starts a stream per new request and
            // writes (in one flush) what the calls have answered so far.
            if let Poll::Ready(ended) = this.conn.as_mut().poll(cx) {
                return Poll::Ready(ended);
            }
            this.calls.extend(
                this.queued
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .drain(..),
            );
            let mut answered = false;
            while let Poll::Ready(Some(())) = this.calls.poll_next_unpin(cx) {
                answered = true;
            }
            if !answered {
                // Every call waits for something that will wake this task
                // (a store, a body, flow control): so does the connection.
                return Poll::Pending;
            }
            // Calls have queued their responses in the connection: round
            // again so that it writes them, and reads what came meanwhile.
        }
        // Busy: let the other tasks run, and come back.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A connection that starts `streams` calls on its first poll, then
    /// ends once they have all run.
    struct FakeConn {
        executor: StreamExecutor,
        streams: usize,
        started: bool,
        ran: Arc<AtomicUsize>,
        polls: usize,
    }

    impl Future for FakeConn {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<usize> {
            self.polls += 1;
            if !self.started {
                self.started = true;
                for _ in 0..self.streams {
                    let ran = Arc::clone(&self.ran);
                    hyper::rt::Executor::execute(&self.executor, async move {
                        tokio::task::yield_now().await;
                        ran.fetch_add(1, Ordering::Relaxed);
                    });
                }
            }
            if self.ran.load(Ordering::Relaxed) == self.streams {
                Poll::Ready(self.polls)
            } else {
                Poll::Pending
            }
        }
    }

    #[tokio::test]
    async fn the_connection_runs_its_streams_and_sees_them_finish() {
        let executor = StreamExecutor::default();
        let ran = Arc::new(AtomicUsize::new(0));
        let conn = FakeConn {
            executor: executor.clone(),
            streams: 100,
            started: false,
            ran: Arc::clone(&ran),
            polls: 0,
        };
        let polls = WithStreams::new(conn, &executor).await;
        assert_eq!(ran.load(Ordering::Relaxed), 100);
        // Started, then (after the calls' one yield) every call finished
        // in one round, and the connection saw it in the next: a poll of
        // the connection per batch of calls, not per call.
        assert!(polls <= 4, "{polls} polls of the connection");
    }
}
