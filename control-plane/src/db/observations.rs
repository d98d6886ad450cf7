//! Gateways' tracking reports (hot keys, big keys, slow log entries), one row per report and tenant, kept for
//! the retention window.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{PgExecutor, PgPool};
use switchyard_schemas::api::{BigKey, HotKey, SlowLogEntry, TenantObservations};

use crate::db::{DbResult, WithOperation};

/// A gateway's report counts this long: the figures it repeats at every report (connections open, divergence
/// windows, repair backlogs) are current while it reports, and a gateway gone drops out.
pub(crate) const FRESH: Duration = Duration::from_secs(180);

/// One gateway report's rows for its tenants (those the control plane does not know are dropped), and the
/// pruning of every row older than `retention`.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    tenants: &[TenantObservations],
    retention: Duration,
) -> DbResult<()> {
    for tenant in tenants {
        sqlx::query!(
            "INSERT INTO tenant_observations (tenant_id, gateway, hot_keys, big_keys, slowlog)
             SELECT id, $2, $3, $4, $5 FROM tenants WHERE name = $1",
            tenant.tenant,
            gateway,
            Json(&tenant.hot_keys) as _,
            Json(&tenant.big_keys) as _,
            Json(&tenant.slowlog) as _,
        )
        .execute(db)
        .await
        .during("recording a tracking report")?;
    }
    sqlx::query!(
        "DELETE FROM tenant_observations WHERE received_at < now() - make_interval(secs => $1)",
        retention.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("pruning tracking reports")?;
    Ok(())
}

/// The hot keys each report of the last `window` gave for the tenant.
pub(crate) async fn hot_keys(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    window: Duration,
) -> DbResult<Vec<Vec<HotKey>>> {
    let rows = sqlx::query!(
        r#"SELECT hot_keys AS "hot_keys: Json<Vec<HotKey>>" FROM tenant_observations
         WHERE tenant_id = $1 AND received_at > now() - make_interval(secs => $2)"#,
        tenant_id,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading hot keys")?;
    Ok(rows.into_iter().map(|row| row.hot_keys.0).collect())
}

/// The hot keys each report of the last `window` gave, with their tenant's name, every tenant's.
pub(crate) async fn fleet_hot_keys(
    db: impl PgExecutor<'_>,
    window: Duration,
) -> DbResult<Vec<(String, Vec<HotKey>)>> {
    let rows = sqlx::query!(
        r#"SELECT t.name AS tenant, o.hot_keys AS "hot_keys: Json<Vec<HotKey>>"
             FROM tenant_observations o JOIN tenants t ON t.id = o.tenant_id
            WHERE o.received_at > now() - make_interval(secs => $1) AND o.hot_keys <> '[]'::jsonb"#,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading every tenant's hot keys")?;
    Ok(rows
        .into_iter()
        .map(|row| (row.tenant, row.hot_keys.0))
        .collect())
}

/// The big keys of the last `window`, each with the gateway that reported it.
pub(crate) async fn big_keys(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    window: Duration,
) -> DbResult<Vec<BigKey>> {
    let rows = sqlx::query!(
        r#"SELECT gateway, big_keys AS "big_keys: Json<Vec<BigKey>>" FROM tenant_observations
         WHERE tenant_id = $1 AND received_at > now() - make_interval(secs => $2)
               AND big_keys <> '[]'::jsonb"#,
        tenant_id,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading big keys")?;
    Ok(rows
        .into_iter()
        .flat_map(|row| {
            let gateway = row.gateway;
            row.big_keys.0.into_iter().map(move |mut big| {
                big.gateway.clone_from(&gateway);
                big
            })
        })
        .collect())
}

/// The slow log entries of the last `window`, each with the gateway that logged it.
pub(crate) async fn slowlog(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    window: Duration,
) -> DbResult<Vec<SlowLogEntry>> {
    let rows = sqlx::query!(
        r#"SELECT gateway, slowlog AS "slowlog: Json<Vec<SlowLogEntry>>" FROM tenant_observations
         WHERE tenant_id = $1 AND received_at > now() - make_interval(secs => $2)
               AND slowlog <> '[]'::jsonb"#,
        tenant_id,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading the slow log")?;
    Ok(rows
        .into_iter()
        .flat_map(|row| {
            let gateway = row.gateway;
            row.slowlog.0.into_iter().map(move |mut entry| {
                entry.gateway.clone_from(&gateway);
                entry
            })
        })
        .collect())
}
