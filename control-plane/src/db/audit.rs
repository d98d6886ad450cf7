//! The audit log: who changed what, at which revision, with the before and after of each change.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use switchyard_schemas::api::AuditEntry;

use crate::db::{DbResult, WithOperation, timestamp};
use crate::redact;

/// Who made a change, as the audit log and route history name them: `admin:<first 8 hex of the token digest>`
/// for a token (see `auth`), `control-plane` for the migration tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Actor(pub(crate) String);

/// What the audit log records about one change.
pub(crate) struct AuditRecord {
    pub(crate) action: &'static str,
    pub(crate) tenant: Option<String>,
    pub(crate) object: String,
    pub(crate) before: Option<Value>,
    pub(crate) after: Option<Value>,
}

impl AuditRecord {
    /// `before`/`after` are anything serializable; they are stored with backend passwords masked.
    pub(crate) fn new(
        action: &'static str,
        tenant: Option<&str>,
        object: String,
        before: Option<&impl serde::Serialize>,
        after: Option<&impl serde::Serialize>,
    ) -> AuditRecord {
        fn json(v: Option<&impl serde::Serialize>) -> Option<Value> {
            v.and_then(|v| serde_json::to_value(v).ok())
                .map(redact::value)
        }
        AuditRecord {
            action,
            tenant: tenant.map(str::to_string),
            object,
            before: json(before),
            after: json(after),
        }
    }
}

pub(crate) struct AuditRow {
    id: i64,
    revision: i64,
    at: DateTime<Utc>,
    actor: String,
    action: String,
    tenant: Option<String>,
    object: String,
    before: Option<Value>,
    after: Option<Value>,
}

impl From<AuditRow> for AuditEntry {
    fn from(row: AuditRow) -> AuditEntry {
        AuditEntry {
            id: row.id,
            revision: row.revision,
            at: timestamp(row.at),
            actor: row.actor,
            action: row.action,
            tenant: row.tenant,
            object: row.object,
            before: row.before,
            after: row.after,
        }
    }
}

pub(crate) async fn insert(
    conn: &mut PgConnection,
    revision: i64,
    actor: &Actor,
    record: &AuditRecord,
) -> DbResult<()> {
    sqlx::query!(
        "INSERT INTO audit_log (revision, actor, action, tenant, object, before, after)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        revision,
        actor.0,
        record.action,
        record.tenant,
        record.object,
        record.before,
        record.after,
    )
    .execute(conn)
    .await
    .during("recording the audit entry")?;
    Ok(())
}

/// Newest first.
/// Which entries `list` answers: each `None` filters nothing.
pub(crate) struct AuditFilter<'a> {
    pub(crate) tenant: Option<&'a str>,
    pub(crate) actor: Option<&'a str>,
    /// An action, or the start of one (`route.` for every route change).
    pub(crate) action: Option<&'a str>,
    pub(crate) since: Option<DateTime<Utc>>,
    pub(crate) until: Option<DateTime<Utc>>,
    pub(crate) before_id: Option<i64>,
    pub(crate) limit: i64,
}

pub(crate) async fn list(pool: &PgPool, filter: &AuditFilter<'_>) -> DbResult<Vec<AuditRow>> {
    sqlx::query_as!(
        AuditRow,
        "SELECT id, revision, at, actor, action, tenant, object, before, after FROM audit_log
         WHERE ($1::text IS NULL OR tenant = $1)
           AND ($2::timestamptz IS NULL OR at >= $2)
           AND ($3::bigint IS NULL OR id < $3)
           AND ($5::timestamptz IS NULL OR at < $5)
           AND ($6::text IS NULL OR actor = $6)
           AND ($7::text IS NULL OR starts_with(action, $7))
         ORDER BY id DESC LIMIT $4",
        filter.tenant,
        filter.since,
        filter.before_id,
        filter.limit,
        filter.until,
        filter.actor,
        filter.action,
    )
    .fetch_all(pool)
    .await
    .during("listing the audit log")
}
