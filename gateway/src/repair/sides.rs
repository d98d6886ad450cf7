//! Where a resource keeps a key now, for the repair: the one node of a standalone resource, the current master of
//! a sentinel-managed one, or the master a Redis Cluster's slot map gives the key's slot; and every node holding
//! the resource's keys (a cluster's every master), for a catch-up's walk and for the watch on restarts.
//!
//! Cluster and sentinel resources are read from the process's shared topologies (the slot map and the sentinel
//! view the data path uses, learnt once per process), which the repair holds while it uses them, so that they
//! stay known after a restart of the gateway before any client came. A node the topology does not know yet, a
//! failed node and a redirect all mean "not now": the key waits, the topology is asked to look again, and the
//! repair goes only where the cluster's own slot map (`CLUSTER SLOTS`) or a sentinel says, never where a reply
//! points.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard_schemas::placement::slot_of;

use super::key::Trouble;
use crate::backend::cluster::ClusterTopology;
use crate::backend::sentinel::SentinelTopology;
use crate::backend::{ClusterSpec, NodeSpec, ResourceSpec, SentinelSpec, Topologies};
use crate::resp::Protocol;

/// How long a topology nothing used is held before it is let go (a route that no longer uses the resource).
const HOLD: Duration = Duration::from_secs(30);

/// A side of a repair that cannot be placed now: the error as the side's [`Trouble`].
pub(super) type Side = fn(io::Error) -> Trouble;

/// The topologies the repair uses, held while it uses them.
pub(super) struct Sides {
    topologies: Arc<Topologies>,
    timeout: Duration,
    clusters: HashMap<ClusterSpec, Arc<ClusterTopology>>,
    sentinels: HashMap<SentinelSpec, Arc<SentinelTopology>>,
    /// The topologies used since `since` (the others are let go after [`HOLD`]).
    used: (HashSet<Vec<String>>, Instant),
}

impl Sides {
    pub(super) fn new(topologies: Arc<Topologies>, timeout: Duration) -> Sides {
        Sides {
            topologies,
            timeout,
            clusters: HashMap::new(),
            sentinels: HashMap::new(),
            used: (HashSet::new(), Instant::now()),
        }
    }

    /// The node that holds `key` of `spec` in the client's database `db`.
    pub(super) fn node_of(
        &mut self,
        spec: &Result<ResourceSpec, String>,
        db: u32,
        key: &[u8],
        side: Side,
    ) -> Result<NodeSpec, Trouble> {
        match self.resolve(spec, db)? {
            ResourceSpec::Node(node) => Ok(node),
            ResourceSpec::Sentinel(sentinel, _) => self
                .sentinel_master(&sentinel)
                .ok_or_else(|| side(io::Error::other("no sentinel has named the master yet"))),
            ResourceSpec::Cluster(cluster) => {
                let topology = self.cluster(&cluster);
                let addr = topology.owner_addr(slot_of(key)).ok_or_else(|| {
                    side(io::Error::other(
                        "the cluster's slot map has no owner for the key",
                    ))
                })?;
                Ok(cluster.master_node(&addr))
            }
        }
    }

    /// Every node that holds keys of `spec` in the client's database `db`: a cluster's every master.
    pub(super) fn nodes(
        &mut self,
        spec: &Result<ResourceSpec, String>,
        db: u32,
        side: Side,
    ) -> Result<Vec<NodeSpec>, Trouble> {
        let not_yet = |what: &str| side(io::Error::other(format!("{what} not known yet")));
        match self.resolve(spec, db)? {
            ResourceSpec::Node(node) => Ok(vec![node]),
            ResourceSpec::Sentinel(sentinel, _) => match self.sentinel_master(&sentinel) {
                Some(master) => Ok(vec![master]),
                None => Err(not_yet("the sentinel master is")),
            },
            ResourceSpec::Cluster(cluster) => {
                let masters = self.cluster(&cluster).master_addrs();
                match masters.is_empty() {
                    true => Err(not_yet("the cluster's masters are")),
                    false => Ok(masters.iter().map(|a| cluster.master_node(a)).collect()),
                }
            }
        }
    }

    /// A node of `spec` failed, refused the connection, or redirected a key: the topology looks again (a
    /// cluster's slot map is read again, the sentinels are asked for the master).
    pub(super) fn stale(&mut self, spec: &Result<ResourceSpec, String>) {
        match self.resolve(spec, 0) {
            Ok(ResourceSpec::Cluster(cluster)) => self.cluster(&cluster).schedule_refresh(),
            Ok(ResourceSpec::Sentinel(sentinel, _)) => self.sentinel(&sentinel).master_is_down(),
            _ => {}
        }
    }

    /// Lets go of the topologies not used for a while.
    pub(super) fn let_go(&mut self) {
        if self.used.1.elapsed() < HOLD {
            return;
        }
        let used = std::mem::take(&mut self.used.0);
        self.clusters.retain(|spec, _| used.contains(&spec.seeds));
        self.sentinels
            .retain(|spec, _| used.contains(&spec.sentinels));
        self.used.1 = Instant::now();
    }

    /// `spec` as its clients in database `db` reach it.
    fn resolve(
        &self,
        spec: &Result<ResourceSpec, String>,
        db: u32,
    ) -> Result<ResourceSpec, Trouble> {
        spec.as_ref()
            .map_err(String::clone)
            .and_then(|spec| spec.for_client(db, Protocol::Resp2))
            .map_err(|reason| Trouble::Refused(format!("unusable resource: {reason}")))
    }

    fn sentinel_master(&mut self, spec: &SentinelSpec) -> Option<NodeSpec> {
        let addr = self.sentinel(spec).master_addr()?;
        Some(spec.master_node(&addr))
    }

    fn cluster(&mut self, spec: &ClusterSpec) -> Arc<ClusterTopology> {
        self.used.0.insert(spec.seeds.clone());
        let (topologies, timeout) = (&self.topologies, self.timeout);
        held(&mut self.clusters, spec, || {
            topologies.cluster(spec, timeout)
        })
    }

    fn sentinel(&mut self, spec: &SentinelSpec) -> Arc<SentinelTopology> {
        self.used.0.insert(spec.sentinels.clone());
        let (topologies, timeout) = (&self.topologies, self.timeout);
        held(&mut self.sentinels, spec, || {
            topologies.sentinel(spec, timeout)
        })
    }
}

/// The topology `held` holds for `spec`, or the process's, joined (or started) by `join` and held from now on.
fn held<K: Hash + Eq + Clone, V>(
    held: &mut HashMap<K, Arc<V>>,
    spec: &K,
    join: impl FnOnce() -> Arc<V>,
) -> Arc<V> {
    Arc::clone(held.entry(spec.clone()).or_insert_with(join))
}
