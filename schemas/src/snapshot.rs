//! The snapshot a gateway pulls from the control plane: everything it needs to serve, at one revision, or only
//! what changed since a revision the gateway already has (a delta).
//!
//! Unknown fields are ignored (unlike in request bodies), so a control plane may add fields without breaking
//! gateways that do not know them yet.
//!
//! Protocol versions, both served by one `GET /v1/snapshot`:
//! - 1: full snapshots only (`revision`, `tenants`). A gateway that sends no `epoch` is served this way.
//! - 2: every snapshot names the control plane's `epoch`; a gateway that passes `epoch` and `after` back gets a
//!   delta (`delta` present) when the control plane can serve one, else a full snapshot.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TenantPolicy;
use crate::{RouteTable, TenantLimits};

/// `GET /v1/snapshot`: every tenant that has a route, at `revision`; or, when `delta` is present, only the tenants
/// added or changed since `delta.after` and the names of those removed.
///
/// Tenants without a route yet are left out: a gateway could not serve them anyway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Snapshot {
    /// The control plane's global revision this snapshot reflects; ask for `after` it to wait for the next.
    pub revision: i64,
    /// Names the control plane's history of revisions (its database): a delta applies only to a snapshot of the
    /// same epoch. Absent from control planes that serve no deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<String>,
    /// Every served tenant, sorted by name; in a delta, only those added or changed since `delta.after`.
    pub tenants: Vec<SnapshotTenant>,
    /// Present when this snapshot is a delta.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<SnapshotDelta>,
}

/// What makes a snapshot a delta: the revision it applies to, and the tenants it removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotDelta {
    /// The revision this delta applies on top of (the `after` the gateway asked with).
    pub after: i64,
    /// Tenants deleted since `after`, sorted; never one of `tenants`. A gateway drops those it has (the list may
    /// name tenants it never had, e.g. one created and deleted in between).
    pub removed_tenants: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotTenant {
    pub name: String,
    /// A disabled tenant's clients are refused at `AUTH`.
    pub disabled: bool,
    /// Lets the tenant run dangerous admin commands (FLUSHALL, CONFIG SET, KEYS, ...).
    pub allow_admin: bool,
    pub limits: TenantLimits,
    #[serde(flatten)]
    pub policy: TenantPolicy,
    /// The tenant's valid (not revoked) credentials.
    pub credentials: Vec<SnapshotCredential>,
    /// The current route table with every registered resource name replaced by its URL.
    pub route: RouteTable,
    /// The version of `route` in the tenant's route history.
    pub route_version: i64,
    /// The destination of the tenant's readiness probe (docs/migration.md#readiness), resource URLs without
    /// their passwords: gateways check the tenant's commands against its placement, and send nothing there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<RouteTable>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SnapshotCredential {
    pub id: i64,
    /// [`credential_digest`](crate::credential_digest) of the secret.
    pub digest: String,
}
