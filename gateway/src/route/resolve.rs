//! A tenant's route resolved on one worker: each shard's read and write resources as upstreams (or the error
//! their commands get), where a key goes, and the direct path's targets for routes that need no dispatch.

use std::rc::Rc;

use bytes::Bytes;
use switchyard_schemas::placement::slot_of;
use switchyard_schemas::{AckMode, ReadPolicy};

use super::{RoutePlan, TargetPlan};
use crate::backend::{ClusterBackend, Keyspace, NodeSpec, ResourceSpec, Upstream};
use crate::cmd::{Command, CommandSpec};
use crate::reply::{DetachedWrites, ReplyHandle};
use crate::resp::{self, Protocol};

const REPLICA_READS: &str = "ERR CLIENT TRACKING is not supported by the gateway on a route that reads from replicas: a replica's copy may lag behind the invalidations the gateway sends";

pub(crate) const CROSSSLOT: &str = "CROSSSLOT Keys in request don't hash to the same slot";

/// A route as one worker serves it: every resource resolved to that worker's upstream.
pub(crate) struct ResolvedRoute {
    pub(super) shards: Vec<ResolvedTarget>,
    /// Whether any target has a cluster resource (then keys are looked at even on a single-target route).
    pub(super) clustered: bool,
    no_backend: Bytes,
}

pub(super) struct ResolvedTarget {
    pub(super) read: Vec<Endpoint>,
    pub(super) read_policy: ReadPolicy,
    pub(super) write: Vec<Endpoint>,
    pub(super) ack: AckMode,
    /// Whether a command's keys must share a hash slot here (some resource is a cluster).
    pub(super) clustered: bool,
}

impl ResolvedTarget {
    /// The cluster every read (or every write) of this target goes to, when that is its one resource: split
    /// sub-commands for one of its masters can then travel as one run.
    pub(super) fn only_cluster(&self, write: bool) -> Option<&Rc<ClusterBackend>> {
        match (write, &self.write[..]) {
            (true, [endpoint]) => endpoint.cluster(),
            (true, _) => None,
            (false, _) => self.only_read()?.cluster(),
        }
    }

    /// The resource every read goes to, when `Dispatch::pick_read` has no choice to make.
    pub(super) fn only_read(&self) -> Option<&Endpoint> {
        match (self.read_policy, &self.read[..]) {
            (_, [read]) | (ReadPolicy::Primary, [read, ..]) => Some(read),
            _ => None,
        }
    }

    /// Writes whose effect is random would make double-written copies diverge.
    pub(super) fn double_write_refusal(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
    ) -> Option<String> {
        (self.write.len() > 1 && spec.random_effect(args)).then(|| {
            let name = spec.display_name();
            format!(
                "ERR {name} is refused on a double-written route: its effect is random and the copies would diverge"
            )
        })
    }
}

/// One resource of a target: its upstream, or the error reply its commands get.
pub(super) struct Endpoint {
    pub(super) upstream: Result<Upstream, Bytes>,
    /// For double-write secondaries: where background writes are tracked.
    pub(super) detached: Option<Rc<DetachedWrites>>,
}

impl Endpoint {
    pub(super) fn send(&self, raw: Bytes, keyspace: Keyspace, reply: ReplyHandle, affinity: usize) {
        match &self.upstream {
            Ok(upstream) => upstream.send_to(raw, keyspace, reply, affinity),
            Err(error) => reply.deliver(error.clone()),
        }
    }

    pub(super) fn healthy(&self) -> bool {
        self.upstream.as_ref().is_ok_and(Upstream::is_healthy)
    }

    pub(super) fn cluster(&self) -> Option<&Rc<ClusterBackend>> {
        match &self.upstream {
            Ok(Upstream::Cluster(cluster)) => Some(cluster),
            _ => None,
        }
    }
}

/// What resolving needs from the worker and the tenant.
pub(crate) trait Resolver {
    /// The worker's upstream for a resource.
    fn upstream(&self, spec: &ResourceSpec) -> Upstream;
    /// Tracking for background writes to a double-write secondary.
    fn detached(&self, resource: &str) -> Rc<DetachedWrites>;
}

impl ResolvedRoute {
    /// Resolves `plan` for database `db` (0 = the resources' own databases) and a client speaking `protocol`.
    pub(crate) fn new(
        plan: &RoutePlan,
        db: u32,
        protocol: Protocol,
        resolver: &dyn Resolver,
    ) -> ResolvedRoute {
        let endpoint = |resource: &super::ResourcePlan, secondary: bool| Endpoint {
            upstream: match &resource.spec {
                Ok(spec) => spec
                    .for_client(db, protocol)
                    .map(|spec| resolver.upstream(&spec))
                    .map_err(|text| resp::error_reply(&text)),
                Err(text) => Err(resp::error_reply(text)),
            },
            detached: secondary.then(|| resolver.detached(&resource.name)),
        };
        let target = |t: &TargetPlan| {
            let read: Vec<Endpoint> = t.read.iter().map(|r| endpoint(r, false)).collect();
            let write: Vec<Endpoint> = t
                .write
                .iter()
                .enumerate()
                .map(|(i, r)| endpoint(r, i > 0))
                .collect();
            ResolvedTarget {
                clustered: read
                    .iter()
                    .chain(write.iter())
                    .any(|e| e.cluster().is_some()),
                read,
                read_policy: t.read_policy,
                write,
                ack: t.ack,
            }
        };
        let shards: Vec<ResolvedTarget> = plan.shards.iter().map(target).collect();
        ResolvedRoute {
            clustered: shards.iter().any(|t| t.clustered),
            shards,
            no_backend: resp::error_reply("ERR the route has no backend"),
        }
    }

    /// The route's one target, its primary write resource and its double-write copies, when it has one target
    /// whose clients wait for the primary only (the write goes to one resource, or its copies are acknowledged
    /// with `ack: primary`).
    pub(super) fn one_primary(&self) -> Option<(&ResolvedTarget, &Endpoint, &[Endpoint])> {
        let [target] = &self.shards[..] else {
            return None;
        };
        let [write, copies @ ..] = &target.write[..] else {
            return None;
        };
        if !copies.is_empty() && target.ack != AckMode::Primary {
            return None;
        }
        Some((target, write, copies))
    }

    /// The shard of a key, and its hash slot when that shard's target has a cluster resource.
    pub(crate) fn locate(&self, plan: &RoutePlan, key: &[u8]) -> Place {
        let shard = plan.shard_of(key);
        let clustered = self.shards.get(shard).is_some_and(|t| t.clustered);
        (shard, clustered.then(|| slot_of(key)))
    }

    /// The one place of every key of a command served on a dedicated connection: `None` for a keyless
    /// command, CROSSSLOT when the keys disagree.
    pub(crate) fn place_of(
        &self,
        plan: &RoutePlan,
        spec: &CommandSpec,
        args: &[Bytes],
        keys: &mut Vec<usize>,
    ) -> Result<Option<Place>, String> {
        routing_keys(spec, args, keys);
        let mut place = None;
        for &key in keys.iter() {
            let here = self.locate(plan, &args[key]);
            if place.is_some_and(|first| first != here) {
                return Err(CROSSSLOT.to_string());
            }
            place = Some(here);
        }
        Ok(place)
    }

    /// The primary write resource of a shard: where dedicated connections go.
    pub(super) fn primary(&self, shard: usize) -> Result<&Upstream, &Bytes> {
        match self.shards.get(shard).and_then(|s| s.write.first()) {
            Some(endpoint) => endpoint.upstream.as_ref(),
            None => Err(&self.no_backend),
        }
    }

    /// The nodes of every shard's primary write resource (what a script of the tenant may keep busy), where
    /// they are known.
    pub(crate) fn script_nodes(&self) -> impl Iterator<Item = NodeSpec> {
        (0..self.shards.len())
            .filter_map(|shard| self.primary(shard).ok())
            .flat_map(Upstream::known_script_nodes)
    }

    /// Why a write cannot run on a shard: one whose effect is random, on a double-written shard.
    pub(crate) fn double_write_refusal(
        &self,
        shard: usize,
        spec: &CommandSpec,
        args: &[Bytes],
    ) -> Option<String> {
        self.shards.get(shard)?.double_write_refusal(spec, args)
    }

    /// The resources the route's reads go to, whose nodes a tracking client's watch covers (see
    /// `client_tracking`); an error when some read from replicas, which the watch would not cover.
    pub(crate) fn read_upstreams(&self) -> Result<Vec<Upstream>, &'static str> {
        let mut upstreams = Vec::new();
        for endpoint in self.shards.iter().flat_map(|shard| shard.read.iter()) {
            let Ok(upstream) = &endpoint.upstream else {
                continue;
            };
            match upstream {
                Upstream::Sentinel(_, Some(_)) => return Err(REPLICA_READS),
                Upstream::Cluster(cluster) if cluster.reads_replicas() => {
                    return Err(REPLICA_READS);
                }
                _ => upstreams.push(upstream.clone()),
            }
        }
        Ok(upstreams)
    }

    /// Whether a shard's writes go to more than one resource.
    pub(crate) fn double_written(&self, shard: usize) -> bool {
        self.shards.get(shard).is_some_and(|s| s.write.len() > 1)
    }

    /// The double-write secondaries of a shard, each with its index among the shard's write resources and its
    /// background-write tracking.
    pub(super) fn secondaries(&self, shard: usize) -> Vec<(usize, Upstream, Rc<DetachedWrites>)> {
        let Some(target) = self.shards.get(shard) else {
            return Vec::new();
        };
        target
            .write
            .iter()
            .enumerate()
            .skip(1)
            .filter_map(|(index, e)| {
                Some((
                    index,
                    e.upstream.clone().ok()?,
                    Rc::clone(e.detached.as_ref()?),
                ))
            })
            .collect()
    }
}

/// Where a key goes: its shard, and its hash slot when that shard's target has a cluster resource.
pub(crate) type Place = (usize, Option<u16>);

/// The arguments a command is placed by: its keys, or a shard channel's name (`SPUBLISH`, `SSUBSCRIBE`), which
/// Redis Cluster places like a key although its key spec says "not a key".
pub(super) fn routing_keys(spec: &CommandSpec, args: &[Bytes], keys: &mut Vec<usize>) {
    if spec.key_indices(args, keys).is_err() {
        keys.clear(); // malformed key arguments: any shard returns Redis' own error for them
    }
    match spec.id {
        Command::Spublish => keys.push(1),
        Command::Ssubscribe => keys.extend(1..args.len()),
        _ => {}
    }
}
