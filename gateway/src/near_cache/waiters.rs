//! Reads that wait for a fill instead of going to Redis themselves: a hot key just invalidated is read by many
//! clients before its fill is back, and each would otherwise cross to Redis.
//!
//! A waiting read is answered with what the fill's `GET` read when that is a value the read may return:
//! - the fill was sent after the read arrived (the read's own miss started it, or the read waited for a write
//!   of its key to be answered first, or for a fill voided under it): the `GET` ran while the read was in
//!   progress, so its value is one the key had during the read, whatever came after;
//! - the fill was sent before the read arrived, and no invalidation of the key reached the gateway before the
//!   fill was complete: its value is then what a hit on the entry it stores would answer.
//!
//! A read the fill it waited for cannot answer (voided under it) waits for the next fill of its key, sent after
//! it arrived. A fill that fails (an error, a lost connection) sends its reads to Redis as they would have gone
//! without the cache, over the client's own connection. The client's later requests wait meanwhile (the session
//! does not read them until the waiting read is answered), so the read keeps its place among them.

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;

use super::TenantCache;
use crate::backend::Backend;
use crate::reply::ReplyHandle;
use crate::resp::Protocol;

/// A read of a key waiting for the key's fill.
pub(crate) struct Waiter {
    /// Where its reply goes.
    pub(crate) handle: ReplyHandle,
    /// The client's protocol: a missing key is `$-1` in RESP2.
    pub(crate) protocol: Protocol,
    /// The read as Redis would be sent it (`GET key`, the key as stored), the node and the client's connection
    /// to it (`affinity`): where it goes when the fill cannot answer it.
    pub(crate) request: Bytes,
    pub(crate) node: Rc<Backend>,
    pub(crate) affinity: usize,
    /// Whether its fill was sent after it arrived (set by the cache).
    pub(super) before_fill: bool,
    /// The tracking connection its fill reads over (set by the cache): a fill of the same key over another
    /// (another database, a former master) is not its.
    source: u32,
}

impl Waiter {
    /// A read of `request` on `node` whose reply goes to `handle`.
    pub(crate) fn new(
        handle: ReplyHandle,
        protocol: Protocol,
        request: Bytes,
        node: Rc<Backend>,
        affinity: usize,
    ) -> Waiter {
        Waiter {
            handle,
            protocol,
            request,
            node,
            affinity,
            before_fill: false,
            source: u32::MAX,
        }
    }

    /// Answers with `reply`, a fill's `GET` reply (RESP3).
    fn deliver(self, reply: &Bytes) {
        let reply = match (self.protocol, &reply[..]) {
            (Protocol::Resp2, super::NULL) => Bytes::from_static(super::NULL_BULK),
            _ => reply.clone(),
        };
        self.handle.deliver(reply);
    }

    /// Sends the read to Redis over the client's connection.
    pub(super) fn resend(self) {
        self.node.send(self.request, self.handle, self.affinity);
    }
}

impl TenantCache {
    /// Has `waiter` wait for the fill of `key` that `get` said it may wait for (`started`: sent for it); without
    /// one, it goes to Redis at once.
    pub(crate) fn wait(&self, key: &[u8], started: bool, mut waiter: Waiter) {
        waiter.source = self.source(&waiter.node).0;
        let mut fills = self.fills.borrow_mut();
        match fills.filling.get(key) {
            Some(&number) if fills.sources.get(&number) == Some(&waiter.source) => {
                waiter.before_fill = started;
                fills.waiting.entry(number).or_default().push(waiter);
            }
            None if fills.writing.contains_key(key) => {
                waiter.before_fill = true;
                let key = (waiter.source, Bytes::copy_from_slice(key));
                fills.after_write.entry(key).or_default().push(waiter);
            }
            _ => {
                drop(fills);
                waiter.resend();
            }
        }
    }

    /// The fill of `key` that `waiting` waited for is complete: its `GET` read `reply` (`None`: it failed), and
    /// `valid` says whether no invalidation of the key came before it was.
    pub(super) fn answer(
        &self,
        key: &Bytes,
        waiting: Vec<Waiter>,
        reply: Option<&Bytes>,
        valid: bool,
    ) {
        let mut later = Vec::new();
        for waiter in waiting {
            match reply {
                Some(reply) if waiter.before_fill || valid => waiter.deliver(reply),
                Some(_) => later.push(waiter),
                None => waiter.resend(),
            }
        }
        if let Some(source) = later.first().map(|waiter| waiter.source) {
            self.requeue(source, key, later);
        }
    }

    /// Puts `waiters`, reads of `key` over the tracking connection `source` that arrived before now, on the next
    /// fill of `key` there: the one in flight (started after they arrived: while they waited, the fill they
    /// waited for held the key), the one after the write of the key in flight, or one sent now; when none can
    /// be, they go to Redis.
    pub(super) fn requeue(&self, source: u32, key: &Bytes, mut waiters: Vec<Waiter>) {
        for waiter in &mut waiters {
            waiter.before_fill = true;
        }
        let mut fills = self.fills.borrow_mut();
        match fills.filling.get(key) {
            Some(&number) if fills.sources.get(&number) == Some(&source) => {
                fills.waiting.entry(number).or_default().extend(waiters);
                return;
            }
            Some(_) => {}
            None if fills.writing.contains_key(key) => {
                let key = (source, key.clone());
                fills.after_write.entry(key).or_default().extend(waiters);
                return;
            }
            None if fills.writing_all == 0 => {
                drop(fills);
                let up = self.source_up(source);
                if let Some(number) = up
                    .then(|| self.start_fill(source, key, Instant::now()))
                    .flatten()
                {
                    let mut fills = self.fills.borrow_mut();
                    fills.waiting.entry(number).or_default().extend(waiters);
                    return;
                }
                return waiters.into_iter().for_each(Waiter::resend);
            }
            None => {}
        }
        drop(fills);
        waiters.into_iter().for_each(Waiter::resend);
    }
}
