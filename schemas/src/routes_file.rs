//! The local routes file: tenants and their routes for a gateway that runs without a control plane.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::RouteTable;

/// `routes.json`: what a gateway started with `--routes` serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutesFile {
    /// Named resources that routes may refer to by name instead of repeating a URL.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, String>,
    pub tenants: Vec<TenantConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantConfig {
    pub name: String,
    /// Any of these authenticates a client as this tenant. Empty: clients need no AUTH (one tenant at most).
    pub passwords: Vec<String>,
    pub route: RouteTable,
    #[serde(default)]
    pub limits: TenantLimits,
    /// Lets the tenant run dangerous admin commands (FLUSHALL, CONFIG SET, KEYS, ...).
    #[serde(default)]
    pub allow_admin: bool,
}

/// Per-tenant limits, enforced by each gateway on its own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantLimits {
    /// Most client connections this tenant may hold open on one gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Most commands per second this tenant may run on one gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_ops_per_sec: Option<u32>,
}
