//! The addresses a reply is owed to (a queue's slot, a detached double-write, a part of a gathered reply), each
//! answered exactly once: filled, or, when dropped unfilled, with `REPLY_LOST`.

use std::rc::Rc;

use bytes::Bytes;

use super::{
    Destination, DetachedWrites, Gather, REPLY_LOST, ReplyHandle, ReplyQueue, Slot, lost_replies,
};
use crate::resp;

/// Where a reply is owed: filled once, or, dropped unfilled, answered with `REPLY_LOST` (see the module's
/// documentation). `None` only once filled.
pub(super) struct Owed<T: Addressee>(pub(super) Option<T>);

/// Somewhere a reply goes.
pub(super) trait Addressee {
    /// Fills it with `replies`; `error` when they may hold an error reply.
    fn fill(self, replies: Bytes, error: bool);
    /// Answers `REPLY_LOST` for every request the reply was owed for.
    fn lose(self);
}

impl<T: Addressee> Owed<T> {
    pub(super) fn fill(mut self, replies: Bytes, error: bool) {
        if let Some(to) = self.0.take() {
            to.fill(replies, error);
        }
    }
}

impl<T: Addressee> Drop for Owed<T> {
    fn drop(&mut self) {
        if let Some(to) = self.0.take() {
            to.lose();
        }
    }
}

pub(super) struct SlotAddress {
    pub(super) queue: Rc<ReplyQueue>,
    pub(super) seq: u64,
    pub(super) part: usize,
}

impl Addressee for SlotAddress {
    fn fill(self, replies: Bytes, error: bool) {
        self.queue.fill(self.seq, self.part, replies, error);
    }

    fn lose(self) {
        self.queue.lost(self.seq);
    }
}

pub(super) struct DetachedAddress {
    pub(super) writes: Rc<DetachedWrites>,
    /// Boxed: a handle is moved several times per request, and only double-writes carry this.
    pub(super) sent: Box<Sent>,
}

/// What a detached write sent: the command's name (for the log), the requests (whose keys a failure records)
/// and how many there are.
pub(super) struct Sent {
    pub(super) command: &'static str,
    pub(super) raw: Bytes,
    pub(super) count: u32,
}

impl Addressee for DetachedAddress {
    fn fill(self, replies: Bytes, _error: bool) {
        let sent = &self.sent;
        self.writes
            .finish(sent.command, &sent.raw, &replies, sent.count);
    }

    fn lose(self) {
        let replies = lost_replies(self.sent.count);
        self.fill(replies, true);
    }
}

pub(super) struct WitnessedAddress {
    pub(super) writes: Rc<DetachedWrites>,
    /// Where the reply goes on to, and what was sent. Boxed: only writes the client waits for on every copy
    /// carry this.
    pub(super) sent: Box<(Destination, Sent)>,
}

impl Addressee for WitnessedAddress {
    fn fill(self, replies: Bytes, error: bool) {
        let (to, sent) = *self.sent;
        if error {
            self.writes.failed(sent.command, &sent.raw, &replies);
        }
        to.deliver(replies, error);
    }

    fn lose(self) {
        // The reply owed on (dropped with `to`) counts the loss.
        let (to, sent) = *self.sent;
        let lost = resp::error_reply(REPLY_LOST).repeat(sent.count as usize);
        self.writes.failed(sent.command, &sent.raw, &lost);
        drop(to);
    }
}

pub(super) struct PartAddress {
    pub(super) gather: Rc<Gather>,
    pub(super) index: usize,
}

impl Addressee for PartAddress {
    fn fill(self, replies: Bytes, _error: bool) {
        self.gather.fill(self.index, replies);
    }

    fn lose(self) {
        self.fill(lost_replies(1), true);
    }
}

impl ReplyHandle {
    /// The sequence number of the queue slot the handle answers, if it answers one.
    pub(crate) fn slot(&self) -> Option<u64> {
        match &self.to {
            Destination::Slot(Owed(Some(address))) => Some(address.seq),
            _ => None,
        }
    }
}

impl ReplyQueue {
    /// Answers slot `seq` with `reply` if it still waits for its backend, whose reply is then dropped when it
    /// comes (CLIENT UNBLOCK); returns whether it did.
    pub(crate) fn answer(&self, seq: u64, reply: Bytes) -> bool {
        // Not through `fill`, which stays inlined where backends deliver.
        let mut inner = self.inner.borrow_mut();
        let Some(index) = seq.checked_sub(inner.base) else {
            return false;
        };
        let Some(slot) = inner.slots.get_mut(index as usize) else {
            return false;
        };
        let Slot::Waiting { opened, .. } = *slot else {
            return false;
        };
        let error = reply.first() == Some(&b'-');
        self.make_ready(slot, index, (reply, opened, error));
        true
    }
}
