//! Registered resources, and which tenants' current routes refer to them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::api::Resource;

use crate::db::{DbResult, WithOperation, timestamp};
use crate::redact;

pub(crate) struct ResourceRow {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) description: String,
    pub(crate) used_by: Vec<String>,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
}

impl ResourceRow {
    /// The resource as answers show it: the URL's passwords masked (`url` keeps the real one).
    pub(crate) fn to_api(&self) -> Resource {
        Resource {
            name: self.name.clone(),
            url: redact::url(&self.url),
            description: self.description.clone(),
            used_by: self.used_by.clone(),
            created_at: timestamp(self.created_at),
            updated_at: timestamp(self.updated_at),
            reachability: None,
        }
    }
}

// Every query that answers a `ResourceRow` repeats its columns: `query_as!` takes its SQL as a literal.

pub(crate) async fn list(db: impl PgExecutor<'_>) -> DbResult<Vec<ResourceRow>> {
    sqlx::query_as!(
        ResourceRow,
        r#"SELECT r.id, r.name, r.url, r.description, r.created_at, r.updated_at,
                ARRAY(SELECT t.name FROM route_resource_refs x JOIN tenants t ON t.id = x.tenant_id
                      WHERE x.resource_id = r.id ORDER BY t.name) AS "used_by!"
         FROM resources r
         ORDER BY r.name"#
    )
    .fetch_all(db)
    .await
    .during("listing resources")
}

pub(crate) async fn get(db: impl PgExecutor<'_>, name: &str) -> DbResult<Option<ResourceRow>> {
    sqlx::query_as!(
        ResourceRow,
        r#"SELECT r.id, r.name, r.url, r.description, r.created_at, r.updated_at,
                ARRAY(SELECT t.name FROM route_resource_refs x JOIN tenants t ON t.id = x.tenant_id
                      WHERE x.resource_id = r.id ORDER BY t.name) AS "used_by!"
         FROM resources r
         WHERE r.name = $1"#,
        name,
    )
    .fetch_optional(db)
    .await
    .during("reading a resource")
}

pub(crate) async fn get_for_update(
    conn: &mut PgConnection,
    name: &str,
) -> DbResult<Option<ResourceRow>> {
    sqlx::query_as!(
        ResourceRow,
        r#"SELECT r.id, r.name, r.url, r.description, r.created_at, r.updated_at,
                ARRAY(SELECT t.name FROM route_resource_refs x JOIN tenants t ON t.id = x.tenant_id
                      WHERE x.resource_id = r.id ORDER BY t.name) AS "used_by!"
         FROM resources r
         WHERE r.name = $1 FOR UPDATE OF r"#,
        name,
    )
    .fetch_optional(conn)
    .await
    .during("locking a resource")
}

pub(crate) async fn insert(
    conn: &mut PgConnection,
    name: &str,
    url: &str,
    description: &str,
) -> DbResult<ResourceRow> {
    let id = sqlx::query_scalar!(
        "INSERT INTO resources (name, url, description) VALUES ($1, $2, $3) RETURNING id",
        name,
        url,
        description,
    )
    .fetch_one(&mut *conn)
    .await
    .during("inserting a resource")?;
    by_id(conn, id).await
}

pub(crate) async fn update(
    conn: &mut PgConnection,
    id: i64,
    url: &str,
    description: &str,
) -> DbResult<ResourceRow> {
    sqlx::query!(
        "UPDATE resources SET url = $2, description = $3, updated_at = now() WHERE id = $1",
        id,
        url,
        description,
    )
    .execute(&mut *conn)
    .await
    .during("updating a resource")?;
    by_id(conn, id).await
}

/// Fails with `route_resource_refs_resource_id_fkey` while a current route refers to the resource.
pub(crate) async fn delete(conn: &mut PgConnection, id: i64) -> DbResult<()> {
    sqlx::query!("DELETE FROM resources WHERE id = $1", id)
        .execute(conn)
        .await
        .during("deleting a resource")?;
    Ok(())
}

/// Whether [`urls`] locks the rows it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lock {
    /// Share-locked until commit: they cannot change or vanish while the caller's route is stored.
    Share,
    None,
}

/// A resource's name and URL.
struct NameUrl {
    name: String,
    url: String,
}

/// The URLs of the named resources that exist.
pub(crate) async fn urls(
    conn: &mut PgConnection,
    names: &[String],
    lock: Lock,
) -> DbResult<HashMap<String, String>> {
    let rows = match lock {
        Lock::Share => {
            sqlx::query_as!(
                NameUrl,
                "SELECT name, url FROM resources WHERE name = ANY($1) FOR SHARE",
                names
            )
            .fetch_all(conn)
            .await
        }
        Lock::None => {
            sqlx::query_as!(
                NameUrl,
                "SELECT name, url FROM resources WHERE name = ANY($1)",
                names
            )
            .fetch_all(conn)
            .await
        }
    }
    .during("reading resource URLs")?;
    Ok(rows.into_iter().map(|r| (r.name, r.url)).collect())
}

pub(crate) async fn all_urls(db: impl PgExecutor<'_>) -> DbResult<HashMap<String, String>> {
    let rows = sqlx::query_as!(NameUrl, "SELECT name, url FROM resources")
        .fetch_all(db)
        .await
        .during("reading every resource URL")?;
    Ok(rows.into_iter().map(|r| (r.name, r.url)).collect())
}

async fn by_id(conn: &mut PgConnection, id: i64) -> DbResult<ResourceRow> {
    sqlx::query_as!(
        ResourceRow,
        r#"SELECT r.id, r.name, r.url, r.description, r.created_at, r.updated_at,
                ARRAY(SELECT t.name FROM route_resource_refs x JOIN tenants t ON t.id = x.tenant_id
                      WHERE x.resource_id = r.id ORDER BY t.name) AS "used_by!"
         FROM resources r
         WHERE r.id = $1"#,
        id,
    )
    .fetch_one(conn)
    .await
    .during("reading a resource")
}
