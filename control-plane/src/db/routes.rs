//! Route versions (immutable history) and the resource references of each tenant's current route.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::RouteTable;
use switchyard_schemas::api::{RouteVersion, RouteVersionSummary};

use crate::db::{DbResult, WithOperation, timestamp};
use crate::redact;

pub(crate) struct RouteVersionRow {
    pub(crate) version: i64,
    pub(crate) route: Json<RouteTable>,
    pub(crate) comment: String,
    pub(crate) author: String,
    pub(crate) created_at: DateTime<Utc>,
}

/// A version as answers show it: inline URLs masked (`RouteVersionRow::route` keeps the real ones).
impl From<RouteVersionRow> for RouteVersion {
    fn from(row: RouteVersionRow) -> RouteVersion {
        RouteVersion {
            version: row.version,
            route: redact::route(row.route.0),
            comment: row.comment,
            author: row.author,
            created_at: timestamp(row.created_at),
        }
    }
}

pub(crate) struct SummaryRow {
    version: i64,
    comment: String,
    author: String,
    created_at: DateTime<Utc>,
}

impl From<SummaryRow> for RouteVersionSummary {
    fn from(row: SummaryRow) -> RouteVersionSummary {
        RouteVersionSummary {
            version: row.version,
            comment: row.comment,
            author: row.author,
            created_at: timestamp(row.created_at),
        }
    }
}

/// One version, or the current one when `version` is `None`.
pub(crate) async fn get(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    version: Option<i64>,
) -> DbResult<Option<RouteVersionRow>> {
    sqlx::query_as!(
        RouteVersionRow,
        r#"SELECT version, route AS "route: Json<RouteTable>", comment, author, created_at
         FROM route_versions
         WHERE tenant_id = $1 AND ($2::bigint IS NULL OR version = $2)
         ORDER BY version DESC LIMIT 1"#,
        tenant_id,
        version,
    )
    .fetch_optional(db)
    .await
    .during("reading a route version")
}

/// Newest first, versions below `before`.
pub(crate) async fn page(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    before: Option<i64>,
    limit: i64,
) -> DbResult<Vec<SummaryRow>> {
    sqlx::query_as!(
        SummaryRow,
        "SELECT version, comment, author, created_at FROM route_versions
         WHERE tenant_id = $1 AND ($2::bigint IS NULL OR version < $2)
         ORDER BY version DESC LIMIT $3",
        tenant_id,
        before,
        limit,
    )
    .fetch_all(db)
    .await
    .during("listing route versions")
}

pub(crate) async fn insert(
    conn: &mut PgConnection,
    tenant_id: i64,
    version: i64,
    route: &RouteTable,
    comment: &str,
    author: &str,
) -> DbResult<RouteVersionRow> {
    sqlx::query_as!(
        RouteVersionRow,
        r#"INSERT INTO route_versions (tenant_id, version, route, comment, author)
         VALUES ($1, $2, $3, $4, $5)
         RETURNING version, route AS "route: Json<RouteTable>", comment, author, created_at"#,
        tenant_id,
        version,
        // `as _`: the macros type jsonb parameters as serde_json::Value; `Json` encodes the same jsonb.
        Json(route) as _,
        comment,
        author,
    )
    .fetch_one(conn)
    .await
    .during("inserting a route version")
}

/// Records which resources the tenant's current route uses (what keeps them from being deleted).
pub(crate) async fn replace_references(
    conn: &mut PgConnection,
    tenant_id: i64,
    names: &[String],
) -> DbResult<()> {
    sqlx::query!(
        "DELETE FROM route_resource_refs WHERE tenant_id = $1",
        tenant_id
    )
    .execute(&mut *conn)
    .await
    .during("recording the route's resource references")?;
    sqlx::query!(
        "INSERT INTO route_resource_refs (tenant_id, resource_id)
         SELECT $1, id FROM resources WHERE name = ANY($2)",
        tenant_id,
        names,
    )
    .execute(conn)
    .await
    .during("recording the route's resource references")?;
    Ok(())
}

/// A tenant's current route.
pub(crate) struct CurrentRoute {
    pub(crate) tenant_id: i64,
    pub(crate) tenant: String,
    pub(crate) route: Json<RouteTable>,
}

/// The current routes that refer to a resource, by tenant name.
pub(crate) async fn current_using(
    conn: &mut PgConnection,
    resource_id: i64,
) -> DbResult<Vec<CurrentRoute>> {
    sqlx::query_as!(
        CurrentRoute,
        r#"SELECT t.id AS tenant_id, t.name AS tenant, rv.route AS "route!: Json<RouteTable>"
         FROM route_resource_refs x
         JOIN tenants t ON t.id = x.tenant_id
         JOIN LATERAL (SELECT route FROM route_versions r WHERE r.tenant_id = t.id
                       ORDER BY version DESC LIMIT 1) rv ON true
         WHERE x.resource_id = $1 ORDER BY t.name"#,
        resource_id,
    )
    .fetch_all(conn)
    .await
    .during("reading the routes that use a resource")
}
