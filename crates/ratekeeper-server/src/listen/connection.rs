//! One connection's driver: serves it with hyper and closes it when it
//! has been idle, slow or open too long, when its door needs the room, or
//! when the service stops.
//!
//! The driver sleeps until the earliest moment one of those could be due,
//! then looks at the connection's [`Activity`]; requests never wake it,
//! except a request head starting on a connection it thought idle (one
//! wake per idle period, not per request).

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::activity::{Activity, State};
use super::stats::CloseReason;
use super::{Door, Protocol};

/// How long a connection must have been idle before a door at its cap
/// closes it: longer than a busy client pauses between two requests on
/// one connection, so that only connections nobody is using go.
pub(crate) const PRESSURE_MIN_IDLE: Duration = Duration::from_secs(1);

/// The most a connection asked to close (idle, too old, making room) may
/// take to finish what it has in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// A door at its connection cap asks its idle connections to close.
#[derive(Debug, Default)]
pub(crate) struct Pressure {
    active: AtomicBool,
    notify: Notify,
}

impl Pressure {
    /// The door is full: every connection idle for [`PRESSURE_MIN_IDLE`]
    /// closes.
    pub(crate) fn apply(&self) {
        self.active.store(true, Relaxed);
        self.notify.notify_waiters();
    }

    /// The door has room again.
    pub(crate) fn release(&self) {
        self.active.store(false, Relaxed);
    }

    fn active(&self) -> bool {
        self.active.load(Relaxed)
    }
}

/// What the driver does after looking at the connection.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Look again at this time.
    Wait { until: Instant, wake_on_head: bool },
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
    pressure: &Pressure,
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
        let mut wake_on_head = false;
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
                    look(door, activity.state(), now, max_age, pressure.active())
                };
                match next {
                    Next::Wait {
                        until,
                        wake_on_head: wake,
                    } => {
                        sleep.as_mut().reset(until);
                        wake_on_head = wake;
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
        activity.wake_on_head(wake_on_head);
        tokio::select! {
            biased;
            result = conn.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(door = door.name, %error, "connection ended with an error");
                }
                return;
            }
            () = &mut sleep => {}
            () = activity.head_started(), if wake_on_head => {}
            changed = stop.changed(), if closing.is_none() => {
                if changed.is_err() {
                    // The accept loop is gone: nothing will tell this
                    // connection to stop any more; finish as if told.
                    door.stats.closed(CloseReason::Shutdown);
                    graceful(conn.as_mut());
                    closing = Some(Instant::now() + door.shutdown_grace);
                }
            }
            () = pressure.notify.notified(), if closing.is_none() => {}
        }
    }
}

/// What is due for a connection in `state` at `now`.
fn look(door: &Door, state: State, now: Instant, max_age: Option<Instant>, pressure: bool) -> Next {
    if max_age.is_some_and(|age| now >= age) {
        return Next::CloseGently(CloseReason::MaxAge);
    }
    let (until, wake_on_head) = match state {
        State::Busy => (now + door.idle_timeout, false),
        State::Idle { since, fresh } => {
            // HTTP/1.1 clients send their request right after connecting;
            // HTTP/2 clients (gRPC channels) may connect ahead of use.
            let first_request = fresh && door.protocol == Protocol::Http1;
            let limit = if first_request {
                door.header_timeout
            } else {
                door.idle_timeout
            };
            let idle = now.saturating_duration_since(since);
            if idle >= limit {
                return if first_request {
                    Next::CloseNow(CloseReason::HeaderTimeout)
                } else {
                    Next::CloseGently(CloseReason::Idle)
                };
            }
            if pressure && idle >= PRESSURE_MIN_IDLE {
                return Next::CloseGently(CloseReason::Pressure);
            }
            let mut until = since + limit;
            if pressure {
                until = until.min(since + PRESSURE_MIN_IDLE);
            }
            (until, door.protocol == Protocol::Http1)
        }
        State::ReadingHead { since } => {
            let reading = now.saturating_duration_since(since);
            if reading >= door.header_timeout {
                return Next::CloseNow(CloseReason::HeaderTimeout);
            }
            if pressure && reading >= PRESSURE_MIN_IDLE {
                return Next::CloseNow(CloseReason::Pressure);
            }
            let mut until = since + door.header_timeout;
            if pressure {
                until = until.min(since + PRESSURE_MIN_IDLE);
            }
            (until, false)
        }
    };
    let until = max_age.map_or(until, |age| until.min(age));
    Next::Wait {
        until,
        wake_on_head,
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
            look(&door, state, since + Duration::from_secs(9), None, false),
            Next::Wait {
                until: since + door.header_timeout,
                wake_on_head: true
            }
        );
        assert_eq!(
            look(&door, state, since + door.header_timeout, None, false),
            Next::CloseNow(CloseReason::HeaderTimeout)
        );
    }

    #[test]
    fn a_new_http2_connection_may_wait_for_its_first_call_as_long_as_an_idle_one() {
        let door = door(Protocol::Http2);
        let since = Instant::now();
        let state = State::Idle { since, fresh: true };
        let later = since + door.header_timeout * 2;
        assert!(matches!(
            look(&door, state, later, None, false),
            Next::Wait { .. }
        ));
        assert_eq!(
            look(&door, state, since + door.idle_timeout, None, false),
            Next::CloseGently(CloseReason::Idle)
        );
    }

    #[test]
    fn a_slow_head_is_cut_at_the_header_timeout_from_its_first_byte() {
        let door = door(Protocol::Http1);
        let since = Instant::now();
        let state = State::ReadingHead { since };
        assert_eq!(
            look(&door, state, since + Duration::from_secs(1), None, false),
            Next::Wait {
                until: since + door.header_timeout,
                wake_on_head: false
            }
        );
        assert_eq!(
            look(&door, state, since + door.header_timeout, None, false),
            Next::CloseNow(CloseReason::HeaderTimeout)
        );
    }

    #[test]
    fn a_busy_connection_is_never_closed_for_idleness_or_pressure() {
        let door = door(Protocol::Http2);
        let now = Instant::now();
        assert!(matches!(
            look(&door, State::Busy, now, None, true),
            Next::Wait { .. }
        ));
    }

    #[test]
    fn under_pressure_only_connections_idle_for_a_while_close() {
        let door = door(Protocol::Http1);
        let since = Instant::now();
        let state = State::Idle {
            since,
            fresh: false,
        };
        let soon = since + PRESSURE_MIN_IDLE / 2;
        assert_eq!(
            look(&door, state, soon, None, true),
            Next::Wait {
                until: since + PRESSURE_MIN_IDLE,
                wake_on_head: true
            }
        );
        assert_eq!(
            look(&door, state, since + PRESSURE_MIN_IDLE, None, true),
            Next::CloseGently(CloseReason::Pressure)
        );
        assert!(matches!(
            look(&door, state, since + PRESSURE_MIN_IDLE, None, false),
            Next::Wait { .. }
        ));
    }

    #[test]
    fn an_old_connection_closes_gently_even_when_busy() {
        let door = door(Protocol::Http2);
        let now = Instant::now();
        assert_eq!(
            look(&door, State::Busy, now, Some(now), false),
            Next::CloseGently(CloseReason::MaxAge)
        );
        let age = now + Duration::from_secs(3);
        assert_eq!(
            look(&door, State::Busy, now, Some(age), false),
            Next::Wait {
                until: age,
                wake_on_head: false
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
