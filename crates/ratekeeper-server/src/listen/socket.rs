//! The accepted TCP stream as the connection sees it: it tells the
//! connection's [`Activity`] when a request's head starts and whether the
//! peer takes its bytes, gives back the door's connection slot when it
//! closes, and closes gently.
//!
//! Closing a socket with unread bytes makes the kernel send a reset, and a
//! reset can destroy the last response before the client reads it: a
//! client that sent its next request as the service closed would see an
//! error for a request it had been answered. So a socket the service
//! closes lingers: it sends its FIN, then reads and drops what the client
//! still sends, for a short while, before it closes.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, OwnedSemaphorePermit};

use super::activity::Activity;

/// How long a closed socket reads what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// How much it reads at most while lingering.
const LINGER_BYTES: usize = 64 * 1024;

/// A door's lingering sockets, which its shutdown waits for (within the
/// grace period): a process that exited while they linger would reset
/// them.
#[derive(Debug, Default)]
pub(crate) struct Lingering {
    count: AtomicUsize,
    none_left: Notify,
}

impl Lingering {
    /// Resolves when no socket lingers.
    pub(crate) async fn finished(&self) {
        loop {
            let notified = self.none_left.notified();
            if self.count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// An accepted connection's socket.
#[derive(Debug)]
pub(crate) struct Socket {
    tcp: Option<TcpStream>,
    /// Told when bytes arrive: on HTTP/1.1, bytes with no request in
    /// flight are a head arriving.
    activity: Arc<Activity>,
    /// The client closed its side: nothing more will come.
    eof: bool,
    lingering: Arc<Lingering>,
}

impl Socket {
    /// `tcp`, whose connection's slot `activity` holds.
    pub(crate) fn new(
        tcp: TcpStream,
        activity: Arc<Activity>,
        lingering: Arc<Lingering>,
    ) -> Socket {
        Socket {
            tcp: Some(tcp),
            activity,
            eof: false,
            lingering,
        }
    }

    /// Tells the connection whether the peer takes its bytes: a write that
    /// would block means the peer has stopped reading (or reads slower
    /// than the service writes).
    fn wrote(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Pending => self.activity.write_blocked(true),
            Poll::Ready(Ok(n)) if *n > 0 => self.activity.write_blocked(false),
            Poll::Ready(_) => {}
        }
    }

    fn tcp(&mut self) -> io::Result<&mut TcpStream> {
        self.tcp
            .as_mut()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(this.tcp()?).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            if buf.filled().len() == before {
                this.eof = true;
            } else {
                this.activity.bytes_arrived();
            }
        }
        polled
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(this.tcp()?).poll_write(cx, buf);
        this.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(this.tcp()?).poll_write_vectored(cx, bufs);
        this.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().tcp()?).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.get_mut().tcp()?).poll_shutdown(cx)
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // `None` if the door handed the slot to a newcomer this connection
        // gave way to.
        let slot = self.activity.take_slot();
        let Some(tcp) = self.tcp.take() else {
            return;
        };
        if self.eof || self.activity.is_abortive() {
            return;
        }
        // The slot goes with the lingering socket: it still holds a file
        // descriptor, and the cap counts descriptors.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let lingering = Arc::clone(&self.lingering);
            lingering.count.fetch_add(1, Ordering::AcqRel);
            runtime.spawn(async move {
                linger(tcp, slot).await;
                if lingering.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                    lingering.none_left.notify_waiters();
                }
            });
        }
    }
}

/// Sends FIN, then drops what the client sends until it closes, for at
/// most [`LINGER`] and [`LINGER_BYTES`].
async fn linger(mut tcp: TcpStream, slot: Option<OwnedSemaphorePermit>) {
    let _ = tcp.shutdown().await;
    let mut buf = [0; 4096];
    let mut read = 0;
    let _ = tokio::time::timeout(LINGER, async {
        while read < LINGER_BYTES {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    })
    .await;
    drop(slot);
}
