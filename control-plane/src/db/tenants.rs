//! Tenants.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::api::{Tenant, TenantCreate};
use switchyard_schemas::{OutputBufferLimit, TenantLimits, TenantPolicy};

use crate::db::{DbResult, WithOperation, timestamp};

pub(crate) struct TenantRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) disabled: bool,
    pub(crate) allow_admin: bool,
    pub(crate) max_connections: Option<i64>,
    pub(crate) max_ops_per_sec: Option<i64>,
    pub(crate) output_buffer_limit: Option<Json<OutputBufferLimit>>,
    pub(crate) pubsub_output_buffer_limit: Option<Json<OutputBufferLimit>>,
    pub(crate) script_timeout_ms: Option<i64>,
    pub(crate) policy: Json<TenantPolicy>,
    pub(crate) route_version: Option<i64>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

impl TenantRow {
    pub(crate) fn limits(&self) -> TenantLimits {
        limits(
            self.max_connections,
            self.max_ops_per_sec,
            self.output_buffer_limit,
            self.pubsub_output_buffer_limit,
            self.script_timeout_ms,
        )
    }

    /// Replaces every limit (what `limits` in a PATCH does).
    pub(crate) fn set_limits(&mut self, limits: &TenantLimits) {
        self.max_connections = limits.max_connections.map(i64::from);
        self.max_ops_per_sec = limits.max_ops_per_sec.map(i64::from);
        self.output_buffer_limit = limits.output_buffer_limit.map(Json);
        self.pubsub_output_buffer_limit = limits.pubsub_output_buffer_limit.map(Json);
        self.script_timeout_ms = limits.script_timeout_ms.map(i64::from);
    }

    pub(crate) fn to_api(&self) -> Tenant {
        Tenant {
            name: self.name.clone(),
            description: self.description.clone(),
            disabled: self.disabled,
            allow_admin: self.allow_admin,
            limits: self.limits(),
            policy: self.policy.0.clone(),
            route_version: self.route_version,
            created_at: timestamp(self.created_at),
            updated_at: timestamp(self.updated_at),
        }
    }
}

/// The limits from their columns. The database keeps counts as bigint (an API u32 does not fit an integer) and
/// output buffer limits as jsonb; the CHECKs keep both to what the API accepts.
pub(crate) fn limits(
    max_connections: Option<i64>,
    max_ops_per_sec: Option<i64>,
    output_buffer_limit: Option<Json<OutputBufferLimit>>,
    pubsub_output_buffer_limit: Option<Json<OutputBufferLimit>>,
    script_timeout_ms: Option<i64>,
) -> TenantLimits {
    TenantLimits {
        max_connections: max_connections.and_then(|v| u32::try_from(v).ok()),
        max_ops_per_sec: max_ops_per_sec.and_then(|v| u32::try_from(v).ok()),
        output_buffer_limit: output_buffer_limit.map(|Json(limit)| limit),
        pubsub_output_buffer_limit: pubsub_output_buffer_limit.map(|Json(limit)| limit),
        script_timeout_ms: script_timeout_ms.and_then(|v| u32::try_from(v).ok()),
    }
}

// Every query that answers a `TenantRow` repeats its columns: `query_as!` takes its SQL as a literal.

/// The tenants a tenant-owner token owns: these names, and those that start with `prefix`.
pub(crate) struct Owned<'a> {
    pub(crate) tenants: &'a [String],
    pub(crate) prefix: Option<&'a str>,
}

/// Tenants whose names start with `prefix` and come after `after` (`""`: from the first), in byte order, at most
/// `limit` of them (`None`: all), and only those of `owned` when given. A range scan of `tenants_name_bytes`: a page costs the same at any population.
pub(crate) async fn page(
    db: impl PgExecutor<'_>,
    prefix: &str,
    after: &str,
    limit: Option<i64>,
    owned: Option<&Owned<'_>>,
) -> DbResult<Vec<TenantRow>> {
    // Every name that starts with `prefix` is below `prefix || U+10FFFF`: names are ASCII, whose bytes are all
    // below that character's first byte in UTF-8.
    sqlx::query_as!(
        TenantRow,
        r#"SELECT t.id, t.name, t.description, t.disabled, t.allow_admin, t.max_connections,
                t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, t.policy AS "policy: Json<TenantPolicy>", t.created_at, t.updated_at,
                (SELECT max(r.version) FROM route_versions r WHERE r.tenant_id = t.id) AS "route_version?"
         FROM tenants t
         WHERE t.name COLLATE "C" >= $1 AND t.name COLLATE "C" < $1 || chr(1114111)
           AND t.name COLLATE "C" > $2
           AND (NOT $4 OR t.name = ANY($5) OR starts_with(t.name, $6))
         ORDER BY t.name COLLATE "C"
         LIMIT $3"#,
        prefix,
        after,
        limit,
        owned.is_some(),
        owned.map_or(&[][..], |o| o.tenants),
        owned.and_then(|o| o.prefix),
    )
    .fetch_all(db)
    .await
    .during("listing tenants")
}

pub(crate) async fn get(db: impl PgExecutor<'_>, name: &str) -> DbResult<Option<TenantRow>> {
    sqlx::query_as!(
        TenantRow,
        r#"SELECT t.id, t.name, t.description, t.disabled, t.allow_admin, t.max_connections,
                t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, t.policy AS "policy: Json<TenantPolicy>", t.created_at, t.updated_at,
                (SELECT max(r.version) FROM route_versions r WHERE r.tenant_id = t.id) AS "route_version?"
         FROM tenants t
         WHERE t.name = $1"#,
        name,
    )
    .fetch_optional(db)
    .await
    .during("reading a tenant")
}

/// The tenant, locked until the transaction ends: changes to one tenant (and its route) are serialized here.
pub(crate) async fn get_for_update(
    conn: &mut PgConnection,
    name: &str,
) -> DbResult<Option<TenantRow>> {
    sqlx::query_as!(
        TenantRow,
        r#"SELECT t.id, t.name, t.description, t.disabled, t.allow_admin, t.max_connections,
                t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, t.policy AS "policy: Json<TenantPolicy>", t.created_at, t.updated_at,
                (SELECT max(r.version) FROM route_versions r WHERE r.tenant_id = t.id) AS "route_version?"
         FROM tenants t
         WHERE t.name = $1 FOR UPDATE OF t"#,
        name,
    )
    .fetch_optional(conn)
    .await
    .during("locking a tenant")
}

pub(crate) async fn insert(conn: &mut PgConnection, new: &TenantCreate) -> DbResult<TenantRow> {
    let id = sqlx::query_scalar!(
        "INSERT INTO tenants (name, description, disabled, allow_admin, max_connections, max_ops_per_sec,
             output_buffer_limit, pubsub_output_buffer_limit, script_timeout_ms, policy)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        new.name,
        new.description,
        new.disabled,
        new.allow_admin,
        new.limits.max_connections.map(i64::from),
        new.limits.max_ops_per_sec.map(i64::from),
        // `as _`: the macros type jsonb parameters as serde_json::Value; `Json` encodes the same jsonb.
        new.limits.output_buffer_limit.map(Json) as _,
        new.limits.pubsub_output_buffer_limit.map(Json) as _,
        new.limits.script_timeout_ms.map(i64::from),
        Json(new.policy()) as _,
    )
    .fetch_one(&mut *conn)
    .await
    .during("inserting a tenant")?;
    by_id(conn, id).await
}

/// Writes every editable field of `tenant` back.
pub(crate) async fn update(conn: &mut PgConnection, tenant: &TenantRow) -> DbResult<TenantRow> {
    sqlx::query!(
        "UPDATE tenants SET description = $2, disabled = $3, allow_admin = $4, max_connections = $5,
             max_ops_per_sec = $6, output_buffer_limit = $7, pubsub_output_buffer_limit = $8,
             script_timeout_ms = $9, policy = $10, updated_at = now()
         WHERE id = $1",
        tenant.id,
        tenant.description,
        tenant.disabled,
        tenant.allow_admin,
        tenant.max_connections,
        tenant.max_ops_per_sec,
        tenant.output_buffer_limit as _,
        tenant.pubsub_output_buffer_limit as _,
        tenant.script_timeout_ms,
        &tenant.policy as _,
    )
    .execute(&mut *conn)
    .await
    .during("updating a tenant")?;
    by_id(conn, tenant.id).await
}

/// A tenant other than `except` whose namespace overlaps `namespace` (one starts the other: see
/// `switchyard_schemas::policy::namespaces_overlap`).
pub(crate) async fn overlapping_namespace(
    conn: &mut PgConnection,
    namespace: &str,
    except: Option<i64>,
) -> DbResult<Option<(String, String)>> {
    let found = sqlx::query!(
        r#"SELECT name, policy ->> 'namespace' AS "namespace!"
           FROM tenants
           WHERE policy ? 'namespace' AND id IS DISTINCT FROM $2
             AND (starts_with($1, policy ->> 'namespace') OR starts_with(policy ->> 'namespace', $1))
           LIMIT 1"#,
        namespace,
        except,
    )
    .fetch_optional(conn)
    .await
    .during("looking for overlapping namespaces")?;
    Ok(found.map(|row| (row.name, row.namespace)))
}

/// Every tenant's namespace, by tenant name.
pub(crate) async fn namespaces(conn: &mut PgConnection) -> DbResult<Vec<(String, String)>> {
    let rows = sqlx::query!(
        r#"SELECT name, policy ->> 'namespace' AS "namespace!" FROM tenants WHERE policy ? 'namespace'"#
    )
    .fetch_all(conn)
    .await
    .during("listing namespaces")?;
    Ok(rows
        .into_iter()
        .map(|row| (row.name, row.namespace))
        .collect())
}

pub(crate) async fn delete(conn: &mut PgConnection, id: i64) -> DbResult<()> {
    sqlx::query!("DELETE FROM tenants WHERE id = $1", id)
        .execute(conn)
        .await
        .during("deleting a tenant")?;
    Ok(())
}

async fn by_id(conn: &mut PgConnection, id: i64) -> DbResult<TenantRow> {
    sqlx::query_as!(
        TenantRow,
        r#"SELECT t.id, t.name, t.description, t.disabled, t.allow_admin, t.max_connections,
                t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, t.policy AS "policy: Json<TenantPolicy>", t.created_at, t.updated_at,
                (SELECT max(r.version) FROM route_versions r WHERE r.tenant_id = t.id) AS "route_version?"
         FROM tenants t
         WHERE t.id = $1"#,
        id,
    )
    .fetch_one(conn)
    .await
    .during("reading a tenant")
}
