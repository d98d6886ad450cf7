//! A catch-up: every key of the tenant compared between the primary and the secondary, for a record that
//! overflowed, a write whose keys could not be named, or a secondary that came back with less than it had.
//!
//! Both sides are walked with `SCAN` (keys only the secondary holds are then deleted there), within the tenant's
//! own keyspace: each of its databases, and only the keys under its namespace prefix when it has one. A key found
//! is repaired only where the route places it on this primary and this secondary: keys of other tenants, or
//! placed elsewhere, are never touched. The gateway's own walk rather than the control plane's migration verify:
//! it needs nothing but the route the gateway serves, and runs where the missed keys were recorded. The walk
//! goes a page at a time, so that one tenant's catch-up does not hold the others' repairs.

use std::time::Duration;

use bytes::Bytes;

use super::key::Trouble;
use super::links::{Links, Nodes, node_of, nodes_of};
use crate::backend::NodeSpec;
use crate::backend::direct::Value;
use crate::missed::{CatchUp, MissedKey};
use crate::route::Tenant;

/// Keys asked per `SCAN` call.
const SCAN_COUNT: &[u8] = b"500";

/// A catch-up under way: the nodes left to walk (each with its client database), and where the walk is.
pub(super) struct Walk {
    /// Why, and the record's generation when it started: a catch-up asked again meanwhile runs again.
    pub(super) asked: (CatchUp, u64),
    nodes: Vec<(NodeSpec, u32)>,
    at: usize,
    cursor: Bytes,
    pattern: Vec<u8>,
}

impl Walk {
    /// The walk of every node holding `tenant`'s keys on either side of the secondary `resource`.
    pub(super) fn new(tenant: &Tenant, resource: &str, asked: (CatchUp, u64)) -> Walk {
        let pattern = match tenant.namespace() {
            Some(namespace) => [&namespace.pattern_prefix()[..], b"*"].concat(),
            None => b"*".to_vec(),
        };
        let databases = u32::try_from(tenant.databases().end).unwrap_or(1);
        let mut nodes: Vec<(NodeSpec, u32)> = Vec::new();
        for db in 0..databases {
            for target in &tenant.route.shards {
                let secondaries = target.write.iter().skip(1).filter(|r| r.name == resource);
                if secondaries.clone().next().is_none() {
                    continue;
                }
                for side in target.write.first().into_iter().chain(secondaries) {
                    let Ok(node) = node_of(&side.spec, db) else {
                        continue;
                    };
                    if !nodes
                        .iter()
                        .any(|(n, _)| n.addr == node.addr && n.db == node.db)
                    {
                        nodes.push((node, db));
                    }
                }
            }
        }
        Walk {
            asked,
            nodes,
            at: 0,
            cursor: Bytes::from_static(b"0"),
            pattern,
        }
    }

    /// Whether some node is left to walk.
    pub(super) fn page_left(&self) -> bool {
        self.at < self.nodes.len()
    }

    /// The next page of keys to compare, each with its nodes; `None` once every node was walked.
    pub(super) async fn page(
        &mut self,
        tenant: &Tenant,
        resource: &str,
        links: &mut Links,
        timeout: Duration,
    ) -> Result<Option<Vec<(MissedKey, Nodes)>>, Trouble> {
        let Some((node, db)) = self.nodes.get(self.at) else {
            return Ok(None);
        };
        let connection = links.to(node, timeout).await.map_err(Trouble::Secondary)?;
        let reply = connection
            .call(&[
                b"SCAN",
                &self.cursor,
                b"MATCH",
                &self.pattern,
                b"COUNT",
                SCAN_COUNT,
            ])
            .await
            .map_err(Trouble::Secondary)?;
        let (next, names) =
            scanned(&reply).ok_or_else(|| Trouble::Refused("unexpected SCAN reply".to_string()))?;
        let here = |n: &NodeSpec| n.addr == node.addr && n.db == node.db;
        let mut page = Vec::with_capacity(names.len());
        for name in names {
            let key = (*db, name);
            match nodes_of(&tenant.route, resource, &key)? {
                // Placed on this walk's node: the walk of another node (or no one) owns the others.
                Some(nodes) if here(&nodes.0) || here(&nodes.1) => page.push((key, nodes)),
                _ => {}
            }
        }
        if &next[..] == b"0" {
            self.at += 1;
        }
        self.cursor = next;
        Ok(Some(page))
    }
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
