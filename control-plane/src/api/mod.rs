//! The REST API: one file per resource, each holding its handlers and its endpoint table.

pub mod audit;
pub mod credentials;
pub mod gateways;
pub mod migrations;
pub mod resources;
pub mod routes;
pub mod snapshot;
pub mod system;
pub mod tenants;

use sqlx::{PgConnection, PgExecutor};

use crate::db::tenants::TenantRow;
use crate::error::{ApiError, ApiResult};
use crate::openapi::Operation;

/// Every endpoint the control plane serves.
pub fn operations() -> Vec<Operation> {
    [
        tenants::operations(),
        credentials::operations(),
        resources::operations(),
        routes::operations(),
        migrations::operations(),
        snapshot::operations(),
        gateways::operations(),
        audit::operations(),
        system::operations(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn no_tenant(name: &str) -> ApiError {
    ApiError::not_found(format!("no tenant named '{name}'"))
}

/// The tenant named in the path, or a 404.
pub async fn tenant(db: impl PgExecutor<'_>, name: &str) -> ApiResult<TenantRow> {
    crate::db::tenants::get(db, name)
        .await?
        .ok_or_else(|| no_tenant(name))
}

/// The tenant named in the path, locked for the rest of the transaction, or a 404.
pub async fn tenant_for_update(conn: &mut PgConnection, name: &str) -> ApiResult<TenantRow> {
    crate::db::tenants::get_for_update(conn, name)
        .await?
        .ok_or_else(|| no_tenant(name))
}
