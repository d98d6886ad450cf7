//! Secondaries that come back with less than they had: restarted (without persistence, or from an older snapshot)
//! or replaced by a failover to a replica that lagged. The record of missed keys cannot know what such a
//! secondary lost, so every tenant that double-writes to it gets a catch-up (every key compared).
//!
//! Each second, the task reads the `run_id` (a new one at every start) and the replication id (a new one at a
//! failover) of every standalone double-write secondary of the routes served; a node whose identity changed
//! since the last reading asks each of its tenants' records for a catch-up. A node that does not answer keeps
//! the identity last read, so one that comes back is compared with what it was before it went away.

use std::collections::HashMap;
use std::time::Duration;

use crate::backend::NodeSpec;
use crate::backend::direct::{DirectConnection, Value};
use crate::missed::{CatchUp, Repairs};
use crate::route::Snapshot;

/// The identity of a node's data: its `run_id` and its `master_replid`.
type Identity = (String, String);

/// What the task last read of each secondary node, by address.
#[derive(Default)]
pub(super) struct Restarts {
    seen: HashMap<String, Identity>,
}

impl Restarts {
    /// Reads every double-write secondary's identity; for each that changed, asks its tenants for a catch-up.
    pub(super) async fn check(
        &mut self,
        snapshot: &Snapshot,
        repairs: &Repairs,
        timeout: Duration,
    ) {
        for (node, records) in secondaries(snapshot).into_values() {
            let Ok(identity) = identity(&node, timeout).await else {
                continue;
            };
            let before = self.seen.insert(node.addr.clone(), identity.clone());
            if before.is_none_or(|before| before == identity) {
                continue;
            }
            tracing::warn!(node = %node.addr, run_id = %identity.0,
                "a double-write secondary came back as another server (restarted or failed over): its tenants' \
                 keys will be compared");
            for (tenant, resource) in records {
                repairs
                    .missed(&tenant, &resource)
                    .ask_catch_up(CatchUp::Restarted);
            }
        }
    }
}

/// Every standalone double-write secondary of the snapshot's routes, with the (tenant, resource) pairs that
/// write to it.
fn secondaries(snapshot: &Snapshot) -> HashMap<String, (NodeSpec, Vec<(String, String)>)> {
    let mut found: HashMap<String, (NodeSpec, Vec<(String, String)>)> = HashMap::new();
    for tenant in snapshot.tenants().iter() {
        for target in &tenant.route.shards {
            for resource in target.write.iter().skip(1) {
                let Ok(crate::backend::ResourceSpec::Node(node)) = &resource.spec else {
                    continue;
                };
                let (_, records) = found
                    .entry(node.addr.clone())
                    .or_insert_with(|| (node.clone(), Vec::new()));
                let record = (tenant.name.clone(), resource.name.clone());
                if !records.contains(&record) {
                    records.push(record);
                }
            }
        }
    }
    found
}

/// A node's `run_id` and `master_replid`, from `INFO`.
async fn identity(node: &NodeSpec, timeout: Duration) -> std::io::Result<Identity> {
    let mut connection = DirectConnection::open_as_owner(node, timeout).await?;
    let info = connection.call(&[b"INFO", b"server"]).await?;
    let replication = connection.call(&[b"INFO", b"replication"]).await?;
    let field = |reply: &Value, name: &str| {
        reply
            .text()?
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(|value| value.trim().to_string())
    };
    match (field(&info, "run_id"), field(&replication, "master_replid")) {
        (Some(run_id), Some(replid)) => Ok((run_id, replid)),
        _ => Err(std::io::Error::other("no run_id or master_replid in INFO")),
    }
}
