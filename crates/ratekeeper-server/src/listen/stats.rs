//! What the listeners count: open connections, and why they were closed.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};

use super::errors::{ConnectionError, ErrorLog};

/// Why the service closed a connection (a client closing its own is not
/// counted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum CloseReason {
    /// No request in flight for `idle_timeout`.
    Idle,
    /// A request's head (or a new connection's first request) took longer
    /// than `header_timeout`.
    HeaderTimeout,
    /// Closed to make room while its door was full (of connections, or of
    /// HTTP/2 streams): stalled, or idle, for a second or more.
    Pressure,
    /// Older than `max_connection_age`.
    MaxAge,
    /// Still open when the shutdown's grace period ended.
    Shutdown,
    /// The TLS handshake failed or took longer than `handshake_timeout`.
    Handshake,
    /// Its answers waited for the peer to read them for `send_timeout`.
    SendTimeout,
    /// Every request in flight waited `body_timeout` for more of its body.
    BodyTimeout,
}

impl CloseReason {
    /// Every reason, in the order of [`DoorSnapshot::closed`].
    pub(crate) const ALL: [CloseReason; 8] = [
        CloseReason::Idle,
        CloseReason::HeaderTimeout,
        CloseReason::Pressure,
        CloseReason::MaxAge,
        CloseReason::Shutdown,
        CloseReason::Handshake,
        CloseReason::SendTimeout,
        CloseReason::BodyTimeout,
    ];

    /// The label value in `/metrics`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CloseReason::Idle => "idle",
            CloseReason::HeaderTimeout => "header_timeout",
            CloseReason::Pressure => "pressure",
            CloseReason::MaxAge => "max_age",
            CloseReason::Shutdown => "shutdown",
            CloseReason::Handshake => "handshake",
            CloseReason::SendTimeout => "send_timeout",
            CloseReason::BodyTimeout => "body_timeout",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// One door's counters, shared by its accept loop and its connections.
#[derive(Debug, Default)]
pub(crate) struct DoorStats {
    open: AtomicU64,
    accepted: AtomicU64,
    closed: [AtomicU64; CloseReason::ALL.len()],
    request_timeouts: AtomicU64,
    cap_reached: AtomicU64,
    accept_errors: AtomicU64,
    streams_refused: AtomicU64,
    /// The streams the door's [`Room`](super::room::Room) counts now.
    pub(crate) streams_held: AtomicUsize,
    /// The bytes of requests still arriving that it counts now.
    pub(crate) request_bytes_held: AtomicUsize,
    bodies_refused: AtomicU64,
    /// Connections that ended with an error.
    pub(crate) errors: ErrorLog,
}

impl DoorStats {
    pub(crate) fn opened(&self) {
        self.accepted.fetch_add(1, Relaxed);
        self.open.fetch_add(1, Relaxed);
    }

    pub(crate) fn gone(&self) {
        self.open.fetch_sub(1, Relaxed);
    }

    pub(crate) fn closed(&self, reason: CloseReason) {
        self.closed[reason.index()].fetch_add(1, Relaxed);
    }

    pub(crate) fn request_timed_out(&self) {
        self.request_timeouts.fetch_add(1, Relaxed);
    }

    pub(crate) fn cap_reached(&self) {
        self.cap_reached.fetch_add(1, Relaxed);
    }

    pub(crate) fn accept_failed(&self) {
        self.accept_errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn body_refused(&self) {
        self.bodies_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn stream_refused(&self) {
        self.streams_refused.fetch_add(1, Relaxed);
    }

    fn snapshot(&self, door: &'static str) -> DoorSnapshot {
        DoorSnapshot {
            door,
            open: self.open.load(Relaxed),
            accepted: self.accepted.load(Relaxed),
            closed: CloseReason::ALL
                .map(|reason| (reason, self.closed[reason.index()].load(Relaxed))),
            request_timeouts: self.request_timeouts.load(Relaxed),
            cap_reached: self.cap_reached.load(Relaxed),
            accept_errors: self.accept_errors.load(Relaxed),
            streams_refused: self.streams_refused.load(Relaxed),
            streams_held: self.streams_held.load(Relaxed) as u64,
            request_bytes_held: self.request_bytes_held.load(Relaxed) as u64,
            bodies_refused: self.bodies_refused.load(Relaxed),
            errors: self.errors.counts(),
        }
    }
}

/// A door's name and counters.
type NamedDoor = (&'static str, Arc<DoorStats>);

/// The connection counters of every door of a process, for `/metrics`.
#[derive(Clone, Debug, Default)]
pub struct ConnectionStats {
    doors: Arc<Mutex<Vec<NamedDoor>>>,
}

impl ConnectionStats {
    /// The counters of `door`, made on first use.
    pub(crate) fn door(&self, door: &'static str) -> Arc<DoorStats> {
        let mut doors = self.doors.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, stats)) = doors.iter().find(|(name, _)| *name == door) {
            return Arc::clone(stats);
        }
        let stats = Arc::new(DoorStats::default());
        doors.push((door, Arc::clone(&stats)));
        stats
    }

    /// Every door's counters now, in the order the doors started.
    pub(crate) fn snapshot(&self) -> Vec<DoorSnapshot> {
        let doors = self.doors.lock().unwrap_or_else(PoisonError::into_inner);
        doors
            .iter()
            .map(|(door, stats)| stats.snapshot(door))
            .collect()
    }
}

/// One door's connection counters at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct DoorSnapshot {
    /// The door: `http`, `grpc`, `admin` or `proxy`.
    pub(crate) door: &'static str,
    /// Connections open now.
    pub(crate) open: u64,
    /// Connections accepted since the start.
    pub(crate) accepted: u64,
    /// Connections the service closed, by reason.
    pub(crate) closed: [(CloseReason, u64); CloseReason::ALL.len()],
    /// Requests reset for taking longer than `request_timeout`.
    pub(crate) request_timeouts: u64,
    /// Times a new connection found the door at its cap.
    pub(crate) cap_reached: u64,
    /// Failed accepts (out of file descriptors, mostly).
    pub(crate) accept_errors: u64,
    /// HTTP/2 streams refused because the door held
    /// `[listen.http2] max_streams_total`.
    pub(crate) streams_refused: u64,
    /// HTTP/2 streams the door counts now against
    /// `[listen.http2] max_streams_total` (each connection at the most it
    /// has had open at once).
    pub(crate) streams_held: u64,
    /// Bytes of requests still arriving (heads and bodies so far), counted now against
    /// `[listen.connections] max_request_bytes_total`.
    pub(crate) request_bytes_held: u64,
    /// Requests failed because their body would have taken the door past
    /// `max_request_bytes_total`.
    pub(crate) bodies_refused: u64,
    /// Connections that ended with an error, by kind.
    pub(crate) errors: [(ConnectionError, u64); ConnectionError::ALL.len()],
}
