//! What gateways and the control plane exchange in heartbeats about fleet limits (docs/tenant-policies.md,
//! "Fleet limits"): each tenant's demand on a gateway, and the gateway's share of its limits.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One tenant's demand on one gateway since its last heartbeat.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitDemand {
    pub tenant: String,
    /// Commands per second its clients sent, those the rate limit refused included.
    #[serde(default)]
    pub ops_per_sec: f64,
    /// Client connections it holds open now.
    #[serde(default)]
    pub connections: u32,
    /// Connections its `max_connections` share refused since the last heartbeat.
    #[serde(default)]
    pub connections_refused: u32,
}

/// One tenant's share of its fleet limits on one gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LimitShare {
    pub tenant: String,
    /// Its share of `max_ops_per_sec`, when it has that limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops_per_sec: Option<f64>,
    /// Its share of `max_connections`, when it has that limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connections: Option<u32>,
}
