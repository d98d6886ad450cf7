//! Reading the whole snapshot gateways are served, consistently at one revision.

use std::collections::HashMap;

use sqlx::PgPool;
use sqlx::types::Json;
use switchyard_schemas::{
    OutputBufferLimit, RouteTable, Snapshot, SnapshotCredential, SnapshotTenant,
};

use crate::db::{DbError, WithOperation, resources, revision, tenants};
use crate::references;

/// Why no snapshot could be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SnapshotError {
    #[error(transparent)]
    Db(#[from] DbError),
    /// The reference table's foreign keys make this unreachable; if it ever happens, serving no snapshot
    /// (gateways keep their last good one) beats serving a tenant a half-resolved route.
    #[error("tenant '{tenant}' refers to unknown resource '{resource}'")]
    UnknownResource { tenant: String, resource: String },
}

struct ServedTenant {
    id: i64,
    name: String,
    disabled: bool,
    allow_admin: bool,
    max_connections: Option<i64>,
    max_ops_per_sec: Option<i64>,
    output_buffer_limit: Option<Json<OutputBufferLimit>>,
    pubsub_output_buffer_limit: Option<Json<OutputBufferLimit>>,
    script_timeout_ms: Option<i64>,
    route_version: i64,
    route: Json<RouteTable>,
}

/// Reads in one repeatable-read transaction, so the revision and the content always agree.
pub(crate) async fn load(pool: &PgPool) -> Result<Snapshot, SnapshotError> {
    let mut tx = pool.begin().await.during("starting the snapshot read")?;
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .during("starting the snapshot read")?;
    let revision = revision::current(&mut *tx).await?;
    let served = sqlx::query_as!(
        ServedTenant,
        r#"SELECT t.id, t.name, t.disabled, t.allow_admin, t.max_connections, t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, rv.version AS "route_version!", rv.route AS "route!: Json<RouteTable>"
         FROM tenants t
         JOIN LATERAL (SELECT version, route FROM route_versions r WHERE r.tenant_id = t.id
                       ORDER BY version DESC LIMIT 1) rv ON true
         ORDER BY t.name"#
    )
    .fetch_all(&mut *tx)
    .await
    .during("reading the served tenants")?;
    let credentials = sqlx::query!(
        "SELECT tenant_id, id, digest FROM credentials WHERE revoked_at IS NULL ORDER BY id"
    )
    .fetch_all(&mut *tx)
    .await
    .during("reading the active credentials")?;
    let urls = resources::all_urls(&mut *tx).await?;
    tx.commit().await.during("ending the snapshot read")?;

    let mut by_tenant: HashMap<i64, Vec<SnapshotCredential>> = HashMap::new();
    for credential in credentials {
        by_tenant
            .entry(credential.tenant_id)
            .or_default()
            .push(SnapshotCredential {
                id: credential.id,
                digest: credential.digest,
            });
    }
    let tenants = served
        .into_iter()
        .map(|t| {
            let mut route = t.route.0;
            references::inline(&mut route, &urls).map_err(|resource| {
                SnapshotError::UnknownResource {
                    tenant: t.name.clone(),
                    resource,
                }
            })?;
            Ok(SnapshotTenant {
                limits: tenants::limits(
                    t.max_connections,
                    t.max_ops_per_sec,
                    t.output_buffer_limit,
                    t.pubsub_output_buffer_limit,
                    t.script_timeout_ms,
                ),
                credentials: by_tenant.remove(&t.id).unwrap_or_default(),
                name: t.name,
                disabled: t.disabled,
                allow_admin: t.allow_admin,
                route,
                route_version: t.route_version,
            })
        })
        .collect::<Result<Vec<_>, SnapshotError>>()?;
    Ok(Snapshot {
        revision,
        epoch: None,
        tenants,
        delta: None,
    })
}
