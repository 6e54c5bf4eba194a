//! A door's room: the connections it holds, the HTTP/2 streams they keep
//! and the request bodies they are receiving, under one accounting, and
//! which connection gives way when any is full.
//!
//! A connection costs its door a slot (a file descriptor and its buffers)
//! from its accept to its close, and an HTTP/2 connection also costs the
//! streams it has had open at once: h2 keeps room for that many streams
//! until the connection closes, answered or not. A request's body costs
//! its bytes until it has all arrived (the decision doors read a body
//! whole before deciding). The door counts all three (slots in the accept
//! loop's semaphore; streams and body bytes here, up to `[listen.http2]
//! max_streams_total` and `[listen.connections] max_request_bytes_total`), so
//! that what its connections can hold is bounded by its settings, whatever
//! the clients do.
//!
//! When the door is full, the connection that is least useful gives way
//! at once, if it has been so for [`EVICTABLE_AFTER`]: first one that is
//! stalled (still opening, a head or a body that does not come, answers
//! nobody reads), the longest stalled first, closed at once; then the
//! longest idle, closed gently. A connection working for its client is
//! never evicted: newcomers then wait, in the kernel's queue for a slot,
//! or refused (`REFUSED_STREAM`, which clients retry) for a stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use super::activity::{Activity, Eviction, State};
use super::stats::DoorStats;

/// How long a connection must have been stalled or idle before it gives
/// way to a newcomer: longer than a busy client pauses between two
/// requests, or than a TLS handshake takes on a slow network, so that
/// only connections nobody is using go.
pub(crate) const EVICTABLE_AFTER: Duration = Duration::from_secs(1);

/// Once this share of the streams is held (in eighths), stalled and idle
/// connections are reclaimed ahead of need, so that a newcomer finds room.
const RECLAIM_AT_EIGHTHS: usize = 7;

/// How often streams are reclaimed at most, so that a burst of streams
/// near the cap does not scan the connections once per stream.
const RECLAIM_EVERY: Duration = Duration::from_millis(10);

/// One door's connections and streams.
#[derive(Debug)]
pub(crate) struct Room {
    connections: Mutex<HashMap<u64, Arc<Activity>>>,
    next_id: AtomicU64,
    /// Its `streams_held` and `request_bytes_held` count what is held, for
    /// `/metrics` too.
    stats: Arc<DoorStats>,
    max_streams: usize,
    /// `None` on a door whose bodies stream through (the proxy's).
    max_body_bytes: Option<usize>,
    /// Milliseconds after `created` of the last reclaim of streams.
    last_reclaim: AtomicU64,
    created: Instant,
}

impl Room {
    /// A room for at most `max_streams` HTTP/2 streams and (if given)
    /// `max_body_bytes` bytes of request bodies arriving, counted in
    /// `stats`.
    pub(crate) fn new(
        max_streams: usize,
        max_body_bytes: Option<usize>,
        stats: Arc<DoorStats>,
    ) -> Room {
        Room {
            connections: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            stats,
            max_streams,
            max_body_bytes,
            last_reclaim: AtomicU64::new(0),
            created: Instant::now(),
        }
    }

    fn connections(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Activity>>> {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts `activity`'s connection in until the guard drops, which
    /// also gives back the streams it held.
    pub(crate) fn enter(self: &Arc<Self>, activity: &Arc<Activity>) -> Entered {
        let id = self.next_id.fetch_add(1, Relaxed);
        activity.enter(self);
        self.connections().insert(id, Arc::clone(activity));
        Entered {
            room: Arc::clone(self),
            id,
        }
    }

    /// Connections in the room now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.connections().len()
    }

    /// Streams held now, over every connection.
    #[cfg(test)]
    pub(crate) fn streams_held(&self) -> usize {
        self.stats.streams_held.load(Relaxed)
    }

    /// Counts one more stream against `activity`'s connection if it needs
    /// one (it has as many in flight as it holds); `false` when the door
    /// holds `max_streams_total` and the stream must be refused. Near the
    /// cap, stalled and idle connections are reclaimed.
    pub(crate) fn take_stream(&self, activity: &Activity) -> bool {
        if activity.in_flight() < activity.streams_held() {
            return true;
        }
        let taken = self
            .stats
            .streams_held
            .fetch_update(Relaxed, Relaxed, |held| {
                (held < self.max_streams).then_some(held + 1)
            });
        let held = match taken {
            Ok(before) => before + 1,
            Err(held) => held,
        };
        if held * 8 >= self.max_streams * RECLAIM_AT_EIGHTHS {
            self.reclaim(|activity| activity.streams_held() > 0);
        }
        if taken.is_err() {
            return false;
        }
        activity.hold_stream();
        true
    }

    /// Counts `bytes` more of a request's body, arrived; `false` (and not
    /// counted) when the door would hold more than `max_request_bytes_total`:
    /// the request must fail. Near the cap, stalled and idle connections
    /// are reclaimed.
    pub(crate) fn hold_body_bytes(&self, bytes: usize) -> bool {
        let Some(max) = self.max_body_bytes else {
            return true;
        };
        let held = &self.stats.request_bytes_held;
        let now = held.fetch_add(bytes, Relaxed).saturating_add(bytes);
        if now * 8 >= max.saturating_mul(RECLAIM_AT_EIGHTHS) {
            self.reclaim(|_| true);
        }
        if now > max {
            held.fetch_sub(bytes, Relaxed);
            self.stats.body_refused();
            return false;
        }
        true
    }

    /// Gives back `bytes` of a body that has arrived (or gone).
    pub(crate) fn release_body_bytes(&self, bytes: usize) {
        if self.max_body_bytes.is_some() {
            self.stats.request_bytes_held.fetch_sub(bytes, Relaxed);
        }
    }

    /// Evicts the least useful connection among those `eligible`, at most
    /// every [`RECLAIM_EVERY`].
    fn reclaim(&self, eligible: impl Fn(&Activity) -> bool) {
        let now = Instant::now();
        let millis =
            u64::try_from(now.duration_since(self.created).as_millis()).unwrap_or(u64::MAX);
        let last = self.last_reclaim.load(Relaxed);
        let every = RECLAIM_EVERY.as_millis() as u64;
        if millis < last.saturating_add(every)
            || self
                .last_reclaim
                .compare_exchange(last, millis, Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        self.evict_least_useful(now, eligible);
    }

    /// Asks the least useful connection to close, if one has been stalled
    /// or idle for [`EVICTABLE_AFTER`]: the door is full. How it was
    /// asked to go; `None` if none could give way.
    pub(crate) fn make_room(&self) -> Option<Eviction> {
        self.evict_least_useful(Instant::now(), |_| true)
    }

    /// Evicts the connection, among those `eligible`, that ranks first by
    /// [`rank`], if any may go; how it was asked to go.
    fn evict_least_useful(
        &self,
        now: Instant,
        eligible: impl Fn(&Activity) -> bool,
    ) -> Option<Eviction> {
        let victim = {
            let connections = self.connections();
            connections
                .values()
                .filter(|activity| activity.eviction().is_none() && eligible(activity))
                .filter_map(|activity| {
                    rank(activity.state(), now).map(|(rank, how)| (rank, how, activity))
                })
                .min_by_key(|(rank, _, _)| *rank)
                .map(|(_, how, activity)| (how, Arc::clone(activity)))
        };
        let (how, activity) = victim?;
        activity.evict(how).then_some(how)
    }
}

/// Where a connection in `state` stands in the queue to give way at
/// `now` (the lowest goes first), and how it would go; `None` if it may
/// not: it is working, or has not been stalled or idle for
/// [`EVICTABLE_AFTER`].
fn rank(state: State, now: Instant) -> Option<((u8, Instant), Eviction)> {
    let (class, since, how) = match state {
        State::Opening { since } => (0, since, Eviction::Now),
        State::ReadingHead { since } => (1, since, Eviction::Now),
        State::ReadingBody { since } => (2, since, Eviction::Now),
        State::Unread { since } => (3, since, Eviction::Now),
        State::Idle { since, .. } => (4, since, Eviction::Gently),
        State::Busy => return None,
    };
    (now.saturating_duration_since(since) >= EVICTABLE_AFTER).then_some(((class, since), how))
}

/// A connection counted in its door's [`Room`].
#[derive(Debug)]
pub(crate) struct Entered {
    room: Arc<Room>,
    id: u64,
}

impl Drop for Entered {
    fn drop(&mut self) {
        let activity = self.room.connections().remove(&self.id);
        if let Some(activity) = activity {
            let held = activity.streams_held() as usize;
            self.room.stats.streams_held.fetch_sub(held, Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stalled_connection_gives_way_before_an_idle_one_and_a_busy_one_never() {
        let room = Arc::new(Room::new(16, Some(1024), Arc::default()));
        let idle = Activity::new(false, false);
        let opening = Activity::new(false, true);
        let busy = Activity::new(false, false);
        let _request = busy.start_request();
        let _entered = [&idle, &opening, &busy].map(|activity| room.enter(activity));
        let later = Instant::now() + EVICTABLE_AFTER;
        assert_eq!(
            room.evict_least_useful(later, |_| true),
            Some(Eviction::Now)
        );
        assert_eq!(opening.eviction(), Some(Eviction::Now));
        assert_eq!(
            room.evict_least_useful(later, |_| true),
            Some(Eviction::Gently)
        );
        assert_eq!(idle.eviction(), Some(Eviction::Gently));
        assert_eq!(room.evict_least_useful(later, |_| true), None);
        assert_eq!(busy.eviction(), None);
    }

    #[test]
    fn nothing_gives_way_before_it_has_been_stalled_for_a_while() {
        let room = Arc::new(Room::new(16, Some(1024), Arc::default()));
        let opening = Activity::new(false, true);
        let _entered = room.enter(&opening);
        assert_eq!(room.evict_least_useful(Instant::now(), |_| true), None);
        assert_eq!(opening.eviction(), None);
    }

    #[test]
    fn streams_are_counted_at_each_connections_peak_and_given_back_when_it_closes() {
        let room = Arc::new(Room::new(3, Some(1024), Arc::default()));
        let first = Activity::new(false, false);
        let second = Activity::new(false, false);
        let entered_first = room.enter(&first);
        let _entered_second = room.enter(&second);
        let mut requests = Vec::new();
        for _ in 0..2 {
            assert!(room.take_stream(&first));
            requests.push(first.start_request());
        }
        drop(requests);
        // The first connection keeps room for the two it had.
        assert_eq!(room.streams_held(), 2);
        assert!(room.take_stream(&first));
        let _again = first.start_request();
        assert_eq!(room.streams_held(), 2);
        assert!(room.take_stream(&second));
        let _one = second.start_request();
        assert!(!room.take_stream(&second), "past max_streams_total");
        drop(entered_first);
        assert_eq!(room.streams_held(), 1);
        assert!(room.take_stream(&second));
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn body_bytes_past_the_total_are_refused_and_given_back() {
        let room = Room::new(16, Some(100), Arc::default());
        assert!(room.hold_body_bytes(60));
        assert!(!room.hold_body_bytes(41), "past max_request_bytes_total");
        assert!(room.hold_body_bytes(40));
        room.release_body_bytes(100);
        assert!(room.hold_body_bytes(100));
        let streaming = Room::new(16, None, Arc::default());
        assert!(streaming.hold_body_bytes(usize::MAX));
    }
}
