//! A Redis Cluster as one upstream: the slot map, redirects, and replica reads.
//!
//! The slot map is the process's ([`ClusterTopology`], one per cluster, shared by every worker): `owner[slot]` is
//! an index into the cluster's shards, so routing a key is one array index. Each worker holds the map it routes
//! with and, per shard, its own node handles (a master, and the nodes that serve its reads for `-slaves`
//! resources); before routing it compares the map's generation with the topology's and takes the new map when
//! they differ. Requests ride the worker's shared, pipelined node connections from the [`BackendPool`]. The map
//! comes from `CLUSTER SLOTS` and is refreshed by one task per cluster and process: at start, periodically, after
//! a `MOVED`, and when a node connection fails on any worker; refreshes are rate-limited and never overlap.
//!
//! Requests carry a [`Redirect`], so a `MOVED`/`ASK`/`TRYAGAIN` error comes back here instead of reaching the
//! client: `MOVED` fixes the slot in place and resends to the new owner, `ASK` sends `ASKING` plus the request to
//! the importing node for that one request, `TRYAGAIN` (a multi-key request during a migration) resends after a
//! short pause. Only Redis steers this: a script's reply is its author's, so a redirect in it is followed only
//! once the cluster confirms it (`redirect`), and a node the cluster's own topology does not name gets no
//! connection, nor the credentials that go with it (`members`). The reply still lands in the client's ordered
//! slot, wherever it finally came from. A run of requests for one master (a split command's sub-commands) is
//! answered as one piece; when an error is among its replies, the run is taken apart and each request handled as
//! if it had been sent alone.

use std::cell::{Cell, Ref, RefCell};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;
use switchyard_schemas::placement::SLOTS;

use bytes::Bytes;
use switchyard_schemas::ReplicaMode;

use super::{Backend, BackendPool, Keyspace, NodeRole, NodeSpec};
use crate::reply::{Combine, Redirect, ReplyHandle};
use crate::resp::{self, Protocol};
use crate::tls::BackendTls;

mod members;
mod redirect;
mod slots;
mod topology;

use members::Members;

pub(super) use redirect::{ClusterError, classify, not_a_member};
pub(crate) use topology::ClusterTopology;
use topology::{NO_OWNER, ShardNodes, SlotTopology};

/// Redirects (and TRYAGAIN retries) one request may take before the client gets an error.
pub(super) const MAX_REDIRECTS: u8 = 5;

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
    /// TLS to every node, seeds and those the slot map names (`rediss-cluster`).
    pub tls: Option<Arc<BackendTls>>,
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
    /// What identifies the cluster's topology: clients' protocols and read modes share it.
    pub(super) fn topology_key(&self) -> ClusterSpec {
        ClusterSpec {
            protocol: Protocol::Resp2,
            replicas: None,
            ..self.clone()
        }
    }

    /// The master at `addr`, reached as this resource's user (for the repair of double-write secondaries).
    pub(crate) fn master_node(&self, addr: &str) -> NodeSpec {
        self.node(addr, NodeRole::Any)
    }

    fn node(&self, addr: &str, role: NodeRole) -> NodeSpec {
        NodeSpec {
            addr: addr.to_string(),
            username: self.username.clone(),
            password: self.password.clone(),
            db: 0,
            role,
            script_user: self.script_user.clone(),
            protocol: self.protocol,
            tls: self.tls.clone(),
        }
    }
}

/// The slot map a worker routes with: the process's map of some generation, and this worker's handles of its
/// shards' nodes.
struct SlotMap {
    /// `topology`'s generation, at hand for the check before routing.
    generation: u64,
    topology: Arc<SlotTopology>,
    shards: Vec<Shard>,
}

/// A master and the nodes that serve its slots' reads, as one worker reaches them.
struct Shard {
    addr: String,
    master: Rc<Backend>,
    /// Replicas (and the master with `withMaster=true`) for `-slaves` resources; empty otherwise.
    reads: Vec<Rc<Backend>>,
}

/// One worker's view of a cluster.
pub(crate) struct ClusterBackend {
    me: Weak<ClusterBackend>,
    spec: ClusterSpec,
    pool: Rc<BackendPool>,
    /// The process's topology of this cluster.
    topology: Arc<ClusterTopology>,
    /// The map this worker routes with; replaced when the topology's generation moves on (see `map`).
    map: RefCell<SlotMap>,
    /// Where requests go while the map has no owner for their slot: its MOVED answers fill the map in.
    seed: Rc<Backend>,
    /// Rotates replica reads over a shard's read nodes.
    next_read: Cell<usize>,
    /// What the cluster's `CLUSTER NODES` said lately (see `members`).
    members: Members,
}

impl ClusterBackend {
    /// Opens the cluster on the current worker, joining the process's topology of it (which starts its refresh
    /// task when this is the first worker to open the cluster): a worker that opens a cluster another worker
    /// already serves routes with the known map at once.
    pub(super) fn open(
        spec: ClusterSpec,
        pool: &Rc<BackendPool>,
        topology: Arc<ClusterTopology>,
    ) -> Rc<ClusterBackend> {
        let seed_addr = spec.seeds.first().cloned().unwrap_or_default();
        let seed = pool.get(&spec.node(&seed_addr, NodeRole::Any));
        let cluster = Rc::new_cyclic(|me| ClusterBackend {
            me: me.clone(),
            spec,
            pool: Rc::clone(pool),
            map: RefCell::new(SlotMap {
                generation: 0,
                topology: topology.current(),
                shards: Vec::new(),
            }),
            topology,
            seed,
            next_read: Cell::new(0),
            members: Members::default(),
        });
        cluster.adopt(cluster.topology.current());
        cluster
    }

    /// The slot map to route with: the one this worker holds, or first the process's current one when that is
    /// newer (one atomic load when it is not).
    #[inline]
    fn map(&self) -> Ref<'_, SlotMap> {
        let map = self.map.borrow();
        if map.generation == self.topology.generation() {
            return map;
        }
        drop(map);
        self.newer_map()
    }

    /// Takes the process's current map, which is newer than this worker's (rarely: off the routing path's code).
    #[cold]
    #[inline(never)]
    fn newer_map(&self) -> Ref<'_, SlotMap> {
        self.adopt(self.topology.current());
        self.map.borrow()
    }

    /// Routes with `topology` from now on. The node handles of its shards are this worker's: kept when only
    /// slots moved between known masters, taken from the pool otherwise (the same handles, for the nodes the
    /// previous map had, since it holds them until the new one is made).
    fn adopt(&self, topology: Arc<SlotTopology>) {
        let mut map = self.map.borrow_mut();
        let shards = match Arc::ptr_eq(&map.topology.shards, &topology.shards)
            && map.shards.len() == topology.shards.len()
        {
            true => std::mem::take(&mut map.shards),
            false => topology
                .shards
                .iter()
                .map(|nodes| self.shard(nodes))
                .collect(),
        };
        *map = SlotMap {
            generation: topology.generation,
            topology,
            shards,
        };
    }

    /// This worker's handles of a shard's nodes.
    fn shard(&self, nodes: &ShardNodes) -> Shard {
        let master = self.pool.get(&self.spec.node(&nodes.addr, NodeRole::Any));
        let mut reads: Vec<Rc<Backend>> = Vec::new();
        if let Some(mode) = self.spec.replicas {
            reads = nodes
                .replicas
                .iter()
                .map(|addr| {
                    self.pool
                        .get(&self.spec.node(addr, NodeRole::ClusterReplica))
                })
                .collect();
            if mode.with_master || reads.is_empty() {
                reads.push(Rc::clone(&master));
            }
        }
        Shard {
            addr: nodes.addr.clone(),
            master,
            reads,
        }
    }

    /// Sends a request: to the owner of `Keyspace::Slot`, to slot 0's master when keyless, to every master
    /// (replies combined) for `Keyspace::Every`.
    pub(crate) fn send(&self, raw: Bytes, keyspace: Keyspace, reply: ReplyHandle, affinity: usize) {
        match keyspace {
            Keyspace::Slot(slot) => self.route(Some(slot), raw, 1, reply, affinity, 0),
            Keyspace::Any => self.route(None, raw, 1, reply, affinity, 0),
            Keyspace::Node(index) => {
                let node = {
                    let map = self.map();
                    map.shards
                        .get(index)
                        .map_or_else(|| Rc::clone(&self.seed), |shard| self.read_node(shard))
                };
                node.send(raw, reply, affinity);
            }
            Keyspace::Every(combine) => {
                // Before the first slot map, "every master" is unknown: the request waits for the map.
                if self.map().shards.is_empty()
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
            let map = self.map();
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
        let mapped = self.topology.mapped.notified();
        if self.map().shards.is_empty() {
            let _ = tokio::time::timeout(FIRST_MAP_WAIT, mapped).await;
        }
    }

    /// Whether some master is reachable.
    pub(crate) fn is_healthy(&self) -> bool {
        let map = self.map();
        match map.shards.is_empty() {
            true => self.seed.is_healthy(),
            false => map.shards.iter().any(|s| s.master.is_healthy()),
        }
    }

    /// Whether reads go to replicas (`-slaves` resources).
    pub(crate) fn reads_replicas(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// How many masters serve slots (1 while the map is unknown: the seed stands for them all).
    pub(crate) fn masters(&self) -> usize {
        self.map().shards.len().max(1)
    }

    /// Every master serving slots (the seed while the slot map is unknown).
    pub(crate) fn master_nodes(&self) -> Vec<NodeSpec> {
        let map = self.map();
        match map.shards.is_empty() {
            true => vec![self.seed.node.clone()],
            false => map
                .shards
                .iter()
                .map(|s| self.spec.node(&s.addr, NodeRole::Any))
                .collect(),
        }
    }

    /// The master owning `slot`, for the commands that need a dedicated connection to the right node (blocking
    /// commands, transactions, subscriptions); `None` while the slot map does not know it (just after start).
    pub(crate) fn master_of(&self, slot: u16) -> Option<NodeSpec> {
        let map = self.map();
        let index = *map.topology.owner.get(usize::from(slot))?;
        let shard = map.shards.get(usize::from(index))?;
        Some(self.spec.node(&shard.addr, NodeRole::Any))
    }

    /// The master owning `slot` as this worker reaches it (a near cache fills its keys from there); `None`
    /// while the slot map does not know it.
    pub(crate) fn master_backend(&self, slot: u16) -> Option<Rc<Backend>> {
        let map = self.map();
        let index = *map.topology.owner.get(usize::from(slot))?;
        map.shards
            .get(usize::from(index))
            .map(|s| Rc::clone(&s.master))
    }

    /// The generation of the slot map this worker routes with (taking the process's newer one first).
    pub(crate) fn map_generation(&self) -> u64 {
        self.map().generation
    }

    /// Whether the slot map names the node at `addr` a master.
    pub(crate) fn is_master(&self, addr: &str) -> bool {
        self.map().shards.iter().any(|s| s.addr == addr)
    }

    /// Whether `other` is the same cluster, seen with the same credentials (this worker's views of one topology,
    /// for different read modes or protocols).
    pub(crate) fn same_cluster(&self, other: &ClusterBackend) -> bool {
        Arc::ptr_eq(&self.topology, &other.topology)
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
            let map = self.map();
            let shard = map
                .topology
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
        let map = self.map();
        map.topology
            .owner
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
            via: redirect::redirector(me, &reply, &backend),
            raw: raw.clone(),
            count,
            attempts,
            affinity: affinity as u32,
            slot,
        };
        backend.send_run(raw, count, reply.with_redirect(redirect), affinity);
    }

    /// The node for a slot (a read node for `-slaves` resources), or the seed while the slot has no owner.
    fn node_for(&self, slot: Option<u16>) -> Rc<Backend> {
        let map = self.map();
        // A keyless request goes to slot 0's master: the same node as long as the slots stay where they are.
        let index = map
            .topology
            .owner
            .get(usize::from(slot.unwrap_or(0)))
            .copied();
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
        let map = self.map();
        match map.shards.iter().find(|s| s.addr == addr) {
            Some(shard) => Rc::clone(&shard.master),
            None => self.pool.get(&self.spec.node(addr, NodeRole::Any)),
        }
    }
}
