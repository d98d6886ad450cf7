//! The entries of one tenant's near cache on one worker: each key's reply (as a RESP3 connection read it), which
//! tracking connection read it, when it expires, and the order of their last reads (least recent first), for
//! eviction.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use bytes::Bytes;

/// What an entry costs beyond its key and reply: the map's and the order's share, counted so that many tiny
/// values cannot exceed the bound by their bookkeeping.
const ENTRY_OVERHEAD: u64 = 96;

pub(super) struct Entry {
    /// The tracking connection (`Source`) that read it: only its invalidations concern the entry.
    pub(super) source: u32,
    /// `GET`'s reply: a bulk string, or RESP3's null.
    pub(super) reply: Bytes,
    /// When Redis expires the key, at the latest (none: no TTL).
    pub(super) expires: Option<Instant>,
    tick: u64,
    size: u64,
}

impl Entry {
    pub(super) fn new(key: &Bytes, source: u32, reply: Bytes, expires: Option<Instant>) -> Entry {
        let size = key.len() as u64 + reply.len() as u64 + ENTRY_OVERHEAD;
        Entry {
            source,
            reply,
            expires,
            tick: 0,
            size,
        }
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }
}

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

    /// The entry of `key`, read at `tick` (it becomes the most recent).
    pub(super) fn get(&mut self, key: &[u8], tick: u64) -> Option<&Entry> {
        let entry = self.entries.get_mut(key)?;
        if let Some(key) = self.order.remove(&entry.tick) {
            self.order.insert(tick, key);
        }
        entry.tick = tick;
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

    fn entry(key: &Bytes, source: u32) -> Entry {
        Entry::new(key, source, Bytes::from_static(b"$1\r\nv\r\n"), None)
    }

    #[test]
    fn entries_leave_least_recently_read_first_and_by_source() {
        let mut store = Store::default();
        let (a, b, c) = (Bytes::from("a"), Bytes::from("b"), Bytes::from("c"));
        store.insert(a.clone(), entry(&a, 1), 1);
        store.insert(b.clone(), entry(&b, 1), 2);
        store.insert(c.clone(), entry(&c, 2), 3);
        assert!(store.get(b"a", 4).is_some()); // a is now the most recent
        let one = entry(&a, 1).size();
        assert_eq!(store.bytes(), 3 * one);
        assert_eq!(store.pop_oldest(), Some(one)); // b
        assert!(store.get(b"b", 5).is_none());
        assert_eq!(store.remove(b"c", Some(1)), None); // another connection's
        assert_eq!(store.remove_source(Some(2)), (1, one));
        assert_eq!(store.oldest(), Some(4));
        assert_eq!(store.insert(a.clone(), entry(&a, 1), 6), Some(one));
        assert_eq!(store.remove_source(None), (1, one));
        assert_eq!(store.bytes(), 0);
    }
}
