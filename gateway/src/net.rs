//! A connection's stream, plain TCP or TLS over it, with the one readiness-driven interface the gateway's
//! sockets are used through (client sessions and backend connections alike): wait until ready, then read or
//! write what can be without waiting. Plain TCP passes straight through to tokio; TLS goes through
//! [`TlsStream`].
//!
//! The per-request methods are `#[inline]` and `TlsStream`'s are not: the plain arm then compiles into the
//! session's and the backend connection's loops as a bare `TcpStream` call did before TLS. Without it the
//! compiler kept these methods out of line once they had a TLS arm, which cost a plain GET about 190
//! instructions (4.5%, `scripts/bench-instructions`; docs/benchmarks.md).

use std::future::poll_fn;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::tls::TlsStream;

pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    #[inline]
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(tcp) => tcp,
            Stream::Tls(tls) => tls.tcp(),
        }
    }

    /// Ready when a read may make progress (data, a hang-up, or plaintext TLS already holds).
    #[inline]
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self {
            Stream::Plain(tcp) => tcp.poll_read_ready(cx),
            Stream::Tls(tls) => tls.poll_read_ready(cx),
        }
    }

    #[inline]
    pub(crate) fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.tcp().poll_write_ready(cx)
    }

    /// Appends what can be read now to `buf`: `Ok(0)` when the peer hung up, `WouldBlock` when nothing came.
    #[inline]
    pub(crate) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.try_read_buf(buf),
            Stream::Tls(tls) => tls.try_read_buf(buf),
        }
    }

    /// Writes what the socket takes of `data` now. On TLS, bytes taken may still wait inside the stream
    /// ([`unsent`](Self::unsent)); an empty `data` writes only those.
    #[inline]
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => tcp.try_write(data),
            Stream::Tls(tls) => tls.try_write(data),
        }
    }

    /// Whether bytes already taken wait for the socket (TLS records it has not taken yet).
    #[inline]
    pub(crate) fn unsent(&self) -> bool {
        match self {
            Stream::Plain(_) => false,
            Stream::Tls(tls) => tls.unsent(),
        }
    }

    /// Reads what comes next into `buf`, waiting for it: `Ok(0)` when the peer hung up.
    pub(crate) async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        poll_fn(|cx| {
            loop {
                ready!(self.poll_read_ready(cx))?;
                match self.try_read_buf(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue, // readiness was stale
                    read => return Poll::Ready(read),
                }
            }
        })
        .await
    }

    /// Waits until the socket takes writes.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    /// Writes all of `data`, waiting for the socket as needed.
    pub(crate) async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() || self.unsent() {
            match self.try_write(data) {
                Ok(0) if !data.is_empty() => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Says the connection ends (TLS' `close_notify`, then TCP's FIN), best effort, without waiting; what the
    /// socket has not taken yet is still sent, and the socket closes when dropped.
    pub(crate) fn shutdown(&self) {
        if let Stream::Tls(tls) = self {
            tls.close();
        }
        let _ = socket2::SockRef::from(self.tcp()).shutdown(std::net::Shutdown::Write);
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        self.tcp().as_raw_fd()
    }
}
