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
//! at once: first one that is stalled (still opening, a head or a body
//! that does not come, answers nobody reads) for [`STALLED_GIVES_WAY_AFTER`],
//! the longest stalled first, closed at once; then one idle for
//! [`IDLE_GIVES_WAY_AFTER`], the longest idle first, closed gently. A
//! newcomer's stream is admitted in the room an evicted connection gives
//! back. A connection working for its client is never evicted: newcomers
//! then wait, in the kernel's queue for a slot, or refused
//! (`REFUSED_STREAM`, which clients retry) for a stream.
//!
//! The minimum stall bounds how fast clients that stall can turn the
//! door's connections over, and so how long a legitimate handshake or
//! request has before it could be taken for a stalled one: a quarter of a
//! second at least, and in practice the time the door takes to fill with
//! newer connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

use super::activity::{Activity, Eviction, State};
use super::stats::DoorStats;

/// How long a connection must have been stalled before it gives way to a
/// newcomer: longer than a TLS handshake or a request takes to arrive from
/// a client that is not stalling, so that only connections going nowhere
/// go.
pub(crate) const STALLED_GIVES_WAY_AFTER: Duration = Duration::from_millis(250);

/// How long a connection must have been idle before it gives way: longer
/// than a busy client pauses between two requests on one connection.
pub(crate) const IDLE_GIVES_WAY_AFTER: Duration = Duration::from_secs(1);

/// Once this share of the streams is held (in eighths), stalled and idle
/// connections are reclaimed ahead of need, so that a newcomer finds room.
const RECLAIM_AT_EIGHTHS: usize = 7;

/// How often streams are reclaimed at most, so that a burst of streams
/// near the cap does not scan the connections once per stream.
const RECLAIM_EVERY: Duration = Duration::from_millis(10);

/// A connection holding fewer streams than this may use the last eighth
/// of `max_streams_total`, and take the room of a stalled connection at
/// the cap (see [`Room::take_stream`]).
const FEW_STREAMS: u32 = 8;

/// How many connections one search lines up to give way to newcomers: a
/// door turned over by a flood of stalled connections searches once per
/// this many newcomers, not once per newcomer.
const CANDIDATES_PER_SEARCH: usize = 64;

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
    /// Milliseconds after `created`, plus one, of the last search for a
    /// connection to evict that found none; 0: none failed.
    last_failed_search: AtomicU64,
    /// Connections lined up to give way to newcomers at the cap, the first
    /// to go last (see [`Room::make_room`]).
    candidates: Mutex<Vec<Arc<Activity>>>,
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
            last_failed_search: AtomicU64::new(0),
            candidates: Mutex::new(Vec::new()),
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
    /// one (it has as many in flight as it holds); `false` when the stream
    /// must be refused.
    ///
    /// The last eighth of `max_streams_total` is kept for connections that
    /// hold fewer than [`FEW_STREAMS`], so that clients that each want
    /// hundreds of streams (or a flood of them) cannot leave a newcomer
    /// without one; reaching it also reclaims stalled and idle connections.
    /// At the cap, a connection that holds few streams takes the room of
    /// one that gives way (the evicted connection's streams come back as
    /// soon as it has closed, so the door goes over its cap by at most one
    /// stream per connection being evicted).
    pub(crate) fn take_stream(&self, activity: &Activity) -> bool {
        if activity.in_flight() < activity.streams_held() {
            return true;
        }
        let few = activity.streams_held() < FEW_STREAMS;
        let reserve = self.max_streams - self.max_streams * (8 - RECLAIM_AT_EIGHTHS) / 8;
        let held = &self.stats.streams_held;
        let taken = held.fetch_update(Relaxed, Relaxed, |held| {
            (held < self.max_streams && (few || held < reserve)).then_some(held + 1)
        });
        let others = |other: &Activity| !std::ptr::eq(other, activity) && other.streams_held() > 0;
        match taken {
            Ok(before) => {
                if before + 1 >= reserve {
                    self.reclaim(others);
                }
            }
            Err(now) => {
                let admitted = few && now >= self.max_streams && self.evict_for_newcomer(others);
                if !admitted {
                    if now >= reserve {
                        self.reclaim(others);
                    }
                    return false;
                }
                held.fetch_add(1, Relaxed);
            }
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
        let millis = self.millis(now);
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

    /// Evicts the least useful connection among those `eligible` for a
    /// newcomer that finds the door full; `false` if none may go. A search
    /// that finds none is not made again for [`RECLAIM_EVERY`], so that a
    /// flood of newcomers at a full door costs a refusal each, not a search.
    fn evict_for_newcomer(&self, eligible: impl Fn(&Activity) -> bool) -> bool {
        let now = Instant::now();
        let millis = self.millis(now);
        let failed = self.last_failed_search.load(Relaxed);
        let every = RECLAIM_EVERY.as_millis() as u64;
        if failed != 0 && millis < failed.saturating_add(every) {
            return false;
        }
        if self.evict_least_useful(now, eligible).is_some() {
            return true;
        }
        self.last_failed_search.store(millis + 1, Relaxed);
        false
    }

    fn millis(&self, now: Instant) -> u64 {
        u64::try_from(now.saturating_duration_since(self.created).as_millis()).unwrap_or(u64::MAX)
    }

    /// Asks the least useful connection to close, if one has been stalled
    /// or idle long enough, and hands its slot to the newcomer that found
    /// the door full: the newcomer need not wait for the connection to
    /// have closed (the door then holds one descriptor more than its cap
    /// for a moment). `None` if none could give way.
    ///
    /// One search over the connections lines up the least useful few
    /// ([`CANDIDATES_PER_SEARCH`]); the next newcomers take them in turn,
    /// each checked again, so that a flood of newcomers costs a search per
    /// few dozen, and a door where none may go is searched again only after
    /// [`RECLAIM_EVERY`].
    pub(crate) fn make_room(&self) -> Option<OwnedSemaphorePermit> {
        let now = Instant::now();
        loop {
            let next = self
                .candidates
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let Some(activity) = next else {
                if !self.line_up(now) {
                    return None;
                }
                continue;
            };
            // It may have got to work, or closed, since it was lined up.
            let Some((_, how)) = rank(activity.state(), now) else {
                continue;
            };
            if activity.eviction().is_some() {
                continue;
            }
            let Some(slot) = activity.take_slot() else {
                continue;
            };
            activity.evict(how);
            return Some(slot);
        }
    }

    /// Lines up the connections that may give way at `now`, the least
    /// useful last; `false` if none may (and then not searched again for
    /// [`RECLAIM_EVERY`]).
    fn line_up(&self, now: Instant) -> bool {
        let millis = self.millis(now);
        let failed = self.last_failed_search.load(Relaxed);
        let every = RECLAIM_EVERY.as_millis() as u64;
        if failed != 0 && millis < failed.saturating_add(every) {
            return false;
        }
        let mut ranked: Vec<_> = {
            let connections = self.connections();
            connections
                .values()
                .filter(|activity| activity.eviction().is_none())
                .filter_map(|activity| {
                    rank(activity.state(), now).map(|(rank, _)| (rank, Arc::clone(activity)))
                })
                .collect()
        };
        if ranked.is_empty() {
            self.last_failed_search.store(millis + 1, Relaxed);
            return false;
        }
        // The least useful first, then reversed for popping from the end.
        if ranked.len() > CANDIDATES_PER_SEARCH {
            ranked.select_nth_unstable_by_key(CANDIDATES_PER_SEARCH, |(rank, _)| *rank);
            ranked.truncate(CANDIDATES_PER_SEARCH);
        }
        ranked.sort_unstable_by_key(|(rank, _)| std::cmp::Reverse(*rank));
        *self
            .candidates
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = ranked.into_iter().map(|(_, a)| a).collect();
        true
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
/// not: it is working, or has not been stalled for
/// [`STALLED_GIVES_WAY_AFTER`] or idle for [`IDLE_GIVES_WAY_AFTER`].
fn rank(state: State, now: Instant) -> Option<((u8, Instant), Eviction)> {
    let (class, since, how) = match state {
        State::Opening { since } => (0, since, Eviction::Now),
        State::ReadingHead { since } => (1, since, Eviction::Now),
        State::ReadingBody { since } => (2, since, Eviction::Now),
        State::Unread { since } => (3, since, Eviction::Now),
        State::Idle { since, .. } => (4, since, Eviction::Gently),
        State::Busy => return None,
    };
    let after = match how {
        Eviction::Now => STALLED_GIVES_WAY_AFTER,
        Eviction::Gently => IDLE_GIVES_WAY_AFTER,
    };
    (now.saturating_duration_since(since) >= after).then_some(((class, since), how))
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
        let later = Instant::now() + IDLE_GIVES_WAY_AFTER;
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
        // The first connection is working: nothing gives way.
        assert!(!room.take_stream(&second), "past max_streams_total");
        drop(entered_first);
        assert_eq!(room.streams_held(), 1);
        assert!(room.take_stream(&second));
        assert_eq!(room.len(), 1);
    }

    #[test]
    fn the_last_eighth_of_the_streams_is_kept_for_connections_with_few() {
        let room = Arc::new(Room::new(64, Some(1024), Arc::default()));
        let hog = Activity::new(false, false);
        let newcomer = Activity::new(false, false);
        let _entered = [&hog, &newcomer].map(|activity| room.enter(activity));
        let mut requests = Vec::new();
        while room.take_stream(&hog) {
            requests.push(hog.start_request());
        }
        assert_eq!(room.streams_held(), 56, "seven eighths");
        for _ in 0..FEW_STREAMS {
            assert!(room.take_stream(&newcomer));
            requests.push(newcomer.start_request());
        }
        assert!(!room.take_stream(&newcomer), "past its few");
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_streams_cap_a_stalled_connection_gives_way_to_a_newcomers_stream() {
        let room = Arc::new(Room::new(2, Some(1024), Arc::default()));
        let stalled = Activity::new(false, false);
        let newcomer = Activity::new(false, false);
        let _entered = [&stalled, &newcomer].map(|activity| room.enter(activity));
        let mut requests = Vec::new();
        for _ in 0..2 {
            assert!(room.take_stream(&stalled));
            let request = stalled.start_request();
            // Answered, and the answer never read.
            let _owed = request.answer();
            requests.push(request);
        }
        assert!(matches!(stalled.state(), State::Unread { .. }));
        assert!(
            !room.take_stream(&newcomer),
            "nothing stalled long enough yet"
        );
        assert_eq!(stalled.eviction(), None);
        tokio::time::advance(STALLED_GIVES_WAY_AFTER).await;
        assert!(
            room.take_stream(&newcomer),
            "the stalled connection gives way"
        );
        assert_eq!(stalled.eviction(), Some(Eviction::Now));
        assert_eq!(room.streams_held(), 3, "over the cap until it has closed");
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_at_the_cap_takes_the_slot_of_the_longest_stalled_connection() {
        let room = Arc::new(Room::new(16, Some(1024), Arc::default()));
        let slots = Arc::new(tokio::sync::Semaphore::new(3));
        let oldest = Activity::new(false, true);
        tokio::time::advance(Duration::from_millis(10)).await;
        let younger = Activity::new(false, true);
        let busy = Activity::new(false, false);
        let _request = busy.start_request();
        let _entered = [&oldest, &younger, &busy].map(|activity| {
            activity.hold_slot(Arc::clone(&slots).try_acquire_owned().unwrap());
            room.enter(activity)
        });
        assert!(room.make_room().is_none(), "none stalled long enough");
        tokio::time::advance(STALLED_GIVES_WAY_AFTER + RECLAIM_EVERY).await;
        let slot = room.make_room().expect("the oldest stalled gives way");
        assert_eq!(oldest.eviction(), Some(Eviction::Now));
        assert!(
            oldest.take_slot().is_none(),
            "its slot went to the newcomer"
        );
        assert_eq!(slots.available_permits(), 0, "the newcomer holds it");
        drop(slot);
        assert!(room.make_room().is_some());
        assert_eq!(younger.eviction(), Some(Eviction::Now));
        assert!(
            room.make_room().is_none(),
            "a busy connection never gives way"
        );
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
