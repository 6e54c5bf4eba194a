//! A future polled again only when its own waker fired.
//!
//! A connection's driver waits on the connection and, beside it, on
//! signals that almost never come (its timer, the service stopping, its
//! door asking for room). `select!` polls every branch each time the task
//! wakes, and the connection wakes it for every request: re-polling the
//! quiet branches cost about 1,200 instructions a request at one request
//! in flight (callgrind, BENCHMARKS.md). Wrapped in [`WhenWoken`], a
//! quiet branch costs an atomic swap and a waker comparison instead.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use futures_util::task::AtomicWaker;
use pin_project_lite::pin_project;

pin_project! {
    /// `future`, polled on the first poll and then only after it woke
    /// its task.
    pub(crate) struct WhenWoken<F> {
        #[pin]
        future: F,
        signal: Arc<Signal>,
        polled: bool,
    }
}

impl<F> WhenWoken<F> {
    pub(crate) fn new(future: F) -> WhenWoken<F> {
        WhenWoken {
            future,
            signal: Arc::new(Signal {
                woken: AtomicBool::new(false),
                task: AtomicWaker::new(),
            }),
            polled: false,
        }
    }
}

/// Whether the inner future woke, and the task to wake when it does.
struct Signal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Registered before the flag is read: a wake after the read finds
        // this task's waker.
        this.signal.task.register(cx.waker());
        if *this.polled && !this.signal.woken.swap(false, Ordering::Acquire) {
            return Poll::Pending;
        }
        *this.polled = true;
        let waker = Waker::from(Arc::clone(this.signal));
        this.future.poll(&mut Context::from_waker(&waker))
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use super::*;

    /// Pending until `ready`, counting its polls and keeping its waker.
    struct Counted {
        polls: Rc<Cell<u32>>,
        ready: Rc<Cell<bool>>,
        waker: Rc<Cell<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();

        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.set(self.polls.get() + 1);
            self.waker.set(Some(cx.waker().clone()));
            match self.ready.get() {
                true => Poll::Ready(()),
                false => Poll::Pending,
            }
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_then_only_after_its_wake() {
        let (polls, ready, waker) = Default::default();
        let inner = Counted {
            polls: Rc::clone(&polls),
            ready: Rc::clone(&ready),
            waker: Rc::clone(&waker),
        };
        let mut future = std::pin::pin!(WhenWoken::new(inner));
        let task = Arc::new(Flag::default());
        let task_waker = Waker::from(Arc::clone(&task));
        let mut cx = Context::from_waker(&task_waker);

        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.get(), 1);
        // Woken by something else: the inner future is not polled.
        for _ in 0..3 {
            assert!(future.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.get(), 1);
        assert!(!task.0.load(Ordering::Acquire));

        // Its own wake reaches the task, and the next poll polls it.
        ready.set(true);
        waker.take().expect("it kept a waker").wake();
        assert!(task.0.load(Ordering::Acquire), "the task was woken");
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.get(), 2);
    }

    #[derive(Default)]
    struct Flag(AtomicBool);

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::Release);
        }
    }
}
