//! Bytes on their way to a backend socket, written without ever waiting outside the connection's `select!`.
//!
//! A node that stops reading (a frozen host, a full socket) must not hold up the reading of replies or the timer
//! of the command timeout: what the socket takes is written at once, in the one syscall of the usual case, and the
//! rest when the socket is writable again, a wait the connection polls beside the others.

use crate::net::Stream;
use bytes::BytesMut;

use super::describe;

pub(crate) struct Outbox {
    buf: BytesMut,
    /// How much of `buf` the socket has taken.
    written: usize,
    /// Whether bytes the stream took wait inside it for the socket (TLS records).
    unsent: bool,
}

impl Outbox {
    pub(crate) fn with_capacity(capacity: usize) -> Outbox {
        Outbox {
            buf: BytesMut::with_capacity(capacity),
            written: 0,
            unsent: false,
        }
    }

    /// Where requests are appended for the next write.
    pub(crate) fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Whether bytes wait for the socket.
    pub(crate) fn pending(&self) -> bool {
        self.written < self.buf.len() || self.unsent
    }

    /// Writes what the socket takes now; `Err` is the reason the connection failed.
    pub(crate) fn write(&mut self, socket: &Stream) -> Result<(), String> {
        self.unsent = false;
        while self.pending() || socket.unsent() {
            match socket.try_write(&self.buf[self.written..]) {
                Ok(0) if self.written < self.buf.len() => {
                    return Err("connection lost: the socket takes no more".to_string());
                }
                Ok(n) => self.written += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.unsent = socket.unsent();
                    return Ok(());
                }
                Err(e) => return Err(format!("connection lost: {}", describe(&e))),
            }
        }
        self.buf.clear();
        self.written = 0;
        Ok(())
    }
}
