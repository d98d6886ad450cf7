//! The contract between Switchyard's control plane and its gateways.
//!
//! Everything that crosses a process boundary is described here as serde types: the route table a tenant is
//! served by, the local routes file a gateway can run from, the resource URLs both name, the snapshot a gateway
//! pulls from the control plane, and the control plane's REST payloads ([`api`]). The JSON Schema files
//! next to this crate (`schemas/*.schema.json`) are generated from these types; `tests/schema_drift.rs` fails when
//! the committed files no longer match.
//!
//! Semantic rules that a schema cannot express (unique shard names, complete bucket coverage, parseable URLs) live
//! in [`validate`], so the gateway and the control plane reject exactly the same tables with the same messages.

/// Declares a struct whose fields are the given ones followed by a tenant's policy fields, with their docs: the
/// tenant bodies that refuse unknown fields (`TenantCreate`, `TenantConfig`) cannot `#[serde(flatten)]` a
/// [`TenantPolicy`], so every struct that holds the fields is declared through here, `TenantPolicy` included.
/// With `gathered`, it also gets `policy()`, which gathers them into a [`TenantPolicy`].
macro_rules! with_policy_fields {
    ($(#[$meta:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$meta])*
        pub struct $name {
            $($fields)*
            /// A prefix the gateway puts before every key the tenant names, and takes off every key it is shown, so
            /// that tenants with distinct namespaces share one database. `{tag}:` keeps all the tenant's keys in
            /// one hash slot (and on one shard); a namespace without braces lets the tenant's own `{hash tags}`
            /// place its keys.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub namespace: Option<String>,
            /// Writes are refused with `READONLY`, as a replica refuses them.
            #[serde(default, skip_serializing_if = "std::ops::Not::not")]
            pub read_only: bool,
            /// Commands the tenant may, or may not, run.
            #[serde(default, skip_serializing_if = "crate::policy::CommandRules::is_empty")]
            pub commands: crate::policy::CommandRules,
            /// Client addresses (CIDRs or single addresses, IPv4 or IPv6) that may authenticate as the tenant;
            /// empty: any address.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub ip_allow: Vec<String>,
            /// Client addresses that may not, even when `ip_allow` names them.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub ip_deny: Vec<String>,
            /// Keys, or glob patterns of keys (Redis' `KEYS` syntax), whose commands are refused.
            #[serde(default, skip_serializing_if = "Vec::is_empty")]
            pub blocked_keys: Vec<String>,
            /// Thresholds of the slow log, big keys and hot keys for this tenant, in place of the gateway's.
            #[serde(default, skip_serializing_if = "crate::policy::TrackingPolicy::is_empty")]
            pub tracking: crate::policy::TrackingPolicy,
            /// What the tenant's scripts may do; none: what its route's resources say (`scripts` URL parameter),
            /// else `allow`.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub scripts: Option<crate::policy::ScriptsPolicy>,
            /// Where `limits.max_ops_per_sec` and `limits.max_connections` hold: across every gateway that
            /// follows the control plane (`fleet`, the default: each gateway enforces a share) or on each gateway
            /// on its own (`gateway`). A gateway serving a routes file enforces them on its own either way.
            #[serde(default, skip_serializing_if = "crate::policy::LimitsScope::is_fleet")]
            pub limits_scope: crate::policy::LimitsScope,
            /// Hot keys answered from the gateway's memory, kept exact by Redis' invalidations
            /// (docs/near-cache.md); none: every read goes to Redis.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub near_cache: Option<crate::policy::NearCachePolicy>,
        }
    };
    (gathered $(#[$meta:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        with_policy_fields! { $(#[$meta])* pub struct $name { $($fields)* } }

        impl $name {
            /// Its policies, as one value.
            pub fn policy(&self) -> crate::policy::TenantPolicy {
                crate::policy::TenantPolicy {
                    namespace: self.namespace.clone(),
                    read_only: self.read_only,
                    commands: self.commands.clone(),
                    ip_allow: self.ip_allow.clone(),
                    ip_deny: self.ip_deny.clone(),
                    blocked_keys: self.blocked_keys.clone(),
                    tracking: self.tracking,
                    scripts: self.scripts,
                    limits_scope: self.limits_scope,
                    near_cache: self.near_cache,
                }
            }
        }
    };
}

pub mod api;
pub mod credential;
pub mod databases;
mod error;
pub mod placement;
pub mod policy;
pub mod resource;
pub mod route;
pub mod routes_file;
pub mod snapshot;
pub mod validate;

pub use credential::{ClientCertificate, certificate_digest, credential_digest};

pub use error::{ValidationError, ValidationErrors};
pub use policy::{
    CommandRules, IpNet, LimitsScope, NearCacheKeys, NearCachePolicy, ScriptsPolicy, TenantPolicy,
};
pub use resource::{
    Credentials, Node, ReplicaMode, ResourceKind, ResourceUrl, ResourceUrlError, resource_location,
};
pub use route::{
    AckMode, HashSpec, ReadPolicy, ReadSet, RouteTable, Shard, SplitTarget, Target, WriteSet,
};
pub use routes_file::{OutputBufferLimit, RoutesFile, TenantConfig, TenantLimits};
pub use snapshot::{Snapshot, SnapshotCredential, SnapshotDelta, SnapshotTenant};

/// Every generated JSON Schema: file name (under `schemas/`) and the schema itself.
pub fn json_schemas() -> Vec<(&'static str, schemars::schema::RootSchema)> {
    vec![
        ("route-table.schema.json", schemars::schema_for!(RouteTable)),
        ("routes-file.schema.json", schemars::schema_for!(RoutesFile)),
        ("snapshot.schema.json", schemars::schema_for!(Snapshot)),
    ]
}
