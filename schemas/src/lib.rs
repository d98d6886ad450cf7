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

pub mod api;
pub mod credential;
pub mod placement;
pub mod policy;
pub mod resource;
pub mod route;
pub mod routes_file;
pub mod snapshot;
pub mod validate;
pub mod x509;

pub use credential::{ClientCertificate, certificate_digest, credential_digest};

pub use policy::{CommandRules, IpNet, TenantPolicy};
pub use resource::{Credentials, Node, ReplicaMode, ResourceKind, ResourceUrl, ResourceUrlError};
pub use route::{
    AckMode, HashSpec, ReadPolicy, ReadSet, RouteTable, Shard, SplitTarget, Target, WriteSet,
};
pub use routes_file::{OutputBufferLimit, RoutesFile, TenantConfig, TenantLimits};
pub use snapshot::{Snapshot, SnapshotCredential, SnapshotDelta, SnapshotTenant};
pub use validate::{ValidationError, ValidationErrors};

/// Every generated JSON Schema: file name (under `schemas/`) and the schema itself.
pub fn json_schemas() -> Vec<(&'static str, schemars::schema::RootSchema)> {
    vec![
        ("route-table.schema.json", schemars::schema_for!(RouteTable)),
        ("routes-file.schema.json", schemars::schema_for!(RoutesFile)),
        ("snapshot.schema.json", schemars::schema_for!(Snapshot)),
    ]
}
