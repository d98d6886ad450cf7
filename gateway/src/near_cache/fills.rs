//! What decides whether a fill may start and whether what it read may be stored: the fills in flight (each
//! voided by an invalidation of its key), the writes through the worker in flight, and their guards.

use std::collections::HashMap;
use std::rc::Weak;
use std::time::Instant;

use bytes::Bytes;

use super::TenantCache;
use super::query::{OwnedQuery, to_resp2};
use super::store::Reply;
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
}

impl Fills {
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
    pub(super) query: Option<OwnedQuery>,
    pub(super) number: u64,
    pub(super) source: u32,
    /// When the fill was sent: its TTL counts from here, so the entry expires no later than the key.
    pub(super) started: Instant,
}

impl FillTicket {
    /// `replies`: the read's, then `PTTL`'s, as the tracking connection read them. An error (`WRONGTYPE`, the
    /// connection's failure) or a reply over `max_value_bytes` is not stored.
    pub(super) fn complete(&mut self, replies: &Bytes) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        let Some(len) = resp::reply_len(replies) else {
            return;
        };
        let reply = replies.slice(..len);
        if reply.len() as u64 > cache.max_value_bytes.saturating_add(24) {
            return;
        }
        let (Some(resp2), Some(query)) = (to_resp2(&reply), self.query.take()) else {
            return;
        };
        let ttl = replies
            .get(len..)
            .and_then(|rest| rest.strip_prefix(b":"))
            .and_then(|rest| {
                let end = rest.iter().position(|&b| b == b'\r')?;
                resp::parse_int(&rest[..end])
            });
        if let Some(ttl) = ttl {
            cache.store(self, Reply::new(query, reply, resp2), ttl);
        }
    }
}

impl Drop for FillTicket {
    fn drop(&mut self) {
        if let Some(cache) = self.cache.upgrade() {
            let mut fills = cache.fills.borrow_mut();
            if fills.filling.get(&self.key) == Some(&self.number) {
                fills.filling.remove(&self.key);
            }
        }
    }
}

/// A write through the worker in flight (see `TenantCache::write`): its keys are not filled until it is dropped.
pub(crate) struct WriteGuard {
    pub(super) cache: Weak<TenantCache>,
    pub(super) keys: Option<Vec<Bytes>>,
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let Some(cache) = self.cache.upgrade() else {
            return;
        };
        let mut fills = cache.fills.borrow_mut();
        match self.keys.take() {
            Some(keys) => {
                for key in keys {
                    if let Some(count) = fills.writing.get_mut(&key) {
                        *count -= 1;
                        if *count == 0 {
                            fills.writing.remove(&key);
                        }
                    }
                }
            }
            None => fills.writing_all = fills.writing_all.saturating_sub(1),
        }
    }
}
