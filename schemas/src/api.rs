//! Request and response bodies of the control plane's REST API.
//!
//! Timestamps are RFC 3339 strings in UTC. Request bodies reject unknown fields, so a misspelt field is a 422
//! rather than a silently ignored change.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod explain;
pub use explain::{
    MAX_EXPLAIN_KEYS, RingPoint, RouteExplainKeys, RouteExplanation, RouteExplanations, WritePlace,
    WriteTable,
};

use crate::{RouteTable, TenantLimits, TenantPolicy};

mod credentials;
pub use credentials::*;
mod divergence;
pub use divergence::*;
mod following;
pub use following::Following;
mod guard;
pub use guard::{KeyMove, KeyMoves, MoveEstimate, percent};
mod reachability;
pub use reachability::*;
mod limits;
pub use limits::{LimitDemand, LimitShare};
mod readiness;
pub use readiness::*;
mod tokens;
pub use tokens::*;
mod tracking;
pub use tracking::*;
mod tenant_patch;
pub use tenant_patch::TenantPatch;
mod usage;
pub use usage::*;

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

with_policy_fields! {
    gathered
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
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Tenant {
    pub name: String,
    pub description: String,
    pub disabled: bool,
    pub allow_admin: bool,
    pub limits: TenantLimits,
    #[serde(flatten)]
    pub policy: TenantPolicy,
    /// The current route version, if the tenant has a route yet.
    pub route_version: Option<i64>,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /v1/tenants`: by name; with `limit`, one page, and `next_after` to pass as `after` for the next one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
    /// The last name of a full page (more may follow); absent on the last page and without `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after: Option<String>,
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
    /// Change the URL though routes use the resource and it points at other data (409) or fails its probe (422).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
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
    /// Whether the gateways reach it (docs/usage.md#resources); in listings and `GET` only, absent where no
    /// gateway reported it lately.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachability: Option<ResourceReachability>,
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
    /// Make the change even though it would leave keys where they are no longer found, or name resources the
    /// control plane cannot reach (yet): see `KeyMoves`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
}

/// `POST /v1/tenants/{tenant}/route/rollback`: makes a new version whose table equals `version`'s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteRollback {
    pub version: i64,
    /// Defaults to "rollback to version N".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// As `RoutePut`'s.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
}

fn is_false(value: &bool) -> bool {
    !value
}

fn is_zero(value: &u32) -> bool {
    *value == 0
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

/// The answer to a route change: the new version, the global revision that carries it, and what the change
/// does to where the tenant's keys are found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RouteChange {
    pub revision: i64,
    #[serde(flatten)]
    pub version: RouteVersion,
    pub keys: KeyMoves,
}

/// `POST /v1/import`: many tenants onboarded in one change (one revision, one audit entry), all or nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Import {
    pub tenants: Vec<TenantImport>,
}

/// One tenant of an import: what `POST /v1/tenants`, `POST .../credentials` and `PUT .../route` would take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantImport {
    pub tenant: TenantCreate,
    /// Imported passwords, client certificates, or `{}` for a secret the control plane issues.
    #[serde(default)]
    pub credentials: Vec<CredentialCreate>,
    /// The tenant's first route version; without one the tenant is not served until a route is put.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteTable>,
    /// The comment of that route version.
    #[serde(default)]
    pub comment: String,
}

/// The answer to an import: the revision that carries all of it, and each tenant in the order given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ImportResult {
    pub revision: i64,
    pub tenants: Vec<TenantImported>,
}

/// One imported tenant, with the secrets issued for it (shown only here, as by `POST .../credentials`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TenantImported {
    pub tenant: Tenant,
    pub credentials: Vec<CredentialIssued>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<RouteVersion>,
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
///
/// Fields added since the first version are left out when empty, and an older control plane refuses a heartbeat
/// with fields it does not know (422): the gateway then sends only the first version's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
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
    /// How often it sends heartbeats, in milliseconds: its shares of fleet limits count for three of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// The control-plane replica it follows (the one this heartbeat goes to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<Following>,
    /// The recent demand of each of its tenants whose limits hold for the fleet (`limits_scope`), those with
    /// neither traffic nor connections left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demand: Vec<LimitDemand>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HeartbeatAck {
    /// The control plane's current revision.
    pub revision: i64,
    /// Gateways whose shares of fleet limits count now, this one included; absent (0) in the answer to a
    /// heartbeat without `interval_ms`, and from control planes without fleet limits.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub live_gateways: u32,
    /// This gateway's share of the fleet limits of every tenant that asked for some anywhere in the fleet
    /// lately; any other tenant's share is its limit divided by `live_gateways`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<LimitShare>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Gateway {
    pub id: String,
    pub address: String,
    pub revision: i64,
    /// Its build version, as its last heartbeat said.
    pub version: String,
    /// The control-plane replica it follows, as its last heartbeat said (absent from gateways that do not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub following: Option<Following>,
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
    /// At least one gateway is live and every live gateway serves the current revision (false when none is live:
    /// then nothing serves it).
    pub converged: bool,
    /// How many gateways are live.
    pub live: usize,
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

/// Where a migration moves a tenant: a whole route table (to re-shard) or one target (a resource or a split
/// target), which becomes a `single` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MigrationDestination {
    Table(RouteTable),
    Target(crate::Target),
}

impl MigrationDestination {
    pub fn into_table(self) -> RouteTable {
        match self {
            MigrationDestination::Table(table) => table,
            MigrationDestination::Target(target) => RouteTable::single(target),
        }
    }
}

/// `POST /v1/tenants/{tenant}/migrations`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationCreate {
    pub to: MigrationDestination,
    /// When a double-written command is answered during the migration (`primary` or `all`).
    #[serde(default)]
    pub ack: crate::AckMode,
    #[serde(default)]
    pub limits: MigrationLimits,
}

/// How hard the background copy and check may press on the deployments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MigrationLimits {
    /// Keys read from the old deployment per second, by backfill and verify (0: unlimited).
    #[serde(default = "default_keys_per_sec")]
    pub keys_per_sec: u64,
    /// Bytes of DUMP payload moved per second (0: unlimited).
    #[serde(default)]
    pub bytes_per_sec: u64,
    /// Keys per SCAN page (and per pipelined batch).
    #[serde(default = "default_batch")]
    pub batch: u64,
    /// Verify treats TTLs that differ by at most this many milliseconds as equal.
    #[serde(default = "default_ttl_tolerance")]
    pub ttl_tolerance_ms: u64,
}

impl Default for MigrationLimits {
    fn default() -> MigrationLimits {
        MigrationLimits {
            keys_per_sec: default_keys_per_sec(),
            bytes_per_sec: 0,
            batch: default_batch(),
            ttl_tolerance_ms: default_ttl_tolerance(),
        }
    }
}

fn default_keys_per_sec() -> u64 {
    20_000
}

fn default_batch() -> u64 {
    200
}

fn default_ttl_tolerance() -> u64 {
    2_000
}

/// A migration's place in its workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MigrationState {
    /// Writes go to old (primary) and new (secondary); reads stay on old.
    DoubleWrite,
    /// The backfill task copies the keys that existed before double-write.
    Backfilling,
    Backfilled,
    /// The verify task compares every key and repairs differences from old.
    Verifying,
    Verified,
    /// Reads go to new; writes go to new (primary) and old (secondary), so a rollback loses nothing.
    CutOver,
    /// An abort from `cut_over`: the route stays as in `cut_over` while the rollback task compares every key and
    /// repairs old from new (what old missed); then the route returns to old and the state is `aborted`.
    RollingBack,
    /// The route is the new one only.
    Finished,
    /// Back on the old route; nothing was deleted anywhere.
    Aborted,
}

impl MigrationState {
    /// The name used in the API, the database and the audit log.
    pub fn as_str(self) -> &'static str {
        match self {
            MigrationState::DoubleWrite => "double_write",
            MigrationState::Backfilling => "backfilling",
            MigrationState::Backfilled => "backfilled",
            MigrationState::Verifying => "verifying",
            MigrationState::Verified => "verified",
            MigrationState::CutOver => "cut_over",
            MigrationState::RollingBack => "rolling_back",
            MigrationState::Finished => "finished",
            MigrationState::Aborted => "aborted",
        }
    }

    /// Every state, in the order a migration goes through them.
    pub const ALL: [MigrationState; 9] = [
        MigrationState::DoubleWrite,
        MigrationState::Backfilling,
        MigrationState::Backfilled,
        MigrationState::Verifying,
        MigrationState::Verified,
        MigrationState::CutOver,
        MigrationState::RollingBack,
        MigrationState::Finished,
        MigrationState::Aborted,
    ];

    pub fn parse(name: &str) -> Option<MigrationState> {
        MigrationState::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Finished and aborted migrations are history; anything else blocks a second migration of the tenant.
    pub fn is_active(self) -> bool {
        !matches!(self, MigrationState::Finished | MigrationState::Aborted)
    }
}

/// The counters of one background task (backfill, verify, or the rollback, which verifies the other way: old is
/// repaired from new).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TaskProgress {
    /// Keys SCAN returned so far.
    pub scanned: u64,
    /// Backfill: keys restored on the new deployment.
    pub copied: u64,
    /// Backfill: keys already there (written through double-write: BUSYKEY) or gone before they were read.
    pub skipped: u64,
    /// Keys that could not be copied or checked (see the logs).
    pub failed: u64,
    /// Verify: keys equal on both sides (type, value digest, TTL within tolerance).
    pub matched: u64,
    /// Verify: keys re-copied from old because new differed or lacked them (rollback: to old from new).
    pub repaired: u64,
    /// Verify: keys deleted from new because old no longer has them (rollback: from old, new lacking them).
    pub removed: u64,
    /// Verify: keys still different after every re-check (written continuously); verify again later.
    pub unresolved: u64,
    /// Keys the deployments held when the task started (DBSIZE): what `remaining` counts down from.
    pub estimated_total: u64,
    pub remaining: u64,
    /// Keys per second over the task so far.
    pub keys_per_sec: f64,
    /// Seconds left at the current rate.
    pub eta_secs: Option<u64>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Verify and rollback: the gateways' repair of the double-write secondaries, as every gateway reporting said
    /// when the task ended (docs/route-tables.md#repair-of-missed-writes): keys it made equal since each gateway
    /// started (`repaired`), keys it still owed (`pending`), the sampled divergence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_repair: Option<DivergenceCounts>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationProgress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill: Option<TaskProgress>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<TaskProgress>,
    /// The rollback task of an abort from `cut_over` (`matched`, `repaired`, `removed` count old's keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<TaskProgress>,
}

/// `GET /v1/tenants/{tenant}/migrations/{id}`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Migration {
    pub id: i64,
    pub tenant: String,
    pub state: MigrationState,
    /// The route before the migration (restored by `abort`).
    pub from: RouteTable,
    /// The route after `finish`.
    pub to: RouteTable,
    pub ack: crate::AckMode,
    pub limits: MigrationLimits,
    /// The revision of the migration's latest route change; the next step waits until every live gateway
    /// serves it.
    pub route_revision: i64,
    /// Every live gateway serves `route_revision` (also true when no gateway is live: there is none to wait for),
    /// so the next step is not held back.
    pub converged: bool,
    pub progress: MigrationProgress,
    /// Why the last background task stopped, if it failed.
    pub error: Option<String>,
    pub author: String,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /v1/tenants/{tenant}/migrations`, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MigrationList {
    pub migrations: Vec<Migration>,
}
