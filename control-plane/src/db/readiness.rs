//! Migration readiness as gateways report it: per migration and gateway, the sums of their reports.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgExecutor, PgPool};
use std::collections::BTreeMap;

use switchyard_schemas::api::{
    ReadinessCounts, ReadinessExample, ReadinessKind, TenantReadiness, merge_commands,
    merge_examples,
};

use crate::db::{DbResult, WithOperation};

/// One gateway's sums for a migration.
pub(crate) struct ReadinessRow {
    pub(crate) gateway: String,
    pub(crate) checked: i64,
    pub(crate) counts: Json<ReadinessCounts>,
    pub(crate) examples: Json<Vec<ReadinessExample>>,
    /// Calls by command name.
    pub(crate) commands: Json<BTreeMap<String, u64>>,
    pub(crate) updated_at: DateTime<Utc>,
}

/// Adds a gateway's report to the sums of each tenant's migration, when that migration is before cutover (the
/// only states whose double-write route has the destination as its secondary table, which gateways check
/// against). A report for a tenant without one is dropped: its counts were made against a route that is not a
/// migration's destination, or too late to matter.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    reports: &[TenantReadiness],
) -> DbResult<()> {
    for report in reports {
        let mut tx = db.begin().await.during("starting a readiness report")?;
        let migration = sqlx::query_scalar!(
            "SELECT m.id FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
             WHERE t.name = $1
               AND m.state IN ('double_write', 'backfilling', 'backfilled', 'verifying', 'verified')",
            report.tenant,
        )
        .fetch_optional(&mut *tx)
        .await
        .during("finding the migration of a readiness report")?;
        let Some(migration) = migration else { continue };
        let known = sqlx::query_as!(
            ReadinessRow,
            r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                      examples AS "examples: Json<Vec<ReadinessExample>>",
                      commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
               FROM migration_readiness WHERE migration_id = $1 AND gateway = $2 FOR UPDATE"#,
            migration,
            gateway,
        )
        .fetch_optional(&mut *tx)
        .await
        .during("reading a gateway's readiness")?;
        let (mut checked, mut counts, mut examples, mut commands) = known.map_or_else(
            || (0, ReadinessCounts::default(), Vec::new(), BTreeMap::new()),
            |row| (row.checked, row.counts.0, row.examples.0, row.commands.0),
        );
        checked = checked.saturating_add(i64::try_from(report.checked).unwrap_or(i64::MAX));
        counts.add(&report.counts);
        // Only the control plane finds commands the destination lacks, when it answers.
        counts.unsupported = 0;
        merge_examples(&mut examples, &report.examples);
        examples.retain(|example| example.kind != ReadinessKind::Unsupported);
        merge_commands(&mut commands, &report.commands);
        sqlx::query!(
            "INSERT INTO migration_readiness (migration_id, gateway, checked, counts, examples, commands)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (migration_id, gateway) DO UPDATE
             SET checked = $3, counts = $4, examples = $5, commands = $6, updated_at = now()",
            migration,
            gateway,
            checked,
            Json(&counts) as _,
            Json(&examples) as _,
            Json(&commands) as _,
        )
        .execute(&mut *tx)
        .await
        .during("recording a readiness report")?;
        tx.commit().await.during("committing a readiness report")?;
    }
    Ok(())
}

/// Every gateway's sums for a migration.
pub(crate) async fn of_migration(
    db: impl PgExecutor<'_>,
    migration_id: i64,
) -> DbResult<Vec<ReadinessRow>> {
    sqlx::query_as!(
        ReadinessRow,
        r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                  examples AS "examples: Json<Vec<ReadinessExample>>",
                  commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
           FROM migration_readiness WHERE migration_id = $1 ORDER BY gateway"#,
        migration_id,
    )
    .fetch_all(db)
    .await
    .during("reading a migration's readiness")
}
