//! The routes a near cache serves (`near_cache`), and the node each key of one is filled from and tracked on.
//!
//! The cache fills from, and tracks, the node a key's writes go to: the route's one Redis, its sentinel set's
//! master, or the Redis Cluster master of the key's slot. A route qualifies when its writes go there first (one
//! resource, or a double-write that waits for the primary only) and its reads come from the same place or from
//! its replicas (`-slaves` resources of the same sentinel set or cluster): a key read from the node its writes go
//! to is at least as fresh as one read from a replica. Sharded routes and reads from another resource do not.

use std::rc::Rc;

use switchyard_schemas::placement::slot_of;

use super::ResolvedRoute;
use crate::backend::{Backend, ClusterBackend, SentinelBackend, Upstream};

/// Where a near-cached route's keys are filled from.
pub(crate) enum CacheRoute {
    Node(Rc<Backend>),
    /// A sentinel set's master, as known at each read.
    Master(Rc<SentinelBackend>),
    /// The master of each key's slot, as the cluster's slot map has it at each read.
    Cluster(Rc<ClusterBackend>),
}

/// The node a key is filled from and tracked on.
pub(crate) struct CacheNode {
    pub(crate) backend: Rc<Backend>,
    /// For a cluster: the cluster, whose other masters hold other keys at the same time.
    pub(crate) cluster: Option<Rc<ClusterBackend>>,
}

impl CacheRoute {
    /// The node `key` (as stored) is filled from now; `None` while it is not known (a sentinel master not found
    /// yet, a slot the cluster's map has no owner for).
    pub(crate) fn node(&self, key: &[u8]) -> Option<CacheNode> {
        match self {
            CacheRoute::Node(node) => Some(CacheNode {
                backend: Rc::clone(node),
                cluster: None,
            }),
            CacheRoute::Master(sentinel) => Some(CacheNode {
                backend: sentinel.known_master()?,
                cluster: None,
            }),
            CacheRoute::Cluster(cluster) => Some(CacheNode {
                backend: cluster.master_backend(slot_of(key))?,
                cluster: Some(Rc::clone(cluster)),
            }),
        }
    }
}

impl ResolvedRoute {
    /// Where a near cache fills the route's keys from, when it is a route the cache serves (see the module's
    /// comment).
    pub(crate) fn cache_route(&self) -> Option<CacheRoute> {
        let (target, write, _) = self.one_primary()?;
        let read = target.only_read()?;
        match (write.upstream.as_ref().ok()?, read.upstream.as_ref().ok()?) {
            (Upstream::Node(write), Upstream::Node(read)) if Rc::ptr_eq(write, read) => {
                Some(CacheRoute::Node(Rc::clone(write)))
            }
            // Reads from the master, or from its replicas (any read mode).
            (Upstream::Sentinel(write, None), Upstream::Sentinel(read, _))
                if Rc::ptr_eq(write, read) =>
            {
                Some(CacheRoute::Master(Rc::clone(write)))
            }
            // Reads from the masters, or from the replicas of the same cluster.
            (Upstream::Cluster(write), Upstream::Cluster(read))
                if !write.reads_replicas() && write.same_cluster(read) =>
            {
                Some(CacheRoute::Cluster(Rc::clone(write)))
            }
            _ => None,
        }
    }
}
