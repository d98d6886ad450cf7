//! Backend resources and their connections.
//!
//! Each worker thread owns its backend connections (no cross-thread hand-off on the data path); the
//! [`BackendPool`] of a worker hands out one shared [`Backend`] per node, created on first use and closed when no
//! route of the current snapshot refers to it any more. A route's resource is an [`Upstream`]: one node, a Redis
//! Cluster ([`cluster`]) or a sentinel-managed master ([`sentinel`]); the last two use the pool's node backends,
//! and follow the process's [`topology`] of their resource, which every worker shares.

pub(crate) mod budget;
pub(crate) mod cluster;
mod connection;
pub(crate) mod dedicated;
pub(crate) mod direct;
pub(crate) mod identity;
mod node;
pub(crate) mod sentinel;
pub(crate) mod spares;
pub(crate) mod topology;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;

use bytes::Bytes;

pub(crate) use cluster::{ClusterBackend, ClusterSpec};
pub(crate) use connection::{
    BackendConnection, ConnectionSettings, Status, TrackingSink, Tracks, kill_on,
};
pub(crate) use node::{NodeRole, NodeSpec};
pub(crate) use sentinel::{SentinelBackend, SentinelSpec};
pub(crate) use topology::Topologies;

use switchyard_schemas::ReplicaMode;

use crate::metrics::Metrics;
use crate::reply::{Combine, ReplyHandle};
use crate::resp::Protocol;

/// A route's resource, compiled: what a worker opens its [`Upstream`] from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum ResourceSpec {
    Node(NodeSpec),
    Cluster(ClusterSpec),
    /// A sentinel set, and for `-slaves` resources how reads use its replicas.
    Sentinel(SentinelSpec, Option<ReplicaMode>),
}

impl ResourceSpec {
    /// The resource as seen by a client that selected database `db` (the `db`th database from the resource's
    /// own; 0: the resource's own database) and speaks `protocol`.
    pub(crate) fn for_client(&self, db: u32, protocol: Protocol) -> Result<ResourceSpec, String> {
        let mut spec = self.clone();
        match &mut spec {
            ResourceSpec::Node(node) => {
                node.db += db;
                node.protocol = protocol;
            }
            ResourceSpec::Sentinel(sentinel, _) => {
                sentinel.db += db;
                sentinel.protocol = protocol;
            }
            // SELECT refuses this before (see `RoutePlan::databases`).
            ResourceSpec::Cluster(_) if db != 0 => {
                return Err("ERR DB index is out of range".into());
            }
            ResourceSpec::Cluster(cluster) => cluster.protocol = protocol,
        }
        Ok(spec)
    }

    /// The database clients get by default.
    pub(crate) fn db(&self) -> u32 {
        match self {
            ResourceSpec::Node(node) => node.db,
            ResourceSpec::Sentinel(sentinel, _) => sentinel.db,
            ResourceSpec::Cluster(_) => 0,
        }
    }
}

/// Which part of a resource's keyspace a request concerns; only a cluster tells them apart.
#[derive(Clone)]
pub(crate) enum Keyspace {
    /// A keyless command: any one node (for a cluster, deterministically the master of slot 0).
    Any,
    /// A command whose keys all hash to this cluster slot.
    Slot(u16),
    /// A keyless command that concerns every node (DBSIZE, KEYS, FLUSHALL): a cluster sends it to every master
    /// and makes one reply with the combiner for that many parts. Shared, because a cluster whose slot map is
    /// not known yet keeps the request until it is.
    Every(Rc<dyn Fn(usize) -> Combine>),
    /// A keyless command for one node of a resource that iterates its nodes (SCAN): a cluster's `n`th master
    /// (by slot order, see [`Upstream::nodes`]); the one node of other resources.
    Node(usize),
}

/// One resource as a worker serves it.
#[derive(Clone)]
pub(crate) enum Upstream {
    Node(Rc<Backend>),
    Cluster(Rc<ClusterBackend>),
    /// A sentinel set's master, or with a read mode (`-slaves` resources) its replicas.
    Sentinel(Rc<SentinelBackend>, Option<ReplicaMode>),
}

impl Upstream {
    /// Sends a request; `affinity` (a client id) keeps one client's requests on one connection per node.
    pub(crate) fn send_to(
        &self,
        raw: Bytes,
        keyspace: Keyspace,
        reply: ReplyHandle,
        affinity: usize,
    ) {
        match self {
            Upstream::Node(backend) => backend.send(raw, reply, affinity),
            Upstream::Cluster(cluster) => cluster.send(raw, keyspace, reply, affinity),
            Upstream::Sentinel(sentinel, reads) => sentinel.send(raw, reply, affinity, *reads),
        }
    }

    pub(crate) fn is_healthy(&self) -> bool {
        match self {
            Upstream::Node(backend) => backend.is_healthy(),
            Upstream::Cluster(cluster) => cluster.is_healthy(),
            Upstream::Sentinel(sentinel, _) => sentinel.is_healthy(),
        }
    }

    /// The node a dedicated connection for `slot` (`None`: keyless) goes to: the node itself, the sentinel
    /// set's master (replica modes aside: blocking commands, transactions and subscriptions want the master), or
    /// the cluster master owning the slot (slot 0's for keyless commands).
    pub(crate) fn dedicated_node(&self, slot: Option<u16>) -> Result<NodeSpec, String> {
        match self {
            Upstream::Node(backend) => Ok(backend.node.clone()),
            Upstream::Cluster(cluster) => {
                let slot = slot.unwrap_or(0);
                // A connection to a guess would answer MOVED, which means nothing to a gateway client.
                cluster
                    .master_of(slot)
                    .ok_or_else(|| unknown_slot_text(slot))
            }
            Upstream::Sentinel(sentinel, _) => sentinel.master().ok_or_else(|| {
                format!(
                    "ERR sentinel master {} not known yet",
                    sentinel.master_name()
                )
            }),
        }
    }

    /// Sends a request to the node [`Upstream::dedicated_node`] names, on the shared connection the client's
    /// earlier commands took, never redirected (a transaction's commands, sent back to back).
    pub(crate) fn send_unredirected(
        &self,
        raw: Bytes,
        slot: Option<u16>,
        reply: ReplyHandle,
        affinity: usize,
    ) {
        match self {
            Upstream::Node(backend) => backend.send(raw, reply, affinity),
            Upstream::Sentinel(sentinel, _) => sentinel.send(raw, reply, affinity, None),
            Upstream::Cluster(cluster) => {
                let slot = slot.unwrap_or(0);
                if let Err(reply) = cluster.send_unredirected(slot, raw, reply, affinity) {
                    reply.deliver(unknown_slot(slot));
                }
            }
        }
    }

    /// Waits until the resource knows its nodes (a cluster's first slot map, bounded), for requests that visit
    /// every node.
    pub(crate) async fn wait_for_nodes(&self) {
        if let Upstream::Cluster(cluster) = self {
            cluster.wait_for_map().await;
        }
    }

    /// The nodes a script sent to this resource may be running on, for `SCRIPT KILL` and `FUNCTION KILL`: the
    /// node, the sentinel set's master (an error reply while it is not known), every master of a cluster.
    pub(crate) async fn script_nodes(&self) -> Vec<Result<NodeSpec, Bytes>> {
        match self {
            Upstream::Node(backend) => vec![Ok(backend.node.clone())],
            Upstream::Sentinel(..) => vec![
                self.dedicated_node(None)
                    .map_err(|e| crate::resp::error_reply(&e)),
            ],
            Upstream::Cluster(cluster) => {
                cluster.wait_for_map().await;
                cluster.master_nodes().into_iter().map(Ok).collect()
            }
        }
    }

    /// The nodes a script sent to this resource may be running on, as far as they are known now (see
    /// [`Upstream::script_nodes`], which waits for a cluster's first slot map).
    pub(crate) fn known_script_nodes(&self) -> Vec<NodeSpec> {
        match self {
            Upstream::Node(backend) => vec![backend.node.clone()],
            Upstream::Sentinel(sentinel, _) => sentinel.master().into_iter().collect(),
            Upstream::Cluster(cluster) => cluster.master_nodes(),
        }
    }

    /// How many nodes hold a part of the resource's keyspace: a cluster's masters (1 while its slot map is
    /// unknown), 1 for anything else. [`Keyspace::Node`] numbers them from 0.
    pub(crate) fn nodes(&self) -> usize {
        match self {
            Upstream::Cluster(cluster) => cluster.masters(),
            Upstream::Node(_) | Upstream::Sentinel(..) => 1,
        }
    }
}

fn unknown_slot_text(slot: u16) -> String {
    format!("TRYAGAIN the gateway does not know yet which node serves slot {slot}")
}

fn unknown_slot(slot: u16) -> Bytes {
    let mut out = bytes::BytesMut::new();
    crate::resp::error(&mut out, &unknown_slot_text(slot));
    out.freeze()
}

/// A backend node as one worker sees it: a few pipelined connections. Each client sticks to one of them, so
/// that its commands reach the node in the order it sent them.
pub(crate) struct Backend {
    /// The node and its handshake, for the dedicated connections opened next to the shared ones.
    node: NodeSpec,
    connections: Vec<BackendConnection>,
}

impl Backend {
    fn open(
        node: &NodeSpec,
        settings: ConnectionSettings,
        count: usize,
        metrics: &Metrics,
    ) -> Backend {
        let metrics = metrics.backend(&node.addr);
        Backend {
            node: node.clone(),
            connections: (0..count.max(1))
                .map(|_| BackendConnection::open(node.clone(), settings, Arc::clone(&metrics)))
                .collect(),
        }
    }

    /// Sends on the connection `affinity` picks (a client id: the same client always gets the same one).
    pub(crate) fn send(&self, raw: Bytes, reply: ReplyHandle, affinity: usize) {
        self.connection(affinity).send(raw, reply);
    }

    /// Sends a run of `count` requests (see [`BackendConnection::send_run`]) on the connection `affinity` picks.
    pub(crate) fn send_run(&self, raw: Bytes, count: u32, reply: ReplyHandle, affinity: usize) {
        self.connection(affinity).send_run(raw, count, reply);
    }

    /// The node, as its connections reach it.
    pub(crate) fn node(&self) -> &NodeSpec {
        &self.node
    }

    /// The connection `affinity` picks.
    pub(crate) fn connection(&self, affinity: usize) -> &BackendConnection {
        &self.connections[affinity % self.connections.len()]
    }

    /// Whether the node is usable: not every connection is down.
    pub(crate) fn is_healthy(&self) -> bool {
        self.connections.iter().any(|c| c.status() != Status::Down)
    }
}

/// One worker's backends, by node, and its clusters and sentinel resources.
pub(crate) struct BackendPool {
    settings: ConnectionSettings,
    connections_per_node: usize,
    metrics: Arc<Metrics>,
    /// The process's topologies, which this worker's clusters and sentinel resources join.
    topologies: Arc<Topologies>,
    nodes: RefCell<HashMap<NodeSpec, Weak<Backend>>>,
    clusters: RefCell<HashMap<ClusterSpec, Weak<ClusterBackend>>>,
    sentinels: RefCell<HashMap<SentinelSpec, Weak<SentinelBackend>>>,
}

impl BackendPool {
    pub(crate) fn new(
        settings: ConnectionSettings,
        connections_per_node: usize,
        metrics: Arc<Metrics>,
        topologies: Arc<Topologies>,
    ) -> BackendPool {
        BackendPool {
            settings,
            connections_per_node,
            metrics,
            topologies,
            nodes: RefCell::new(HashMap::new()),
            clusters: RefCell::new(HashMap::new()),
            sentinels: RefCell::new(HashMap::new()),
        }
    }

    /// The shared upstream for a resource, opening it if no one holds it.
    pub(crate) fn upstream(self: &Rc<Self>, spec: &ResourceSpec) -> Upstream {
        match spec {
            ResourceSpec::Node(node) => Upstream::Node(self.get(node)),
            ResourceSpec::Cluster(cluster) => {
                Upstream::Cluster(shared(&self.clusters, cluster, || {
                    let topology = self.topologies.cluster(cluster, self.control_timeout());
                    ClusterBackend::open(cluster.clone(), self, topology)
                }))
            }
            ResourceSpec::Sentinel(sentinel, reads) => {
                let backend = shared(&self.sentinels, sentinel, || {
                    let topology = self.topologies.sentinel(sentinel, self.control_timeout());
                    SentinelBackend::open(sentinel.clone(), self, topology)
                });
                if reads.is_some() {
                    backend.want_replicas();
                }
                Upstream::Sentinel(backend, *reads)
            }
        }
    }

    /// The deadline of the gateway's own queries about a resource's topology.
    pub(crate) fn control_timeout(&self) -> std::time::Duration {
        self.settings
            .connect_timeout
            .max(std::time::Duration::from_millis(500))
    }

    /// A connection of its own to `node` that tracks the keys it reads (see `connection::tracking`), telling
    /// `sink` of their changes.
    pub(crate) fn open_tracking(
        &self,
        node: &NodeSpec,
        sink: Rc<dyn TrackingSink>,
    ) -> BackendConnection {
        self.open_tracking_as(node, sink, Tracks::Reads)
    }

    /// A connection of its own to `node` in broadcasting mode (`CLIENT TRACKING on BCAST`), telling `sink` of
    /// every change to a key under `prefix` (empty: every key), whoever read it.
    pub(crate) fn open_broadcast(
        &self,
        node: &NodeSpec,
        sink: Rc<dyn TrackingSink>,
        prefix: Bytes,
    ) -> BackendConnection {
        self.open_tracking_as(node, sink, Tracks::Prefix(prefix))
    }

    fn open_tracking_as(
        &self,
        node: &NodeSpec,
        sink: Rc<dyn TrackingSink>,
        tracks: Tracks,
    ) -> BackendConnection {
        let metrics = self.metrics.backend(&node.addr);
        BackendConnection::open_tracking(node.clone(), self.settings, metrics, sink, tracks)
    }

    /// The shared backend for `node`, opening it if no one holds it.
    pub(crate) fn get(&self, node: &NodeSpec) -> Rc<Backend> {
        shared(&self.nodes, node, || {
            Rc::new(Backend::open(
                node,
                self.settings,
                self.connections_per_node,
                &self.metrics,
            ))
        })
    }
}

/// The value `cache` holds for `key` while someone uses it, or a new one.
fn shared<K: std::hash::Hash + Eq + Clone, V>(
    cache: &RefCell<HashMap<K, Weak<V>>>,
    key: &K,
    open: impl FnOnce() -> Rc<V>,
) -> Rc<V> {
    if let Some(value) = cache.borrow().get(key).and_then(Weak::upgrade) {
        return value;
    }
    // Opened with the cache released: opening takes node backends from the pool.
    let value = open();
    let mut cache = cache.borrow_mut();
    cache.retain(|_, value| value.strong_count() > 0);
    cache.insert(key.clone(), Rc::downgrade(&value));
    value
}

/// Calls its function when dropped while the thread unwinds from a panic. Tokio catches a panic inside a task and
/// drops the task's future while unwinding, so a guard the task holds answers for what the task owned (its
/// queued requests) instead of leaving them to wait for a task that is gone.
pub(super) struct OnPanic<F: FnMut()>(pub(super) F);

impl<F: FnMut()> Drop for OnPanic<F> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            (self.0)();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::OnPanic;

    #[test]
    fn on_panic_runs_only_while_a_panic_unwinds() {
        let calls = Cell::new(0);
        drop(OnPanic(|| calls.set(calls.get() + 1)));
        assert_eq!(calls.get(), 0);
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _guard = OnPanic(|| calls.set(calls.get() + 1));
            panic!("inside the guarded scope");
        }));
        assert!(unwound.is_err());
        assert_eq!(calls.get(), 1);
    }
}
