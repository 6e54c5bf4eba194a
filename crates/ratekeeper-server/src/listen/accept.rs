//! A door's accept loop: one task per connection, at most the door's cap
//! of them (at the cap, the least useful connection gives way to the
//! newcomer at once, see [`Room`](super::room::Room)), and a shutdown that
//! lets requests in flight finish within the grace period before it closes
//! what is left.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::activity::Activity;
use super::body::RequestBody;
use super::connection::drive;
use super::detect::detect;
use super::service::{BoxError, Tracked};
use super::socket::{Lingering, Socket};
use super::stats::CloseReason;
use super::streams::{StreamExecutor, WithStreams};
use super::tls::TlsListener;
use super::{Door, Protocol};

/// How long the loop pauses after a failed accept (out of file
/// descriptors, mostly), so that it does not spin while the connections
/// already open go on.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How often a failed accept is logged at most.
const ACCEPT_ERROR_LOG_EVERY: Duration = Duration::from_secs(10);

/// At the cap with no connection that may give way, how long before the
/// loop looks again (connections become stalled or idle by themselves).
const ROOM_RECHECK: Duration = Duration::from_millis(100);

/// Serves `service` on `listener` as `door` says, until `stop` resolves;
/// then stops accepting (new connections are refused), lets every
/// connection finish what it has in flight within the door's grace period,
/// closes what is left and returns.
///
/// Accept errors never end the loop: a process out of file descriptors
/// refuses new connections for a moment and keeps serving the ones it has.
pub(crate) async fn serve<S, B>(
    listener: TcpListener,
    door: Door,
    service: S,
    stop: impl Future<Output = ()>,
) where
    S: tower::Service<Request<RequestBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let door = Arc::new(door);
    let permits = Arc::new(Semaphore::new(door.max_connections));
    let lingering = Arc::new(Lingering::default());
    let (stopping, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut last_error_log: Option<Instant> = None;
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                door.stats.cap_reached();
                tracing::debug!(
                    door = door.name,
                    cap = door.max_connections,
                    "at the connection cap: a stalled or idle connection gives way"
                );
                let waited = loop {
                    // The newcomer is likely already in the kernel's queue:
                    // make room now rather than when a connection times out,
                    // and take the slot at once rather than when the
                    // connection that gave way has closed.
                    if let Some(slot) = door.room.make_room() {
                        break Some(slot);
                    }
                    tokio::select! {
                        permit = Arc::clone(&permits).acquire_owned() => break permit.ok(),
                        () = tokio::time::sleep(ROOM_RECHECK) => {}
                        () = &mut stop => break None,
                    }
                };
                match waited {
                    Some(permit) => permit,
                    None => break,
                }
            }
        };
        let accepted = loop {
            tokio::select! {
                accepted = listener.accept() => break Some(accepted),
                // A finished connection's task keeps its memory until it
                // is joined: join them while no one connects, not only at
                // the next accept (after a flood, that may be never).
                Some(_) = connections.join_next() => {}
                () = &mut stop => break None,
            }
        };
        let (tcp, peer) = match accepted {
            None => break,
            Some(Ok(accepted)) => accepted,
            Some(Err(error)) => {
                door.stats.accept_failed();
                log_accept_error(&door, &error, &mut last_error_log);
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        // A door that speaks both versions knows which once the first
        // bytes have come (see `serve_connection`).
        // A connection is of no use to anyone until its handshake is done
        // and, on a door that speaks both versions, its first bytes tell
        // which (see `serve_connection`).
        let opening = door.tls.is_some() || door.protocol == Protocol::Auto;
        let activity = Activity::new(door.protocol == Protocol::Http1, opening);
        let entered = door.room.enter(&activity);
        activity.hold_slot(permit);
        let socket = Socket::new(tcp, Arc::clone(&activity), Arc::clone(&lingering));
        let tracked = Tracked {
            service: service.clone(),
            activity: Arc::clone(&activity),
            stats: Arc::clone(&door.stats),
            door: door.name,
            peer: (door.protocol != Protocol::Http2).then_some(peer),
            timeout: door.request_timeout,
            room: Arc::clone(&door.room),
            count_streams: false,
        };
        let (door, stopped) = (Arc::clone(&door), stopped.clone());
        connections.spawn(async move {
            door.stats.opened();
            match &door.tls {
                None => serve_connection(socket, &door, tracked, &activity, stopped).await,
                Some(tls) => {
                    if let Some(tls) = handshake(tls, socket, &door, &activity).await {
                        serve_connection(tls, &door, tracked, &activity, stopped).await;
                    }
                }
            }
            drop(entered);
            door.stats.gone();
        });
    }
    // Refuse new connections from now on, then drain.
    drop(listener);
    let _ = stopping.send(true);
    let deadline = Instant::now() + door.shutdown_grace + Duration::from_millis(100);
    let drained = tokio::time::timeout_at(deadline, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let left = connections.len();
        tracing::info!(
            door = door.name,
            left,
            "closing the connections still open after the grace period"
        );
        connections.shutdown().await;
    }
    // Closed sockets read the clients' last bytes before they go; an exit
    // now would reset them. They take a moment, and never past the grace.
    let _ = tokio::time::timeout_at(deadline, lingering.finished()).await;
}

/// The server side of a TLS handshake on `socket`, within the door's
/// `handshake_timeout` (a client that connects and says nothing must not
/// hold a connection slot), and given up at once if the door needs the
/// room. A failure closes only this connection, counted as
/// [`CloseReason::Handshake`] and logged at debug: a scanner or a client
/// without a certificate is no fault of the service.
async fn handshake(
    tls: &TlsListener,
    socket: Socket,
    door: &Door,
    activity: &Activity,
) -> Option<tokio_rustls::server::TlsStream<Socket>> {
    // A client that timed out is owed nothing: its socket closes without
    // lingering. One that failed the handshake is sent its alert.
    let accept = tls.accept(socket, door.handshake_timeout, || activity.set_abortive());
    tokio::select! {
        accepted = accept => match accepted {
            Ok(stream) => {
                if door.protocol != Protocol::Auto {
                    activity.opened_fully();
                }
                Some(stream)
            }
            Err(_) => {
                door.stats.closed(CloseReason::Handshake);
                None
            }
        },
        _ = activity.evicted() => {
            door.stats.closed(CloseReason::Pressure);
            None
        }
    }
}

/// Serves one accepted connection with the door's protocol; on a door
/// that speaks both, with the one the client's first bytes show. A client
/// that sends nothing to tell within the door's `header_timeout` is
/// closed, as an HTTP/1.1 one that sends no request.
async fn serve_connection<IO, S, B>(
    socket: IO,
    door: &Door,
    service: Tracked<S>,
    activity: &Activity,
    stopped: watch::Receiver<bool>,
) where
    S: tower::Service<Request<RequestBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    if door.protocol != Protocol::Auto {
        return serve_protocol(socket, door, service, activity, stopped).await;
    }
    let detected = tokio::select! {
        detected = tokio::time::timeout(door.header_timeout, detect(socket)) => detected,
        _ = activity.evicted() => {
            door.stats.closed(CloseReason::Pressure);
            return;
        }
    };
    let (protocol, socket) = match detected {
        Ok(Ok(detected)) => detected,
        Ok(Err(error)) => {
            tracing::debug!(door = door.name, %error, "connection ended before its first request");
            return;
        }
        Err(_) => {
            door.stats.closed(CloseReason::HeaderTimeout);
            activity.set_abortive();
            return;
        }
    };
    activity.opened_fully();
    if protocol == Protocol::Http1 {
        activity.track_heads();
        // The bytes read to tell were the first request's head.
        activity.bytes_arrived();
    }
    let door = Door {
        protocol,
        ..door.clone()
    };
    serve_protocol(socket, &door, service, activity, stopped).await;
}

/// Serves one connection in `door.protocol`, HTTP/1.1 or HTTP/2.
async fn serve_protocol<IO, S, B>(
    socket: IO,
    door: &Door,
    service: Tracked<S>,
    activity: &Activity,
    stopped: watch::Receiver<bool>,
) where
    S: tower::Service<Request<RequestBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(socket);
    match door.protocol {
        // Told apart by `serve_connection`; here only for completeness.
        Protocol::Http1 | Protocol::Auto => {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                // The driver times heads from their first byte; hyper's
                // own timer would also cut idle keep-alive connections.
                .header_read_timeout(None)
                .max_buf_size(door.max_header_bytes)
                .keep_alive(true);
            // Upgrades (WebSocket) for the proxy; the other doors never
            // answer 101, so their connections are never upgraded.
            let conn = builder.serve_connection(io, service).with_upgrades();
            drive(
                conn,
                http1::UpgradeableConnection::graceful_shutdown,
                door,
                activity,
                stopped,
            )
            .await;
        }
        Protocol::Http2 => {
            let service = service.counting_streams();
            let executor = StreamExecutor::default();
            let mut builder = http2::Builder::new(executor.clone());
            let h2 = &door.http2;
            builder
                .timer(TokioTimer::new())
                .max_concurrent_streams(h2.max_concurrent_streams)
                .keep_alive_interval(h2.keepalive_interval)
                .keep_alive_timeout(h2.keepalive_timeout)
                .max_header_list_size(u32::try_from(door.max_header_bytes).unwrap_or(u32::MAX))
                // gRPC clients read no Date (grpc-go's server sends none);
                // it cost an encoded header per response.
                .auto_date_header(false);
            let conn = WithStreams::new(builder.serve_connection(io, service), &executor);
            drive(
                conn,
                |conn| http2::Connection::graceful_shutdown(conn.conn()),
                door,
                activity,
                stopped,
            )
            .await;
        }
    }
}

/// Logs a failed accept, at most once per [`ACCEPT_ERROR_LOG_EVERY`].
fn log_accept_error(door: &Door, error: &io::Error, last: &mut Option<Instant>) {
    let now = Instant::now();
    if last.is_some_and(|at| now.duration_since(at) < ACCEPT_ERROR_LOG_EVERY) {
        return;
    }
    *last = Some(now);
    if is_out_of_files(error) {
        tracing::error!(
            door = door.name,
            %error,
            "cannot accept connections: out of file descriptors; new connections wait, open ones are served (raise the open-file limit or lower listen.connections.max_connections)"
        );
    } else {
        tracing::warn!(door = door.name, %error, "a connection could not be accepted");
    }
}

/// EMFILE or ENFILE: the process or the system has no file descriptor to
/// give the connection.
fn is_out_of_files(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(23 | 24))
}
