//! The snapshot a gateway pulls from the control plane: everything it needs to serve, at one revision.
//!
//! Unknown fields are ignored (unlike in request bodies), so a control plane may add fields without breaking
//! gateways that do not know them yet.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{RouteTable, TenantLimits};

/// `GET /v1/snapshot`: every tenant that has a route, at `revision`.
///
/// Tenants without a route yet are left out: a gateway could not serve them anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    /// The control plane's global revision this snapshot reflects; ask for `after` it to wait for the next.
    pub revision: i64,
    pub tenants: Vec<SnapshotTenant>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotTenant {
    pub name: String,
    /// A disabled tenant's clients are refused at `AUTH`.
    pub disabled: bool,
    /// Lets the tenant run dangerous admin commands (FLUSHALL, CONFIG SET, KEYS, ...).
    pub allow_admin: bool,
    pub limits: TenantLimits,
    /// The tenant's valid (not revoked) credentials.
    pub credentials: Vec<SnapshotCredential>,
    /// The current route table with every registered resource name replaced by its URL.
    pub route: RouteTable,
    /// The version of `route` in the tenant's route history.
    pub route_version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotCredential {
    pub id: i64,
    /// [`credential_digest`](crate::credential_digest) of the secret.
    pub digest: String,
}
