//! TLS over a non-blocking socket, driven the way the gateway drives its plain sockets: wait for readiness, then
//! `try_read_buf`/`try_write`, never blocking and never waiting inside a call. rustls is a state machine over
//! bytes; this feeds it what the socket has and writes what it produced, so that a TLS connection runs on the
//! same code paths (and select loops) as a plain one.
//!
//! Two rules keep a readiness-driven caller from stalling on bytes rustls holds: plaintext rustls decrypted is
//! always handed over whole (a caller never waits for the socket while plaintext sits here), and what rustls
//! encrypted but the socket did not take shows in [`TlsStream::unsent`], which callers count as bytes still to
//! write.

use std::cell::RefCell;
use std::io::{self, BufRead, Read, Write};
use std::task::{Context, Poll};

use bytes::BytesMut;
use rustls::Connection;
use tokio::net::TcpStream;

use super::describe_error;

pub(crate) struct TlsStream {
    tcp: TcpStream,
    /// Only ever borrowed inside one synchronous call: the stream is used from one task, through `&self` like a
    /// `TcpStream`, by its reading and its writing side alike.
    conn: RefCell<Connection>,
}

/// The socket as rustls reads and writes it: non-blocking, `WouldBlock` clearing tokio's readiness.
struct Io<'a>(&'a TcpStream);

impl Read for Io<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Io<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    /// Runs the handshake on `tcp` (a client's: `conn` is a `ClientConnection`; an accepted one's: a
    /// `ServerConnection`). Callers bound it with their own deadline.
    pub(crate) async fn handshake(tcp: TcpStream, conn: Connection) -> io::Result<TlsStream> {
        let stream = TlsStream {
            tcp,
            conn: RefCell::new(conn),
        };
        loop {
            match stream.flush() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    stream.tcp.writable().await?;
                    continue;
                }
                Err(e) => return Err(e),
            }
            if !stream.conn.borrow().is_handshaking() {
                return Ok(stream);
            }
            match stream.receive() {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS handshake failed: the peer closed the connection",
                    ));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => stream.tcp.readable().await?,
                Err(e) => return Err(e),
            }
        }
    }

    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The peer's certificate chain, leaf first (a client's only when it sent one).
    pub(crate) fn peer_leaf(&self) -> Option<Vec<u8>> {
        let conn = self.conn.borrow();
        conn.peer_certificates()
            .and_then(|chain| chain.first())
            .map(|leaf| leaf.to_vec())
    }

    /// Reads TLS records from the socket into rustls and processes them: `Ok(0)` when the peer closed the socket.
    /// A protocol or certificate error sends rustls' alert (best effort) and fails the stream.
    fn receive(&self) -> io::Result<usize> {
        let mut conn = self.conn.borrow_mut();
        let n = conn.read_tls(&mut Io(&self.tcp))?;
        if n > 0
            && let Err(e) = conn.process_new_packets()
        {
            let _ = conn.write_tls(&mut Io(&self.tcp));
            return Err(io::Error::other(describe_error(&e, conn.is_handshaking())));
        }
        Ok(n)
    }

    /// Writes what rustls has encrypted: `WouldBlock` while the socket does not take all of it.
    fn flush(&self) -> io::Result<()> {
        let mut conn = self.conn.borrow_mut();
        while conn.wants_write() {
            if conn.write_tls(&mut Io(&self.tcp))? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        Ok(())
    }

    /// Moves the plaintext rustls holds into `buf`: `Some(n)` when there was some (or the peer ended the TLS
    /// session: `Some(0)`), `None` when rustls needs more from the socket.
    fn take_plaintext(&self, buf: &mut BytesMut) -> io::Result<Option<usize>> {
        let mut conn = self.conn.borrow_mut();
        let mut reader = conn.reader();
        let mut taken = 0;
        loop {
            match reader.fill_buf() {
                Ok([]) => return Ok(Some(taken)),
                Ok(chunk) => {
                    let n = chunk.len();
                    buf.extend_from_slice(chunk);
                    reader.consume(n);
                    taken += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && taken > 0 => {
                    return Ok(Some(taken));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // The peer closed the socket without ending the TLS session: a hang-up, as on a plain socket.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(Some(taken)),
                Err(e) => return Err(e),
            }
        }
    }

    /// As `TcpStream::try_read_buf`: the plaintext available now, `Ok(0)` when the peer hung up, `WouldBlock`
    /// when there is none yet.
    #[inline(never)] // net::Stream inlines its plain arm; this keeps the TLS arm a call
    pub(crate) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            if let Some(n) = self.take_plaintext(buf)? {
                return Ok(n);
            }
            if self.receive()? == 0 {
                return Ok(0);
            }
            // TLS 1.3 answers some records (a key update) on its own.
            match self.flush() {
                Err(e) if e.kind() != io::ErrorKind::WouldBlock => return Err(e),
                _ => {}
            }
        }
    }

    /// As `TcpStream::try_write`: takes `data` (all of it, unless rustls' buffer is full) once what was encrypted
    /// before has gone out; what the socket does not take now shows in [`unsent`](Self::unsent). Empty `data`
    /// only writes what waits: `Ok(0)` once nothing does.
    #[inline(never)] // net::Stream inlines its plain arm; this keeps the TLS arm a call
    pub(crate) fn try_write(&self, data: &[u8]) -> io::Result<usize> {
        self.flush()?;
        if data.is_empty() {
            return Ok(0);
        }
        let n = self.conn.borrow_mut().writer().write(data)?;
        match self.flush() {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    /// Whether encrypted bytes wait for the socket.
    pub(crate) fn unsent(&self) -> bool {
        self.conn.borrow().wants_write()
    }

    /// Ready at once while rustls holds plaintext (left by the handshake's last read), else when the socket is.
    #[inline(never)] // net::Stream inlines its plain arm; this keeps the TLS arm a call
    pub(crate) fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let buffered = match self.conn.borrow_mut().reader().fill_buf() {
            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
            Ok(_) => true,
        };
        if buffered {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Ends the TLS session (`close_notify`), best effort, before the socket closes.
    pub(crate) fn close(&self) {
        self.conn.borrow_mut().send_close_notify();
        let _ = self.flush();
    }
}
