//! Which HTTP version a client of a door that speaks both opens with: the
//! HTTP/2 connection preface (sent with prior knowledge, or after ALPN
//! chose `h2`) or anything else, HTTP/1.1.
//!
//! The bytes read to tell are handed back first to the connection that
//! serves it ([`Rewind`]), so nothing the client sent is lost.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use super::Protocol;

/// What every HTTP/2 connection starts with (RFC 9113 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads from `io` until its first bytes tell the protocol: HTTP/2 once
/// the whole preface has come, HTTP/1.1 at the first byte that differs
/// from it (or at the end of the stream). At most 24 bytes are read.
pub(crate) async fn detect<IO>(mut io: IO) -> io::Result<(Protocol, Rewind<IO>)>
where
    IO: AsyncRead + Unpin,
{
    let mut read = Vec::with_capacity(PREFACE.len());
    let mut buf = [0; PREFACE.len()];
    let protocol = loop {
        let want = PREFACE.len() - read.len();
        let n = io.read(&mut buf[..want]).await?;
        if n == 0 {
            break Protocol::Http1;
        }
        read.extend_from_slice(&buf[..n]);
        if !PREFACE.starts_with(&read) {
            break Protocol::Http1;
        }
        if read.len() == PREFACE.len() {
            break Protocol::Http2;
        }
    };
    Ok((
        protocol,
        Rewind {
            prefix: read,
            at: 0,
            io,
        },
    ))
}

/// A stream whose first bytes, already read, are read again.
#[derive(Debug)]
pub(crate) struct Rewind<IO> {
    prefix: Vec<u8>,
    at: usize,
    io: IO,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Rewind<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let left = this.prefix.get(this.at..).unwrap_or_default();
        if !left.is_empty() {
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Rewind<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn detected(sent: &[u8]) -> (Protocol, Vec<u8>) {
        let (mut client, server) = tokio::io::duplex(64);
        client.write_all(sent).await.unwrap();
        drop(client);
        let (protocol, mut rewound) = detect(server).await.unwrap();
        let mut all = Vec::new();
        rewound.read_to_end(&mut all).await.unwrap();
        (protocol, all)
    }

    #[tokio::test]
    async fn the_preface_is_http2_and_anything_else_http1_with_no_byte_lost() {
        let h2 = [&PREFACE[..], b"\0\0\0\x04rest"].concat();
        assert_eq!(detected(&h2).await, (Protocol::Http2, h2.clone()));
        let h1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(detected(&h1).await, (Protocol::Http1, h1.clone()));
        // A method that starts like the preface is still HTTP/1.1.
        let pri = b"PRI /x HTTP/1.1\r\n\r\n".to_vec();
        assert_eq!(detected(&pri).await, (Protocol::Http1, pri.clone()));
        assert_eq!(detected(b"").await, (Protocol::Http1, Vec::new()));
        assert_eq!(detected(b"PRI").await, (Protocol::Http1, b"PRI".to_vec()));
    }
}
