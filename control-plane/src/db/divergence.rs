//! How far each tenant's double-write secondaries are from their primaries, as each gateway's latest report said
//! (`secondary_divergence`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use switchyard_schemas::api::{DivergenceCounts, GatewayDivergence, SecondaryDivergence};

use crate::db::observations::FRESH;

use crate::db::{DbResult, WithOperation, timestamp};

/// One gateway's report of one of the tenant's secondaries.
pub(crate) struct DivergenceRow {
    pub(crate) resource: String,
    pub(crate) gateway: String,
    pub(crate) samples: i64,
    pub(crate) differing: i64,
    pub(crate) pending: i64,
    pub(crate) catching_up: bool,
    pub(crate) repaired: i64,
    pub(crate) reported_at: DateTime<Utc>,
}

impl DivergenceRow {
    pub(crate) fn to_api(&self) -> GatewayDivergence {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        GatewayDivergence {
            gateway: self.gateway.clone(),
            counts: DivergenceCounts {
                samples: count(self.samples),
                differing: count(self.differing),
                pending: count(self.pending),
                catching_up: self.catching_up,
                repaired: count(self.repaired),
            },
            reported_at: timestamp(self.reported_at),
        }
    }
}

/// Replaces `gateway`'s rows with its report (a report without entries, such as a report's further posts, leaves
/// them; entries of tenants the control plane does not know are dropped), and prunes every gateway's rows not
/// reported for `window`.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    entries: &[SecondaryDivergence],
    window: Duration,
) -> DbResult<()> {
    if !entries.is_empty() {
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let column = |f: fn(&SecondaryDivergence) -> u64| -> Vec<i64> {
            entries.iter().map(|e| clamp(f(e))).collect()
        };
        let tenants: Vec<String> = entries.iter().map(|e| e.tenant.clone()).collect();
        let resources: Vec<String> = entries.iter().map(|e| e.resource.clone()).collect();
        let catching_up: Vec<bool> = entries.iter().map(|e| e.catching_up).collect();
        let mut tx = db.begin().await.during("recording divergence")?;
        sqlx::query!(
            "DELETE FROM secondary_divergence WHERE gateway = $1",
            gateway
        )
        .execute(&mut *tx)
        .await
        .during("recording divergence")?;
        sqlx::query!(
            "INSERT INTO secondary_divergence (tenant_id, resource, gateway, samples, differing, pending,
                                               catching_up, repaired)
             SELECT t.id, e.resource, $1, e.samples, e.differing, e.pending, e.catching_up, e.repaired
               FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bool[],
                           $8::bigint[])
                    AS e(tenant, resource, samples, differing, pending, catching_up, repaired)
               JOIN tenants t ON t.name = e.tenant
             ON CONFLICT (tenant_id, resource, gateway) DO NOTHING",
            gateway,
            &tenants,
            &resources,
            &column(|e| e.samples),
            &column(|e| e.differing),
            &column(|e| e.pending),
            &catching_up,
            &column(|e| e.repaired),
        )
        .execute(&mut *tx)
        .await
        .during("recording divergence")?;
        tx.commit().await.during("recording divergence")?;
    }
    sqlx::query!(
        "DELETE FROM secondary_divergence WHERE reported_at < now() - make_interval(secs => $1)",
        window.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("pruning divergence")?;
    Ok(())
}

/// Every gateway's report of the tenant's secondaries made within `fresh`, by resource and gateway.
pub(crate) async fn fresh(
    db: impl PgExecutor<'_>,
    tenant_id: i64,
    fresh: Duration,
) -> DbResult<Vec<DivergenceRow>> {
    sqlx::query_as!(
        DivergenceRow,
        "SELECT resource, gateway, samples, differing, pending, catching_up, repaired, reported_at
           FROM secondary_divergence
          WHERE tenant_id = $1 AND reported_at >= now() - make_interval(secs => $2)
          ORDER BY resource, gateway",
        tenant_id,
        fresh.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading divergence")
}

/// Every recent gateway's figures for the tenant's secondaries, summed (`catching_up`: any): what the repair still
/// owes them and what it made equal, as a migration's verify and rollback report it.
pub(crate) async fn summed(db: impl PgExecutor<'_>, tenant_id: i64) -> DbResult<DivergenceCounts> {
    let mut sum = DivergenceCounts::default();
    for row in fresh(db, tenant_id, FRESH).await? {
        sum.add(&row.to_api().counts);
    }
    Ok(sum)
}
