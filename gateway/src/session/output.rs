//! A client's socket: what it is ready for, what the client has not read yet (the replies waiting for it, written
//! without ever blocking the session), and the bounds on a client connection (`--output-buffer-limit`, `--pubsub-output-buffer-limit`,
//! `--client-write-timeout-ms`, `--client-idle-timeout-s`, `--max-query-buffer`).

use std::io;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use switchyard_schemas::OutputBufferLimit;

use super::BUFFER_SIZE;
use crate::clients::ClientInfo;
use crate::metrics::Closed;
use crate::net::Stream;

/// What a client's socket is ready for.
pub(super) enum Socket {
    /// It takes writes again.
    Writable,
    /// This many bytes were read into the input (0: the client hung up).
    Read(usize),
}

/// Waits until the socket takes writes (when `write`), or reads what it has into `input` (when `read`), as
/// `read_buf` would on a stream the session does not share with its writes.
pub(super) fn poll_socket(
    stream: &Stream,
    cx: &mut Context<'_>,
    input: &mut BytesMut,
    read: bool,
    write: bool,
) -> Poll<std::io::Result<Socket>> {
    if write && stream.poll_write_ready(cx)?.is_ready() {
        return Poll::Ready(Ok(Socket::Writable));
    }
    if !read {
        return Poll::Pending;
    }
    loop {
        ready!(stream.poll_read_ready(cx))?;
        match stream.try_read_buf(input) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue, // readiness was stale
            read => return Poll::Ready(read.map(Socket::Read)),
        }
    }
}

/// The bytes written to a client's socket once it takes them, in order.
pub(super) struct Output {
    buf: BytesMut,
    /// Since when bytes have been waiting that the socket would not take (none while it takes everything).
    stalled: Option<Instant>,
    /// Since when the buffer has been over the soft limit.
    over_soft: Option<Instant>,
    /// Whether bytes the stream took wait inside it for the socket (TLS records).
    unsent: bool,
}

impl Output {
    pub(super) fn new() -> Output {
        Output {
            buf: BytesMut::with_capacity(BUFFER_SIZE),
            stalled: None,
            over_soft: None,
            unsent: false,
        }
    }

    /// Where replies go to be written.
    pub(super) fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes not taken by the socket yet.
    pub(super) fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether everything has gone to the socket.
    pub(super) fn is_empty(&self) -> bool {
        self.buf.is_empty() && !self.unsent
    }

    /// Writes what the socket takes now, without waiting; what it does not take waits for `wait_writable`, and
    /// shows in the client's CLIENT LIST line (`info`). Returns whether bytes started waiting (the session's
    /// timer must then be set again).
    pub(super) fn flush(
        &mut self,
        stream: &Stream,
        now: Instant,
        info: &ClientInfo,
    ) -> io::Result<bool> {
        let mut progress = false;
        while !self.buf.is_empty() {
            match stream.try_write(&self.buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                // All of it, as nearly always: cleared, which keeps the buffer's whole capacity at hand.
                Ok(n) if n == self.buf.len() => self.buf.clear(),
                Ok(n) => {
                    self.buf.advance(n);
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        // The last TLS records may still wait inside the stream.
        self.unsent = self.buf.is_empty()
            && stream.unsent()
            && match stream.try_write(&[]) {
                Ok(_) => false,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
                Err(e) => return Err(e),
            };
        if self.is_empty() {
            if self.stalled.take().is_some() {
                info.set_unread(0);
            }
            self.over_soft = None;
            if self.buf.capacity() > 1024 * 1024 {
                self.buf = BytesMut::with_capacity(BUFFER_SIZE); // give back what a huge reply took
            }
            return Ok(false);
        }
        info.set_unread(self.buf.len());
        let started = self.stalled.is_none();
        if started || progress {
            self.stalled = Some(now); // the write timeout counts from the last byte the client took
        }
        Ok(started)
    }

    /// Checks the bytes waiting against `limit`; returns why the connection must close, if it must.
    pub(super) fn check(&mut self, limit: OutputBufferLimit, now: Instant) -> Result<(), Closed> {
        let len = self.buf.len() as u64;
        if limit.hard_bytes > 0 && len > limit.hard_bytes {
            return Err(Closed::OutputHard);
        }
        if limit.soft_bytes == 0 || len <= limit.soft_bytes {
            self.over_soft = None;
            return Ok(());
        }
        let since = *self.over_soft.get_or_insert(now);
        if now.saturating_duration_since(since) >= soft_window(limit) {
            return Err(Closed::OutputSoft);
        }
        Ok(())
    }

    /// The earliest moment the bytes waiting can break a bound: the soft limit's window or the write timeout.
    pub(super) fn deadline(
        &self,
        limit: OutputBufferLimit,
        write_timeout: Option<Duration>,
    ) -> Option<Instant> {
        let soft = self.over_soft.map(|since| since + soft_window(limit));
        let write = self.stalled.zip(write_timeout).map(|(since, t)| since + t);
        soft.into_iter().chain(write).min()
    }

    /// Whether the client has taken nothing for `write_timeout`.
    pub(super) fn timed_out(&self, write_timeout: Option<Duration>, now: Instant) -> bool {
        self.stalled
            .zip(write_timeout)
            .is_some_and(|(since, timeout)| now.saturating_duration_since(since) >= timeout)
    }
}

fn soft_window(limit: OutputBufferLimit) -> Duration {
    Duration::from_secs(u64::from(limit.soft_seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(hard: u64, soft: u64, seconds: u32) -> OutputBufferLimit {
        OutputBufferLimit {
            hard_bytes: hard,
            soft_bytes: soft,
            soft_seconds: seconds,
        }
    }

    fn holding(bytes: usize) -> Output {
        let mut output = Output::new();
        output.buf().extend_from_slice(&vec![b'x'; bytes]);
        output
    }

    #[test]
    fn over_the_hard_limit_closes_at_once() {
        let now = Instant::now();
        assert_eq!(holding(100).check(limit(100, 0, 0), now), Ok(()));
        assert_eq!(
            holding(101).check(limit(100, 0, 0), now),
            Err(Closed::OutputHard)
        );
        assert_eq!(holding(1 << 20).check(limit(0, 0, 0), now), Ok(()));
    }

    #[test]
    fn over_the_soft_limit_closes_once_its_window_has_passed() {
        let now = Instant::now();
        let soft = limit(0, 10, 60);
        let mut output = holding(11);
        assert_eq!(output.check(soft, now), Ok(()));
        assert_eq!(
            output.deadline(soft, None),
            Some(now + Duration::from_secs(60))
        );
        assert_eq!(output.check(soft, now + Duration::from_secs(59)), Ok(()));
        assert_eq!(
            output.check(soft, now + Duration::from_secs(60)),
            Err(Closed::OutputSoft)
        );
        // Back under the limit: the window starts again next time.
        output.buf().truncate(5);
        assert_eq!(output.check(soft, now + Duration::from_secs(61)), Ok(()));
        assert_eq!(output.deadline(soft, None), None);
    }
}
