//! The entries of one tenant's near cache on one worker: each key's replies to the reads asked of it (as a RESP3
//! connection read them, and in RESP2), which tracking connection read them, when the key expires, and the order
//! of their last reads (least recent first), for eviction.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use bytes::Bytes;

use super::query::{OwnedQuery, Query};
use crate::resp::Protocol;

/// What an entry costs beyond its key and replies: the map's and the order's share, counted so that many tiny
/// values cannot exceed the bound by their bookkeeping.
const ENTRY_OVERHEAD: u64 = 96;
/// What each reply of an entry costs beyond its bytes.
const REPLY_OVERHEAD: u64 = 64;
/// The most replies an entry keeps (`HGET`s of as many fields): beyond, the oldest makes room.
pub(super) const MAX_REPLIES: usize = 32;

/// One read's reply, in both protocols.
pub(super) struct Reply {
    query: OwnedQuery,
    resp3: Bytes,
    /// The same bytes as `resp3` (shared) when the forms do not differ.
    resp2: Bytes,
}

impl Reply {
    pub(super) fn new(query: OwnedQuery, resp3: Bytes, resp2: Bytes) -> Reply {
        Reply {
            query,
            resp3,
            resp2,
        }
    }

    fn size(&self) -> u64 {
        let resp2 = match self.resp2.as_ptr() == self.resp3.as_ptr() {
            true => 0,
            false => self.resp2.len() as u64,
        };
        self.query.size() + self.resp3.len() as u64 + resp2 + REPLY_OVERHEAD
    }
}

pub(super) struct Entry {
    /// The tracking connection (`Source`) that read it: only its invalidations concern the entry.
    pub(super) source: u32,
    /// The replies to the reads asked of the key so far, each read over `source` since its last invalidation.
    replies: Vec<Reply>,
    /// When Redis expires the key, at the latest (none: no TTL).
    pub(super) expires: Option<Instant>,
    tick: u64,
    size: u64,
}

impl Entry {
    pub(super) fn new(key: &Bytes, source: u32) -> Entry {
        Entry {
            source,
            replies: Vec::new(),
            expires: None,
            tick: 0,
            size: key.len() as u64 + ENTRY_OVERHEAD,
        }
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// The reply to `query`, in `protocol`, if the entry holds it.
    pub(super) fn reply(&self, query: &Query<'_>, protocol: Protocol) -> Option<Bytes> {
        let reply = self.replies.iter().find(|r| r.query.matches(query))?;
        Some(match protocol {
            Protocol::Resp2 => reply.resp2.clone(),
            Protocol::Resp3 => reply.resp3.clone(),
        })
    }

    /// Adds `reply`, read when the key expired at `expires` (in place of one to the same read); the entry expires
    /// at the earlier of its deadlines.
    pub(super) fn add(&mut self, reply: Reply, expires: Option<Instant>) {
        let same = self.replies.iter().position(|r| r.query == reply.query);
        let replaced = match same {
            Some(i) => Some(self.replies.remove(i)),
            None if self.replies.len() >= MAX_REPLIES => Some(self.replies.remove(0)),
            None => None,
        };
        if let Some(replaced) = replaced {
            self.size -= replaced.size();
        }
        self.size += reply.size();
        self.replies.push(reply);
        self.expires = match (self.expires, expires) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// How many reads (of any entry of the worker's caches) an entry's place in the order may lag behind its last
/// read: the eviction order is least recently read to within that many reads.
const RECENT_TICKS: u64 = 64;

#[derive(Default)]
pub(super) struct Store {
    entries: HashMap<Bytes, Entry>,
    /// Keys by the tick of their last read.
    order: BTreeMap<u64, Bytes>,
    bytes: u64,
}

impl Store {
    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The tick of the least recently read entry.
    pub(super) fn oldest(&self) -> Option<u64> {
        self.order.keys().next().copied()
    }

    /// The entry of `key`, read at `tick`: it becomes the most recent, unless it was within the last
    /// `RECENT_TICKS` already (a hot key is moved in the order once every so many reads, not at each).
    pub(super) fn get(&mut self, key: &[u8], tick: u64) -> Option<&Entry> {
        let entry = self.entries.get_mut(key)?;
        if tick.saturating_sub(entry.tick) >= RECENT_TICKS {
            if let Some(key) = self.order.remove(&entry.tick) {
                self.order.insert(tick, key);
            }
            entry.tick = tick;
        }
        Some(entry)
    }

    /// Takes the entry of `key` out (to add a reply to it and put it back).
    pub(super) fn take(&mut self, key: &[u8]) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        self.order.remove(&entry.tick);
        self.bytes -= entry.size;
        Some(entry)
    }

    /// Puts `entry` under `key`, read at `tick`; returns the size of the entry it replaced.
    pub(super) fn insert(&mut self, key: Bytes, mut entry: Entry, tick: u64) -> Option<u64> {
        entry.tick = tick;
        self.bytes += entry.size;
        self.order.insert(tick, key.clone());
        let replaced = self.entries.insert(key, entry)?;
        self.order.remove(&replaced.tick);
        self.bytes -= replaced.size;
        Some(replaced.size)
    }

    /// Removes the entry of `key` (if `source` is given, only one that connection read); returns its size.
    pub(super) fn remove(&mut self, key: &[u8], source: Option<u32>) -> Option<u64> {
        if source.is_some_and(|source| self.entries.get(key).is_some_and(|e| e.source != source)) {
            return None;
        }
        let entry = self.entries.remove(key)?;
        self.order.remove(&entry.tick);
        self.bytes -= entry.size;
        Some(entry.size)
    }

    /// Removes the least recently read entry; returns its size.
    pub(super) fn pop_oldest(&mut self) -> Option<u64> {
        let (_, key) = self.order.pop_first()?;
        let entry = self.entries.remove(&key)?;
        self.bytes -= entry.size;
        Some(entry.size)
    }

    /// Removes every entry `source` read (every entry, for `None`); returns how many, and their bytes.
    pub(super) fn remove_source(&mut self, source: Option<u32>) -> (u64, u64) {
        let before = (self.entries.len() as u64, self.bytes);
        match source {
            None => {
                self.entries.clear();
                self.order.clear();
                self.bytes = 0;
            }
            Some(source) => {
                let order = &mut self.order;
                let bytes = &mut self.bytes;
                self.entries.retain(|_, entry| {
                    let keep = entry.source != source;
                    if !keep {
                        order.remove(&entry.tick);
                        *bytes -= entry.size;
                    }
                    keep
                });
            }
        }
        (before.0 - self.entries.len() as u64, before.1 - self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::near_cache::query::Kind;

    fn query(kind: Kind, rest: &[&str]) -> OwnedQuery {
        let rest: Vec<Bytes> = rest
            .iter()
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect();
        Query { kind, rest: &rest }.keep()
    }

    fn reply(query: OwnedQuery, resp3: &'static [u8], resp2: &'static [u8]) -> Reply {
        let resp3 = Bytes::from_static(resp3);
        let resp2 = match resp2 == &resp3[..] {
            true => resp3.clone(),
            false => Bytes::from_static(resp2),
        };
        Reply::new(query, resp3, resp2)
    }

    fn entry(key: &Bytes, source: u32) -> Entry {
        let mut entry = Entry::new(key, source);
        let v = b"$1\r\nv\r\n";
        entry.add(reply(query(Kind::Get, &[]), v, v), None);
        entry
    }

    #[test]
    fn an_entry_holds_each_read_of_its_key_in_both_protocols() {
        let key = Bytes::from("h");
        let mut entry = Entry::new(&key, 1);
        let empty = entry.size();
        let all = reply(query(Kind::Hgetall, &[]), b"%0\r\n", b"*0\r\n");
        entry.add(all, None);
        let now = Instant::now();
        let later = now + std::time::Duration::from_secs(1);
        let field = |value: &'static [u8]| reply(query(Kind::Hget, &["f"]), value, value);
        entry.add(field(b"$1\r\na\r\n"), Some(later));
        entry.add(field(b"$1\r\nb\r\n"), Some(now));
        assert_eq!(entry.expires, Some(now));
        let args = [Bytes::from("f")];
        let hget = Query {
            kind: Kind::Hget,
            rest: &args,
        };
        assert_eq!(
            entry.reply(&hget, Protocol::Resp2).as_deref(),
            Some(&b"$1\r\nb\r\n"[..])
        );
        let hgetall = Query {
            kind: Kind::Hgetall,
            rest: &[],
        };
        assert_eq!(
            entry.reply(&hgetall, Protocol::Resp3).as_deref(),
            Some(&b"%0\r\n"[..])
        );
        assert_eq!(
            entry.reply(&hgetall, Protocol::Resp2).as_deref(),
            Some(&b"*0\r\n"[..])
        );
        let other = [Bytes::from("g")];
        assert!(
            entry
                .reply(
                    &Query {
                        kind: Kind::Hget,
                        rest: &other
                    },
                    Protocol::Resp3
                )
                .is_none()
        );
        // Counted once each (the field's second reply replaced the first), the RESP2 copy too.
        let one_field = field(b"$1\r\nb\r\n").size();
        let hgetall_size = reply(query(Kind::Hgetall, &[]), b"%0\r\n", b"*0\r\n").size();
        assert_eq!(entry.size(), empty + one_field + hgetall_size);
        // At most MAX_REPLIES: the oldest go.
        for i in 0..MAX_REPLIES {
            let name = format!("f{i}");
            let rest = [Bytes::from(name)];
            let owned = Query {
                kind: Kind::Hget,
                rest: &rest,
            }
            .keep();
            entry.add(reply(owned, b":1\r\n", b":1\r\n"), None);
        }
        assert!(entry.reply(&hgetall, Protocol::Resp3).is_none());
        assert_eq!(entry.replies.len(), MAX_REPLIES);
    }

    #[test]
    fn entries_leave_least_recently_read_first_and_by_source() {
        let mut store = Store::default();
        let (a, b, c) = (Bytes::from("a"), Bytes::from("b"), Bytes::from("c"));
        store.insert(a.clone(), entry(&a, 1), 1);
        store.insert(b.clone(), entry(&b, 1), 2);
        store.insert(c.clone(), entry(&c, 2), 3);
        assert!(store.get(b"a", 4).is_some()); // read just now: a keeps its place
        assert_eq!(store.oldest(), Some(1));
        let later = 1 + RECENT_TICKS;
        assert!(store.get(b"a", later).is_some()); // a is now the most recent
        let one = entry(&a, 1).size();
        assert_eq!(store.bytes(), 3 * one);
        assert_eq!(store.pop_oldest(), Some(one)); // b
        assert!(store.get(b"b", later + 1).is_none());
        assert_eq!(store.remove(b"c", Some(1)), None); // another connection's
        assert_eq!(store.remove_source(Some(2)), (1, one));
        assert_eq!(store.oldest(), Some(later));
        assert_eq!(store.insert(a.clone(), entry(&a, 1), later + 2), Some(one));
        assert_eq!(store.remove_source(None), (1, one));
        assert_eq!(store.bytes(), 0);
    }
}
