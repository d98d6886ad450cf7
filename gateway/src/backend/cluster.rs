//! A Redis Cluster as one upstream: the slot map, redirects, and replica reads.
//!
//! Each worker keeps its own slot map per cluster: `owner[slot]` is an index into the cluster's shards (a master,
//! and the nodes that serve its reads for `-slaves` resources), so routing a key is one array index. Requests ride
//! the worker's shared, pipelined node connections from the [`BackendPool`]. The map comes from `CLUSTER SLOTS`
//! and is refreshed by one background task per cluster: at start, periodically, after a `MOVED`, and when a node
//! connection fails; refreshes are rate-limited and never overlap.
//!
//! Requests carry a [`Redirect`], so a `MOVED`/`ASK`/`TRYAGAIN` error comes back here instead of reaching the
//! client: `MOVED` fixes the slot in place and resends to the new owner, `ASK` sends `ASKING` plus the request to
//! the importing node for that one request, `TRYAGAIN` (a multi-key request during a migration) resends after a
//! short pause. The reply still lands in the client's ordered slot, wherever it finally came from. A run of
//! requests for one master (a split command's sub-commands) is answered as one piece; when an error is among its
//! replies, the run is taken apart and each request handled as if it had been sent alone.

use std::cell::{Cell, RefCell};
use std::io;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use switchyard_schemas::ReplicaMode;
use tokio::sync::Notify;

use super::direct::{DirectConnection, Value};
use super::{Backend, BackendPool, Keyspace, NodeRole, NodeSpec};
use crate::reply::{Combine, Redirect, Redirector, ReplyHandle, RunAs};
use crate::resp::{self, Protocol};
use crate::signal::LocalSignal;

/// Redis Cluster's number of hash slots.
pub(crate) const SLOTS: usize = 16384;

/// Redirects (and TRYAGAIN retries) one request may take before the client gets an error.
pub(super) const MAX_REDIRECTS: u8 = 5;

/// How often the slot map is re-read when nothing asks for it sooner.
const REFRESH_PERIOD: Duration = Duration::from_secs(5);

/// The shortest time between two refreshes: a burst of MOVED replies (a resharding) costs one refresh each time.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(200);

const NO_OWNER: u16 = u16::MAX;

/// How long a request that concerns every master waits for the first slot map before it makes do with the seed.
const FIRST_MAP_WAIT: Duration = Duration::from_secs(2);

/// How to reach a cluster: seeds, the data nodes' credentials, and whether reads go to replicas.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct ClusterSpec {
    /// `host:port` of each seed.
    pub seeds: Vec<String>,
    pub username: Option<String>,
    pub password: Option<String>,
    /// An operator-provisioned script user (see `NodeSpec::script_user`).
    pub script_user: Option<(String, String)>,
    pub protocol: Protocol,
    pub replicas: Option<ReplicaMode>,
}

impl std::fmt::Debug for ClusterSpec {
    // Never print the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterSpec")
            .field("seeds", &self.seeds)
            .field("username", &self.username)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl ClusterSpec {
    fn node(&self, addr: &str, role: NodeRole) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.username.clone(),
            password: self.password.clone(),
            db: 0,
            role,
            script_user: self.script_user.clone(),
            protocol: self.protocol,
        }
    }
}

/// One worker's view of a cluster.
pub(crate) struct ClusterBackend {
    me: Weak<ClusterBackend>,
    spec: ClusterSpec,
    pool: Rc<BackendPool>,
    map: RefCell<SlotMap>,
    /// What the map was made of, for a sibling that opens later (see [`ClusterBackend::open`]).
    ranges: RefCell<Vec<SlotRange>>,
    /// Wakes whoever waits for a slot map (see [`ClusterBackend::wait_for_map`]) when one is installed.
    mapped: Notify,
    /// Where requests go while the map has no owner for their slot: its MOVED answers fill the map in.
    seed: Rc<Backend>,
    refresh: Rc<RefreshSignal>,
    /// Rotates replica reads over a shard's read nodes.
    next_read: Cell<usize>,
}

struct SlotMap {
    owner: Box<[u16]>,
    shards: Vec<Shard>,
}

/// A master and the nodes that serve its slots' reads.
struct Shard {
    addr: String,
    master: Rc<Backend>,
    /// Replicas (and the master with `withMaster=true`) for `-slaves` resources; empty otherwise.
    reads: Vec<Rc<Backend>>,
}

struct RefreshSignal {
    wake: LocalSignal,
    closed: Cell<bool>,
}

/// One range of `CLUSTER SLOTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SlotRange {
    start: u16,
    end: u16,
    master: String,
    replicas: Vec<String>,
}

impl ClusterBackend {
    /// Opens the cluster and starts its refresh task on the current worker. `sibling`, the same cluster opened
    /// for the other protocol, lends its slot map until this one has read its own: a client that switches
    /// protocols finds its keys' nodes known.
    pub(super) fn open(
        spec: ClusterSpec,
        pool: &Rc<BackendPool>,
        sibling: Option<Rc<ClusterBackend>>,
    ) -> Rc<ClusterBackend> {
        let seed_addr = spec.seeds.first().cloned().unwrap_or_default();
        let seed = pool.get(&spec.node(&seed_addr, NodeRole::Any));
        let refresh = Rc::new(RefreshSignal {
            wake: LocalSignal::default(),
            closed: Cell::new(false),
        });
        let cluster = Rc::new_cyclic(|me| ClusterBackend {
            me: me.clone(),
            spec,
            pool: Rc::clone(pool),
            map: RefCell::new(SlotMap {
                owner: vec![NO_OWNER; SLOTS].into_boxed_slice(),
                shards: Vec::new(),
            }),
            ranges: RefCell::new(Vec::new()),
            mapped: Notify::new(),
            seed,
            refresh: Rc::clone(&refresh),
            next_read: Cell::new(0),
        });
        if let Some(sibling) = sibling {
            let ranges = sibling.ranges.borrow().clone();
            cluster.install(ranges);
        }
        tokio::task::spawn_local(refresh_loop(
            Rc::downgrade(&cluster),
            refresh,
            pool.settings
                .connect_timeout
                .max(Duration::from_millis(500)),
        ));
        cluster
    }

    /// Sends a request: to the owner of `Keyspace::Slot`, to slot 0's master when keyless, to every master
    /// (replies combined) for `Keyspace::Every`.
    pub(crate) fn send(&self, raw: Bytes, keyspace: Keyspace, reply: ReplyHandle, affinity: usize) {
        match keyspace {
            Keyspace::Slot(slot) => self.route(Some(slot), raw, 1, reply, affinity, 0),
            Keyspace::Any => self.route(None, raw, 1, reply, affinity, 0),
            Keyspace::Node(index) => {
                let node = {
                    let map = self.map.borrow();
                    map.shards
                        .get(index)
                        .map_or_else(|| Rc::clone(&self.seed), |shard| self.read_node(shard))
                };
                node.send(raw, reply, affinity);
            }
            Keyspace::Every(combine) => {
                // Before the first slot map, "every master" is unknown: the request waits for the map.
                if self.map.borrow().shards.is_empty()
                    && let Some(me) = self.me.upgrade()
                {
                    tokio::task::spawn_local(async move {
                        me.wait_for_map().await;
                        me.send_to_masters(raw, &*combine, reply, affinity);
                    });
                    return;
                }
                self.send_to_masters(raw, &*combine, reply, affinity);
            }
        }
    }

    /// Sends a request to every master (the seed while the map is unknown) and combines their replies.
    fn send_to_masters(
        &self,
        raw: Bytes,
        combine: &dyn Fn(usize) -> Combine,
        reply: ReplyHandle,
        affinity: usize,
    ) {
        let masters: Vec<Rc<Backend>> = {
            let map = self.map.borrow();
            match map.shards.is_empty() {
                true => vec![Rc::clone(&self.seed)],
                false => map.shards.iter().map(|s| Rc::clone(&s.master)).collect(),
            }
        };
        let handles = reply.split(masters.len(), combine(masters.len()));
        for (master, handle) in masters.iter().zip(handles) {
            master.send(raw.clone(), handle, affinity);
        }
    }

    /// Waits until the first slot map has arrived (at most `FIRST_MAP_WAIT`): requests that concern every master
    /// (DBSIZE, SCAN...) must not see only the seed in the first milliseconds after the cluster is opened.
    pub(crate) async fn wait_for_map(&self) {
        let mapped = self.mapped.notified();
        if self.map.borrow().shards.is_empty() {
            let _ = tokio::time::timeout(FIRST_MAP_WAIT, mapped).await;
        }
    }

    /// Whether some master is reachable.
    pub(crate) fn is_healthy(&self) -> bool {
        let map = self.map.borrow();
        match map.shards.is_empty() {
            true => self.seed.is_healthy(),
            false => map.shards.iter().any(|s| s.master.is_healthy()),
        }
    }

    /// How many masters serve slots (1 while the map is unknown: the seed stands for them all).
    pub(crate) fn masters(&self) -> usize {
        self.map.borrow().shards.len().max(1)
    }

    /// The master owning `slot`, for the commands that need a dedicated connection to the right node (blocking
    /// commands, transactions, subscriptions); `None` while the slot map does not know it (just after start).
    pub(crate) fn master_of(&self, slot: u16) -> Option<NodeSpec> {
        let map = self.map.borrow();
        let index = *map.owner.get(usize::from(slot))?;
        let shard = map.shards.get(usize::from(index))?;
        Some(self.spec.node(&shard.addr, NodeRole::Any))
    }

    /// Sends to the master owning `slot` without following redirects, or returns the request when the slot map
    /// does not know the owner yet. For a transaction's commands, which must reach one node back to back: a
    /// `MOVED` inside it fails the transaction, as on Redis Cluster, instead of resending one command alone.
    pub(crate) fn send_unredirected(
        &self,
        slot: u16,
        raw: Bytes,
        reply: ReplyHandle,
        affinity: usize,
    ) -> Result<(), ReplyHandle> {
        let master = {
            let map = self.map.borrow();
            let shard = map
                .owner
                .get(usize::from(slot))
                .and_then(|&index| map.shards.get(usize::from(index)));
            match shard {
                Some(shard) => Rc::clone(&shard.master),
                None => return Err(reply),
            }
        };
        master.send(raw, reply, affinity);
        Ok(())
    }

    /// Sends `count` requests that `raw` holds back to back, each for a slot that the master of `slot` serves
    /// (the sub-commands of a split command that one node serves, see `Dispatch::split`): one queue entry, and
    /// one delivery of their replies. When a reply in the run is an error, the run is taken apart and each
    /// refused request follows its own redirect (see `split_run`).
    pub(crate) fn send_run(
        &self,
        raw: Bytes,
        slot: u16,
        count: u32,
        reply: ReplyHandle,
        affinity: usize,
    ) {
        self.route(Some(slot), raw, count, reply, affinity, 0);
    }

    /// The master (its index in the slot map) that serves `slot`, while the map knows it: requests for slots
    /// with the same master may travel as one run.
    pub(crate) fn master_index(&self, slot: u16) -> Option<u16> {
        let map = self.map.borrow();
        map.owner
            .get(usize::from(slot))
            .copied()
            .filter(|&index| index != NO_OWNER)
    }

    fn route(
        &self,
        slot: Option<u16>,
        raw: Bytes,
        count: u32,
        reply: ReplyHandle,
        affinity: usize,
        attempts: u8,
    ) {
        let Some(me) = self.me.upgrade() else {
            let closed = resp::error_reply("ERR the cluster backend is closed");
            return reply.deliver(Bytes::from(closed.repeat(count as usize)));
        };
        let backend = self.node_for(slot);
        let redirect = Redirect {
            via: me,
            raw: raw.clone(),
            count,
            attempts,
            affinity: affinity as u32,
            slot,
        };
        backend.send_run(raw, count, reply.with_redirect(redirect), affinity);
    }

    /// A run whose replies hold an error: each request gets its reply back separately, so that those refused
    /// with a redirect (or a stale map) can be handled one by one, as if sent alone; the run's reply is then
    /// put together again, in order.
    fn split_run(&self, replies: Bytes, handle: ReplyHandle, redirect: Redirect) {
        let requests: Vec<&[u8]> = resp::each_reply(&redirect.raw).collect();
        let answers: Vec<&[u8]> = resp::each_reply(&replies).collect();
        if requests.len() != redirect.count as usize || answers.len() != requests.len() {
            // A connection answers each request of a run exactly once; anything else is a bug, not a redirect.
            return handle.deliver(resp::error_reply("ERR unexpected reply from a backend"));
        }
        let concat: Combine = Box::new(|parts: Vec<Bytes>| Bytes::from(parts.concat()));
        let parts = handle.split(requests.len(), concat);
        for ((request, answer), part) in requests.into_iter().zip(answers).zip(parts) {
            let answer = replies.slice_ref(answer);
            if answer.first() != Some(&b'-') {
                part.deliver(answer);
                continue;
            }
            let request = redirect.raw.slice_ref(request);
            let slot = first_key_slot(&request);
            self.on_error(
                answer,
                part,
                Redirect {
                    via: Rc::clone(&redirect.via),
                    raw: request,
                    count: 1,
                    attempts: redirect.attempts,
                    affinity: redirect.affinity,
                    slot,
                },
            );
        }
    }

    /// The node for a slot (a read node for `-slaves` resources), or the seed while the slot has no owner.
    fn node_for(&self, slot: Option<u16>) -> Rc<Backend> {
        let map = self.map.borrow();
        // A keyless request goes to slot 0's master: the same node as long as the slots stay where they are.
        let index = map.owner.get(usize::from(slot.unwrap_or(0))).copied();
        match index.and_then(|i| map.shards.get(usize::from(i))) {
            Some(shard) => self.read_node(shard),
            None => Rc::clone(&self.seed),
        }
    }

    /// The node that serves a shard's reads: its master, or one of its read nodes for `-slaves` resources.
    fn read_node(&self, shard: &Shard) -> Rc<Backend> {
        if shard.reads.is_empty() {
            return Rc::clone(&shard.master);
        }
        // Round robin over the healthy read nodes; the master when none is.
        let start = self.next_read.get();
        self.next_read.set(start.wrapping_add(1));
        let count = shard.reads.len();
        (0..count)
            .map(|i| &shard.reads[(start + i) % count])
            .find(|b| b.is_healthy())
            .map_or_else(|| Rc::clone(&shard.master), Rc::clone)
    }

    /// The backend of the node at `addr`: a known master's, or a new one from the pool.
    fn node_at(&self, addr: &str) -> Rc<Backend> {
        let map = self.map.borrow();
        match map.shards.iter().find(|s| s.addr == addr) {
            Some(shard) => Rc::clone(&shard.master),
            None => self.pool.get(&self.spec.node(addr, NodeRole::Any)),
        }
    }

    /// After a MOVED: `slot` now belongs to the master at `addr`.
    fn moved(&self, slot: u16, addr: &str) {
        let mut map = self.map.borrow_mut();
        let index = match map.shards.iter().position(|s| s.addr == addr) {
            Some(index) => index,
            None => {
                let master = self.pool.get(&self.spec.node(addr, NodeRole::Any));
                map.shards.push(Shard {
                    addr: addr.to_string(),
                    master,
                    reads: Vec::new(),
                });
                map.shards.len() - 1
            }
        };
        if let (Ok(index), Some(owner)) =
            (u16::try_from(index), map.owner.get_mut(usize::from(slot)))
        {
            *owner = index;
        }
    }

    fn schedule_refresh(&self) {
        self.refresh.wake.notify();
    }

    /// Where to ask for the slot map: the seeds, then every node the current map knows.
    fn candidates(&self) -> Vec<String> {
        let mut addrs = self.spec.seeds.clone();
        for shard in &self.map.borrow().shards {
            if !addrs.contains(&shard.addr) {
                addrs.push(shard.addr.clone());
            }
        }
        addrs
    }

    /// Replaces the slot map with what `CLUSTER SLOTS` said.
    fn install(&self, ranges: Vec<SlotRange>) {
        self.ranges.replace(ranges.clone());
        let mut owner = vec![NO_OWNER; SLOTS].into_boxed_slice();
        let mut shards: Vec<Shard> = Vec::new();
        let mut replicas_of: Vec<Vec<String>> = Vec::new();
        for range in ranges {
            let index = match shards.iter().position(|s| s.addr == range.master) {
                Some(index) => index,
                None => {
                    shards.push(Shard {
                        master: self.pool.get(&self.spec.node(&range.master, NodeRole::Any)),
                        addr: range.master,
                        reads: Vec::new(),
                    });
                    replicas_of.push(Vec::new());
                    shards.len() - 1
                }
            };
            let Ok(index16) = u16::try_from(index) else {
                continue;
            };
            if let Some(slots) = owner.get_mut(usize::from(range.start)..=usize::from(range.end)) {
                slots.fill(index16);
            }
            if let Some(known) = replicas_of.get_mut(index) {
                for replica in range.replicas {
                    if !known.contains(&replica) {
                        known.push(replica);
                    }
                }
            }
        }
        if let Some(mode) = self.spec.replicas {
            for (shard, replicas) in shards.iter_mut().zip(replicas_of) {
                shard.reads = replicas
                    .iter()
                    .map(|addr| {
                        self.pool
                            .get(&self.spec.node(addr, NodeRole::ClusterReplica))
                    })
                    .collect();
                if mode.with_master || shard.reads.is_empty() {
                    shard.reads.push(Rc::clone(&shard.master));
                }
            }
        }
        let mut map = self.map.borrow_mut();
        if map.owner != owner || map.shards.len() != shards.len() {
            tracing::info!(
                seeds = ?self.spec.seeds,
                masters = shards.len(),
                "cluster slot map updated"
            );
        }
        *map = SlotMap { owner, shards };
        self.mapped.notify_waiters();
    }
}

impl Drop for ClusterBackend {
    fn drop(&mut self) {
        self.refresh.closed.set(true);
        self.refresh.wake.notify();
    }
}

/// What an error reply from a cluster node asks the gateway to do.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ClusterError<'a> {
    Moved {
        slot: u16,
        addr: &'a str,
    },
    Ask {
        addr: &'a str,
    },
    TryAgain,
    /// A node or the cluster is unreachable or reconfiguring: the map may be stale.
    Stale,
    Other,
}

pub(super) fn classify(reply: &[u8]) -> ClusterError<'_> {
    let line = reply.strip_suffix(b"\r\n").unwrap_or(reply);
    let Ok(line) = std::str::from_utf8(line) else {
        return ClusterError::Other;
    };
    let mut words = line.split(' ');
    match words.next() {
        Some("-MOVED") => match (words.next().and_then(|s| s.parse().ok()), words.next()) {
            (Some(slot), Some(addr)) if usize::from(slot) < SLOTS => {
                ClusterError::Moved { slot, addr }
            }
            _ => ClusterError::Other,
        },
        Some("-ASK") => match (words.next(), words.next()) {
            (Some(_), Some(addr)) => ClusterError::Ask { addr },
            _ => ClusterError::Other,
        },
        Some("-TRYAGAIN") => ClusterError::TryAgain,
        Some("-CLUSTERDOWN") => ClusterError::Stale,
        Some("-ERR") if line.starts_with("-ERR backend ") => ClusterError::Stale,
        _ => ClusterError::Other,
    }
}

impl Redirector for ClusterBackend {
    fn on_error(&self, reply: Bytes, handle: ReplyHandle, redirect: Redirect) {
        if redirect.count > 1 {
            return self.split_run(reply, handle, redirect);
        }
        let kind = classify(&reply);
        let redirecting = matches!(
            kind,
            ClusterError::Moved { .. } | ClusterError::Ask { .. } | ClusterError::TryAgain
        );
        if redirecting && redirect.attempts >= MAX_REDIRECTS {
            let line = String::from_utf8_lossy(&reply);
            let last = line.trim_start_matches('-').trim_end();
            return handle.deliver(resp::error_reply(&format!(
                "ERR too many cluster redirects (last: {last})"
            )));
        }
        let Redirect {
            via,
            raw,
            attempts,
            affinity,
            slot,
            ..
        } = redirect;
        let again = |slot| Redirect {
            via: Rc::clone(&via),
            raw: raw.clone(),
            count: 1,
            attempts: attempts + 1,
            affinity,
            slot,
        };
        let affinity = affinity as usize;
        match kind {
            ClusterError::Moved { slot: moved, addr } => {
                tracing::debug!(slot = moved, %addr, "cluster: MOVED");
                self.moved(moved, addr);
                self.schedule_refresh();
                let backend = self.node_at(addr);
                backend.send(
                    raw.clone(),
                    handle.with_redirect(again(Some(moved))),
                    affinity,
                );
            }
            ClusterError::Ask { addr } => {
                tracing::debug!(?slot, %addr, "cluster: ASK");
                // ASKING and the request go out back to back on the same connection, as the protocol requires;
                // a script's ASKING goes after the AUTH that precedes it (see `identity`).
                let backend = self.node_at(addr);
                let handle = match handle.run_as() {
                    RunAs::Gateway => {
                        backend.send(asking(), ReplyHandle::discard(), affinity);
                        handle
                    }
                    _ => handle.after_asking(),
                };
                backend.send(raw.clone(), handle.with_redirect(again(slot)), affinity);
            }
            ClusterError::TryAgain => {
                let Some(me) = self.me.upgrade() else {
                    return handle.deliver(reply);
                };
                let pause = Duration::from_millis(10 << attempts.min(5));
                tokio::task::spawn_local(async move {
                    tokio::time::sleep(pause).await;
                    me.route(slot, raw, 1, handle, affinity, attempts + 1);
                });
            }
            ClusterError::Stale => {
                self.schedule_refresh();
                handle.deliver(reply);
            }
            ClusterError::Other => handle.deliver(reply),
        }
    }
}

fn asking() -> Bytes {
    Bytes::from_static(b"*1\r\n$6\r\nASKING\r\n")
}

/// Keeps one cluster's slot map fresh until the cluster is dropped. Holds only a weak reference between
/// refreshes, so a cluster no route uses any more is freed.
async fn refresh_loop(cluster: Weak<ClusterBackend>, signal: Rc<RefreshSignal>, timeout: Duration) {
    let mut last: Option<Instant> = None;
    let mut failing = false;
    loop {
        if let Some(last) = last {
            tokio::select! {
                () = signal.wake.notified() => {}
                () = tokio::time::sleep(REFRESH_PERIOD) => {}
            }
            if signal.closed.get() {
                return;
            }
            let wait = MIN_REFRESH_INTERVAL.saturating_sub(last.elapsed());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        last = Some(Instant::now());
        let Some((candidates, spec)) = cluster.upgrade().map(|c| (c.candidates(), c.spec.clone()))
        else {
            return;
        };
        match fetch_slots(&candidates, &spec, timeout).await {
            Ok(ranges) => match cluster.upgrade() {
                Some(cluster) => {
                    cluster.install(ranges);
                    failing = false;
                }
                None => return,
            },
            // Failed requests ask for refreshes every 200 ms during an outage: warn once per outage.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(seeds = ?spec.seeds, "cannot read the cluster slot map: {e}");
            }
            Err(e) => tracing::debug!(seeds = ?spec.seeds, "cannot read the cluster slot map: {e}"),
        }
    }
}

/// Asks each candidate in turn for `CLUSTER SLOTS` until one gives a usable answer.
async fn fetch_slots(
    candidates: &[String],
    spec: &ClusterSpec,
    timeout: Duration,
) -> io::Result<Vec<SlotRange>> {
    let mut last_error = io::Error::other("no seed nodes");
    for addr in candidates {
        let attempt = async {
            let mut connection = DirectConnection::open(
                &spec.node(addr, NodeRole::Any).speaking(Protocol::Resp2),
                timeout,
            )
            .await?;
            let reply = connection.call(&[b"CLUSTER", b"SLOTS"]).await?;
            parse_slots(&reply, addr)
                .filter(|ranges| !ranges.is_empty())
                .ok_or_else(|| io::Error::other("unusable CLUSTER SLOTS reply"))
        };
        match attempt.await {
            Ok(ranges) => return Ok(ranges),
            Err(e) => last_error = io::Error::other(format!("{addr}: {e}")),
        }
    }
    Err(last_error)
}

/// Reads a `CLUSTER SLOTS` reply: `[[start, end, [ip, port, id, ...], replica...], ...]`. A node without an
/// address (`""` or `?`) is the one that answered.
fn parse_slots(reply: &Value, answered_by: &str) -> Option<Vec<SlotRange>> {
    let host_of_answer = answered_by
        .rsplit_once(':')
        .map_or(answered_by, |(host, _)| host);
    let node = |value: &Value| -> Option<String> {
        let fields = value.array()?;
        let ip = fields.first()?.text()?;
        let port = fields.get(1)?.int().and_then(|p| u16::try_from(p).ok())?;
        let host = match ip {
            "" | "?" => host_of_answer,
            ip => ip,
        };
        Some(format!("{host}:{port}"))
    };
    let mut ranges = Vec::new();
    for entry in reply.array()? {
        let fields = entry.array()?;
        let start = u16::try_from(fields.first()?.int()?).ok()?;
        let end = u16::try_from(fields.get(1)?.int()?).ok()?;
        if start > end || usize::from(end) >= SLOTS {
            return None;
        }
        let master = node(fields.get(2)?)?;
        let replicas = fields
            .get(3..)
            .unwrap_or_default()
            .iter()
            .filter_map(node)
            .collect();
        ranges.push(SlotRange {
            start,
            end,
            master,
            replicas,
        });
    }
    Some(ranges)
}

/// The hash slot of a key (its `{hash tag}` if it has one), as Redis Cluster computes it.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    use switchyard_schemas::placement::{crc16, hash_tag};
    crc16(hash_tag(key)) % SLOTS as u16
}

/// The slot of a request's first argument after its name: the key of the sub-commands a run holds. Read with the
/// reply scanner (a request is an array of bulk strings), not the request decoder, which stays inlined where
/// clients' requests are decoded.
fn first_key_slot(request: &[u8]) -> Option<u16> {
    let elements = request.get(request.iter().position(|&b| b == b'\n')? + 1..)?;
    let key = resp::each_reply(elements).nth(1)?; // `$len\r\nkey\r\n`
    let start = key.iter().position(|&b| b == b'\n')? + 1;
    key.get(start..key.len().checked_sub(2)?).map(slot_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_cluster_errors() {
        assert_eq!(
            classify(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            ClusterError::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381"
            }
        );
        assert_eq!(
            classify(b"-ASK 3999 127.0.0.1:6381\r\n"),
            ClusterError::Ask {
                addr: "127.0.0.1:6381"
            }
        );
        assert_eq!(classify(b"-MOVED 16384 h:1\r\n"), ClusterError::Other);
        assert_eq!(classify(b"-MOVED x\r\n"), ClusterError::Other);
        assert_eq!(
            classify(b"-TRYAGAIN Multiple keys\r\n"),
            ClusterError::TryAgain
        );
        assert_eq!(
            classify(b"-ERR backend h:1 unavailable: connection refused\r\n"),
            ClusterError::Stale
        );
        assert_eq!(classify(b"-ERR wrong type\r\n"), ClusterError::Other);
        assert_eq!(classify(b"-\xff\r\n"), ClusterError::Other);
    }

    #[test]
    fn parses_cluster_slots_and_refuses_bad_ranges() {
        let reply = Bytes::from_static(
            b"*2\r\n\
              *4\r\n:0\r\n:8191\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n*2\r\n$0\r\n\r\n:7003\r\n\
              *3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.2\r\n:7001\r\n",
        );
        let ranges = parse_slots(&Value::parse(&reply).unwrap(), "10.0.0.9:7000").unwrap();
        assert_eq!(
            ranges,
            vec![
                SlotRange {
                    start: 0,
                    end: 8191,
                    master: "127.0.0.1:7000".into(),
                    replicas: vec!["10.0.0.9:7003".into()]
                },
                SlotRange {
                    start: 8192,
                    end: 16383,
                    master: "127.0.0.2:7001".into(),
                    replicas: vec![]
                },
            ]
        );
        for bad in [
            &b"*1\r\n*3\r\n:5\r\n:4\r\n*2\r\n$1\r\nh\r\n:1\r\n"[..],
            b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n",
            b"*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\nh\r\n:70000\r\n",
            b"*1\r\n*2\r\n:0\r\n:1\r\n",
            b"+OK\r\n",
        ] {
            let value = Value::parse(&Bytes::from_static(bad)).unwrap();
            assert_eq!(parse_slots(&value, "h:1"), None, "{bad:?}");
        }
    }

    #[test]
    fn a_sub_command_is_placed_by_its_first_key() {
        let request = b"*3\r\n$3\r\nDEL\r\n$3\r\nfoo\r\n$3\r\n{a}\r\n";
        assert_eq!(first_key_slot(request), Some(slot_of(b"foo")));
        assert_eq!(first_key_slot(b"*1\r\n$4\r\nPING\r\n"), None);
        assert_eq!(first_key_slot(b"*2\r\n$3\r\nGET\r\n$3\r\nfo"), None);
    }

    #[test]
    fn slots_match_redis() {
        // CLUSTER KEYSLOT on redis-server 7.0.
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b""), 0);
    }
}
