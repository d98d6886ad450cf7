//! Request and response bodies of the control plane's REST API.
//!
//! Timestamps are RFC 3339 strings in UTC. Request bodies reject unknown fields, so a misspelt field is a 422
//! rather than a silently ignored change.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{RouteTable, TenantLimits};

/// Every error: a stable machine-readable `error` code, a sentence for people, and per-field details.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: String,
    pub message: String,
    #[serde(default)]
    pub details: Vec<ErrorDetail>,
}

/// One problem in a request body, at `path` (a JSON pointer into that body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorDetail {
    pub path: String,
    pub message: String,
}

/// `POST /v1/tenants`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantCreate {
    /// 1 to 64 of `A-Z a-z 0-9 _ . -`, starting with a letter or digit.
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub disabled: bool,
    #[serde(default)]
    pub allow_admin: bool,
    #[serde(default)]
    pub limits: TenantLimits,
}

/// `PATCH /v1/tenants/{tenant}`: only the fields given change; `limits` replaces all limits at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_admin: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<TenantLimits>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tenant {
    pub name: String,
    pub description: String,
    pub disabled: bool,
    pub allow_admin: bool,
    pub limits: TenantLimits,
    /// The current route version, if the tenant has a route yet.
    pub route_version: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// `POST /v1/tenants/{tenant}/credentials`: without `password` the control plane issues a random secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialCreate {
    #[serde(default)]
    pub description: String,
    /// An existing password to import (at least 16 characters), so clients of an old proxy keep working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Credential {
    pub id: i64,
    pub description: String,
    /// Whether the secret was imported rather than issued by the control plane.
    pub imported: bool,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

/// The answer to `POST .../credentials`: the only time an issued secret is ever shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialIssued {
    #[serde(flatten)]
    pub credential: Credential,
    /// The issued secret (absent for an imported password, which the caller already knows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CredentialList {
    pub credentials: Vec<Credential>,
}

/// `POST /v1/resources`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceCreate {
    /// 1 to 128 of `A-Z a-z 0-9 _ . -`, starting with a letter or digit (so never a URL).
    pub name: String,
    /// A resource URL: `redis://`, `redis-sentinel://`, `redis-cluster://`, ...
    pub url: String,
    #[serde(default)]
    pub description: String,
}

/// `PUT /v1/resources/{name}`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceUpdate {
    pub url: String,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Resource {
    pub name: String,
    pub url: String,
    pub description: String,
    /// Tenants whose current route refers to this resource (it cannot be deleted while any does).
    pub used_by: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ResourceList {
    pub resources: Vec<Resource>,
}

/// `PUT /v1/tenants/{tenant}/route`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RoutePut {
    pub route: RouteTable,
    #[serde(default)]
    pub comment: String,
}

/// `POST /v1/tenants/{tenant}/route/rollback`: makes a new version whose table equals `version`'s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRollback {
    pub version: i64,
    /// Defaults to "rollback to version N".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
}

/// One immutable version of a tenant's route table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteVersion {
    pub version: i64,
    pub route: RouteTable,
    pub comment: String,
    pub author: String,
    pub created_at: String,
}

/// `GET .../route/explain?key=K`: where a key goes under the current route, computed by the placement code the
/// gateways use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteExplanation {
    pub key: String,
    pub version: i64,
    /// The shard's name; `null` for a single-target route.
    pub shard: Option<String>,
    /// Read resources (names or URLs without passwords), in policy order.
    pub read: Vec<String>,
    pub read_policy: crate::ReadPolicy,
    /// Write resources: the primary first, then double-write secondaries.
    pub write: Vec<String>,
    pub ack: crate::AckMode,
}

/// The answer to a route change: the new version and the global revision that carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteChange {
    pub revision: i64,
    #[serde(flatten)]
    pub version: RouteVersion,
}

/// A version in the history listing (the table itself is at `.../route/versions/{v}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteVersionSummary {
    pub version: i64,
    pub comment: String,
    pub author: String,
    pub created_at: String,
}

/// Newest first; pass `next_before` as `before` for the next page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RouteVersionPage {
    pub versions: Vec<RouteVersionSummary>,
    pub next_before: Option<i64>,
}

/// `POST /v1/gateways/heartbeat`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// Stable for the life of a gateway process (1 to 200 characters).
    pub id: String,
    /// Where clients reach it, for people reading `GET /v1/gateways`.
    #[serde(default)]
    pub address: String,
    /// The snapshot revision the gateway serves.
    pub revision: i64,
    /// The gateway's build version (at most 100 characters).
    #[serde(default)]
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatAck {
    /// The control plane's current revision.
    pub revision: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Gateway {
    pub id: String,
    pub address: String,
    pub revision: i64,
    /// Its build version, as its last heartbeat said.
    pub version: String,
    pub last_seen: String,
    /// Heard from within the liveness window.
    pub live: bool,
    /// Serves the current revision.
    pub up_to_date: bool,
}

/// `GET /v1/gateways`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct GatewayFleet {
    pub revision: i64,
    /// Every live gateway serves the current revision.
    pub converged: bool,
    pub gateways: Vec<Gateway>,
}

/// One change, as the audit log recorded it. Secrets never appear; backend passwords are masked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditEntry {
    pub id: i64,
    /// The global revision this change produced.
    pub revision: i64,
    pub at: String,
    pub actor: String,
    /// What happened, e.g. `tenant.create`, `route.put`, `credential.revoke`.
    pub action: String,
    pub tenant: Option<String>,
    /// What changed, e.g. `tenants/acme/credentials/3`.
    pub object: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
}

/// `GET /healthz`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    pub status: String,
    pub revision: i64,
}
