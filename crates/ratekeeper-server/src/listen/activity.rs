//! What a connection is doing, as its driver and its door need to know to
//! time it out or reclaim it: whether it is still opening (a TLS
//! handshake, or the first bytes that tell its protocol), its requests in
//! flight, whether they wait for their bodies, whether its answers wait
//! for the peer to read them, and since when.
//!
//! Kept in atomics that the request path updates without waking the
//! connection's driver: the driver looks when its own timer fires, and is
//! woken early only when work (a request, or an HTTP/1.1 head's first
//! byte) starts on a connection it believes idle, once per idle period,
//! or when its door asks it to close ([`Activity::evict`]).

use std::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit};
use tokio::time::Instant;

use super::room::Room;

/// One connection's activity.
#[derive(Debug)]
pub(crate) struct Activity {
    opened: Instant,
    /// Whether the connection is still opening: in its TLS handshake, or
    /// before its first bytes told its protocol.
    opening: AtomicBool,
    in_flight: AtomicU32,
    /// Requests begun since the connection opened.
    requests: AtomicU64,
    /// Milliseconds after `opened` when the last request ended.
    idle_since: AtomicU64,
    /// Milliseconds after `opened`, plus one, when the first byte of the
    /// next request's head arrived; 0: none has.
    head_since: AtomicU64,
    /// Requests in flight whose body has not ended.
    bodies: AtomicU32,
    /// Answers whose next frame waits for the connection to send it: for
    /// the peer to read, mostly (see [`Answering`]).
    owed: AtomicU32,
    /// Counts the progress of bodies and answers: a body begun or a frame
    /// of it arrived, an answer ready or a frame of it taken to be sent.
    /// A count, not a time, so that the request path reads no clock; who
    /// looks at the connection tells when it last changed.
    progress: AtomicU64,
    /// `progress` as last looked at, and milliseconds after `opened` when
    /// it was first seen at that value: the time of the last progress,
    /// as well as lookers can tell (within a look's interval).
    seen_progress: AtomicU64,
    seen_at: AtomicU64,
    /// Milliseconds after `opened`, plus one, since when the socket has
    /// refused to take more bytes; 0: it takes them.
    write_blocked: AtomicU64,
    /// The streams its door counts against this HTTP/2 connection: the
    /// most it has had in flight at once, which its protocol state keeps
    /// room for until it closes (h2's stream tables never shrink).
    streams_held: AtomicU32,
    /// Whether the driver sleeps as if the connection were idle, and so
    /// must be woken when work starts (a head's deadline, or a stall,
    /// could come before it wakes).
    wake_on_work: AtomicBool,
    work_started: Notify,
    /// Whether bytes arriving with no request in flight are a request's
    /// head: HTTP/1.1's (an HTTP/2 connection's pings and settings are
    /// not).
    track_heads: AtomicBool,
    /// Whether the connection ends abruptly (a timeout), so that its
    /// socket is closed at once instead of lingering for the client's last
    /// bytes.
    abortive: AtomicBool,
    /// What the door asked of this connection to make room: an
    /// [`Eviction`] as a number, 0 for nothing.
    evicted: AtomicU8,
    eviction: Notify,
    /// The door's room, once the connection is counted in it (see
    /// [`Room::enter`](super::room::Room::enter), which also lets it go).
    room: OnceLock<Arc<Room>>,
    /// The connection's slot in its door's cap, until its socket closes,
    /// or until the door hands it to a newcomer this connection gives way
    /// to.
    slot: Mutex<Option<OwnedSemaphorePermit>>,
}

/// What the connection is doing now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Still opening since `since`: a TLS handshake, or waiting for the
    /// first bytes that tell its protocol.
    Opening { since: Instant },
    /// A request's head has been arriving since `since`.
    ReadingHead { since: Instant },
    /// Every request in flight waits for its body, which last made
    /// progress at `since`.
    ReadingBody { since: Instant },
    /// Answers (or bytes already written) wait for the peer to read them;
    /// the last progress was at `since`.
    Unread { since: Instant },
    /// No request in flight since `since`; `fresh` if it never had one.
    Idle { since: Instant, fresh: bool },
    /// Requests in flight, deciding or sending their answers.
    Busy,
}

/// How a door asks a connection to make room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Eviction {
    /// It has nothing in flight: close gently (HTTP/2 clients get a
    /// GOAWAY), but soon.
    Gently = 1,
    /// It is stalled (opening, a head or body that does not come, answers
    /// nobody reads): close now.
    Now = 2,
}

impl Activity {
    /// A connection opened now; `track_heads` as [`Activity::track_heads`],
    /// `opening` while a TLS handshake or the protocol's detection runs
    /// (until [`Activity::opened_fully`]).
    pub(crate) fn new(track_heads: bool, opening: bool) -> Arc<Activity> {
        Arc::new(Activity {
            opened: Instant::now(),
            opening: AtomicBool::new(opening),
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            head_since: AtomicU64::new(0),
            bodies: AtomicU32::new(0),
            owed: AtomicU32::new(0),
            progress: AtomicU64::new(0),
            seen_progress: AtomicU64::new(0),
            seen_at: AtomicU64::new(0),
            write_blocked: AtomicU64::new(0),
            streams_held: AtomicU32::new(0),
            wake_on_work: AtomicBool::new(false),
            work_started: Notify::new(),
            track_heads: AtomicBool::new(track_heads),
            abortive: AtomicBool::new(false),
            evicted: AtomicU8::new(0),
            eviction: Notify::new(),
            room: OnceLock::new(),
            slot: Mutex::new(None),
        })
    }

    /// Counts the connection in `room` (once).
    pub(crate) fn enter(&self, room: &Arc<Room>) {
        let _ = self.room.set(Arc::clone(room));
    }

    /// The door's room the connection is counted in.
    pub(crate) fn room(&self) -> Option<&Arc<Room>> {
        self.room.get()
    }

    /// The connection holds `slot` in its door's cap.
    pub(crate) fn hold_slot(&self, slot: OwnedSemaphorePermit) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(slot);
    }

    /// The connection's slot, taken: by its socket when it closes, or by
    /// its door for a newcomer. `None` once taken.
    pub(crate) fn take_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    pub(crate) fn opened(&self) -> Instant {
        self.opened
    }

    /// The handshake and the protocol's detection are done: the connection
    /// serves requests from now on.
    pub(crate) fn opened_fully(&self) {
        self.opening.store(false, Relaxed);
    }

    fn millis(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.opened).as_millis()).unwrap_or(u64::MAX)
    }

    fn now_millis(&self) -> u64 {
        self.millis(Instant::now())
    }

    fn at(&self, millis: u64) -> Instant {
        self.opened + Duration::from_millis(millis)
    }

    /// A request begins; it ends when the guard (held by its response
    /// body) drops.
    pub(crate) fn start_request(self: &Arc<Self>) -> InFlight {
        // SeqCst, with the flag's: either the driver sees this request when
        // it looks again after asking to be woken, or this sees its ask.
        self.in_flight.fetch_add(1, SeqCst);
        self.requests.fetch_add(1, Relaxed);
        self.head_since.store(0, Relaxed);
        self.work_starts();
        InFlight(Arc::clone(self))
    }

    /// Requests in flight now.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Relaxed)
    }

    /// The streams the door counts against this connection (see
    /// [`Room`](super::room::Room)).
    pub(crate) fn streams_held(&self) -> u32 {
        self.streams_held.load(Relaxed)
    }

    /// The door counts one more stream against this connection. Only the
    /// connection's own task starts its requests, so this cannot race
    /// with itself.
    pub(crate) fn hold_stream(&self) {
        self.streams_held.fetch_add(1, Relaxed);
    }

    /// A request's body begins to arrive; it has arrived (or been given
    /// up) when the guard drops.
    pub(crate) fn start_body(self: &Arc<Self>) -> BodyOpen {
        self.progressed();
        self.bodies.fetch_add(1, Relaxed);
        BodyOpen(Arc::clone(self))
    }

    /// A body or an answer made progress.
    fn progressed(&self) {
        self.progress.fetch_add(1, Relaxed);
    }

    /// When bodies and answers last made progress, as far as lookers can
    /// tell: the first look that saw the progress count where it is now.
    fn last_progress(&self) -> u64 {
        let progress = self.progress.load(Relaxed);
        if self.seen_progress.swap(progress, Relaxed) != progress {
            let now = self.now_millis();
            self.seen_at.store(now, Relaxed);
            return now;
        }
        self.seen_at.load(Relaxed)
    }

    /// The socket refused bytes (`false`: it took some).
    pub(crate) fn write_blocked(&self, blocked: bool) {
        let since = self.write_blocked.load(Relaxed);
        if blocked && since == 0 {
            self.write_blocked.store(self.now_millis() + 1, Relaxed);
        } else if !blocked && since != 0 {
            self.write_blocked.store(0, Relaxed);
        }
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
            let now = self.now_millis();
            self.head_since.store(now + 1, SeqCst);
            self.work_starts();
        }
    }

    /// Wakes the driver if it sleeps as if the connection were idle.
    fn work_starts(&self) {
        if self.wake_on_work.load(SeqCst) && self.wake_on_work.swap(false, SeqCst) {
            self.work_started.notify_one();
        }
    }

    pub(crate) fn state(&self) -> State {
        if self.opening.load(Relaxed) {
            return State::Opening { since: self.opened };
        }
        // What the peer has not read comes first: bytes the socket would
        // not take, and answers waiting for room to be sent.
        let blocked = self.write_blocked.load(Relaxed);
        let unread_since = match (blocked, self.owed.load(Relaxed)) {
            (0, 0) => None,
            (0, _) => Some(self.last_progress()),
            (blocked, 0) => Some(blocked - 1),
            (blocked, _) => Some((blocked - 1).min(self.last_progress())),
        };
        if let Some(since) = unread_since {
            return State::Unread {
                since: self.at(since),
            };
        }
        // Acquire pairs with the guard's release: no request in flight
        // comes with the time the last one ended.
        let in_flight = self.in_flight.load(Acquire);
        if in_flight > 0 {
            if self.bodies.load(Relaxed) >= in_flight {
                return State::ReadingBody {
                    since: self.at(self.last_progress()),
                };
            }
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

    /// Asks to be woken when work starts: the next request, or request
    /// head (see [`Activity::work_started`]).
    pub(crate) fn wake_on_work(&self, wake: bool) {
        self.wake_on_work.store(wake, SeqCst);
    }

    /// Whether work has started since the driver last looked at an idle
    /// connection: checked after [`Activity::wake_on_work`], so that work
    /// that started just before the ask is not missed.
    pub(crate) fn work_pending(&self) -> bool {
        self.in_flight.load(SeqCst) > 0 || self.head_since.load(SeqCst) != 0
    }

    /// Resolves when work starts while [`Activity::wake_on_work`] is set.
    pub(crate) async fn work_started(&self) {
        self.work_started.notified().await;
    }

    pub(crate) fn set_abortive(&self) {
        self.abortive.store(true, Relaxed);
    }

    pub(crate) fn is_abortive(&self) -> bool {
        self.abortive.load(Relaxed)
    }

    /// The door asks the connection to close, as `how` says. A connection
    /// asked once is not asked again. Its socket will not linger: a
    /// newcomer waits for its slot.
    pub(crate) fn evict(&self, how: Eviction) -> bool {
        if self
            .evicted
            .compare_exchange(0, how as u8, Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        self.set_abortive();
        // notify_one keeps the permit for a driver not yet waiting.
        self.eviction.notify_one();
        true
    }

    /// How the door asked the connection to close, if it has.
    pub(crate) fn eviction(&self) -> Option<Eviction> {
        match self.evicted.load(Relaxed) {
            1 => Some(Eviction::Gently),
            2 => Some(Eviction::Now),
            _ => None,
        }
    }

    /// Resolves when the door asks the connection to close.
    pub(crate) async fn evicted(&self) -> Eviction {
        loop {
            if let Some(how) = self.eviction() {
                return how;
            }
            self.eviction.notified().await;
        }
    }
}

/// A request in flight on a connection.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    /// Its answer is ready to be sent: owed until it ends, or until its
    /// source has no frame (see [`Answering`]).
    pub(crate) fn answer(&self) -> Answering {
        self.0.owed.fetch_add(1, Relaxed);
        self.0.progressed();
        Answering { owed: true }
    }

    /// A frame of its answer was taken to be sent: progress, and the next
    /// frame is owed.
    pub(crate) fn frame_taken(&self, answering: &mut Answering) {
        self.0.progressed();
        if !answering.owed {
            answering.owed = true;
            self.0.owed.fetch_add(1, Relaxed);
        }
    }

    /// The answer's source has no frame yet (a proxied upstream, say): no
    /// fault of the peer, so nothing is owed meanwhile. Also its end.
    pub(crate) fn waiting_for_source(&self, answering: &mut Answering) {
        if answering.owed {
            answering.owed = false;
            self.0.owed.fetch_sub(1, Relaxed);
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let activity = &self.0;
        // The idle time is written before the count drops, so a driver that
        // sees no request in flight also sees when the last one ended.
        activity.idle_since.store(activity.now_millis(), Relaxed);
        activity.in_flight.fetch_sub(1, Release);
    }
}

/// Whether an answer is owed: its next frame waits for the connection to
/// take it. Kept beside the request's [`InFlight`], which must settle it
/// ([`InFlight::waiting_for_source`]) before it drops.
#[derive(Debug)]
pub(crate) struct Answering {
    owed: bool,
}

/// A request body still arriving.
#[derive(Debug)]
pub(crate) struct BodyOpen(Arc<Activity>);

impl BodyOpen {
    /// A frame of it arrived.
    pub(crate) fn arrived(&self) {
        self.0.progressed();
    }

    /// The room of its connection's door.
    pub(crate) fn room(&self) -> Option<&Arc<Room>> {
        self.0.room()
    }
}

impl Drop for BodyOpen {
    fn drop(&mut self) {
        self.0.bodies.fetch_sub(1, Relaxed);
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_opening_until_its_handshake_is_done() {
        let activity = Activity::new(false, true);
        assert!(matches!(activity.state(), State::Opening { .. }));
        activity.opened_fully();
        assert!(matches!(activity.state(), State::Idle { fresh: true, .. }));
    }

    #[test]
    fn requests_waiting_only_for_their_bodies_are_reading_body() {
        let activity = Activity::new(false, false);
        let first = activity.start_request();
        let body = activity.start_body();
        assert!(matches!(activity.state(), State::ReadingBody { .. }));
        // A second request whose body is whole: the connection works.
        let second = activity.start_request();
        assert_eq!(activity.state(), State::Busy);
        drop(second);
        drop(body);
        assert_eq!(activity.state(), State::Busy);
        drop(first);
        assert!(matches!(activity.state(), State::Idle { fresh: false, .. }));
    }

    #[test]
    fn an_answer_is_owed_until_its_source_waits_or_it_ends() {
        let activity = Activity::new(false, false);
        let request = activity.start_request();
        let mut answer = request.answer();
        assert!(matches!(activity.state(), State::Unread { .. }));
        request.waiting_for_source(&mut answer);
        assert_eq!(activity.state(), State::Busy);
        request.frame_taken(&mut answer);
        assert!(matches!(activity.state(), State::Unread { .. }));
        request.waiting_for_source(&mut answer);
        assert_eq!(activity.state(), State::Busy);
        drop(request);
    }

    #[test]
    fn a_stall_dates_from_the_first_look_that_saw_no_progress() {
        let activity = Activity::new(false, false);
        let request = activity.start_request();
        let mut answer = request.answer();
        let State::Unread { since: first } = activity.state() else {
            panic!("owed");
        };
        // No progress since: the same moment, however late the look.
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(activity.state(), State::Unread { since: first });
        request.frame_taken(&mut answer);
        let State::Unread { since } = activity.state() else {
            panic!("owed");
        };
        assert!(since > first, "progress moves the stall's start");
        request.waiting_for_source(&mut answer);
    }

    #[test]
    fn a_blocked_socket_is_unread_even_with_nothing_in_flight() {
        let activity = Activity::new(true, false);
        activity.write_blocked(true);
        assert!(matches!(activity.state(), State::Unread { .. }));
        activity.write_blocked(false);
        assert!(matches!(activity.state(), State::Idle { .. }));
    }

    #[test]
    fn a_connection_is_evicted_once() {
        let activity = Activity::new(false, false);
        assert_eq!(activity.eviction(), None);
        assert!(activity.evict(Eviction::Gently));
        assert!(!activity.evict(Eviction::Now));
        assert_eq!(activity.eviction(), Some(Eviction::Gently));
    }
}
