//! Secondaries that come back with less than they had: restarted (without persistence, or from an older snapshot)
//! or replaced by a failover to a replica that lagged. The record of missed keys cannot know what such a
//! secondary lost, so every tenant that double-writes to it gets a catch-up (every key compared).
//!
//! Each second, the task reads the `run_id` (a new one at every start) and the replication id (a new one at a
//! failover) of every master of every double-write secondary of the routes served: a standalone node, a
//! sentinel-managed resource's current master, each master of a Redis Cluster (see `sides`). A master whose
//! identity changed since the last reading, or a resource whose masters are other nodes than at the last reading
//! (a sentinel's or a cluster's failover, a cluster resharded onto a new master), asks each of its tenants'
//! records for a catch-up. A node that does not answer keeps the identity last read, so one that comes back is
//! compared with what it was before it went away. With `--state-dir`, what was read is kept in
//! `<state-dir>/repair/identities.json` whenever it changes, so that a gateway restarted while a secondary was
//! away compares it, once it is back, with what the gateway before it read.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::key::Trouble;
use super::sides::Sides;
use crate::backend::direct::{DirectConnection, Value};
use crate::backend::{NodeSpec, ResourceSpec};
use crate::missed::{CatchUp, Repairs};
use crate::route::Snapshot;

/// The identity of a node's data: its `run_id` and its `master_replid`.
type Identity = (String, String);

/// A secondary resource as watched: what names it (a node's address, a cluster's seeds, a sentinel set and its
/// master), its spec, and the (tenant, resource) records that write to it.
type Watched = (Result<ResourceSpec, String>, Vec<(String, String)>);

/// What the task last read of each master, by address, and of each secondary resource, its masters.
#[derive(Default, Clone, PartialEq, Serialize, Deserialize)]
struct Seen {
    identities: HashMap<String, Identity>,
    masters: HashMap<String, Vec<String>>,
}

/// What the task last read, and where it keeps it.
#[derive(Default)]
pub(super) struct Restarts {
    seen: Seen,
    file: Option<PathBuf>,
}

impl Restarts {
    /// What a gateway before this one read and kept under `state_dir`, if anything (and nothing without it).
    pub(super) fn kept_in(state_dir: Option<&Path>) -> Restarts {
        let Some(file) = state_dir.map(|dir| dir.join("repair").join("identities.json")) else {
            return Restarts::default();
        };
        let seen = match std::fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %file.display(), error = %e,
                    "the secondaries' identities kept on disk cannot be read; they are read again");
                Seen::default()
            }),
            Err(_) => Seen::default(),
        };
        Restarts {
            seen,
            file: Some(file),
        }
    }

    /// Keeps what was read, when it changed: a new file renamed over the old one.
    fn keep(&self, before: &Seen) {
        let Some(file) = self.file.as_ref().filter(|_| self.seen != *before) else {
            return;
        };
        let tmp = file.with_extension("tmp");
        let written = serde_json::to_vec(&self.seen)
            .map_err(std::io::Error::other)
            .and_then(|bytes| std::fs::write(&tmp, bytes))
            .and_then(|()| std::fs::rename(&tmp, file));
        if let Err(e) = written {
            tracing::warn!(file = %file.display(), error = %e,
                "cannot keep the secondaries' identities on disk");
        }
    }

    /// Reads every double-write secondary's masters and their identities; for each secondary that changed, asks
    /// its tenants for a catch-up.
    pub(super) async fn check(
        &mut self,
        snapshot: &Snapshot,
        repairs: &Repairs,
        sides: &mut Sides,
        timeout: Duration,
    ) {
        let before = self.seen.clone();
        for (name, (spec, records)) in secondaries(snapshot) {
            let Ok(nodes) = sides.nodes(&spec, 0, Trouble::Secondary) else {
                continue;
            };
            let mut changed = None;
            for node in &nodes {
                let Ok(identity) = identity(node, timeout).await else {
                    continue;
                };
                let before = self
                    .seen
                    .identities
                    .insert(node.addr.clone(), identity.clone());
                if before.is_some_and(|before| before != identity) {
                    changed = Some(node.addr.clone());
                }
            }
            let mut masters: Vec<String> = nodes.iter().map(|n| n.addr.clone()).collect();
            masters.sort();
            let before = self.seen.masters.insert(name.clone(), masters.clone());
            if before.is_some_and(|before| before != masters) {
                changed = Some(masters.join(","));
            }
            let Some(node) = changed else {
                continue;
            };
            tracing::warn!(%node, secondary = %name,
                "a double-write secondary came back as another server (restarted or failed over): its tenants' \
                 keys will be compared");
            for (tenant, resource) in records {
                repairs
                    .missed(&tenant, &resource)
                    .ask_catch_up(CatchUp::Restarted);
            }
        }
        self.keep(&before);
    }
}

/// Every double-write secondary of the snapshot's routes, by what names it, with the (tenant, resource) pairs
/// that write to it.
fn secondaries(snapshot: &Snapshot) -> HashMap<String, Watched> {
    let mut found: HashMap<String, Watched> = HashMap::new();
    for tenant in snapshot.tenants().iter() {
        for target in &tenant.route.shards {
            for resource in target.write.iter().skip(1) {
                let name = match &resource.spec {
                    Ok(ResourceSpec::Node(node)) => node.addr.clone(),
                    Ok(ResourceSpec::Cluster(cluster)) => format!("cluster {:?}", cluster.seeds),
                    Ok(ResourceSpec::Sentinel(sentinel, _)) => {
                        format!("sentinel {} {:?}", sentinel.master_name, sentinel.sentinels)
                    }
                    Err(_) => continue,
                };
                let (_, records) = found
                    .entry(name)
                    .or_insert_with(|| (resource.spec.clone(), Vec::new()));
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
