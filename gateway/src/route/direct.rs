//! The direct path's targets: a route that is one resource for reads and one for writes, and where each request
//! the gateway forwards verbatim goes on it (the run it joins).

use std::rc::Rc;

use switchyard_schemas::placement::{slot_of, slot_of_prefixed};

use super::resolve::Endpoint;
use super::{ResolvedRoute, RunTarget, WriteCopy};
use crate::backend::{Backend, ClusterBackend, SentinelBackend, Upstream};
use crate::cmd::{CommandSpec, flag};

/// A route that is one resource for reads and one for writes, each a plain Redis, a sentinel-managed master or a
/// Redis Cluster: one target, one read resource (or reads from the primary), writes to one resource or
/// double-written with ack `primary` to plain Redis only. Its commands need no decision but read or write (and, for a cluster, the key's slot).
pub(crate) struct DirectRoute {
    read: Direct,
    write: Direct,
    /// The double-write secondaries (empty when writes go to one resource), each a plain Redis.
    copies: Rc<[WriteCopy]>,
}

/// The resource a direct route sends reads, or writes, to.
enum Direct {
    Node(Rc<Backend>),
    /// A sentinel-managed master (not its replicas: `-slaves` resources pick a replica per read).
    Master(Rc<SentinelBackend>),
    Cluster(Rc<ClusterBackend>),
}

impl DirectRoute {
    /// Where a request the gateway forwards verbatim goes: a read to the read resource, a write to the write
    /// resource and its double-write copies; on a cluster, to the master of its key's slot, the key being its
    /// first argument, placed as stored (under `prefix`, a tenant's key namespace). `None` when the request needs
    /// `dispatch`: a double-written write whose effect may differ from copy to copy, a cluster command whose key
    /// is not its first argument, a sentinel master not known yet (`dispatch` holds the request for it).
    #[inline(always)] // once per request of the direct path, inside the decode loop
    pub(crate) fn target<'k>(
        &self,
        spec: &CommandSpec,
        key: impl FnOnce() -> Option<&'k [u8]>,
        prefix: Option<&[u8]>,
    ) -> Option<RunTarget> {
        let read = spec.has(flag::READONLY);
        let target = if read { &self.read } else { &self.write };
        let copies = (!read && !self.copies.is_empty()).then(|| Rc::clone(&self.copies));
        if (copies.is_some() && spec.has(flag::NONDETERMINISTIC))
            || (matches!(target, Direct::Cluster(_)) && !spec.key_is_first_argument())
        {
            return None;
        }
        Some(match target {
            Direct::Node(backend) => RunTarget::Node {
                backend: Rc::clone(backend),
                copies,
            },
            Direct::Master(sentinel) => RunTarget::Node {
                backend: sentinel.known_master()?,
                copies,
            },
            Direct::Cluster(cluster) => {
                let key = key()?;
                let slot = match prefix {
                    Some(prefix) => slot_of_prefixed(prefix, key),
                    None => slot_of(key),
                };
                RunTarget::Cluster {
                    master: cluster.master_index(slot),
                    cluster: Rc::clone(cluster),
                    slot,
                }
            }
        })
    }
}

impl ResolvedRoute {
    /// The route's nodes, when it is a direct route.
    pub(crate) fn direct(&self) -> Option<DirectRoute> {
        // A double-write is direct when the client waits for the primary only, and every copy is a plain Redis.
        let (target, write, copies) = self.one_primary()?;
        let copies = copies
            .iter()
            .map(|copy| match (&copy.upstream, &copy.detached) {
                (Ok(Upstream::Node(node)), Some(writes)) => Some(WriteCopy {
                    node: Rc::clone(node),
                    writes: Rc::clone(writes),
                }),
                _ => None,
            })
            .collect::<Option<Rc<[WriteCopy]>>>()?;
        let read = target.only_read()?;
        let direct = |endpoint: &Endpoint| match &endpoint.upstream {
            Ok(Upstream::Node(node)) => Some(Direct::Node(Rc::clone(node))),
            Ok(Upstream::Sentinel(sentinel, None)) => Some(Direct::Master(Rc::clone(sentinel))),
            Ok(Upstream::Cluster(cluster)) => Some(Direct::Cluster(Rc::clone(cluster))),
            _ => None,
        };
        let write = direct(write)?;
        if !copies.is_empty() && !matches!(write, Direct::Node(_)) {
            return None;
        }
        Some(DirectRoute {
            read: direct(read)?,
            write,
            copies,
        })
    }
}
