//! Per-client reply ordering: every request gets a slot, in the order it was read, and slots are written back
//! in that order whatever order backends answer in.
//!
//! A client connection and the backend connections serving it run on the same worker thread, so the queue is
//! shared by `Rc` and filled in place: no channel and no allocation per request.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;

/// The ordered replies of one client connection.
#[derive(Default)]
pub struct ReplyQueue {
    inner: RefCell<Slots>,
    /// Wakes the client task when the oldest slot becomes ready.
    ready: Notify,
}

#[derive(Default)]
struct Slots {
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Slot>,
}

/// Rewrites a backend's reply before the client sees it (for the few commands the gateway answers partly
/// itself, such as INFO). Boxed, but only those commands pay for it.
pub type Transform = Box<dyn FnOnce(Bytes) -> Bytes>;

enum Slot {
    Waiting {
        started: Instant,
        transform: Option<Transform>,
    },
    Ready {
        reply: Bytes,
        started: Instant,
    },
}

/// Where a backend delivers the reply to one request.
pub struct ReplyHandle {
    queue: Rc<ReplyQueue>,
    seq: u64,
}

impl ReplyQueue {
    /// Opens a slot for a request that a backend will answer.
    pub fn reserve(self: &Rc<Self>, started: Instant) -> ReplyHandle {
        self.reserve_with(started, None)
    }

    /// Opens a slot whose reply is rewritten by `transform` when it arrives.
    pub fn reserve_with(
        self: &Rc<Self>,
        started: Instant,
        transform: Option<Transform>,
    ) -> ReplyHandle {
        let mut inner = self.inner.borrow_mut();
        let seq = inner.base + inner.slots.len() as u64;
        inner.slots.push_back(Slot::Waiting { started, transform });
        ReplyHandle {
            queue: Rc::clone(self),
            seq,
        }
    }

    /// Queues a reply the gateway produced itself, behind every earlier request.
    pub fn push_ready(&self, reply: Bytes, started: Instant) {
        self.inner
            .borrow_mut()
            .slots
            .push_back(Slot::Ready { reply, started });
    }

    /// Requests still waiting for their reply or for being written.
    pub fn len(&self) -> usize {
        self.inner.borrow().slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Moves every reply that is ready and in order into `out`, calling `done` with each one's start time.
    pub fn drain_ready(&self, out: &mut BytesMut, mut done: impl FnMut(Instant)) {
        let mut inner = self.inner.borrow_mut();
        while let Some(Slot::Ready { .. }) = inner.slots.front() {
            if let Some(Slot::Ready { reply, started }) = inner.slots.pop_front() {
                out.extend_from_slice(&reply);
                done(started);
            }
            inner.base += 1;
        }
    }

    /// Waits until the oldest slot may be ready (callers check with `drain_ready`).
    pub async fn wait_ready(&self) {
        self.ready.notified().await;
    }
}

impl ReplyHandle {
    pub fn deliver(self, reply: Bytes) {
        let mut inner = self.queue.inner.borrow_mut();
        let Some(index) = self.seq.checked_sub(inner.base) else {
            return;
        };
        if let Some(slot) = inner.slots.get_mut(index as usize) {
            if let Slot::Waiting { started, transform } = slot {
                let started = *started;
                // Runs with the queue borrowed: a transform only rewrites bytes.
                let reply = match transform.take() {
                    Some(transform) => transform(reply),
                    None => reply,
                };
                *slot = Slot::Ready { reply, started };
            }
            if index == 0 {
                self.queue.ready.notify_one();
            }
        }
    }
}
