//! Dedicated connections as a tenant's route places them: which node serves a place (the shard's primary; on a
//! cluster, the master of the slot), the leases that bound them (the tenant's and the node's), and the connection
//! a session holds for blocking commands, transactions and subscriptions.

use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{Place, ResolvedRoute, Tenant};
use crate::backend::budget::DedicatedBudget;
use crate::backend::dedicated::{self, Pushes, Wait};
use crate::backend::spares::Spares;
use crate::backend::{ClusterBackend, ConnectionSettings, NodeSpec, Upstream};
use crate::clients::Blocked;
use crate::reply::{ReplyHandle, ReplyQueue};
use crate::resp;

/// What opening a dedicated connection takes beside the route: the worker's spares and timeouts, the gateway's
/// per-node budget and limit per tenant, and the tenant.
pub(crate) struct Opening<'a> {
    pub tenant: &'a Tenant,
    pub budget: &'a Arc<DedicatedBudget>,
    pub spares: &'a Rc<Spares>,
    pub connect_timeout: Duration,
    pub command_timeout: Duration,
    /// Most dedicated connections one tenant holds (`--max-dedicated-connections`).
    pub max_per_tenant: usize,
    /// For a subscription: the client's reply queue, where the node's messages go.
    pub pushes: Option<&'a Rc<ReplyQueue>>,
}

/// A session's own connection to the node that serves one place of its route.
pub(crate) struct Dedicated {
    connection: dedicated::Dedicated,
}

impl ResolvedRoute {
    /// Opens a dedicated connection to the primary of `place` (for a cluster, the master of its slot), within the
    /// tenant's limit and the node's budget. An error is returned as the reply the client gets.
    pub(crate) fn open_dedicated(
        &self,
        place: Place,
        opening: Opening<'_>,
    ) -> Result<Dedicated, Bytes> {
        let (node, cluster) = self.dedicated_node(place)?;
        let tenant = opening.tenant;
        let max = opening.max_per_tenant;
        let limit = i64::try_from(max).unwrap_or(i64::MAX);
        let Some(lease) = tenant.runtime.lease_dedicated(limit) else {
            return Err(resp::error_reply(&format!(
                "ERR tenant '{}' holds its maximum of {max} dedicated backend connections (blocking commands, transactions, subscriptions); try again later",
                tenant.name
            )));
        };
        let settings = ConnectionSettings {
            connect_timeout: opening.connect_timeout,
            command_timeout: opening.command_timeout,
        };
        let pushes = opening.pushes.map(|queue| Pushes {
            queue: Rc::clone(queue),
            rename: tenant.channels().map(|channels| {
                Box::new(move |frame| channels.inbound_frame(frame)) as Box<dyn Fn(Bytes) -> Bytes>
            }),
        });
        let leases = (lease, opening.budget.take(&node.addr, &tenant.name)?);
        let spares = Rc::clone(opening.spares);
        Ok(Dedicated {
            connection: dedicated::Dedicated::open(
                (node, cluster),
                settings,
                spares,
                leases,
                pushes,
            ),
        })
    }

    /// The node a dedicated connection for `place` goes to, and its cluster on a cluster route (whose members
    /// alone a redirect is followed to).
    fn dedicated_node(
        &self,
        place: Place,
    ) -> Result<(NodeSpec, Option<Weak<ClusterBackend>>), Bytes> {
        let (shard, slot) = place;
        let upstream = self.primary(shard).map_err(Bytes::clone)?;
        let node = upstream
            .dedicated_node(slot)
            .map_err(|e| resp::error_reply(&e))?;
        let cluster = match upstream {
            Upstream::Cluster(cluster) => Some(Rc::downgrade(cluster)),
            _ => None,
        };
        Ok((node, cluster))
    }
}

impl Dedicated {
    /// Sends a request whose replies, one per handle and in order, go to `replies`, within the command timeout.
    pub(crate) fn send(&self, raw: Bytes, replies: Vec<ReplyHandle>) {
        self.connection.send(raw, replies, Wait::Bounded);
    }

    /// Sends a blocking command: no deadline for its reply, and its client shows as blocked once the node has it.
    pub(crate) fn send_blocking(&self, raw: Bytes, reply: ReplyHandle, blocked: Blocked) {
        self.connection.send_blocking(raw, reply, Box::new(blocked));
    }

    /// Whether this connection goes to the node that serves `place` of `route` (a client's subscriptions share
    /// one connection, so they must live on one node); the error reply when that node cannot be told.
    pub(crate) fn serves(&self, route: &ResolvedRoute, place: Place) -> Result<bool, Bytes> {
        Ok(route.dedicated_node(place)?.0.addr == self.connection.addr())
    }

    /// Replies sent for but not received yet.
    pub(crate) fn pending(&self) -> usize {
        self.connection.pending()
    }

    /// Whether the connection failed (its requests got error replies).
    pub(crate) fn failed(&self) -> bool {
        self.connection.failed()
    }

    /// The backend connection, for `EXEC` (see `exec`).
    pub(super) fn connection(&self) -> &dedicated::Dedicated {
        &self.connection
    }
}

impl dedicated::Blocked for Blocked {
    fn reached(&mut self) {
        Blocked::reached(self);
    }
}
