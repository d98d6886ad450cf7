//! The request a reply slot answers, kept for the slots whose answer the session may have to tell something
//! about (a slow command, a big reply: see `tracking`). The request's bytes are shared, not copied; a queue
//! whose session keeps no requests does nothing here but one test per slot.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::ReplyQueue;

/// What `ReplyQueue::drain_ready` tells of each reply it moves out.
pub(crate) struct Answered<'a> {
    pub started: Instant,
    /// How many requests the reply answers.
    pub count: u32,
    /// The reply, when it may hold an error reply.
    pub error: Option<&'a [u8]>,
    pub reply: &'a Bytes,
    /// The request (or run of requests) it answers, when the slot was tagged with it.
    pub request: Option<Bytes>,
}

#[derive(Default)]
pub(super) struct Tags {
    /// Whether `tag` keeps anything (the session's tracking wants requests back).
    keep: bool,
    /// Set by `tag`, taken by the next slot opened.
    pending: Option<Bytes>,
    /// The tagged slots' sequence numbers and requests, in order.
    tagged: VecDeque<(u64, Bytes)>,
}

impl Tags {
    /// Slot `seq` was opened: it answers the request tagged last, if one was.
    #[inline]
    pub(super) fn opened(&mut self, seq: u64) {
        if let Some(request) = self.pending.take() {
            self.tagged.push_back((seq, request));
        }
    }

    /// The request of slot `seq`, which leaves the queue, if it was tagged.
    #[inline]
    pub(super) fn take(&mut self, seq: u64) -> Option<Bytes> {
        match self.tagged.front() {
            Some((tagged, _)) if *tagged == seq => self.tagged.pop_front().map(|(_, raw)| raw),
            _ => None,
        }
    }
}

impl ReplyQueue {
    /// Whether the queue keeps the requests it is given with `tag` (off by default).
    pub(crate) fn keep_requests(&self, keep: bool) {
        self.inner.borrow_mut().tags.keep = keep;
    }

    /// The next slot opened answers `request` (`None`: no request is pending any more). Out of line: it would
    /// otherwise grow the direct path's loop, which must stay small enough for the decoder to be inlined in it.
    #[inline(never)]
    pub(crate) fn tag(&self, request: Option<&Bytes>) {
        let mut inner = self.inner.borrow_mut();
        if inner.tags.keep {
            inner.tags.pending = request.cloned();
        }
    }
}
