//! Per-client reply ordering: every request gets a slot, in the order it was read, and slots are written back
//! in that order whatever order backends answer in.
//!
//! A client connection and the backend connections serving it run on the same worker thread, so the queue is
//! shared by `Rc` and filled in place: no channel and no allocation per request. Requests served by several
//! backends (split multi-key commands, double-writes that wait for every copy) gather their parts in one slot.
//!
//! Pub/sub messages are not replies: they get no slot, and are written between two replies as soon as they
//! arrive, after every reply that was ready by then (as Redis writes a message to a subscriber's connection
//! when it is published, between the replies to that client's commands).
//!
//! Every request gets exactly one reply: a handle dropped without a reply (a bug, or a task that panicked) answers
//! its requests with [`REPLY_LOST`] and counts it, so that one lost reply never hangs a client's pipeline.
//!
//! A handle may carry a [`Redirect`]: requests to a Redis Cluster do, so that a `MOVED`/`ASK` answer goes back to
//! the cluster backend (which resends the request) instead of to the client. Only error replies are looked at, and
//! only at the top level of each request's reply (never inside `EXEC`'s array); a script's, whose content is its
//! author's ([`ReplyHandle::reply_is_payload`]), only as a claim the cluster must confirm.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};

use crate::family::Family;
use crate::resp;
use crate::signal::LocalSignal;

mod detached;
mod gather;
mod handle;
mod owed;
mod run_as;
mod tagged;

pub(crate) use detached::DetachedWrites;
use gather::Gather;
use owed::{DetachedAddress, Owed, PartAddress, Sent, SlotAddress, WitnessedAddress};
pub(crate) use run_as::{RestrictedUser, RunAs, ScriptUser};
pub(crate) use tagged::Answered;
use tagged::Tags;

/// Rewrites a backend's reply before the client sees it (for the few commands the gateway answers partly
/// itself, such as INFO). Boxed, but only those commands pay for it.
pub(crate) type Transform = Box<dyn FnOnce(Bytes) -> Bytes>;

/// `first`, then `then`, over one reply.
pub(crate) fn chain(first: Option<Transform>, then: Option<Transform>) -> Option<Transform> {
    match (first, then) {
        (Some(first), Some(then)) => Some(Box::new(move |reply| then(first(reply)))),
        (first, None) => first,
        (None, then) => then,
    }
}

/// Builds one reply from the replies of every part of a request, in part order.
pub(crate) type Combine = Box<dyn FnOnce(Vec<Bytes>) -> Bytes>;

/// What a request whose reply was lost gets.
pub(crate) const REPLY_LOST: &str = "ERR internal: reply lost";

/// Replies lost so far, gateway-wide (`switchyard_replies_lost_total`): each is a bug.
pub(crate) static REPLIES_LOST: AtomicU64 = AtomicU64::new(0);

/// The ordered replies of one client connection.
#[derive(Default)]
pub(crate) struct ReplyQueue {
    inner: RefCell<Slots>,
    /// Wakes the client task when the oldest slot becomes ready.
    ready: LocalSignal,
    /// Wakes a subscription's connection, paused while too many messages wait here, when some are written.
    drained: LocalSignal,
    /// The family of the command(s) the slots opened from now on answer (see `set_family`).
    family: Cell<Family>,
}

#[derive(Default)]
struct Slots {
    /// Sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Slot>,
    /// Requests the slots answer (a run's slot answers several).
    requests: usize,
    /// Messages, each with the sequence number of the slot it is written before.
    messages: VecDeque<(u64, Bytes)>,
    /// The client is gone: replies and messages that still come are dropped.
    closed: bool,
    /// The client asked for no replies (`CLIENT REPLY OFF`, or `SKIP` for one command): the slots opened
    /// meanwhile are answered but not written (`silent`, in order), and so are monitor lines. Pub/sub messages
    /// and the slots opened by `pushing` are written all the same, as Redis writes them (see `pushing`).
    muted: bool,
    silent: VecDeque<u64>,
    /// The requests of the slots that keep theirs (see `tagged`).
    tags: Tags,
}

/// What every slot knows from its opening on.
#[derive(Clone, Copy)]
struct Opened {
    started: Instant,
    /// How many requests the slot answers.
    count: u32,
    /// Their command's family (a run's first command's).
    family: Family,
}

enum Slot {
    /// One request, or a run of `count` requests that went to one backend connection back to back and whose
    /// replies arrive as one piece.
    Waiting {
        opened: Opened,
        transform: Option<Transform>,
    },
    Gathering {
        opened: Opened,
        parts: Vec<Option<Bytes>>,
        missing: usize,
        /// Some part holds an error reply.
        error: bool,
        combine: Option<Combine>,
    },
    Ready {
        opened: Opened,
        reply: Bytes,
        /// `reply` may hold an error reply (a run's replies are looked into only then).
        error: bool,
    },
}

/// Where a backend delivers the reply to one request (or to one part of it).
pub(crate) struct ReplyHandle {
    to: Destination,
    /// Set for requests a backend may have to resend (Redis Cluster redirects): error replies go there first.
    redirect: Option<Redirect>,
    /// Who the backend runs the request as; it travels with the handle, so that a redirected script is resent
    /// as the same user.
    run_as: RunAs,
    /// The request is a script that a cluster resends after `ASK`: `ASKING` goes between its `AUTH`s.
    asking: bool,
    /// For a script: how long it may run, in milliseconds (its tenant's `script_timeout_ms`), which is its
    /// deadline on the backend connection instead of the command timeout.
    script_limit_ms: u32,
}

enum Destination {
    /// A slot of a client's queue (one part of it, for a slot gathering several).
    Slot(Owed<SlotAddress>),
    /// A double-write to a secondary that the client does not wait for (`count` writes of a run): only failures
    /// are counted.
    Detached(Owed<DetachedAddress>),
    /// A double-write to a secondary that the client waits for (ack `all` or `all_check_error`): its reply goes
    /// on to the client's slot, and a failure's keys are recorded as a detached write's are.
    Witnessed(Owed<WitnessedAddress>),
    /// One part of a reply that a backend itself assembles from several nodes (a cluster fan-out).
    Part(Owed<PartAddress>),
    /// A reply nobody needs (the `+OK` of an `ASKING` sent ahead of a redirected request).
    Discard,
}

impl Destination {
    fn slot(queue: Rc<ReplyQueue>, seq: u64, part: usize) -> Destination {
        Destination::Slot(Owed(Some(SlotAddress { queue, seq, part })))
    }

    fn detached(
        writes: Rc<DetachedWrites>,
        command: &'static str,
        raw: Bytes,
        count: u32,
    ) -> Destination {
        Destination::Detached(Owed(Some(DetachedAddress {
            writes,
            sent: Box::new(Sent {
                command,
                raw,
                count,
            }),
        })))
    }

    fn part(gather: Rc<Gather>, index: usize) -> Destination {
        Destination::Part(Owed(Some(PartAddress { gather, index })))
    }

    fn deliver(self, replies: Bytes, error: bool) {
        match self {
            Destination::Slot(slot) => slot.fill(replies, error),
            Destination::Detached(writes) => writes.fill(replies, error),
            Destination::Witnessed(copy) => copy.fill(replies, error),
            Destination::Part(part) => part.fill(replies, error),
            Destination::Discard => {}
        }
    }
}

/// What a redirecting backend needs to resend a request: the request itself and how often it was redirected.
/// Cloning `raw` and `via` bumps reference counts; nothing is allocated per request.
pub(crate) struct Redirect {
    pub via: Rc<dyn Redirector>,
    pub raw: Bytes,
    /// How many requests `raw` holds back to back (a run, answered by as many replies delivered as one).
    pub count: u32,
    /// Redirects followed so far.
    pub attempts: u8,
    /// The client's connection affinity, so a resent request keeps riding one connection per node. 32 bits
    /// (it only picks among a node's few connections) keep a handle small: it is moved several times per
    /// request.
    pub affinity: u32,
    /// The request's hash slot, for a cluster (`None`: keyless); a run's first request's.
    pub slot: Option<u16>,
}

/// A backend that wants to see the error replies to its requests before the client does.
pub(crate) trait Redirector {
    /// Handles a reply with an error to a request (or run) sent with `redirect`: resends what was refused
    /// (delivering to `handle` later), or delivers `reply` (or another error) to `handle`.
    fn on_error(&self, reply: Bytes, handle: ReplyHandle, redirect: Redirect);

    /// A node a request was sent to could not answer it (connection lost or refused, timed out): the backend's
    /// picture of where things live may be out of date.
    fn on_failure(&self);
}

impl ReplyQueue {
    /// Opens a slot for a request that a backend will answer.
    pub(crate) fn reserve(self: &Rc<Self>, started: Instant) -> ReplyHandle {
        self.reserve_with(started, None)
    }

    /// Opens a slot whose reply is rewritten by `transform` when it arrives.
    pub(crate) fn reserve_with(
        self: &Rc<Self>,
        started: Instant,
        transform: Option<Transform>,
    ) -> ReplyHandle {
        let opened = self.opened(started, 1);
        let seq = self.push(Slot::Waiting { opened, transform }, 1, None);
        self.handle(seq, 0)
    }

    /// Opens one slot for a run of `count` requests (`raw`) sent to one backend connection as one piece: the
    /// backend delivers their replies together (see `BackendConnection::send_run`).
    pub(crate) fn reserve_run(
        self: &Rc<Self>,
        started: Instant,
        raw: &Bytes,
        count: u32,
    ) -> ReplyHandle {
        let opened = self.opened(started, count);
        let transform = None;
        let seq = self.push(
            Slot::Waiting { opened, transform },
            count,
            Some((raw, true)),
        );
        self.handle(seq, 0)
    }

    /// Opens a slot for `count` requests (one, or a pipeline's run over several nodes, whose first node's
    /// requests are `first`) answered by `parts` backend replies, put together by `combine` once all have arrived.
    pub(crate) fn reserve_parts(
        self: &Rc<Self>,
        started: Instant,
        parts: usize,
        count: u32,
        combine: Combine,
        first: Option<&Bytes>,
    ) -> Vec<ReplyHandle> {
        let seq = self.push(
            Slot::Gathering {
                opened: self.opened(started, count),
                parts: vec![None; parts],
                missing: parts,
                error: false,
                combine: Some(combine),
            },
            count,
            first.map(|raw| (raw, false)),
        );
        (0..parts).map(|part| self.handle(seq, part)).collect()
    }

    /// Queues `slot`, which answers `count` requests (`raw`: see `Tags::opened`); returns its sequence number.
    #[inline]
    fn push(&self, slot: Slot, count: u32, raw: Option<(&Bytes, bool)>) -> u64 {
        let mut inner = self.inner.borrow_mut();
        let seq = inner.base + inner.slots.len() as u64;
        if !inner.closed {
            inner.requests += count as usize;
            inner.slots.push_back(slot);
            if inner.muted {
                inner.silent.push_back(seq);
            }
            inner.tags.opened(seq, raw);
        }
        seq
    }

    fn opened(&self, started: Instant, count: u32) -> Opened {
        let family = self.family.get();
        Opened {
            started,
            count,
            family,
        }
    }

    /// The slots opened from now on answer commands of `family`.
    pub(crate) fn set_family(&self, family: Family) {
        self.family.set(family);
    }

    fn handle(self: &Rc<Self>, seq: u64, part: usize) -> ReplyHandle {
        ReplyHandle::new(Destination::slot(Rc::clone(self), seq, part))
    }

    /// Queues a reply the gateway produced itself, behind every earlier request.
    pub(crate) fn push_ready(&self, reply: Bytes, started: Instant) {
        self.push_answered(reply, started, 1, None);
    }

    /// Queues the replies of `count` requests (`raw`, back to back: a run) the gateway answered itself, in one
    /// slot behind every earlier request.
    pub(crate) fn push_answered(
        &self,
        reply: Bytes,
        started: Instant,
        count: u32,
        raw: Option<&Bytes>,
    ) {
        let error = reply.first() == Some(&b'-');
        let opened = self.opened(started, count);
        let slot = Slot::Ready {
            opened,
            reply,
            error,
        };
        self.push(slot, count, raw.map(|raw| (raw, true)));
    }

    /// Queues a pub/sub message (or a subscription's failure), written after every reply ready now, whatever
    /// `CLIENT REPLY` says: Redis 7.0 writes every `message` and `pmessage` to a client that turned its replies
    /// off.
    pub(crate) fn push_message(&self, message: Bytes) {
        self.push_between(message, false);
    }

    /// Queues lines of a monitor, as messages, unless the client turned its replies off: Redis writes them as
    /// replies, which `CLIENT REPLY OFF` drops.
    pub(crate) fn push_monitor_lines(&self, lines: Bytes) {
        self.push_between(lines, true);
    }

    /// Queues a push written after the replies of every request the client has sent so far, ready or not,
    /// whatever `CLIENT REPLY` says: a tracking client's invalidation (see `client_tracking`), which must not
    /// reach it before the reply of a read that may hold the value it invalidates.
    pub(crate) fn push_after_sent(&self, message: Bytes) {
        self.queue_message(message, true, false);
    }

    fn push_between(&self, message: Bytes, reply: bool) {
        self.queue_message(message, false, reply);
    }

    /// Queues `message` after every reply ready now, or after every slot open now (`after_open`); a `reply` is
    /// dropped while muted.
    fn queue_message(&self, message: Bytes, after_open: bool, reply: bool) {
        let mut inner = self.inner.borrow_mut();
        if inner.closed || (reply && inner.muted) {
            return;
        }
        let ready = inner
            .slots
            .iter()
            .take_while(|slot| matches!(slot, Slot::Ready { .. }))
            .count() as u64;
        let before = match after_open {
            true => inner.base + inner.slots.len() as u64,
            false => inner.base + ready,
        };
        // Messages are written in order: one never goes before a message queued earlier.
        let before = inner
            .messages
            .back()
            .map_or(before, |(last, _)| before.max(*last));
        inner.messages.push_back((before, message));
        if before == inner.base {
            self.ready.notify();
        }
    }

    /// Messages not written yet.
    pub(crate) fn messages(&self) -> usize {
        self.inner.borrow().messages.len()
    }

    /// Waits until messages have been written since the last wait (callers check with `messages`).
    pub(crate) async fn wait_drained(&self) {
        self.drained.notified().await;
    }

    /// Requests still waiting for their reply or for being written.
    pub(crate) fn requests(&self) -> usize {
        self.inner.borrow().requests
    }

    /// How many more requests may be in flight or unwritten within `bound`.
    pub(crate) fn room(&self, bound: usize) -> usize {
        bound.saturating_sub(self.requests())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.inner.borrow().slots.is_empty()
    }

    /// The client is gone: what is queued is dropped, and so is every reply and message that still comes.
    pub(crate) fn close(&self) {
        let mut inner = self.inner.borrow_mut();
        inner.closed = true;
        inner.base += inner.slots.len() as u64;
        inner.slots.clear();
        inner.messages.clear();
        inner.silent.clear();
        inner.tags = Tags::default();
        inner.requests = 0;
    }

    /// Whether the slots opened from now on are written to the client (see `Slots::muted`).
    pub(crate) fn set_muted(&self, muted: bool) {
        self.inner.borrow_mut().muted = muted;
    }

    /// Runs `open` with the muting lifted, so that the slots it opens are written whatever `CLIENT REPLY` says:
    /// Redis 7.0 writes the confirmations of `(P|S)SUBSCRIBE` and their `UNSUBSCRIBE`s even to a client that
    /// turned its replies off (its `CLIENT_PUSHING`).
    pub(crate) fn pushing<R>(&self, open: impl FnOnce() -> R) -> R {
        let muted = std::mem::replace(&mut self.inner.borrow_mut().muted, false);
        let opened = open();
        self.inner.borrow_mut().muted = muted;
        opened
    }

    /// Moves every reply that is ready and in order into `out`, and the messages between them, calling `done` with
    /// each one (`Answered`: even one the client asked not to be written, as Redis counts those errors too).
    pub(crate) fn drain_ready(&self, out: &mut BytesMut, mut done: impl FnMut(Answered<'_>)) {
        let mut inner = self.inner.borrow_mut();
        loop {
            let base = inner.base;
            while let Some((_, message)) =
                inner.messages.pop_front_if(|(before, _)| *before <= base)
            {
                out.extend_from_slice(&message);
                self.drained.notify();
            }
            if !matches!(inner.slots.front(), Some(Slot::Ready { .. })) {
                break;
            }
            if let Some(Slot::Ready {
                opened,
                reply,
                error,
            }) = inner.slots.pop_front()
            {
                if inner.silent.front() == Some(&base) {
                    inner.silent.pop_front();
                } else {
                    out.extend_from_slice(&reply);
                }
                inner.requests -= opened.count as usize;
                let request = inner.tags.take(base);
                done(Answered {
                    started: opened.started,
                    count: opened.count,
                    family: opened.family,
                    error: error.then_some(&reply[..]),
                    reply: &reply,
                    request,
                });
            }
            inner.base += 1;
        }
    }

    /// Waits until the oldest slot may be ready (callers check with `drain_ready`).
    pub(crate) async fn wait_ready(&self) {
        self.ready.notified().await;
    }

    fn fill(&self, seq: u64, part: usize, reply: Bytes, error: bool) {
        let mut inner = self.inner.borrow_mut();
        let Some(index) = seq.checked_sub(inner.base) else {
            return;
        };
        let Some(slot) = inner.slots.get_mut(index as usize) else {
            return;
        };
        // Transforms and combines run with the queue borrowed: they only rewrite bytes.
        let finished = match slot {
            Slot::Waiting { opened, transform } => match transform.take() {
                Some(transform) => {
                    let reply = transform(reply);
                    let error = reply.first() == Some(&b'-');
                    Some((reply, *opened, error))
                }
                None => Some((reply, *opened, error)),
            },
            Slot::Gathering {
                opened,
                parts,
                missing,
                error: any_error,
                combine,
            } => {
                if let Some(entry) = parts.get_mut(part).filter(|entry| entry.is_none()) {
                    *entry = Some(reply);
                    *missing -= 1;
                    *any_error |= error;
                }
                match (*missing, combine.take()) {
                    (0, Some(combine)) => {
                        let replies = parts
                            .iter_mut()
                            .map(|p| p.take().unwrap_or_default())
                            .collect();
                        let reply = combine(replies);
                        let error = *any_error || reply.first() == Some(&b'-');
                        Some((reply, *opened, error))
                    }
                    (_, combine_back) => {
                        *combine = combine_back;
                        None
                    }
                }
            }
            Slot::Ready { .. } => None,
        };
        if let Some(ready) = finished {
            self.make_ready(slot, index, ready);
        }
    }

    /// Puts `ready` (reply, the slot's opening, may hold an error) in `slot`, the `index`-th of the queue; the
    /// first slot wakes the session.
    #[inline]
    fn make_ready(&self, slot: &mut Slot, index: u64, ready: (Bytes, Opened, bool)) {
        let (reply, opened, error) = ready;
        *slot = Slot::Ready {
            opened,
            reply,
            error,
        };
        if index == 0 {
            self.ready.notify();
        }
    }

    /// A handle to slot `seq` was dropped unanswered: the whole slot fails (a gathering slot's other parts no
    /// longer matter), one error per request it answers. The queue may be borrowed already when a panic unwinds
    /// through a borrow of it: then nothing is done, the session is going down anyway.
    fn lost(&self, seq: u64) {
        let Ok(mut inner) = self.inner.try_borrow_mut() else {
            return;
        };
        let Some(index) = seq.checked_sub(inner.base) else {
            return;
        };
        let Some(slot) = inner.slots.get_mut(index as usize) else {
            return;
        };
        let (Slot::Waiting { opened, .. } | Slot::Gathering { opened, .. }) = *slot else {
            return;
        };
        self.make_ready(slot, index, (lost_replies(opened.count), opened, true));
    }
}

/// [`REPLY_LOST`] for each of `count` requests, counted.
fn lost_replies(count: u32) -> Bytes {
    REPLIES_LOST.fetch_add(u64::from(count), Ordering::Relaxed);
    let error = resp::error_reply(REPLY_LOST);
    error.repeat(count as usize).into()
}

#[cfg(test)]
mod tests;
