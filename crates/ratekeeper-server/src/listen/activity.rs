//! What a connection is doing, as its driver needs to know to time it out:
//! requests in flight, since when it has been idle, and since when a
//! request's head has been arriving.
//!
//! Kept in atomics that the request path updates without waking the
//! connection's driver: the driver looks when its own timer fires, and is
//! woken early only when a request's head starts on a connection it
//! believes idle for longer than a header timeout.

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// One connection's activity.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    in_flight: AtomicU32,
    /// Requests begun since the connection opened.
    requests: AtomicU64,
    /// Milliseconds after `opened` when the last request ended.
    idle_since: AtomicU64,
    /// Milliseconds after `opened`, plus one, when the first byte of the
    /// next request's head arrived; 0: none has.
    head_since: AtomicU64,
    /// Whether the driver sleeps past a head's deadline, and so must be
    /// woken when one starts.
    wake_on_head: AtomicBool,
    head_started: Notify,
    /// Whether bytes arriving with no request in flight are a request's
    /// head: HTTP/1.1's (an HTTP/2 connection's pings and settings are
    /// not).
    track_heads: AtomicBool,
    /// Whether the connection ends abruptly (a timeout), so that its
    /// socket is closed at once instead of lingering for the client's last
    /// bytes.
    abortive: AtomicBool,
}

/// What the connection is doing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// At least one request in flight.
    Busy,
    /// No request in flight since `since`; `fresh` if it never had one.
    Idle { since: Instant, fresh: bool },
    /// A request's head has been arriving since `since`.
    ReadingHead { since: Instant },
}

impl Activity {
    /// A connection opened now; `track_heads` as [`Activity::track_heads`].
    pub(crate) fn new(track_heads: bool) -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            wake_on_head: AtomicBool::new(false),
            head_started: Notify::new(),
            track_heads: AtomicBool::new(track_heads),
            abortive: AtomicBool::new(false),
        })
    }

    pub(crate) fn opened(&self) -> Instant {
        self.opened
    }

    fn millis(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.opened).as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, millis: u64) -> Instant {
        self.opened + Duration::from_millis(millis)
    }

    /// A request begins; it ends when the guard (held by its response
    /// body) drops.
    pub(crate) fn start_request(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Relaxed);
        self.requests.fetch_add(1, Relaxed);
        self.head_since.store(0, Relaxed);
        InFlight(Arc::clone(self))
    }

    /// From now on, bytes that arrive with no request in flight are the
    /// next request's head (the connection turned out to be HTTP/1.1).
    pub(crate) fn track_heads(&self) {
        self.track_heads.store(true, Relaxed);
    }

    /// Bytes arrived: on HTTP/1.1, with no request in flight, they are the
    /// next request's head.
    pub(crate) fn bytes_arrived(&self) {
        if !self.track_heads.load(Relaxed) {
            return;
        }
        if self.in_flight.load(Relaxed) == 0 && self.head_since.load(Relaxed) == 0 {
            let now = self.millis(Instant::now());
            self.head_since.store(now + 1, Relaxed);
            if self.wake_on_head.swap(false, Relaxed) {
                self.head_started.notify_one();
            }
        }
    }

    pub(crate) fn state(&self) -> State {
        // Acquire pairs with the guard's release: no request in flight
        // comes with the time the last one ended.
        if self.in_flight.load(Acquire) > 0 {
            return State::Busy;
        }
        match self.head_since.load(Relaxed) {
            0 => State::Idle {
                since: self.at(self.idle_since.load(Relaxed)),
                fresh: self.requests.load(Relaxed) == 0,
            },
            since => State::ReadingHead {
                since: self.at(since - 1),
            },
        }
    }

    /// Asks to be woken by the next request head (see
    /// [`Activity::head_started`]).
    pub(crate) fn wake_on_head(&self, wake: bool) {
        self.wake_on_head.store(wake, Relaxed);
    }

    /// Resolves when a head starts while [`Activity::wake_on_head`] is set.
    pub(crate) async fn head_started(&self) {
        self.head_started.notified().await;
    }

    pub(crate) fn set_abortive(&self) {
        self.abortive.store(true, Relaxed);
    }

    pub(crate) fn is_abortive(&self) -> bool {
        self.abortive.load(Relaxed)
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        // The idle time is written before the count drops, so a driver that
        // sees no request in flight also sees when the last one ended.
        activity
            .idle_since
            .store(activity.millis(Instant::now()), Relaxed);
        activity.in_flight.fetch_sub(1, Release);
    }
}
