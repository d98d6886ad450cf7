//! A near cache's tracking connections (`Source`s): one per node it fills from (and database), opened on first
//! use, each pinged now and then so that a silent node is found out; and which of them a read may be served from.
//!
//! On a sentinel set, the master is the one node: a new one replaces the former, and what was read there is
//! dropped. On a Redis Cluster, each master holds its slots' keys: an entry is served only when it was read from
//! the master its slot has now (the source a read finds for its key), and once the slot map changes, the
//! connections to nodes that are no longer masters are closed and what they read dropped.

use std::cell::Cell;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::Bytes;

use super::TenantCache;
use crate::backend::{Backend, BackendConnection, ClusterBackend, NodeSpec, TrackingSink};
use crate::reply::ReplyHandle;
use crate::resp::Protocol;
use crate::route::CacheNode;

/// A tracking connection of the cache to one node (and database), and what it tells.
pub(super) struct SourceSlot {
    /// The node as the tracking connection reaches it (in RESP3).
    node: NodeSpec,
    /// The route's backends for that node seen so far (one per protocol its clients speak), for a quick match.
    backends: Vec<Rc<Backend>>,
    pub(super) source: Rc<Source>,
    pub(super) connection: BackendConnection,
}

/// What a tracking connection tells the cache (its `TrackingSink`).
pub(super) struct Source {
    pub(super) id: u32,
    cache: Weak<TenantCache>,
    pub(super) up: Cell<bool>,
}

impl TrackingSink for Source {
    fn up(&self) {
        self.up.set(true);
    }

    fn invalidated(&self, keys: Option<Vec<Bytes>>) {
        if let Some(cache) = self.cache.upgrade() {
            cache.invalidated(self.id, keys);
        }
    }

    fn lost(&self) {
        self.up.set(false);
        if let Some(cache) = self.cache.upgrade() {
            cache.invalidated(self.id, None);
        }
    }
}

/// How often a tracking connection that is up is sent `PING`: one whose node stops answering without closing it
/// (a silent network) fails at the command timeout after it, which drops what it read, even while every read is
/// a hit and no fill goes over it.
const HEARTBEAT: Duration = Duration::from_secs(1);

/// Pings the tracking connection `source` of `cache` every [`HEARTBEAT`], for as long as both last.
async fn heartbeat(cache: Weak<TenantCache>, source: u32) {
    let mut ticker = tokio::time::interval(HEARTBEAT);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        match cache.upgrade() {
            Some(cache) if cache.ping(source) => {}
            _ => return,
        }
    }
}

impl TenantCache {
    /// The tracking connection to `node` (opened on first use): its id, and whether it is up.
    pub(super) fn source(&self, node: &CacheNode) -> (u32, bool) {
        if let Some(cluster) = &node.cluster {
            self.follow_map(cluster);
        }
        let backend = &node.backend;
        let mut sources = self.sources.borrow_mut();
        if let Some(slot) = sources
            .iter()
            .find(|s| s.backends.iter().any(|b| Rc::ptr_eq(b, backend)))
        {
            return (slot.source.id, slot.source.up.get());
        }
        // The same node for a client of another protocol: the same tracking connection.
        let spec = backend.node().clone().speaking(Protocol::Resp3);
        if let Some(slot) = sources.iter_mut().find(|s| s.node == spec) {
            slot.backends.push(Rc::clone(backend));
            return (slot.source.id, slot.source.up.get());
        }
        // Another node for the same database (a sentinel set's new master): what was read there is dropped. A
        // cluster's other masters hold other slots (see `follow_map`).
        let moved: Vec<u32> = match node.cluster {
            Some(_) => Vec::new(),
            None => sources
                .iter()
                .filter(|s| s.node.db == spec.db)
                .map(|s| s.source.id)
                .collect(),
        };
        sources.retain(|s| !moved.contains(&s.source.id));
        let id = self.next_source.get();
        self.next_source.set(id + 1);
        let source = Rc::new(Source {
            id,
            cache: self.me.clone(),
            up: Cell::new(false),
        });
        let sink: Rc<dyn TrackingSink> = Rc::clone(&source) as Rc<dyn TrackingSink>;
        let connection = self.pool.open_tracking(&spec, sink);
        tokio::task::spawn_local(heartbeat(self.me.clone(), id));
        sources.push(SourceSlot {
            node: spec,
            backends: vec![Rc::clone(backend)],
            source,
            connection,
        });
        drop(sources);
        for moved in moved {
            self.invalidated(moved, None);
        }
        (id, false)
    }

    /// Once `cluster`'s slot map changed (a failover, a resharding, a `MOVED`): the tracking connections to nodes
    /// it no longer names masters are closed, and what they read is dropped. (Entries a master read of slots it
    /// no longer owns are never served: a read finds the source of its slot's master now, not theirs.)
    fn follow_map(&self, cluster: &ClusterBackend) {
        let generation = cluster.map_generation();
        if generation == self.map_generation.get() {
            return;
        }
        self.map_generation.set(generation);
        let mut sources = self.sources.borrow_mut();
        let gone: Vec<u32> = sources
            .iter()
            .filter(|s| !cluster.is_master(&s.node.addr))
            .map(|s| s.source.id)
            .collect();
        sources.retain(|s| !gone.contains(&s.source.id));
        drop(sources);
        for gone in gone {
            self.invalidated(gone, None);
        }
    }

    /// Whether the tracking connection `source` is still the cache's, and up.
    pub(super) fn source_up(&self, source: u32) -> bool {
        let sources = self.sources.borrow();
        sources
            .iter()
            .any(|s| s.source.id == source && s.source.up.get())
    }

    /// Sends `PING` over the tracking connection `source` if it is up; whether it is still the cache's.
    pub(super) fn ping(&self, source: u32) -> bool {
        let sources = self.sources.borrow();
        let Some(slot) = sources.iter().find(|s| s.source.id == source) else {
            return false;
        };
        if slot.source.up.get() {
            let ping = Bytes::from_static(b"*1\r\n$4\r\nPING\r\n");
            slot.connection.send(ping, ReplyHandle::discard());
        }
        true
    }
}
