//! Reading what gateways are served, consistently at one revision: the whole snapshot, or a delta with only the
//! tenants changed since a revision (`snapshot_changes`, kept by triggers: migrations/0010).

use std::collections::{BTreeSet, HashMap};

use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use switchyard_schemas::{
    OutputBufferLimit, RouteTable, Snapshot, SnapshotCredential, SnapshotDelta, SnapshotTenant,
    TenantPolicy,
};

use crate::db::{DbError, DbResult, WithOperation, resources, revision, tenants};
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
    policy: Json<TenantPolicy>,
    route_version: i64,
    route: Json<RouteTable>,
    probe: Option<Json<RouteTable>>,
}

/// The whole snapshot.
pub(crate) async fn load(pool: &PgPool) -> Result<Snapshot, SnapshotError> {
    let mut tx = begin(pool).await?;
    let revision = revision::current(&mut *tx).await?;
    let epoch = history(&mut tx).await?.epoch;
    let snapshot = read_tenants(&mut tx, revision, epoch, None).await?;
    tx.commit().await.during("ending the snapshot read")?;
    Ok(snapshot)
}

/// What changed after revision `after` of `epoch`, up to the current revision; `None` when that cannot be told
/// (another epoch, a revision whose changes were pruned, or one this control plane never reached), and the
/// caller needs the whole snapshot.
pub(crate) async fn load_delta(
    pool: &PgPool,
    epoch: &str,
    after: i64,
) -> Result<Option<Snapshot>, SnapshotError> {
    let mut tx = begin(pool).await?;
    let revision = revision::current(&mut *tx).await?;
    let history = history(&mut tx).await?;
    if history.epoch != epoch || after < history.horizon || after > revision {
        return Ok(None);
    }
    let changes = sqlx::query!(
        "SELECT tenant_id, removed_name FROM snapshot_changes WHERE revision > $1",
        after
    )
    .fetch_all(&mut *tx)
    .await
    .during("reading the changes since a revision")?;
    let mut changed = Vec::with_capacity(changes.len());
    let mut removed = BTreeSet::new();
    for change in changes {
        changed.push(change.tenant_id);
        removed.extend(change.removed_name);
    }
    changed.sort_unstable();
    changed.dedup();
    let mut snapshot = read_tenants(&mut tx, revision, history.epoch, Some(&changed)).await?;
    tx.commit().await.during("ending the snapshot read")?;
    // A name deleted and then created again is served under its new identity.
    for tenant in &snapshot.tenants {
        removed.remove(&tenant.name);
    }
    snapshot.delta = Some(SnapshotDelta {
        after,
        removed_tenants: removed.into_iter().collect(),
    });
    Ok(Some(snapshot))
}

/// Marks the changes logged by the committing change (see migrations/0010) with its revision.
pub(crate) async fn stamp_changes(conn: &mut PgConnection, revision: i64) -> DbResult<()> {
    sqlx::query!(
        "UPDATE snapshot_changes SET revision = $1 WHERE revision IS NULL",
        revision
    )
    .execute(conn)
    .await
    .during("stamping the change log")?;
    Ok(())
}

/// Forgets the changes logged before `before` seconds ago; deltas are then served only after the last revision
/// forgotten. Returns how many rows went.
pub(crate) async fn prune_changes(pool: &PgPool, older_than_secs: f64) -> DbResult<u64> {
    let pruned = sqlx::query_scalar!(
        r#"WITH pruned AS (
               DELETE FROM snapshot_changes
               WHERE revision IS NOT NULL AND at < now() - make_interval(secs => $1)
               RETURNING revision),
           horizon AS (
               UPDATE snapshot_history SET horizon = GREATEST(horizon, (SELECT max(revision) FROM pruned))
               WHERE EXISTS (SELECT 1 FROM pruned))
           SELECT count(*) AS "count!" FROM pruned"#,
        older_than_secs
    )
    .fetch_one(pool)
    .await
    .during("pruning the change log")?;
    Ok(u64::try_from(pruned).unwrap_or(0))
}

/// A readiness probe's destination as gateways get it: resource names inlined, passwords masked (gateways
/// place keys with it and send nothing there). None when it names a resource deleted since: a probe must never
/// keep a tenant's routes from being served.
fn probe_placement(mut probe: RouteTable, urls: &HashMap<String, String>) -> Option<RouteTable> {
    references::inline(&mut probe, urls).ok()?;
    Some(crate::redact::route(probe))
}

/// One repeatable-read transaction, so the revision and the content always agree.
async fn begin(pool: &PgPool) -> DbResult<sqlx::Transaction<'static, sqlx::Postgres>> {
    let mut tx = pool.begin().await.during("starting the snapshot read")?;
    sqlx::query!("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await
        .during("starting the snapshot read")?;
    Ok(tx)
}

struct History {
    epoch: String,
    horizon: i64,
}

async fn history(conn: &mut PgConnection) -> DbResult<History> {
    sqlx::query_as!(History, "SELECT epoch, horizon FROM snapshot_history")
        .fetch_one(conn)
        .await
        .during("reading the snapshot history")
}

/// The served tenants (those with a route), all of them or those of `ids`, with routes resolved.
async fn read_tenants(
    conn: &mut PgConnection,
    revision: i64,
    epoch: String,
    ids: Option<&[i64]>,
) -> Result<Snapshot, SnapshotError> {
    let served = sqlx::query_as!(
        ServedTenant,
        r#"SELECT t.id, t.name, t.disabled, t.allow_admin, t.max_connections, t.max_ops_per_sec,
                t.output_buffer_limit AS "output_buffer_limit: Json<OutputBufferLimit>",
                t.pubsub_output_buffer_limit AS "pubsub_output_buffer_limit: Json<OutputBufferLimit>",
                t.script_timeout_ms, t.policy AS "policy: Json<TenantPolicy>",
                rv.version AS "route_version!", rv.route AS "route!: Json<RouteTable>",
                p.destination AS "probe?: Json<RouteTable>"
         FROM tenants t
         JOIN LATERAL (SELECT version, route FROM route_versions r WHERE r.tenant_id = t.id
                       ORDER BY version DESC LIMIT 1) rv ON true
         LEFT JOIN readiness_probes p ON p.tenant_id = t.id
         WHERE $1::bigint[] IS NULL OR t.id = ANY($1)
         ORDER BY t.name"#,
        ids as Option<&[i64]>
    )
    .fetch_all(&mut *conn)
    .await
    .during("reading the served tenants")?;
    let credentials = sqlx::query!(
        "SELECT tenant_id, id, digest FROM credentials
         WHERE revoked_at IS NULL AND ($1::bigint[] IS NULL OR tenant_id = ANY($1))
         ORDER BY id",
        ids as Option<&[i64]>
    )
    .fetch_all(&mut *conn)
    .await
    .during("reading the active credentials")?;
    let urls = resources::all_urls(&mut *conn).await?;

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
                policy: t.policy.0,
                route,
                route_version: t.route_version,
                readiness_probe: t.probe.and_then(|probe| probe_placement(probe.0, &urls)),
            })
        })
        .collect::<Result<Vec<_>, SnapshotError>>()?;
    Ok(Snapshot {
        revision,
        epoch: Some(epoch),
        tenants,
        delta: None,
    })
}
