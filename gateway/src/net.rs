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
use tokio::io::Interest;
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
    ///
    /// On plain TCP, a read that fills less than the room `buf` offers has emptied the socket's receive queue (a
    /// TCP receive returns what is queued, up to the room): the socket's readiness is then cleared at once, as a
    /// `WouldBlock` would clear it, instead of by one more receive that would only say `WouldBlock`. That
    /// receive was one of the three system calls of every non-pipelined request (read the request, write its
    /// reply), and of every batch of replies from a backend. What arrives later raises a new readiness event: the
    /// poller is edge-triggered, and tokio keeps readiness that the driver set after the read began (its tick),
    /// as well as a hang-up.
    #[inline]
    pub(crate) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Stream::Plain(tcp) => {
                let room = buf.capacity() - buf.len();
                let mut drained = 0;
                let read = tcp.try_io(Interest::READABLE, || match tcp.try_read_buf(buf)? {
                    n @ 1.. if n < room => {
                        drained = n;
                        Err(io::ErrorKind::WouldBlock.into()) // clears the readiness; the bytes are in `buf`
                    }
                    n => Ok(n),
                });
                match read {
                    Err(e) if drained > 0 && e.kind() == io::ErrorKind::WouldBlock => Ok(drained),
                    read => read,
                }
            }
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

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    /// Whether a read would be tried now, without waiting (a waker that does nothing).
    fn read_ready(stream: &Stream) -> bool {
        stream
            .poll_read_ready(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    #[tokio::test]
    async fn a_short_read_clears_readiness_and_later_bytes_and_a_hang_up_raise_it_again() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let stream = Stream::Plain(listener.accept().await.unwrap().0);
        let mut buf = BytesMut::with_capacity(4096);

        client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        assert_eq!(stream.read_buf(&mut buf).await.unwrap(), 14);
        // The read took less than the room: the socket is known empty, with no second read to find it so.
        assert!(!read_ready(&stream));

        client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
        assert_eq!(stream.read_buf(&mut buf).await.unwrap(), 14);
        assert_eq!(buf.len(), 28);

        // A read that fills the room may leave more behind: readiness stays, and the rest is read.
        client.write_all(&[b'x'; 100]).await.unwrap();
        let mut small = BytesMut::with_capacity(64);
        let room = small.capacity();
        while small.len() < room {
            stream.read_buf(&mut small).await.unwrap();
        }
        assert!(read_ready(&stream));
        small.reserve(4096);
        assert_eq!(stream.read_buf(&mut small).await.unwrap(), 100 - room);

        drop(client);
        assert_eq!(stream.read_buf(&mut buf).await.unwrap(), 0);
    }
}
