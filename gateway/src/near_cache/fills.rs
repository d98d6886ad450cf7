//! What decides whether a fill may start and whether what it read may be stored: the fills in flight (each
//! voided by an invalidation of its key), the writes through the worker in flight, and their guards.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Weak;
use std::time::Instant;

use bytes::Bytes;

use super::TenantCache;
use super::waiters::Waiter;
use crate::resp;

/// Fills in flight and writes through the worker in flight, which decide whether a fill may start and whether
/// what it read may be stored.
#[derive(Default)]
pub(super) struct Fills {
    /// Keys with a fill in flight, and its number: a fill finds its number there when it completes, or it was
    /// overtaken by an invalidation (which takes the key out) and stores nothing.
    pub(super) filling: HashMap<Bytes, u64>,
    pub(super) next: u64,
    /// Writes in flight, by key.
    pub(super) writing: HashMap<Bytes, u32>,
    /// Writes in flight whose keys are not known.
    pub(super) writing_all: u32,
    /// Reads waiting for a fill, by the fill's number (see `waiters`).
    pub(super) waiting: HashMap<u64, Vec<Waiter>>,
    /// The tracking connection of each fill in flight, by number.
    pub(super) sources: HashMap<u64, u32>,
    /// Fills in flight whose `GET` reply is not in yet: an invalidation read before that reply is of a change
    /// the `GET` saw (Redis pushes it on the same connection, in order), and does not void them.
    pub(super) unread: HashSet<u64>,
    /// Reads waiting for the fill that starts once the writes of their key in flight are answered, by tracking
    /// connection and key.
    pub(super) after_write: HashMap<(u32, Bytes), Vec<Waiter>>,
}

impl Fills {
    /// Voids the fill of `key` for an invalidation Redis pushed: only if its `GET` reply is in (`unread`).
    pub(super) fn invalidate(&mut self, key: &[u8]) {
        if self
            .filling
            .get(key)
            .is_some_and(|number| !self.unread.contains(number))
        {
            self.filling.remove(key);
        }
    }

    /// Voids the fill of `key` (every fill, for `None`).
    pub(super) fn void(&mut self, key: Option<&[u8]>) {
        match key {
            Some(key) => {
                self.filling.remove(key);
            }
            None => self.filling.clear(),
        }
    }
}

/// A fill in flight: completing it stores what it read, unless it was voided; dropping it frees its key.
pub(super) struct FillTicket {
    pub(super) cache: Weak<TenantCache>,
    pub(super) key: Bytes,
    pub(super) number: u64,
    pub(super) source: u32,
    /// When the fill was sent: its TTL counts from here, so the entry expires no later than the key.
    pub(super) started: Instant,
    /// `GET`'s reply, once in.
    pub(super) got: RefCell<Option<Bytes>>,
}

impl FillTicket {
    /// `GET`'s reply is in: from now on an invalidation of the key voids the fill.
    pub(super) fn read(&self, reply: Bytes) {
        if let Some(cache) = self.cache.upgrade() {
            cache.fills.borrow_mut().unread.remove(&self.number);
        }
        *self.got.borrow_mut() = Some(reply);
    }

    /// `PTTL`'s reply is in (`ttl`): the reads waiting for the fill are answered (or sent to Redis), and what
    /// `GET` read is stored unless the fill was voided.
    pub(super) fn complete(&self, ttl: &Bytes) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        let reply = self
            .got
            .borrow_mut()
            .take()
            .filter(|reply| matches!(reply.first(), Some(b'$' | b'_')));
        let valid = cache.fills.borrow().filling.get(&self.key) == Some(&self.number);
        let waiting = cache.fills.borrow_mut().waiting.remove(&self.number);
        cache.answer(
            &self.key,
            waiting.unwrap_or_default(),
            reply.as_ref(),
            valid,
        );
        // An error (WRONGTYPE), or the connection's failure, is not stored.
        let Some(reply) = reply else {
            return;
        };
        let cacheable =
            reply[0] == b'_' || (reply.len() as u64) <= cache.max_value_bytes.saturating_add(24);
        let ttl = ttl.strip_prefix(b":").and_then(|rest| {
            let end = rest.iter().position(|&b| b == b'\r')?;
            resp::parse_int(&rest[..end])
        });
        if let (true, Some(ttl)) = (cacheable, ttl) {
            cache.store(self, reply, ttl);
        }
    }
}

impl Drop for FillTicket {
    /// Frees the key; a fill that never completed sends the reads waiting for it to Redis.
    fn drop(&mut self) {
        if let Some(cache) = self.cache.upgrade() {
            let waiting = {
                let mut fills = cache.fills.borrow_mut();
                if fills.filling.get(&self.key) == Some(&self.number) {
                    fills.filling.remove(&self.key);
                }
                fills.sources.remove(&self.number);
                fills.unread.remove(&self.number);
                fills.waiting.remove(&self.number)
            };
            waiting.into_iter().flatten().for_each(Waiter::resend);
        }
    }
}

/// A write through the worker in flight (see `TenantCache::write`): its keys are not filled until it is dropped.
pub(crate) struct WriteGuard {
    pub(super) cache: Weak<TenantCache>,
    pub(super) keys: Option<Vec<Bytes>>,
}

impl Drop for WriteGuard {
    /// The keys may be filled again: the reads waiting for their write go on the next fill.
    fn drop(&mut self) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        let mut fills = cache.fills.borrow_mut();
        let mut waiting = Vec::new();
        match self.keys.take() {
            Some(keys) => {
                for key in keys {
                    if let Some(count) = fills.writing.get_mut(&key) {
                        *count -= 1;
                        if *count == 0 {
                            fills.writing.remove(&key);
                            waiting.extend(fills.after_write.extract_if(|(_, k), _| *k == key));
                        }
                    }
                }
            }
            None => fills.writing_all = fills.writing_all.saturating_sub(1),
        }
        drop(fills);
        for ((source, key), waiters) in waiting {
            cache.requeue(source, &key, waiters);
        }
    }
}
