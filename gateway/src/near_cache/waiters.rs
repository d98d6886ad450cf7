//! Reads that wait for a fill instead of going to Redis themselves: a hot key just invalidated is read by many
//! clients before its fill is back, and each would otherwise cross to Redis.
//!
//! A waiting read is answered with what the fill read (the same read, of the same key, over the same tracking
//! connection) when that is a value the read may return:
//! - the fill was sent after the read arrived (the read's own miss started it, or the read waited for a write
//!   of its key to be answered first, or for a fill voided under it): the fill's read ran while the read was in
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

use bytes::{Bytes, BytesMut};

use super::TenantCache;
use super::query::{OwnedQuery, Query};
use crate::backend::Backend;
use crate::reply::ReplyHandle;
use crate::resp::Protocol;

/// A read of a key waiting for a fill.
pub(crate) struct Waiter {
    /// Where its reply goes.
    handle: ReplyHandle,
    /// The client's protocol, the reply's form.
    protocol: Protocol,
    /// What it reads.
    query: OwnedQuery,
    /// The read as Redis would be sent it (the key as stored), the node it goes to and the client's connection
    /// to it (`affinity`): where it goes when no fill can answer it.
    request: Bytes,
    node: Rc<Backend>,
    affinity: usize,
    /// Whether its fill was sent after it arrived (set by the cache).
    before_fill: bool,
}

impl Waiter {
    /// A read of `query` of `key` (as stored) on `node`, whose reply goes to `handle`.
    pub(crate) fn new(
        handle: ReplyHandle,
        protocol: Protocol,
        (query, key): (&Query<'_>, &[u8]),
        node: Rc<Backend>,
        affinity: usize,
    ) -> Waiter {
        let query = query.keep();
        let mut request = BytesMut::with_capacity(key.len() + 32);
        query.command(&mut request, key);
        Waiter {
            handle,
            protocol,
            query,
            request: request.freeze(),
            node,
            affinity,
            before_fill: false,
        }
    }

    /// Sends the read to Redis over the client's connection.
    pub(super) fn resend(self) {
        self.node.send(self.request, self.handle, self.affinity);
    }
}

impl TenantCache {
    /// Has `waiter`, a read of `key` (as stored), wait for the fill over `source` that `read` said it may wait
    /// for (`started`: sent for it); without one, it goes to Redis at once.
    pub(crate) fn wait(&self, key: &[u8], source: u32, started: bool, mut waiter: Waiter) {
        let mut fills = self.fills.borrow_mut();
        if let Some(number) = fills.in_flight(key, source, |query| *query == waiter.query) {
            waiter.before_fill = started;
            fills.waiting.entry(number).or_default().push(waiter);
        } else if !fills.filling.contains_key(key) && fills.writing.contains_key(key) {
            waiter.before_fill = true;
            let key = (source, Bytes::copy_from_slice(key));
            fills.after_write.entry(key).or_default().push(waiter);
        } else {
            drop(fills);
            waiter.resend();
        }
    }

    /// The fill of `key` over `source` that `waiting` waited for is complete: it read `reply` (in RESP3 and in
    /// RESP2's forms; `None`: it failed), and `valid` says whether no invalidation of the key came before it was.
    pub(super) fn answer(
        &self,
        source: u32,
        key: &Bytes,
        waiting: Vec<Waiter>,
        reply: Option<(&Bytes, &Bytes)>,
        valid: bool,
    ) {
        let mut later = Vec::new();
        for waiter in waiting {
            match reply {
                Some((resp3, resp2)) if waiter.before_fill || valid => {
                    let reply = match waiter.protocol {
                        Protocol::Resp2 => resp2,
                        Protocol::Resp3 => resp3,
                    };
                    waiter.handle.deliver(reply.clone());
                }
                Some(_) => later.push(waiter),
                None => waiter.resend(),
            }
        }
        self.requeue(source, key, later);
    }

    /// Puts `waiters`, reads of `key` over the tracking connection `source` that arrived before now, on the next
    /// fill of their read there: the one in flight (started after they arrived: while they waited, the fill they
    /// waited for held the key), the one after the write of the key in flight, or one sent now. When none can
    /// be (another read's fill holds the key, a script is in flight, the connection is down), and for the reads
    /// of another kind than the first, they go to Redis.
    pub(super) fn requeue(&self, source: u32, key: &Bytes, mut waiters: Vec<Waiter>) {
        let Some(query) = waiters.first().map(|waiter| waiter.query.clone()) else {
            return;
        };
        for waiter in &mut waiters {
            waiter.before_fill = true;
        }
        let (same, other): (Vec<Waiter>, Vec<Waiter>) = waiters
            .into_iter()
            .partition(|waiter| waiter.query == query);
        other.into_iter().for_each(Waiter::resend);
        let mut fills = self.fills.borrow_mut();
        let number = match fills.in_flight(key, source, |q| *q == query) {
            Some(number) => Some(number),
            None if fills.filling.contains_key(key) || fills.writing_all > 0 => None,
            None if fills.writing.contains_key(key) => {
                let key = (source, key.clone());
                fills.after_write.entry(key).or_default().extend(same);
                return;
            }
            None => {
                drop(fills);
                let number = match self.source_up(source) {
                    true => self.start_fill(source, key, query, Instant::now()),
                    false => None,
                };
                fills = self.fills.borrow_mut();
                number
            }
        };
        // A fill that failed as it was sent (its connection down) is over already: nothing would answer them.
        match number.filter(|number| fills.reads.contains_key(number)) {
            Some(number) => fills.waiting.entry(number).or_default().extend(same),
            None => {
                drop(fills);
                same.into_iter().for_each(Waiter::resend);
            }
        }
    }
}
