//! The databases each tenant's current route reaches (`tenant_databases`, places as `databases.rs` names them),
//! and the tenants that share one across the namespace rule or a migration's destination rule.

use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::RouteTable;

use crate::db::{DbResult, WithOperation};

/// Replaces the databases recorded for the tenant's current route.
pub(crate) async fn replace(
    conn: &mut PgConnection,
    tenant_id: i64,
    places: &[String],
) -> DbResult<()> {
    sqlx::query!(
        "DELETE FROM tenant_databases WHERE tenant_id = $1",
        tenant_id
    )
    .execute(&mut *conn)
    .await
    .during("recording the route's databases")?;
    sqlx::query!(
        "INSERT INTO tenant_databases (tenant_id, place) SELECT $1, unnest($2::text[])",
        tenant_id,
        places,
    )
    .execute(conn)
    .await
    .during("recording the route's databases")?;
    Ok(())
}

/// Another tenant sharing one of the tenant's databases with a key namespace where the tenant has none, or none
/// where it has one, neither of them an admin tenant.
pub(crate) struct Mixed {
    pub(crate) tenant: String,
    pub(crate) other: String,
    /// The other tenant's namespace (`None`: it has none, and the tenant has one).
    pub(crate) namespace: Option<String>,
    pub(crate) place: String,
}

/// The first tenant (by name) that shares a database with `tenant_id` across the namespace rule, if any.
pub(crate) async fn mixed(conn: &mut PgConnection, tenant_id: i64) -> DbResult<Option<Mixed>> {
    sqlx::query_as!(
        Mixed,
        r#"SELECT me.name AS tenant, other.name AS other, other.policy ->> 'namespace' AS namespace, theirs.place
           FROM tenants me
           JOIN tenant_databases mine ON mine.tenant_id = me.id
           JOIN tenant_databases theirs ON theirs.place = mine.place AND theirs.tenant_id <> me.id
           JOIN tenants other ON other.id = theirs.tenant_id
           WHERE me.id = $1 AND NOT me.allow_admin AND NOT other.allow_admin
             AND (me.policy ? 'namespace') <> (other.policy ? 'namespace')
           ORDER BY other.name, theirs.place
           LIMIT 1"#,
        tenant_id,
    )
    .fetch_optional(conn)
    .await
    .during("looking for a database shared across the namespace rule")
}

/// A tenant whose current route reaches a database.
pub(crate) struct Neighbour {
    pub(crate) other_id: i64,
    pub(crate) other: String,
    pub(crate) namespace: Option<String>,
    pub(crate) place: String,
}

/// Every tenant other than `tenant_id` whose current route reaches one of `places` (admin tenants included), by
/// name and place.
pub(crate) async fn neighbours(
    conn: &mut PgConnection,
    tenant_id: i64,
    places: &[String],
) -> DbResult<Vec<Neighbour>> {
    sqlx::query_as!(
        Neighbour,
        r#"SELECT other.id AS other_id, other.name AS other, other.policy ->> 'namespace' AS namespace, theirs.place
           FROM tenant_databases theirs
           JOIN tenants other ON other.id = theirs.tenant_id
           WHERE theirs.tenant_id <> $1 AND theirs.place = ANY($2)
           ORDER BY other.name, theirs.place"#,
        tenant_id,
        places,
    )
    .fetch_all(conn)
    .await
    .during("looking for the tenants of a migration's destination")
}

/// The databases the tenant's current route reaches.
pub(crate) async fn of_tenant(conn: &mut PgConnection, tenant_id: i64) -> DbResult<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT place FROM tenant_databases WHERE tenant_id = $1",
        tenant_id
    )
    .fetch_all(conn)
    .await
    .during("reading the route's databases")
}

/// The current routes of tenants whose databases were never recorded (routes stored before the table was).
pub(crate) async fn unrecorded(db: impl PgExecutor<'_>) -> DbResult<Vec<(i64, Json<RouteTable>)>> {
    let rows = sqlx::query!(
        r#"SELECT t.id, rv.route AS "route!: Json<RouteTable>" FROM tenants t
           JOIN LATERAL (SELECT route FROM route_versions r WHERE r.tenant_id = t.id
                         ORDER BY version DESC LIMIT 1) rv ON true
           WHERE NOT EXISTS (SELECT 1 FROM tenant_databases d WHERE d.tenant_id = t.id)"#
    )
    .fetch_all(db)
    .await
    .during("reading routes whose databases are not recorded")?;
    Ok(rows.into_iter().map(|r| (r.id, r.route)).collect())
}

/// Records the tenant's databases unless a change recorded them meanwhile (which knows its route better).
pub(crate) async fn record_unrecorded(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    places: &[String],
) -> DbResult<()> {
    sqlx::query!(
        "INSERT INTO tenant_databases (tenant_id, place) SELECT $1, unnest($2::text[])
         WHERE NOT EXISTS (SELECT 1 FROM tenant_databases WHERE tenant_id = $1)
         ON CONFLICT DO NOTHING",
        tenant_id,
        places,
    )
    .execute(db)
    .await
    .during("recording a stored route's databases")?;
    Ok(())
}
