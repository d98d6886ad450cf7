//! Whether each gateway reaches each backend resource, as its latest report said (`resource_reachability`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, PgPool};
use switchyard_schemas::api::{GatewayReach, ResourceReach};

use crate::db::{DbResult, WithOperation, timestamp};

/// One gateway's view of the resource at `location`.
pub(crate) struct ReachRow {
    pub(crate) location: String,
    pub(crate) gateway: String,
    pub(crate) up: bool,
    pub(crate) since: DateTime<Utc>,
    pub(crate) last_error: Option<String>,
    pub(crate) last_error_at: Option<DateTime<Utc>>,
    pub(crate) reported_at: DateTime<Utc>,
}

impl ReachRow {
    pub(crate) fn to_api(&self) -> GatewayReach {
        GatewayReach {
            gateway: self.gateway.clone(),
            up: self.up,
            since: timestamp(self.since),
            last_error: self.last_error.clone(),
            last_error_at: self.last_error_at.map(timestamp),
            reported_at: timestamp(self.reported_at),
        }
    }
}

/// Replaces `gateway`'s rows with its report (a report without resources, such as a report's further posts,
/// leaves them), and prunes every gateway's rows not reported for `window`.
pub(crate) async fn record(
    db: &PgPool,
    gateway: &str,
    resources: &[ResourceReach],
    window: Duration,
) -> DbResult<()> {
    if !resources.is_empty() {
        let mut tx = db.begin().await.during("recording reachability")?;
        let locations: Vec<String> = resources.iter().map(|r| r.location.clone()).collect();
        let up: Vec<bool> = resources.iter().map(|r| r.up).collect();
        let since: Vec<i64> = resources.iter().map(|r| r.since_ms).collect();
        let errors: Vec<Option<String>> = resources.iter().map(|r| r.last_error.clone()).collect();
        let error_at: Vec<Option<i64>> = resources.iter().map(|r| r.last_error_ms).collect();
        sqlx::query!(
            "DELETE FROM resource_reachability WHERE gateway = $1 AND NOT (location = ANY($2::text[]))",
            gateway,
            &locations,
        )
        .execute(&mut *tx)
        .await
        .during("recording reachability")?;
        sqlx::query!(
            "INSERT INTO resource_reachability (gateway, location, up, since, last_error, last_error_at)
             SELECT $1, r.location, r.up, to_timestamp(r.since_ms / 1000.0), r.last_error,
                    to_timestamp(r.error_ms / 1000.0)
               FROM UNNEST($2::text[], $3::bool[], $4::bigint[], $5::text[], $6::bigint[])
                    AS r(location, up, since_ms, last_error, error_ms)
             ON CONFLICT (location, gateway) DO UPDATE SET
                up = EXCLUDED.up,
                since = EXCLUDED.since,
                last_error = EXCLUDED.last_error,
                last_error_at = EXCLUDED.last_error_at,
                reported_at = now()",
            gateway,
            &locations,
            &up,
            &since,
            &errors as &[Option<String>],
            &error_at as &[Option<i64>],
        )
        .execute(&mut *tx)
        .await
        .during("recording reachability")?;
        tx.commit().await.during("recording reachability")?;
    }
    sqlx::query!(
        "DELETE FROM resource_reachability WHERE reported_at < now() - make_interval(secs => $1)",
        window.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("pruning reachability")?;
    Ok(())
}

/// Every gateway's view reported within `fresh`, by location and gateway.
pub(crate) async fn fresh(db: impl PgExecutor<'_>, fresh: Duration) -> DbResult<Vec<ReachRow>> {
    sqlx::query_as!(
        ReachRow,
        "SELECT location, gateway, up, since, last_error, last_error_at, reported_at
           FROM resource_reachability
          WHERE reported_at >= now() - make_interval(secs => $1)
          ORDER BY location, gateway",
        fresh.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("reading reachability")
}
