//! A catch-up: every key of the tenant compared between the primary and the secondary, for a record that
//! overflowed, a write whose keys could not be named, or a secondary that came back with less than it had.
//!
//! Both sides are walked with `SCAN` (keys only the secondary holds are then deleted there), within the tenant's
//! own keyspace: each of its databases, and only the keys under its namespace prefix when it has one. A key found
//! is repaired only where the route places it on this primary and this secondary: keys of other tenants, or
//! placed elsewhere, are never touched. The gateway's own walk rather than the control plane's migration verify:
//! it needs nothing but the route the gateway serves, and runs where the missed keys were recorded. The walk
//! goes a page at a time, so that one tenant's catch-up does not hold the others' repairs. A Redis Cluster is
//! walked on each of its masters, a sentinel-managed resource on its current master (see `sides`).

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;

use super::key::Trouble;
use super::links::{Links, Nodes, nodes_of};
use super::sides::{Side, Sides};
use crate::backend::direct::Value;
use crate::backend::{NodeSpec, ResourceSpec};
use crate::missed::{CatchUp, MissedKey};
use crate::route::Tenant;

/// Keys asked per `SCAN` call.
const SCAN_COUNT: &[u8] = b"500";

/// A node to walk: the node, the client database it stands for, and its resource (to look again at where the
/// resource keeps its keys when the node fails).
type Walked = (NodeSpec, u32, Result<ResourceSpec, String>, Side);

/// A catch-up under way: the nodes walked, and where the walk is. The nodes are read from the route and the
/// topologies at every page, so that a cluster's failover or resharding during the walk is followed: a master
/// that is one no more is left, and the one that took its slots walked.
pub(super) struct Walk {
    /// Why, and the record's generation when it started: a catch-up asked again meanwhile runs again.
    pub(super) asked: (CatchUp, u64),
    walked: HashSet<(String, u32)>,
    /// The node being walked (its address and database) and the cursor there.
    at: Option<((String, u32), Bytes)>,
    finished: bool,
    pattern: Vec<u8>,
}

impl Walk {
    /// The walk of every node holding `tenant`'s keys on either side of its secondary.
    pub(super) fn new(tenant: &Tenant, asked: (CatchUp, u64)) -> Walk {
        let pattern = match tenant.namespace() {
            Some(namespace) => [&namespace.pattern_prefix()[..], b"*"].concat(),
            None => b"*".to_vec(),
        };
        Walk {
            asked,
            walked: HashSet::new(),
            at: None,
            finished: false,
            pattern,
        }
    }

    /// Whether some node may be left to walk.
    pub(super) fn page_left(&self) -> bool {
        !self.finished
    }

    /// The next page of keys to compare, each with its nodes; `None` once every node was walked.
    pub(super) async fn page(
        &mut self,
        tenant: &Tenant,
        resource: &str,
        links: &mut Links,
        sides: &mut Sides,
        timeout: Duration,
    ) -> Result<Option<Vec<(MissedKey, Nodes)>>, Trouble> {
        let nodes = every_node(tenant, resource, sides)?;
        let id = |n: &NodeSpec| (n.addr.clone(), n.db);
        // A node that no longer holds the resource's keys (a cluster master that failed over) is left.
        if let Some((at, _)) = &self.at
            && !nodes.iter().any(|(n, ..)| id(n) == *at)
        {
            self.at = None;
        }
        let next = match &self.at {
            Some((at, _)) => nodes.iter().find(|(n, ..)| id(n) == *at),
            None => nodes.iter().find(|(n, ..)| !self.walked.contains(&id(n))),
        };
        let Some((node, db, spec, side)) = next else {
            self.finished = true;
            return Ok(None);
        };
        let cursor = match &self.at {
            Some((_, cursor)) => cursor.clone(),
            None => Bytes::from_static(b"0"),
        };
        let scan: [&[u8]; 6] = [
            b"SCAN",
            &cursor,
            b"MATCH",
            &self.pattern,
            b"COUNT",
            SCAN_COUNT,
        ];
        let reply = match links.to(node, timeout).await {
            Ok(connection) => connection.call(&scan).await,
            Err(e) => Err(e),
        };
        let reply = reply.map_err(|e| {
            links.drop(node);
            sides.stale(spec);
            side(e)
        })?;
        let (next, names) =
            scanned(&reply).ok_or_else(|| Trouble::Refused("unexpected SCAN reply".to_string()))?;
        let here = |n: &NodeSpec| n.addr == node.addr && n.db == node.db;
        let mut page = Vec::with_capacity(names.len());
        for name in names {
            let key = (*db, name);
            match nodes_of(&tenant.route, resource, &key, sides)? {
                // Placed on this walk's node: the walk of another node (or no one) owns the others.
                Some(nodes) if here(&nodes.0) || here(&nodes.1) => page.push((key, nodes)),
                _ => {}
            }
        }
        match &next[..] == b"0" {
            true => {
                self.walked.insert(id(node));
                self.at = None;
            }
            false => self.at = Some((id(node), next)),
        }
        Ok(Some(page))
    }
}

/// Every node holding `tenant`'s keys on either side of its secondary `resource`, now: in each of its databases,
/// the primary's and the secondary's nodes of each shard that writes there (a cluster's every master).
fn every_node(tenant: &Tenant, resource: &str, sides: &mut Sides) -> Result<Vec<Walked>, Trouble> {
    let databases = u32::try_from(tenant.databases().end).unwrap_or(1);
    let mut nodes: Vec<Walked> = Vec::new();
    for db in 0..databases {
        for target in &tenant.route.shards {
            let secondaries = target.write.iter().skip(1).filter(|r| r.name == resource);
            if secondaries.clone().next().is_none() {
                continue;
            }
            let primary = target.write.first().map(|p| (p, Trouble::Primary as Side));
            let secondaries = secondaries.map(|s| (s, Trouble::Secondary as Side));
            for (plan, side) in primary.into_iter().chain(secondaries) {
                let found = match sides.nodes(&plan.spec, db, side) {
                    Ok(found) => found,
                    // A resource with fewer databases (a cluster has one): nothing of the tenant's there.
                    Err(Trouble::Refused(_)) => continue,
                    Err(trouble) => return Err(trouble),
                };
                for node in found {
                    if !nodes
                        .iter()
                        .any(|(n, ..)| n.addr == node.addr && n.db == node.db)
                    {
                        nodes.push((node, db, plan.spec.clone(), side));
                    }
                }
            }
        }
    }
    Ok(nodes)
}

/// A `SCAN` reply's next cursor and keys.
fn scanned(reply: &Value) -> Option<(Bytes, Vec<Bytes>)> {
    let [Value::Bulk(cursor), Value::Array(keys)] = reply.array()? else {
        return None;
    };
    let keys = keys
        .iter()
        .map(|key| match key {
            Value::Bulk(name) => Some(name.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    Some((cursor.clone(), keys))
}
