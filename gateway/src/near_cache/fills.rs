//! What decides whether a fill may start and whether what it read may be stored: the fills in flight (each
//! voided by an invalidation of its key), the writes through the worker in flight, and their guards; and the reads
//! waiting for a fill (`waiters`).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::{Rc, Weak};
use std::time::Instant;

use bytes::Bytes;

use super::TenantCache;
use super::query::{OwnedQuery, to_resp2};
use super::store::Reply;
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
    /// Each fill in flight's tracking connection and read, by number: which waiting reads it answers.
    pub(super) reads: HashMap<u64, (u32, OwnedQuery)>,
    /// Fills in flight whose read's reply is not in yet: an invalidation read before that reply is of a change
    /// the read saw (Redis pushes it on the same connection, in order), and does not void them.
    pub(super) unread: HashSet<u64>,
    /// Writes in flight, by key.
    pub(super) writing: HashMap<Bytes, u32>,
    /// Writes in flight whose keys are not known.
    pub(super) writing_all: u32,
    /// Reads waiting for a fill, by the fill's number (see `waiters`).
    pub(super) waiting: HashMap<u64, Vec<Waiter>>,
    /// Reads waiting for the fill that starts once the writes of their key in flight are answered, by tracking
    /// connection and key.
    pub(super) after_write: HashMap<(u32, Bytes), Vec<Waiter>>,
}

impl Fills {
    /// Registers a fill of `query` of `key` over `source` about to be sent; returns its number.
    pub(super) fn start(&mut self, key: &[u8], source: u32, query: &OwnedQuery) -> u64 {
        self.next += 1;
        let number = self.next;
        self.filling.insert(Bytes::copy_from_slice(key), number);
        self.reads.insert(number, (source, query.clone()));
        self.unread.insert(number);
        number
    }

    /// The fill of `key` in flight, when it reads over `source` what `matches` accepts: its number.
    pub(super) fn in_flight(
        &self,
        key: &[u8],
        source: u32,
        matches: impl Fn(&OwnedQuery) -> bool,
    ) -> Option<u64> {
        let number = *self.filling.get(key)?;
        let (from, query) = self.reads.get(&number)?;
        (*from == source && matches(query)).then_some(number)
    }

    /// Voids the fill of `key` for an invalidation Redis pushed: only if its read's reply is in (`unread`).
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
    /// The read it sends for `key`.
    pub(super) query: RefCell<Option<OwnedQuery>>,
    pub(super) number: u64,
    pub(super) source: u32,
    /// When the fill was sent: its TTL counts from here, so the entry expires no later than the key.
    pub(super) started: Instant,
    /// The read's reply, once in.
    pub(super) got: RefCell<Option<Bytes>>,
}

impl FillTicket {
    /// The read's reply is in: from now on an invalidation of the key voids the fill.
    pub(super) fn read(&self, reply: Bytes) {
        if let Some(cache) = self.cache.upgrade() {
            cache.fills.borrow_mut().unread.remove(&self.number);
        }
        *self.got.borrow_mut() = Some(reply);
    }

    /// `PTTL`'s reply is in (`ttl`): the reads waiting for the fill are answered (or sent on), and the read's
    /// reply is stored unless the fill was voided. An error (`WRONGTYPE`, the connection's failure) or a reply
    /// over `max_value_bytes` is not stored.
    pub(super) fn complete(&self, ttl: &Bytes) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        // Only a reply of the cached reads' types, whole, in both protocols' forms.
        let reply = self.got.borrow_mut().take().and_then(|reply| {
            let resp2 = to_resp2(&reply)?;
            Some((reply, resp2))
        });
        let valid = cache.fills.borrow().filling.get(&self.key) == Some(&self.number);
        let waiting = cache.fills.borrow_mut().waiting.remove(&self.number);
        let answer = reply.as_ref().map(|(resp3, resp2)| (resp3, resp2));
        cache.answer(
            self.source,
            &self.key,
            waiting.unwrap_or_default(),
            answer,
            valid,
        );
        let (Some((reply, resp2)), Some(query)) = (reply, self.query.borrow_mut().take()) else {
            return;
        };
        if reply.len() as u64 > cache.max_value_bytes.saturating_add(24) {
            return;
        }
        let ttl = ttl.strip_prefix(b":").and_then(|rest| {
            let end = rest.iter().position(|&b| b == b'\r')?;
            resp::parse_int(&rest[..end])
        });
        if let Some(ttl) = ttl {
            cache.store(self, Reply::new(query, reply, resp2), ttl);
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
                fills.reads.remove(&self.number);
                fills.unread.remove(&self.number);
                fills.waiting.remove(&self.number)
            };
            waiting.into_iter().flatten().for_each(Waiter::resend);
        }
    }
}

/// A write through the worker in flight (see `TenantCache::write`): its keys are not filled until it is dropped,
/// once its reply is in; their entries, which the session that sent it does not read meanwhile (`OwnWrites`), go
/// then.
pub(crate) struct WriteGuard {
    pub(super) cache: Weak<TenantCache>,
    pub(super) keys: Option<Vec<Bytes>>,
    pub(super) own: Rc<OwnWrites>,
}

impl Drop for WriteGuard {
    /// The write is answered: its keys' entries, read before it, are dropped, and the keys may be filled again:
    /// the reads waiting for their write go on the next fill.
    fn drop(&mut self) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        let mut waiting = Vec::new();
        let keys = self.keys.take();
        if let Some(keys) = &keys {
            self.own.remove(keys);
            let mut store = cache.store.borrow_mut();
            let dropped = keys.iter().fold((0, 0), |(entries, bytes), key| {
                match store.remove(key, None) {
                    Some(size) => (entries + 1, bytes + size),
                    None => (entries, bytes),
                }
            });
            drop(store);
            cache.dropped(dropped);
        }
        let mut fills = cache.fills.borrow_mut();
        match keys {
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

/// The keys a session's writes in flight name, as stored: until a write is answered, the other sessions may still
/// be answered from the entry read before it (they read concurrently with it), and this one may not (it reads
/// its own writes).
#[derive(Default)]
pub(crate) struct OwnWrites(RefCell<Vec<Bytes>>);

impl OwnWrites {
    /// Whether a write of `key` by the session is in flight.
    #[inline]
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        let keys = self.0.borrow();
        !keys.is_empty() && keys.iter().any(|own| own[..] == *key)
    }

    /// Writes of `keys` are about to be sent.
    pub(super) fn add(&self, keys: &[Bytes]) {
        self.0.borrow_mut().extend_from_slice(keys);
    }

    /// A write of `keys` is answered.
    fn remove(&self, keys: &[Bytes]) {
        let mut own = self.0.borrow_mut();
        for key in keys {
            if let Some(i) = own.iter().position(|k| k == key) {
                own.swap_remove(i);
            }
        }
    }
}
