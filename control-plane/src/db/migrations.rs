//! Tenant migrations: their state, the two routes, and the background tasks' progress and cursor.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::api::{Migration, MigrationLimits, MigrationProgress, MigrationState};
use switchyard_schemas::{AckMode, RouteTable};

use crate::db::{DbResult, WithOperation, timestamp};
use crate::redact;

#[derive(Clone)]
pub(crate) struct MigrationRow {
    pub(crate) id: i64,
    pub(crate) tenant_id: i64,
    pub(crate) tenant: String,
    pub(crate) state: String,
    pub(crate) source: Json<RouteTable>,
    pub(crate) destination: Json<RouteTable>,
    pub(crate) ack: Json<AckMode>,
    pub(crate) limits: Json<MigrationLimits>,
    pub(crate) route_revision: i64,
    pub(crate) progress: Json<MigrationProgress>,
    pub(crate) task_cursor: Option<Value>,
    pub(crate) error: Option<String>,
    pub(crate) author: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

impl MigrationRow {
    /// The state; a name the table's CHECK admits always parses, so the fallback is never taken.
    pub(crate) fn state(&self) -> MigrationState {
        MigrationState::parse(&self.state).unwrap_or(MigrationState::Aborted)
    }

    /// The migration as answers show it: inline URLs of both tables masked.
    pub(crate) fn to_api(&self, converged: bool) -> Migration {
        Migration {
            id: self.id,
            tenant: self.tenant.clone(),
            state: self.state(),
            from: redact::route(self.source.0.clone()),
            to: redact::route(self.destination.0.clone()),
            ack: self.ack.0,
            limits: self.limits.0.clone(),
            route_revision: self.route_revision,
            converged,
            progress: self.progress.0.clone(),
            error: self.error.clone(),
            author: self.author.clone(),
            created_at: timestamp(self.created_at),
            updated_at: timestamp(self.updated_at),
        }
    }
}

// Every query that answers a `MigrationRow` repeats its columns: `query_as!` takes its SQL as a literal.

pub(crate) struct NewMigration<'a> {
    pub(crate) tenant_id: i64,
    pub(crate) source: &'a RouteTable,
    pub(crate) destination: &'a RouteTable,
    pub(crate) ack: AckMode,
    pub(crate) limits: &'a MigrationLimits,
    pub(crate) author: &'a str,
}

/// Inserts in state `double_write`; `route_revision` is set by [`set_state`] in the same transaction.
pub(crate) async fn insert(conn: &mut PgConnection, new: NewMigration<'_>) -> DbResult<i64> {
    let ack = serde_json::to_value(new.ack).unwrap_or_default();
    // `as _`: the macros type jsonb parameters as serde_json::Value; `Json` encodes the same jsonb.
    sqlx::query_scalar!(
        "INSERT INTO tenant_migrations (tenant_id, state, source, destination, ack, limits, route_revision, author)
         VALUES ($1, 'double_write', $2, $3, $4::jsonb #>> '{}', $5, 0, $6) RETURNING id",
        new.tenant_id,
        Json(new.source) as _,
        Json(new.destination) as _,
        ack,
        Json(new.limits) as _,
        new.author,
    )
    .fetch_one(conn)
    .await
    .during("inserting a migration")
}

/// One migration of a tenant; `lock` holds its row for the rest of the transaction.
pub(crate) async fn get(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    id: i64,
    lock: bool,
) -> DbResult<Option<MigrationRow>> {
    if lock {
        sqlx::query_as!(
            MigrationRow,
            r#"SELECT m.id, m.tenant_id, t.name AS tenant, m.state,
                m.source AS "source: Json<RouteTable>", m.destination AS "destination: Json<RouteTable>",
                to_jsonb(m.ack) AS "ack!: Json<AckMode>", m.limits AS "limits: Json<MigrationLimits>",
                m.route_revision, m.progress AS "progress: Json<MigrationProgress>", m.task_cursor, m.error,
                m.author, m.created_at, m.updated_at
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.tenant_id = $1 AND m.id = $2 FOR UPDATE OF m"#,
            tenant_id,
            id,
        )
        .fetch_optional(db)
        .await
        .during("locking a migration")
    } else {
        sqlx::query_as!(
            MigrationRow,
            r#"SELECT m.id, m.tenant_id, t.name AS tenant, m.state,
                m.source AS "source: Json<RouteTable>", m.destination AS "destination: Json<RouteTable>",
                to_jsonb(m.ack) AS "ack!: Json<AckMode>", m.limits AS "limits: Json<MigrationLimits>",
                m.route_revision, m.progress AS "progress: Json<MigrationProgress>", m.task_cursor, m.error,
                m.author, m.created_at, m.updated_at
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.tenant_id = $1 AND m.id = $2"#,
            tenant_id,
            id,
        )
        .fetch_optional(db)
        .await
        .during("reading a migration")
    }
}

/// A migration by id alone (for the workers).
pub(crate) async fn by_id(db: impl PgExecutor<'_>, id: i64) -> DbResult<Option<MigrationRow>> {
    sqlx::query_as!(
        MigrationRow,
        r#"SELECT m.id, m.tenant_id, t.name AS tenant, m.state,
                m.source AS "source: Json<RouteTable>", m.destination AS "destination: Json<RouteTable>",
                to_jsonb(m.ack) AS "ack!: Json<AckMode>", m.limits AS "limits: Json<MigrationLimits>",
                m.route_revision, m.progress AS "progress: Json<MigrationProgress>", m.task_cursor, m.error,
                m.author, m.created_at, m.updated_at
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.id = $1"#,
        id,
    )
    .fetch_optional(db)
    .await
    .during("reading a migration")
}

/// The tenant's migrations, newest first.
pub(crate) async fn list(db: impl PgExecutor<'_>, tenant_id: i64) -> DbResult<Vec<MigrationRow>> {
    sqlx::query_as!(
        MigrationRow,
        r#"SELECT m.id, m.tenant_id, t.name AS tenant, m.state,
                m.source AS "source: Json<RouteTable>", m.destination AS "destination: Json<RouteTable>",
                to_jsonb(m.ack) AS "ack!: Json<AckMode>", m.limits AS "limits: Json<MigrationLimits>",
                m.route_revision, m.progress AS "progress: Json<MigrationProgress>", m.task_cursor, m.error,
                m.author, m.created_at, m.updated_at
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.tenant_id = $1 ORDER BY m.id DESC"#,
        tenant_id,
    )
    .fetch_all(db)
    .await
    .during("listing migrations")
}

/// The tenant's active migration, if any.
pub(crate) async fn active(db: impl PgExecutor<'_>, tenant_id: i64) -> DbResult<Option<i64>> {
    sqlx::query_scalar!(
        "SELECT id FROM tenant_migrations
         WHERE tenant_id = $1 AND state NOT IN ('finished', 'aborted')",
        tenant_id,
    )
    .fetch_optional(db)
    .await
    .during("looking for the tenant's active migration")
}

/// An active migration's tenant and destination, which the destination rule holds other tenants to.
pub(crate) struct ActiveDestination {
    pub(crate) id: i64,
    pub(crate) tenant_id: i64,
    pub(crate) tenant: String,
    pub(crate) namespace: Option<String>,
    pub(crate) destination: Json<RouteTable>,
}

/// The destination of every migration not finished nor aborted (at most one a tenant).
pub(crate) async fn active_destinations(
    conn: &mut PgConnection,
) -> DbResult<Vec<ActiveDestination>> {
    sqlx::query_as!(
        ActiveDestination,
        r#"SELECT m.id, m.tenant_id, t.name AS tenant, t.policy ->> 'namespace' AS namespace,
                m.destination AS "destination: Json<RouteTable>"
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.state NOT IN ('finished', 'aborted') ORDER BY m.id"#,
    )
    .fetch_all(conn)
    .await
    .during("reading the destinations of active migrations")
}

/// A migration not finished nor aborted, as `/metrics` shows it.
pub(crate) struct UnfinishedRow {
    pub(crate) id: i64,
    pub(crate) tenant: String,
    pub(crate) state: String,
    pub(crate) progress: Json<MigrationProgress>,
    pub(crate) updated_at: DateTime<Utc>,
}

/// Every migration not finished nor aborted (at most one a tenant).
pub(crate) async fn unfinished(db: impl PgExecutor<'_>) -> DbResult<Vec<UnfinishedRow>> {
    sqlx::query_as!(
        UnfinishedRow,
        r#"SELECT m.id, t.name AS tenant, m.state, m.progress AS "progress: Json<MigrationProgress>",
                m.updated_at
         FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
         WHERE m.state NOT IN ('finished', 'aborted') ORDER BY m.id"#,
    )
    .fetch_all(db)
    .await
    .during("listing unfinished migrations")
}

/// Migrations whose background task (backfill, verify or rollback) should be running.
pub(crate) async fn with_task(db: impl PgExecutor<'_>) -> DbResult<Vec<i64>> {
    sqlx::query_scalar!(
        "SELECT id FROM tenant_migrations WHERE state IN ('backfilling', 'verifying', 'rolling_back') ORDER BY id",
    )
    .fetch_all(db)
    .await
    .during("looking for migration tasks")
}

/// Moves to `state`; a route change also records its revision. A new task starts from no cursor.
pub(crate) async fn set_state(
    conn: &mut PgConnection,
    id: i64,
    state: MigrationState,
    route_revision: Option<i64>,
) -> DbResult<()> {
    sqlx::query!(
        "UPDATE tenant_migrations SET state = $2, route_revision = COALESCE($3, route_revision),
             task_cursor = NULL, error = NULL, updated_at = now()
         WHERE id = $1",
        id,
        state.as_str(),
        route_revision,
    )
    .execute(conn)
    .await
    .during("changing a migration's state")?;
    Ok(())
}

/// Saves a task's counters and cursor, only while the migration is still in the task's state (an abort in the
/// meantime wins). Returns whether it still is.
pub(crate) async fn save_progress(
    db: impl PgExecutor<'_>,
    id: i64,
    state: MigrationState,
    progress: &MigrationProgress,
    cursor: Option<&Value>,
    error: Option<&str>,
) -> DbResult<bool> {
    let updated = sqlx::query!(
        "UPDATE tenant_migrations SET progress = $3, task_cursor = $4, error = $5, updated_at = now()
         WHERE id = $1 AND state = $2",
        id,
        state.as_str(),
        Json(progress) as _,
        cursor,
        error,
    )
    .execute(db)
    .await.during("saving a migration's progress")?;
    Ok(updated.rows_affected() == 1)
}

/// Advisory-lock class of migration tasks (the second key is the migration id).
const TASK_LOCK_CLASS: i32 = 0x5359_4d47; // "SYMG"

/// Takes the task lock of migration `id` for this connection's session, unless another session holds it. It is
/// held until [`unlock_task`], or until the connection closes (so a process that dies releases it).
pub(crate) async fn try_lock_task(conn: &mut PgConnection, id: i32) -> DbResult<bool> {
    sqlx::query_scalar!(
        r#"SELECT pg_try_advisory_lock($1, $2) AS "locked!""#,
        TASK_LOCK_CLASS,
        id,
    )
    .fetch_one(conn)
    .await
    .during("taking a migration task's lock")
}

pub(crate) async fn unlock_task(conn: &mut PgConnection, id: i32) -> DbResult<()> {
    // False only when this session did not hold the lock: nothing to undo then.
    sqlx::query_scalar!(
        r#"SELECT pg_advisory_unlock($1, $2) AS "unlocked!""#,
        TASK_LOCK_CLASS,
        id,
    )
    .fetch_one(conn)
    .await
    .during("releasing a migration task's lock")?;
    Ok(())
}
