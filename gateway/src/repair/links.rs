//! Where the repair of a key goes, and its connections: the key's primary and secondary nodes under the route
//! served now, and one connection per node and database, opened as the resource's own user.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use super::key::Trouble;
use crate::backend::direct::DirectConnection;
use crate::backend::{NodeSpec, ResourceSpec};
use crate::missed::MissedKey;
use crate::resp::Protocol;
use crate::route::RoutePlan;

/// A key's primary node and secondary node, each in the key's database.
pub(super) type Nodes = (NodeSpec, NodeSpec);

/// The connections of one round, by node and database.
#[derive(Default)]
pub(super) struct Links {
    open: HashMap<(String, u32), DirectConnection>,
}

impl Links {
    /// The connection to `node` (in its database), opened if need be.
    pub(super) async fn to(
        &mut self,
        node: &NodeSpec,
        timeout: Duration,
    ) -> io::Result<&mut DirectConnection> {
        let id = (node.addr.clone(), node.db);
        if !self.open.contains_key(&id) {
            let connection = DirectConnection::open_as_owner(node, timeout).await?;
            self.open.insert(id.clone(), connection);
        }
        self.open
            .get_mut(&id)
            .ok_or_else(|| io::Error::other("connection lost"))
    }

    /// The primary's connection and the secondary's, both open.
    pub(super) async fn pair(
        &mut self,
        nodes: &Nodes,
        timeout: Duration,
    ) -> Result<(&mut DirectConnection, &mut DirectConnection), Trouble> {
        let (primary, secondary) = nodes;
        self.to(secondary, timeout)
            .await
            .map_err(Trouble::Secondary)?;
        self.to(primary, timeout).await.map_err(Trouble::Primary)?;
        let ids = [
            (primary.addr.clone(), primary.db),
            (secondary.addr.clone(), secondary.db),
        ];
        match self.open.get_disjoint_mut([&ids[0], &ids[1]]) {
            [Some(p), Some(s)] => Ok((p, s)),
            _ => Err(Trouble::Refused(
                "the primary and the secondary are the same node".to_string(),
            )),
        }
    }

    /// Forgets a connection that failed: the next use opens a new one.
    pub(super) fn drop_all(&mut self) {
        self.open.clear();
    }
}

/// The primary and the secondary `resource` of a recorded key under `route` (each in the key's database), or
/// none when the route no longer writes the key there. Only standalone resources are repaired.
pub(super) fn nodes_of(
    route: &RoutePlan,
    resource: &str,
    key: &MissedKey,
) -> Result<Option<Nodes>, Trouble> {
    let (db, name) = key;
    let Some(target) = route.shards.get(route.shard_of(name)) else {
        return Ok(None);
    };
    let (Some(primary), Some(secondary)) = (
        target.write.first(),
        target.write.iter().skip(1).find(|r| r.name == resource),
    ) else {
        return Ok(None);
    };
    Ok(Some((
        node_of(&primary.spec, *db)?,
        node_of(&secondary.spec, *db)?,
    )))
}

/// The node of a standalone resource, in database `db` of the client's.
pub(super) fn node_of(spec: &Result<ResourceSpec, String>, db: u32) -> Result<NodeSpec, Trouble> {
    match spec
        .as_ref()
        .ok()
        .and_then(|spec| spec.for_client(db, Protocol::Resp2).ok())
    {
        Some(ResourceSpec::Node(node)) => Ok(node),
        _ => Err(Trouble::Refused(
            "only standalone resources are repaired".to_string(),
        )),
    }
}
