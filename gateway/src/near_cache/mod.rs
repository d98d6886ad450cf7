//! Near caches: a tenant's reads of hot keys (`GET`, `HGET`, `HGETALL`, `SMEMBERS`...: `query`) answered from the worker's memory, kept exact by Redis'
//! own invalidations (docs/near-cache.md).
//!
//! Each worker keeps one cache per tenant that has the policy ([`NearCaches`]), and reads into it over
//! connections of the cache's own to the tenant's node (`Source`s), which track what they read (`CLIENT
//! TRACKING on`, RESP3): Redis pushes an invalidation on the same connection, in order with its replies, for every
//! change to a key the connection read. A client's own reads and writes never ride those connections (their order
//! on the client's connection is kept): a read the cache cannot answer goes the usual way, and the cache fills
//! the key in the background (the read itself and `PTTL`, back to back). An entry holds a key's replies to each
//! read asked of it; any change to the key drops them all.
//!
//! What keeps an entry exact:
//! - a fill that an invalidation of its key (or of every key, or the loss of its connection) overtakes stores
//!   nothing (`Fills`): what it read may be older than the change;
//! - a write through this worker drops the keys it names before it is sent, voids their fills, and no fill of
//!   them starts until its reply is in (`WriteGuard`); a write whose keys are not known (a script, a transaction,
//!   `FLUSHDB`) does the same for every key;
//! - a tracking connection that goes down drops every entry it read, and nothing is filled until it is back;
//! - an entry whose key has a TTL expires in the gateway no later than in Redis (`PTTL`, counted from before
//!   the fill was sent).

mod fills;
mod hot;
mod query;
mod sources;
mod store;
mod waiters;

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use switchyard_schemas::NearCacheKeys;

use crate::backend::BackendPool;
use crate::metrics::NearCacheCounters;
use crate::reply::ReplyHandle;
use crate::resp::{self, Protocol};
use crate::route::{CacheNode, PerCompiledTenant, Tenant};

use fills::{FillTicket, Fills};
pub(crate) use fills::{OwnWrites, WriteGuard};
use hot::HotFilter;
use query::OwnedQuery;
pub(crate) use query::Query;
use sources::SourceSlot;
use store::{Entry, Reply, Store};
pub(crate) use waiters::Waiter;

/// What the cache says of a read.
pub(crate) enum Lookup {
    /// It holds the reply.
    Hit(Bytes),
    /// The read may wait for a fill of the key over the tracking connection `source` (`TenantCache::wait`): in
    /// flight (`started`: sent for this read), or to start once a write of the key in flight is answered.
    Wait { started: bool, source: u32 },
    /// The read goes to Redis.
    Miss,
}

/// A worker's near caches, one per tenant with the policy, and the bound on them all (`--near-cache-max-bytes`,
/// this worker's share).
pub(crate) struct NearCaches {
    budget: Rc<Budget>,
    /// Workers of the process: each holds its share of every bound.
    workers: u64,
    pool: Rc<BackendPool>,
    tenants: PerCompiledTenant<TenantCache>,
}

/// What a worker's caches share: their bound and the bytes they hold, and the clock of their reads.
struct Budget {
    max_bytes: u64,
    bytes: Cell<u64>,
    tick: Cell<u64>,
    caches: RefCell<Vec<Weak<TenantCache>>>,
}

impl Budget {
    fn tick(&self) -> u64 {
        let tick = self.tick.get() + 1;
        self.tick.set(tick);
        tick
    }

    /// Evicts the least recently read entries of every cache of the worker until `size` more bytes fit.
    fn make_room(&self, size: u64) {
        while self.bytes.get() + size > self.max_bytes {
            let caches: Vec<Rc<TenantCache>> = {
                let mut caches = self.caches.borrow_mut();
                caches.retain(|cache| cache.strong_count() > 0);
                caches.iter().filter_map(Weak::upgrade).collect()
            };
            let oldest = caches
                .iter()
                .filter_map(|cache| Some((cache.store.borrow().oldest()?, cache)))
                .min_by_key(|(tick, _)| *tick);
            let Some((_, cache)) = oldest else {
                return;
            };
            cache.evict_oldest();
        }
    }
}

impl NearCaches {
    /// `max_bytes` for the whole gateway, of which this worker, one of `workers`, holds its share.
    pub(crate) fn new(max_bytes: u64, workers: usize, pool: Rc<BackendPool>) -> NearCaches {
        let workers = workers.max(1) as u64;
        NearCaches {
            budget: Rc::new(Budget {
                max_bytes: max_bytes / workers,
                bytes: Cell::new(0),
                tick: Cell::new(0),
                caches: RefCell::new(Vec::new()),
            }),
            workers,
            pool,
            tenants: PerCompiledTenant::default(),
        }
    }

    /// `tenant`'s cache on this worker, as its snapshot has it (a tenant compiled anew, its route or policies
    /// changed, gets an empty one); `None` without the policy.
    pub(crate) fn for_tenant(&self, tenant: &Arc<Tenant>) -> Option<Rc<TenantCache>> {
        let policy = tenant.near_cache?;
        Some(self.tenants.get_or_make(tenant, || {
            let cache = Rc::new_cyclic(|me| TenantCache {
                me: me.clone(),
                keys: policy.keys,
                max_bytes: (policy.max_bytes / self.workers).max(1),
                max_value_bytes: policy.max_value_bytes,
                counters: tenant.runtime.clone(),
                budget: Rc::clone(&self.budget),
                pool: Rc::clone(&self.pool),
                store: RefCell::new(Store::default()),
                fills: RefCell::new(Fills::default()),
                hot: RefCell::new(HotFilter::default()),
                sources: RefCell::new(Vec::new()),
                next_source: Cell::new(0),
                map_generation: Cell::new(0),
            });
            self.budget.caches.borrow_mut().push(Rc::downgrade(&cache));
            cache
        }))
    }

    /// Drops the caches of tenants `current` no longer has as they were (removed, compiled anew, without the
    /// policy): their entries, and their tracking connections once no session holds them.
    pub(crate) fn retain(&self, current: impl Fn(&str) -> Option<*const Tenant>) {
        self.tenants.retain(current);
    }
}

/// One tenant's near cache on one worker.
pub(crate) struct TenantCache {
    me: Weak<TenantCache>,
    keys: NearCacheKeys,
    /// This worker's share of the tenant's `max_bytes`.
    max_bytes: u64,
    max_value_bytes: u64,
    counters: crate::tenant::TenantRuntime,
    budget: Rc<Budget>,
    pool: Rc<BackendPool>,
    store: RefCell<Store>,
    fills: RefCell<Fills>,
    hot: RefCell<HotFilter>,
    sources: RefCell<Vec<SourceSlot>>,
    next_source: Cell<u32>,
    /// On a cluster route: the generation of the slot map the sources were last checked against.
    map_generation: Cell<u64>,
}

impl TenantCache {
    /// The reply to `query` of `key` (as stored, in the tenant's namespace) on `node` (where the route's writes
    /// of the key go now), in `protocol`, when the cache holds it, read from that node, and the session reading
    /// has no write of the key in flight (`own`); else a miss (counted), and the key may be filled in the
    /// background: off a Redis Cluster, the read may wait for that fill (`Wait`).
    pub(crate) fn read(
        &self,
        node: &CacheNode,
        (key, own): (&[u8], &OwnWrites),
        query: &Query<'_>,
        protocol: Protocol,
        now: Instant,
    ) -> Lookup {
        let counters = &self.counters.counters.near_cache;
        let (source, up) = self.source(node);
        if up && !own.contains(key) {
            let tick = self.budget.tick();
            let mut store = self.store.borrow_mut();
            let found = store.get(key, tick).map(|entry| {
                // Expired, or read from another node (a sentinel set's former master, the former owner of a
                // cluster slot): gone.
                let gone = entry.source != source || entry.expires.is_some_and(|at| at <= now);
                (gone, entry.reply(query, protocol))
            });
            match found {
                Some((false, Some(reply))) => {
                    counters.hits.fetch_add(1, Ordering::Relaxed);
                    return Lookup::Hit(reply);
                }
                Some((true, _)) => {
                    if let Some(size) = store.remove(key, None) {
                        drop(store);
                        self.released(size);
                    }
                }
                _ => {}
            }
        }
        counters.misses.fetch_add(1, Ordering::Relaxed);
        if !up {
            return Lookup::Miss;
        }
        match self.fill(source, key, query, now) {
            // A read that waited would go to Redis after all without the cluster's redirects: not on a cluster.
            Some(started) if node.cluster.is_none() => Lookup::Wait { started, source },
            _ => Lookup::Miss,
        }
    }

    /// A write through this worker by the session of `own` is about to be sent: the fills of the keys it names
    /// (`None`: it may write any key) are voided, and none starts until the guard returned is dropped (once its
    /// reply is in). Their entries stay for the other sessions until then, or until Redis' invalidation comes
    /// first: a read concurrent with a write may return what the key held before it. A write of any key drops
    /// every entry now.
    pub(crate) fn write(&self, keys: Option<Vec<Bytes>>, own: &Rc<OwnWrites>) -> WriteGuard {
        let mut fills = self.fills.borrow_mut();
        match &keys {
            Some(keys) => {
                for key in keys {
                    fills.void(Some(&key[..]));
                    *fills.writing.entry(key.clone()).or_default() += 1;
                }
                own.add(keys);
            }
            None => {
                fills.void(None);
                fills.writing_all += 1;
                drop(fills);
                let dropped = self.store.borrow_mut().remove_source(None);
                self.dropped(dropped);
            }
        }
        WriteGuard {
            cache: self.me.clone(),
            keys,
            own: Rc::clone(own),
        }
    }

    /// Starts a background fill of `query` of `key` over `source`, when nothing forbids it: a write of any key
    /// in flight, a key not hot enough. Returns whether the read that missed may wait for a fill of the key: one
    /// in flight (`Some(true)`: started now for this read), or one that starts once the write of the key in
    /// flight is answered; `None` when no fill will come.
    fn fill(&self, source: u32, key: &[u8], query: &Query<'_>, started: Instant) -> Option<bool> {
        {
            let fills = self.fills.borrow();
            if fills.writing_all > 0 {
                return None;
            }
            if fills.filling.contains_key(key) {
                return Some(false);
            }
            if self.keys == NearCacheKeys::Hot && !self.hot.borrow_mut().admit(key) {
                return None;
            }
            if fills.writing.contains_key(key) {
                return Some(false);
            }
        }
        self.start_fill(source, key, query.keep(), started)
            .map(|_| true)
    }

    /// Sends a fill of `query` of `key` over `source` (the read, then `PTTL`, back to back, as two requests so
    /// that the read's reply is seen as it comes, before the pushes after it); returns its number.
    fn start_fill(
        &self,
        source: u32,
        key: &[u8],
        query: OwnedQuery,
        started: Instant,
    ) -> Option<u64> {
        let sources = self.sources.borrow();
        let slot = sources.iter().find(|s| s.source.id == source)?;
        let mut read = BytesMut::with_capacity(2 * key.len() + 64);
        query.command(&mut read, key);
        let mut ttl = BytesMut::with_capacity(key.len() + 32);
        resp::command(&mut ttl, &[&b"PTTL"[..], key]);
        let number = self.fills.borrow_mut().start(key, source, &query);
        let ticket = Rc::new(FillTicket {
            cache: self.me.clone(),
            key: Bytes::copy_from_slice(key),
            query: RefCell::new(Some(query)),
            number,
            source,
            started,
            got: RefCell::new(None),
        });
        let first = Rc::clone(&ticket);
        let replies = ReplyHandle::discard().split(
            1,
            Box::new(move |replies: Vec<Bytes>| {
                if let Some(reply) = replies.into_iter().next() {
                    first.read(reply);
                }
                Bytes::new()
            }),
        );
        let then = ReplyHandle::discard().split(
            1,
            Box::new(move |replies: Vec<Bytes>| {
                if let Some(reply) = replies.first() {
                    ticket.complete(reply);
                }
                Bytes::new()
            }),
        );
        for (raw, handles) in [(read, replies), (ttl, then)] {
            let raw = raw.freeze();
            for handle in handles {
                slot.connection.send(raw.clone(), handle);
            }
        }
        Some(number)
    }

    /// What a tracking connection said: these keys changed (`None`: every key, or the connection is lost).
    fn invalidated(&self, source: u32, keys: Option<Vec<Bytes>>) {
        let mut fills = self.fills.borrow_mut();
        let mut store = self.store.borrow_mut();
        let mut dropped = (0, 0);
        match keys {
            Some(keys) => {
                for key in keys {
                    fills.invalidate(&key);
                    if let Some(size) = store.remove(&key, Some(source)) {
                        dropped.0 += 1;
                        dropped.1 += size;
                    }
                }
            }
            None => {
                fills.void(None);
                dropped = store.remove_source(Some(source));
            }
        }
        drop((fills, store));
        self.dropped(dropped);
    }

    /// Stores what a fill read (beside the key's other replies read over the same connection), unless it was
    /// voided.
    fn store(&self, ticket: &FillTicket, reply: Reply, ttl_ms: i64) {
        if self.fills.borrow().filling.get(&ticket.key) != Some(&ticket.number) {
            return;
        }
        let expires = match ttl_ms {
            -1 | -2 => None,
            ms if ms > 0 => Some(ticket.started + Duration::from_millis(ms as u64)),
            _ => return, // expiring now
        };
        // No invalidation of the key came since its entry's replies were read (it would have dropped them), nor
        // since this fill was sent (it would have voided it): they hold together.
        let taken = self.store.borrow_mut().take(&ticket.key);
        let now = Instant::now();
        let mut entry = match taken {
            Some(entry) => {
                self.released(entry.size());
                match entry.source == ticket.source && entry.expires.is_none_or(|at| at > now) {
                    true => entry,
                    false => Entry::new(&ticket.key, ticket.source),
                }
            }
            None => Entry::new(&ticket.key, ticket.source),
        };
        entry.add(reply, expires);
        let size = entry.size();
        if size > self.max_bytes || size > self.budget.max_bytes {
            return;
        }
        loop {
            let over = self.store.borrow().bytes() + size > self.max_bytes;
            if !over || !self.evict_oldest() {
                break;
            }
        }
        self.budget.make_room(size);
        let tick = self.budget.tick();
        let replaced = self
            .store
            .borrow_mut()
            .insert(ticket.key.clone(), entry, tick);
        self.budget.bytes.set(self.budget.bytes.get() + size);
        let counters = &self.counters.counters.near_cache;
        counters.bytes.fetch_add(size as i64, Ordering::Relaxed);
        if let Some(replaced) = replaced {
            self.released(replaced);
        }
    }

    /// Evicts the least recently read entry; whether there was one.
    fn evict_oldest(&self) -> bool {
        let evicted = self.store.borrow_mut().pop_oldest();
        if let Some(size) = evicted {
            self.released(size);
            let counters = &self.counters.counters.near_cache;
            counters.evictions.fetch_add(1, Ordering::Relaxed);
        }
        evicted.is_some()
    }

    /// `dropped` entries (how many, their bytes) were invalidated.
    fn dropped(&self, (entries, bytes): (u64, u64)) {
        if entries > 0 {
            let counters = &self.counters.counters.near_cache;
            counters.invalidations.fetch_add(entries, Ordering::Relaxed);
            self.released(bytes);
        }
    }

    /// `size` bytes of entries are gone.
    fn released(&self, size: u64) {
        self.budget
            .bytes
            .set(self.budget.bytes.get().saturating_sub(size));
        let counters: &NearCacheCounters = &self.counters.counters.near_cache;
        counters.bytes.fetch_sub(size as i64, Ordering::Relaxed);
    }
}

impl Drop for TenantCache {
    /// Releases its bytes; the reads still waiting for its fills go to Redis.
    fn drop(&mut self) {
        let bytes = self.store.get_mut().bytes();
        self.released(bytes);
        let fills = self.fills.get_mut();
        let waiting = std::mem::take(&mut fills.waiting).into_values();
        let after_write = std::mem::take(&mut fills.after_write).into_values();
        waiting
            .chain(after_write)
            .flatten()
            .for_each(Waiter::resend);
    }
}
