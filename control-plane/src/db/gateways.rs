//! Gateways as their heartbeats report them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::PgExecutor;
use switchyard_schemas::api::{Gateway, Heartbeat};

use crate::db::{DbResult, WithOperation, timestamp};

pub(crate) struct GatewayRow {
    id: String,
    address: String,
    revision: i64,
    version: String,
    last_seen: DateTime<Utc>,
    live: bool,
}

impl GatewayRow {
    pub(crate) fn to_api(&self, current_revision: i64) -> Gateway {
        Gateway {
            id: self.id.clone(),
            address: self.address.clone(),
            revision: self.revision,
            version: self.version.clone(),
            last_seen: timestamp(self.last_seen),
            live: self.live,
            up_to_date: self.revision >= current_revision,
        }
    }
}

pub(crate) async fn record(db: impl PgExecutor<'_>, heartbeat: &Heartbeat) -> DbResult<()> {
    sqlx::query!(
        "INSERT INTO gateways (id, address, revision, version) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE
         SET address = EXCLUDED.address, revision = EXCLUDED.revision, version = EXCLUDED.version,
             last_seen = now()",
        heartbeat.id,
        heartbeat.address,
        heartbeat.revision,
        heartbeat.version,
    )
    .execute(db)
    .await
    .during("recording a heartbeat")?;
    Ok(())
}

/// Every gateway ever heard of; `live` when heard from within `window`.
pub(crate) async fn list(db: impl PgExecutor<'_>, window: Duration) -> DbResult<Vec<GatewayRow>> {
    sqlx::query_as!(
        GatewayRow,
        r#"SELECT id, address, revision, version, last_seen,
                last_seen > now() - make_interval(secs => $1) AS "live!"
         FROM gateways ORDER BY id"#,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("listing gateways")
}
