//! The tenant named in a request's path, or the 404 every resource under `/v1/tenants/{tenant}` answers.

use sqlx::{PgConnection, PgExecutor};

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
