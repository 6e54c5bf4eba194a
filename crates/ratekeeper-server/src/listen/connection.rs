//! One connection's driver: serves it with hyper and closes it when it
//! has been idle, slow or open too long, when its peer stops reading its
//! answers, when its door needs the room, or when the service stops.
//!
//! The driver sleeps until the earliest moment one of those could be due,
//! then looks at the connection's [`Activity`]; requests never wake it,
//! except work starting on a connection it thought idle (one wake per idle
//! period, not per request) and its door asking it to make room.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::activity::{Activity, Eviction, State};
use super::stats::CloseReason;
use super::when_woken::WhenWoken;
use super::{Door, Protocol};

/// The most a connection asked to close (idle, too old) may take to
/// finish what it has in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The most an idle connection evicted to make room may take to close:
/// its door is full, and a newcomer waits for its slot.
const EVICTED_GRACE: Duration = Duration::from_millis(250);

/// What the driver does after looking at the connection.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Look again at this time.
    Wait { until: Instant, wake_on_work: bool },
    /// Finish what is in flight, then close.
    CloseGently(CloseReason),
    /// Close now (the client is too slow to be owed an answer).
    CloseNow(CloseReason),
}

/// Serves `conn` to its end, closing it as its door's settings say.
/// `graceful` starts hyper's graceful shutdown of the connection.
pub(crate) async fn drive<C>(
    conn: C,
    graceful: fn(Pin<&mut C>),
    door: &Door,
    activity: &Activity,
    mut stop: watch::Receiver<bool>,
) where
    C: Future<Output = hyper::Result<()>>,
{
    tokio::pin!(conn);
    let sleep = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(sleep);
    let max_age = door
        .http2
        .max_connection_age
        .map(|age| activity.opened() + jittered(age));
    // Once closing: when to give up waiting for the connection to finish.
    let mut closing: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let mut wake_on_work = false;
        match closing {
            Some(deadline) if now >= deadline => {
                activity.set_abortive();
                return;
            }
            Some(deadline) => sleep.as_mut().reset(deadline),
            None => {
                let next = if *stop.borrow() {
                    door.stats.closed(CloseReason::Shutdown);
                    graceful(conn.as_mut());
                    closing = Some(now + door.shutdown_grace);
                    continue;
                } else {
                    look(door, activity.state(), now, max_age)
                };
                match next {
                    Next::Wait {
                        until,
                        wake_on_work: wake,
                    } => {
                        sleep.as_mut().reset(until);
                        wake_on_work = wake;
                    }
                    Next::CloseGently(reason) => {
                        door.stats.closed(reason);
                        graceful(conn.as_mut());
                        closing = Some(now + CLOSE_GRACE.min(door.shutdown_grace));
                        continue;
                    }
                    Next::CloseNow(reason) => {
                        door.stats.closed(reason);
                        activity.set_abortive();
                        return;
                    }
                }
            }
        }
        activity.wake_on_work(wake_on_work);
        if wake_on_work && activity.work_pending() {
            // Work started between the look and the ask: look again.
            activity.wake_on_work(false);
            continue;
        }
        tokio::select! {
            biased;
            result = conn.as_mut() => {
                if let Err(error) = result {
                    // A client that broke the protocol (or reset the
                    // connection) is owed no lingering close.
                    activity.set_abortive();
                    door.stats.errors.record(door.name, &error);
                }
                return;
            }
            // The other branches are polled only when they woke the
            // driver, not on each of the connection's wakes.
            () = WhenWoken::new(sleep.as_mut()) => {}
            () = WhenWoken::new(activity.work_started()), if wake_on_work => {}
            changed = WhenWoken::new(stop.changed()), if closing.is_none() => {
                if changed.is_err() {
                    // The accept loop is gone: nothing will tell this
                    // connection to stop any more; finish as if told.
                    door.stats.closed(CloseReason::Shutdown);
                    graceful(conn.as_mut());
                    closing = Some(Instant::now() + door.shutdown_grace);
                }
            }
            how = WhenWoken::new(activity.evicted()), if closing.is_none() => {
                door.stats.closed(CloseReason::Pressure);
                match how {
                    Eviction::Now => return,
                    Eviction::Gently => {
                        graceful(conn.as_mut());
                        closing = Some(Instant::now() + EVICTED_GRACE);
                    }
                }
            }
        }
    }
}

/// What is due for a connection in `state` at `now`.
fn look(door: &Door, state: State, now: Instant, max_age: Option<Instant>) -> Next {
    if max_age.is_some_and(|age| now >= age) {
        return Next::CloseGently(CloseReason::MaxAge);
    }
    // A stalled connection is owed no answer: it closes at once when its
    // timeout comes.
    let stalled = |since: Instant, timeout: Duration, reason| {
        if now.saturating_duration_since(since) >= timeout {
            Err(Next::CloseNow(reason))
        } else {
            Ok((since + timeout, false))
        }
    };
    let due = match state {
        // Requests may stall later without waking the driver: it looks
        // again within a stall timeout, so a stall is caught within one
        // and a half of it.
        State::Busy | State::Opening { .. } => {
            Ok((now + door.idle_timeout.min(door.stall_check_every()), false))
        }
        State::Unread { since } => stalled(since, door.send_timeout, CloseReason::SendTimeout),
        State::ReadingBody { since } => stalled(since, door.body_timeout, CloseReason::BodyTimeout),
        State::ReadingHead { since } => {
            stalled(since, door.header_timeout, CloseReason::HeaderTimeout)
        }
        State::Idle { since, fresh } => {
            // HTTP/1.1 clients send their request right after connecting;
            // HTTP/2 clients (gRPC channels) may connect ahead of use.
            let first_request = fresh && door.protocol == Protocol::Http1;
            let limit = if first_request {
                door.header_timeout
            } else {
                door.idle_timeout
            };
            if now.saturating_duration_since(since) >= limit {
                Err(if first_request {
                    Next::CloseNow(CloseReason::HeaderTimeout)
                } else {
                    Next::CloseGently(CloseReason::Idle)
                })
            } else {
                // Work starting wakes the driver: a head's deadline or a
                // stall could come long before the idle timeout.
                Ok((since + limit, true))
            }
        }
    };
    match due {
        Err(next) => next,
        Ok((until, wake_on_work)) => Next::Wait {
            until: max_age.map_or(until, |age| until.min(age)),
            wake_on_work,
        },
    }
}

/// `age`, give or take a tenth, so that connections opened together (a
/// fleet of clients restarted at once) do not all close together.
fn jittered(age: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // A fraction in [0.9, 1.1).
    let fraction = 0.9 + (random % 2000) as f64 / 10_000.0;
    age.mul_f64(fraction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConnectionConfig;

    fn door(protocol: Protocol) -> Door {
        Door::new(
            "test",
            protocol,
            &ConnectionConfig::default(),
            &Default::default(),
        )
    }

    #[test]
    fn a_new_http1_connection_must_send_its_request_within_the_header_timeout() {
        let door = door(Protocol::Http1);
        let since = Instant::now();
        let state = State::Idle { since, fresh: true };
        assert_eq!(
            look(&door, state, since + Duration::from_secs(9), None),
            Next::Wait {
                until: since + door.header_timeout,
                wake_on_work: true
            }
        );
        assert_eq!(
            look(&door, state, since + door.header_timeout, None),
            Next::CloseNow(CloseReason::HeaderTimeout)
        );
    }

    #[test]
    fn a_new_http2_connection_may_wait_for_its_first_call_as_long_as_an_idle_one() {
        let door = door(Protocol::Http2);
        let since = Instant::now();
        let state = State::Idle { since, fresh: true };
        let later = since + door.header_timeout * 2;
        assert!(matches!(look(&door, state, later, None), Next::Wait { .. }));
        assert_eq!(
            look(&door, state, since + door.idle_timeout, None),
            Next::CloseGently(CloseReason::Idle)
        );
    }

    #[test]
    fn a_slow_head_is_cut_at_the_header_timeout_from_its_first_byte() {
        let door = door(Protocol::Http1);
        let since = Instant::now();
        let state = State::ReadingHead { since };
        assert_eq!(
            look(&door, state, since + Duration::from_secs(1), None),
            Next::Wait {
                until: since + door.header_timeout,
                wake_on_work: false
            }
        );
        assert_eq!(
            look(&door, state, since + door.header_timeout, None),
            Next::CloseNow(CloseReason::HeaderTimeout)
        );
    }

    #[test]
    fn a_busy_connection_is_looked_at_again_within_a_stall_timeout() {
        let door = door(Protocol::Http2);
        let now = Instant::now();
        assert_eq!(
            look(&door, State::Busy, now, None),
            Next::Wait {
                until: now + door.stall_check_every(),
                wake_on_work: false
            }
        );
    }

    #[test]
    fn answers_nobody_reads_close_the_connection_at_the_send_timeout() {
        let door = door(Protocol::Http2);
        let since = Instant::now();
        let state = State::Unread { since };
        assert_eq!(
            look(&door, state, since + door.send_timeout / 2, None),
            Next::Wait {
                until: since + door.send_timeout,
                wake_on_work: false
            }
        );
        assert_eq!(
            look(&door, state, since + door.send_timeout, None),
            Next::CloseNow(CloseReason::SendTimeout)
        );
    }

    #[test]
    fn a_body_that_stops_coming_closes_the_connection_at_the_body_timeout() {
        let door = door(Protocol::Http1);
        let since = Instant::now();
        let state = State::ReadingBody { since };
        assert!(matches!(
            look(&door, state, since + door.body_timeout / 2, None),
            Next::Wait { .. }
        ));
        assert_eq!(
            look(&door, state, since + door.body_timeout, None),
            Next::CloseNow(CloseReason::BodyTimeout)
        );
    }

    #[test]
    fn an_old_connection_closes_gently_even_when_busy() {
        let door = door(Protocol::Http2);
        let now = Instant::now();
        assert_eq!(
            look(&door, State::Busy, now, Some(now)),
            Next::CloseGently(CloseReason::MaxAge)
        );
        let age = now + Duration::from_secs(3);
        assert_eq!(
            look(&door, State::Busy, now, Some(age)),
            Next::Wait {
                until: age,
                wake_on_work: false
            }
        );
    }

    #[test]
    fn jitter_stays_within_a_tenth() {
        let age = Duration::from_secs(1000);
        for _ in 0..100 {
            let got = jittered(age);
            assert!(
                got >= Duration::from_secs(900) && got < Duration::from_secs(1100),
                "{got:?}"
            );
        }
    }
}
