//! Bytes on their way to a backend socket, written without ever waiting outside the connection's `select!`.
//!
//! A node that stops reading (a frozen host, a full socket) must not hold up the reading of replies or the timer
//! of the command timeout: what the socket takes is written at once, in the one syscall of the usual case, and the
//! rest when the socket is writable again, a wait the connection polls beside the others.

use bytes::BytesMut;
use tokio::net::TcpStream;

use super::describe;

pub(crate) struct Outbox {
    buf: BytesMut,
    /// How much of `buf` the socket has taken.
    written: usize,
}

impl Outbox {
    pub(crate) fn with_capacity(capacity: usize) -> Outbox {
        Outbox {
            buf: BytesMut::with_capacity(capacity),
            written: 0,
        }
    }

    /// Where requests are appended for the next write.
    pub(crate) fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Whether bytes wait for the socket.
    pub(crate) fn pending(&self) -> bool {
        self.written < self.buf.len()
    }

    /// Writes what the socket takes now; `Err` is the reason the connection failed.
    pub(crate) fn write(&mut self, socket: &TcpStream) -> Result<(), String> {
        while self.pending() {
            match socket.try_write(&self.buf[self.written..]) {
                Ok(0) => return Err("connection lost: the socket takes no more".to_string()),
                Ok(n) => self.written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(format!("connection lost: {}", describe(&e))),
            }
        }
        self.buf.clear();
        self.written = 0;
        Ok(())
    }
}
