//! What the gateway process knows about its backends' topology, shared by every worker: one slot map per Redis
//! Cluster ([`ClusterTopology`]) and one master/replica view per sentinel set ([`SentinelTopology`]).
//!
//! Workers keep their own node connections, but a topology is learnt once per process: the first worker to open
//! a resource creates its topology and starts the one task that keeps it fresh (on that worker's thread), and
//! every other worker joins it. Whichever worker hears of a change first (a `MOVED`, a failed connection, a
//! sentinel's announcement) updates it for all. A topology lives as long as some worker's upstream holds it.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use super::cluster::ClusterTopology;
use super::sentinel::SentinelTopology;
use super::{ClusterSpec, SentinelSpec};

/// The process's topologies, by the resource they describe.
#[derive(Default)]
pub(crate) struct Topologies {
    clusters: Mutex<HashMap<ClusterSpec, Weak<ClusterTopology>>>,
    sentinels: Mutex<HashMap<SentinelSpec, Weak<SentinelTopology>>>,
}

impl Topologies {
    /// The topology of the cluster `spec` reaches, created (and its refresh started on the calling worker) when
    /// no worker holds it. Clients' protocols and read modes share one topology.
    pub(crate) fn cluster(
        &self,
        spec: &ClusterSpec,
        timeout: std::time::Duration,
    ) -> Arc<ClusterTopology> {
        joined(&self.clusters, spec.topology_key(), |key| {
            ClusterTopology::start(key, timeout)
        })
    }

    /// The view of the sentinel set `spec` watches, created (and its watcher started on the calling worker) when
    /// no worker holds it. Every database, protocol and read mode of the set shares one view.
    pub(crate) fn sentinel(
        &self,
        spec: &SentinelSpec,
        timeout: std::time::Duration,
    ) -> Arc<SentinelTopology> {
        joined(&self.sentinels, spec.topology_key(), |key| {
            SentinelTopology::start(key, timeout)
        })
    }
}

/// The live value `cache` holds for `key`, or a new one made by `start`.
fn joined<K: Hash + Eq + Clone, V>(
    cache: &Mutex<HashMap<K, Weak<V>>>,
    key: K,
    start: impl FnOnce(K) -> Arc<V>,
) -> Arc<V> {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(value) = cache.get(&key).and_then(Weak::upgrade) {
        return value;
    }
    cache.retain(|_, value| value.strong_count() > 0);
    let value = start(key.clone());
    cache.insert(key, Arc::downgrade(&value));
    value
}
