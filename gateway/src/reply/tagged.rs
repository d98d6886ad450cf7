//! The request a reply slot answers, kept for the session's `tracking`, which looks into a request only once
//! its reply is in (how long it took, how big it is, whether its key is sampled). The request's bytes are
//! shared, not copied; a queue whose session keeps no requests does nothing here but one test per slot.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::ReplyQueue;
use crate::family::Family;

/// What `ReplyQueue::drain_ready` tells of each reply it moves out.
pub(crate) struct Answered<'a> {
    pub started: Instant,
    /// How many requests the reply answers.
    pub count: u32,
    /// Their command's family (a run's first command's).
    pub family: Family,
    /// The reply, when it may hold an error reply.
    pub error: Option<&'a [u8]>,
    pub reply: &'a Bytes,
    /// The request (or run of requests) it answers, when the slot was tagged with one.
    pub request: Option<Tag>,
}

/// The requests a slot answers, as they were kept.
pub(crate) struct Tag {
    /// One request, or a run's back to back, as they went to the backend (keys under the tenant's namespace, if
    /// it has one).
    pub raw: Bytes,
    /// The reply holds one reply per request of `raw`, in order (not so for a cluster run spread over several
    /// masters: `raw` then holds the first master's requests only).
    pub aligned: bool,
}

#[derive(Default)]
pub(super) struct Tags {
    /// Whether slots keep their requests (the session's tracking wants them).
    keep: bool,
    /// Set by `tag`, taken by the next slot opened without a request of its own.
    pending: Option<Bytes>,
    /// The tagged slots' sequence numbers and requests, in order.
    tagged: VecDeque<(u64, Tag)>,
}

impl Tags {
    /// Slot `seq` was opened for `request` (a run's, and whether the slot's replies are in its order), or for the
    /// request tagged last.
    #[inline]
    pub(super) fn opened(&mut self, seq: u64, request: Option<(&Bytes, bool)>) {
        if !self.keep {
            return;
        }
        let tag = match request {
            Some((raw, aligned)) => Tag {
                raw: raw.clone(),
                aligned,
            },
            None => match self.pending.take() {
                Some(raw) => Tag { raw, aligned: true },
                None => return,
            },
        };
        self.tagged.push_back((seq, tag));
    }

    /// The request of slot `seq`, which leaves the queue, if it was tagged.
    #[inline]
    pub(super) fn take(&mut self, seq: u64) -> Option<Tag> {
        match self.tagged.front() {
            Some((tagged, _)) if *tagged == seq => self.tagged.pop_front().map(|(_, tag)| tag),
            _ => None,
        }
    }
}

impl ReplyQueue {
    /// Whether the queue keeps the requests of its slots (off by default).
    pub(crate) fn keep_requests(&self, keep: bool) {
        self.inner.borrow_mut().tags.keep = keep;
    }

    /// The next slot opened without a request of its own answers `request` (`None`: no request is pending any
    /// more): the dispatch path's request, as it goes to the backend.
    pub(crate) fn tag(&self, request: Option<&Bytes>) {
        let mut inner = self.inner.borrow_mut();
        if inner.tags.keep {
            inner.tags.pending = request.cloned();
        }
    }
}
