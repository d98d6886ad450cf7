//! The heartbeat's part in fleet limits (docs/tenant-policies.md, "Fleet limits"): the demand of each tenant
//! whose limits hold for the fleet, sent with each heartbeat, and the shares its answer hands this gateway.

use std::collections::HashMap;
use std::time::Duration;

use switchyard_schemas::api::{HeartbeatAck, LimitDemand, LimitShare};

use crate::route::Snapshot;

/// The demand, over the `elapsed` since the last heartbeat, of every tenant of `snapshot` whose limits hold for
/// the fleet and that asked something or holds a connection.
pub(super) fn demand(snapshot: &Snapshot, elapsed: Duration) -> Vec<LimitDemand> {
    snapshot
        .tenants()
        .iter()
        .filter(|tenant| tenant.fleet_limits)
        .filter_map(|tenant| tenant.runtime.limit_demand(&tenant.name, elapsed))
        .collect()
}

/// Gives each tenant of `snapshot` whose limits hold for the fleet its share from `ack`: the one handed out for
/// it, else its limits divided by the live gateways (no gateway asked for any lately), or none at all (the whole
/// limits here) from a control plane that hands out no shares.
pub(super) fn apply(snapshot: &Snapshot, ack: &HeartbeatAck) {
    let shares: HashMap<&str, &LimitShare> = ack
        .shares
        .iter()
        .map(|share| (share.tenant.as_str(), share))
        .collect();
    for tenant in snapshot.tenants().iter().filter(|t| t.fleet_limits) {
        let (ops, connections) = match (shares.get(tenant.name.as_str()), ack.live_gateways) {
            (Some(share), _) => (share.ops_per_sec, share.connections),
            (None, 0) => (None, None),
            (None, live) => (
                tenant
                    .limits
                    .max_ops_per_sec
                    .map(|limit| f64::from(limit) / f64::from(live)),
                tenant.limits.max_connections.map(|limit| limit / live),
            ),
        };
        tenant.runtime.share.set(ops, connections);
    }
}
