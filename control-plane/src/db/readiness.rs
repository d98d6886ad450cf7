//! Migration readiness as gateways report it: per migration (or readiness probe) and gateway, the sums of their
//! reports.

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use sqlx::{PgConnection, PgExecutor, PgPool};
use std::collections::BTreeMap;

use switchyard_schemas::RouteTable;

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
/// against), or, for a report counted against a readiness probe, to the tenant's probe. A report for a tenant
/// without one is dropped: its counts were made against a route that is not a migration's destination, or a probe
/// deleted since, or too late to matter.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    reports: &[TenantReadiness],
) -> DbResult<()> {
    for report in reports {
        let mut tx = db.begin().await.during("starting a readiness report")?;
        if let Some(subject) = Subject::of(&mut tx, report).await? {
            subject.add(&mut tx, gateway, report).await?;
        }
        tx.commit().await.during("committing a readiness report")?;
    }
    Ok(())
}

/// What a report is counted for.
#[derive(Clone, Copy)]
pub(crate) enum Subject {
    /// A migration before cutover, by id.
    Migration(i64),
    /// A tenant's readiness probe, by the tenant's id.
    Probe(i64),
}

impl Subject {
    async fn of(tx: &mut PgConnection, report: &TenantReadiness) -> DbResult<Option<Subject>> {
        Ok(match report.probe {
            false => sqlx::query_scalar!(
                "SELECT m.id FROM tenant_migrations m JOIN tenants t ON t.id = m.tenant_id
                 WHERE t.name = $1
                   AND m.state IN ('double_write', 'backfilling', 'backfilled', 'verifying', 'verified')",
                report.tenant,
            )
            .fetch_optional(&mut *tx)
            .await
            .during("finding the migration of a readiness report")?
            .map(Subject::Migration),
            true => sqlx::query_scalar!(
                "SELECT p.tenant_id FROM readiness_probes p JOIN tenants t ON t.id = p.tenant_id
                 WHERE t.name = $1",
                report.tenant,
            )
            .fetch_optional(&mut *tx)
            .await
            .during("finding the readiness probe of a report")?
            .map(Subject::Probe),
        })
    }

    /// Every gateway's sums for the subject.
    pub(crate) async fn rows(self, db: impl PgExecutor<'_>) -> DbResult<Vec<ReadinessRow>> {
        match self {
            Subject::Migration(id) => {
                sqlx::query_as!(
                    ReadinessRow,
                    r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                          examples AS "examples: Json<Vec<ReadinessExample>>",
                          commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
                   FROM migration_readiness WHERE migration_id = $1 ORDER BY gateway"#,
                    id,
                )
                .fetch_all(db)
                .await
            }
            Subject::Probe(tenant_id) => {
                sqlx::query_as!(
                    ReadinessRow,
                    r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                          examples AS "examples: Json<Vec<ReadinessExample>>",
                          commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
                   FROM readiness_probe_reports WHERE tenant_id = $1 ORDER BY gateway"#,
                    tenant_id,
                )
                .fetch_all(db)
                .await
            }
        }
        .during("reading the readiness reports")
    }

    /// Adds `report` to the gateway's sums for the subject.
    async fn add(
        &self,
        tx: &mut PgConnection,
        gateway: &str,
        report: &TenantReadiness,
    ) -> DbResult<()> {
        let known = match *self {
            Subject::Migration(id) => {
                sqlx::query_as!(
                    ReadinessRow,
                    r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                          examples AS "examples: Json<Vec<ReadinessExample>>",
                          commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
                   FROM migration_readiness WHERE migration_id = $1 AND gateway = $2 FOR UPDATE"#,
                    id,
                    gateway,
                )
                .fetch_optional(&mut *tx)
                .await
            }
            Subject::Probe(tenant_id) => {
                sqlx::query_as!(
                    ReadinessRow,
                    r#"SELECT gateway, checked, counts AS "counts: Json<ReadinessCounts>",
                          examples AS "examples: Json<Vec<ReadinessExample>>",
                          commands AS "commands: Json<BTreeMap<String, u64>>", updated_at
                   FROM readiness_probe_reports WHERE tenant_id = $1 AND gateway = $2 FOR UPDATE"#,
                    tenant_id,
                    gateway,
                )
                .fetch_optional(&mut *tx)
                .await
            }
        }
        .during("reading a gateway's readiness")?;
        let Sums {
            checked,
            counts,
            examples,
            commands,
        } = Sums::added(known, report);
        let (counts, examples, commands) = (Json(&counts), Json(&examples), Json(&commands));
        match *self {
            Subject::Migration(id) => sqlx::query!(
                "INSERT INTO migration_readiness (migration_id, gateway, checked, counts, examples, commands)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (migration_id, gateway) DO UPDATE
                 SET checked = $3, counts = $4, examples = $5, commands = $6, updated_at = now()",
                id,
                gateway,
                checked,
                counts as _,
                examples as _,
                commands as _,
            )
            .execute(&mut *tx)
            .await,
            Subject::Probe(tenant_id) => sqlx::query!(
                "INSERT INTO readiness_probe_reports (tenant_id, gateway, checked, counts, examples, commands)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (tenant_id, gateway) DO UPDATE
                 SET checked = $3, counts = $4, examples = $5, commands = $6, updated_at = now()",
                tenant_id,
                gateway,
                checked,
                counts as _,
                examples as _,
                commands as _,
            )
            .execute(&mut *tx)
            .await,
        }
        .during("recording a readiness report")?;
        Ok(())
    }
}

/// One gateway's sums, a report added.
struct Sums {
    checked: i64,
    counts: ReadinessCounts,
    examples: Vec<ReadinessExample>,
    commands: BTreeMap<String, u64>,
}

impl Sums {
    fn added(known: Option<ReadinessRow>, report: &TenantReadiness) -> Sums {
        let mut sums = known.map_or_else(
            || Sums {
                checked: 0,
                counts: ReadinessCounts::default(),
                examples: Vec::new(),
                commands: BTreeMap::new(),
            },
            |row| Sums {
                checked: row.checked,
                counts: row.counts.0,
                examples: row.examples.0,
                commands: row.commands.0,
            },
        );
        sums.checked = sums
            .checked
            .saturating_add(i64::try_from(report.checked).unwrap_or(i64::MAX));
        sums.counts.add(&report.counts);
        // Only the control plane finds commands the destination lacks, when it answers.
        sums.counts.unsupported = 0;
        merge_examples(&mut sums.examples, &report.examples);
        sums.examples
            .retain(|example| example.kind != ReadinessKind::Unsupported);
        merge_commands(&mut sums.commands, &report.commands);
        sums
    }
}

/// A tenant's readiness probe.
pub(crate) struct ProbeRow {
    pub(crate) destination: Json<RouteTable>,
    pub(crate) author: String,
    pub(crate) created_at: DateTime<Utc>,
}

/// The readiness probe of tenant `tenant_id`, if it has one.
pub(crate) async fn probe(db: impl PgExecutor<'_>, tenant_id: i64) -> DbResult<Option<ProbeRow>> {
    sqlx::query_as!(
        ProbeRow,
        r#"SELECT destination AS "destination: Json<RouteTable>", author, created_at
           FROM readiness_probes WHERE tenant_id = $1"#,
        tenant_id,
    )
    .fetch_optional(db)
    .await
    .during("reading a readiness probe")
}

/// Sets the tenant's readiness probe, replacing the one it had with its reports.
pub(crate) async fn set_probe(
    conn: &mut PgConnection,
    tenant_id: i64,
    destination: &RouteTable,
    author: &str,
) -> DbResult<ProbeRow> {
    remove_probe(&mut *conn, tenant_id).await?;
    sqlx::query_as!(
        ProbeRow,
        r#"INSERT INTO readiness_probes (tenant_id, destination, author) VALUES ($1, $2, $3)
           RETURNING destination AS "destination: Json<RouteTable>", author, created_at"#,
        tenant_id,
        Json(destination) as _,
        author,
    )
    .fetch_one(conn)
    .await
    .during("setting a readiness probe")
}

/// Deletes the tenant's readiness probe and its reports; false if it had none.
pub(crate) async fn remove_probe(conn: &mut PgConnection, tenant_id: i64) -> DbResult<bool> {
    let removed = sqlx::query!(
        "DELETE FROM readiness_probes WHERE tenant_id = $1",
        tenant_id
    )
    .execute(conn)
    .await
    .during("deleting a readiness probe")?;
    Ok(removed.rows_affected() > 0)
}
