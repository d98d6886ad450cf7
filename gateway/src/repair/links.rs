//! Where the repair of a key goes, and its connections: the key's primary and secondary nodes under the route
//! served now (see `sides`), and one connection per node and database, opened as the resource's own user; a
//! sentinel-managed master's only once it says it is a master (`ROLE`), so that a demoted one gets no copy.

use std::collections::HashMap;
use std::io;
use std::time::Duration;

use super::key::Trouble;
use super::sides::Sides;
use crate::backend::direct::DirectConnection;
use crate::backend::{NodeRole, NodeSpec};
use crate::missed::MissedKey;
use crate::route::{ResourcePlan, RoutePlan};

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
            let mut connection = DirectConnection::open_as_owner(node, timeout).await?;
            if node.role == NodeRole::Master {
                let role = connection.call(&[b"ROLE"]).await?;
                let first = role.array().and_then(|r| r.first()?.text());
                if first != Some("master") {
                    return Err(io::Error::other("the sentinel's master is no master (yet)"));
                }
            }
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

    /// Forgets the connection to `node`, which failed: the next use opens a new one.
    pub(super) fn drop(&mut self, node: &NodeSpec) {
        self.open.remove(&(node.addr.clone(), node.db));
    }

    /// Forgets the connection of the side of `nodes` that `trouble` blames, if one.
    pub(super) fn forget<T>(&mut self, nodes: &Nodes, outcome: &Result<T, Trouble>) {
        match outcome {
            Err(Trouble::Primary(_)) => self.drop(&nodes.0),
            Err(Trouble::Secondary(_)) => self.drop(&nodes.1),
            _ => {}
        }
    }

    /// Forgets every connection (those to nodes no longer routed go with them).
    pub(super) fn drop_all(&mut self) {
        self.open.clear();
    }
}

/// The primary and the secondary `resource` of a recorded key under `route` (each the node that holds the key, in
/// its database), or none when the route no longer writes the key there.
pub(super) fn nodes_of(
    route: &RoutePlan,
    resource: &str,
    key: &MissedKey,
    sides: &mut Sides,
) -> Result<Option<Nodes>, Trouble> {
    let Some((primary, secondary)) = resources_of(route, resource, &key.1) else {
        return Ok(None);
    };
    let (db, name) = key;
    Ok(Some((
        sides.node_of(&primary.spec, *db, name, Trouble::Primary)?,
        sides.node_of(&secondary.spec, *db, name, Trouble::Secondary)?,
    )))
}

/// The primary resource and the secondary `resource` that `route` writes `key` to, if it still does.
pub(super) fn resources_of<'r>(
    route: &'r RoutePlan,
    resource: &str,
    key: &[u8],
) -> Option<(&'r ResourcePlan, &'r ResourcePlan)> {
    let target = route.shards.get(route.shard_of(key))?;
    Some((
        target.write.first()?,
        target.write.iter().skip(1).find(|r| r.name == resource)?,
    ))
}
