//! The tenant named in a request's path, or the 404 every resource under `/v1/tenants/{tenant}` answers; and
//! likewise a tenant's migration, which its steps and its readiness look up.

use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::db::migrations::MigrationRow;
use crate::db::tenants::TenantRow;
use crate::error::{ApiError, ApiResult};

fn no_tenant(name: &str) -> ApiError {
    ApiError::not_found(format!("no tenant named '{name}'"))
}

/// The tenant named in the path, or a 404.
pub(crate) async fn tenant(db: impl PgExecutor<'_>, name: &str) -> ApiResult<TenantRow> {
    crate::db::tenants::get(db, name)
        .await?
        .ok_or_else(|| no_tenant(name))
}

/// The tenant named in the path, locked for the rest of the transaction, or a 404.
pub(crate) async fn tenant_for_update(conn: &mut PgConnection, name: &str) -> ApiResult<TenantRow> {
    crate::db::tenants::get_for_update(conn, name)
        .await?
        .ok_or_else(|| no_tenant(name))
}

pub(crate) fn no_migration(tenant: &str, id: i64) -> ApiError {
    ApiError::not_found(format!(
        "tenant '{tenant}' has no migration {id} (migration ids are numbered across all tenants: \
         `switchyard-ctl migrations list {tenant}` or GET /v1/tenants/{tenant}/migrations shows its own)"
    ))
}

/// Tenant `name`'s migration `id`, or a 404 for either missing.
pub(crate) async fn migration(pool: &PgPool, name: &str, id: i64) -> ApiResult<MigrationRow> {
    let row = tenant(pool, name).await?;
    crate::db::migrations::get(pool, row.id, id, false)
        .await?
        .ok_or_else(|| no_migration(name, id))
}
