//! Gateways as their heartbeats report them.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgExecutor};
use switchyard_schemas::api::{Following, Gateway, Heartbeat};

use crate::db::{DbResult, WithOperation, timestamp};

pub(crate) struct GatewayRow {
    id: String,
    address: String,
    revision: i64,
    version: String,
    following_url: String,
    following_address: String,
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
            following: (!self.following_url.is_empty()).then(|| Following {
                url: self.following_url.clone(),
                address: self.following_address.clone(),
            }),
            last_seen: timestamp(self.last_seen),
            live: self.live,
            up_to_date: self.revision >= current_revision,
        }
    }
}

pub(crate) async fn record(db: impl PgExecutor<'_>, heartbeat: &Heartbeat) -> DbResult<()> {
    // An interval past an integer's range is taken as the longest (its shares then count for ever longer).
    let interval = heartbeat
        .interval_ms
        .map(|ms| i32::try_from(ms.max(1)).unwrap_or(i32::MAX));
    let following = heartbeat.following.as_ref();
    sqlx::query!(
        "INSERT INTO gateways (id, address, revision, version, heartbeat_interval_ms, following_url,
                               following_address)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE
         SET address = EXCLUDED.address, revision = EXCLUDED.revision, version = EXCLUDED.version,
             heartbeat_interval_ms = EXCLUDED.heartbeat_interval_ms, following_url = EXCLUDED.following_url,
             following_address = EXCLUDED.following_address, last_seen = now()",
        heartbeat.id,
        heartbeat.address,
        heartbeat.revision,
        heartbeat.version,
        interval,
        following.map_or("", |f| f.url.as_str()),
        following.map_or("", |f| f.address.as_str()),
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
        r#"SELECT id, address, revision, version, following_url, following_address, last_seen,
                last_seen > now() - make_interval(secs => $1) AS "live!"
         FROM gateways ORDER BY id"#,
        window.as_secs_f64(),
    )
    .fetch_all(db)
    .await
    .during("listing gateways")
}

/// Forgets gateways not heard from for `retention`: a gateway that was replaced or scaled away leaves the fleet
/// by itself.
pub(crate) async fn forget_silent(db: impl PgExecutor<'_>, retention: Duration) -> DbResult<()> {
    sqlx::query!(
        "DELETE FROM gateways WHERE last_seen < now() - make_interval(secs => $1)",
        retention.as_secs_f64(),
    )
    .execute(db)
    .await
    .during("forgetting silent gateways")?;
    Ok(())
}

/// Removes one gateway; what it was, if there was one.
pub(crate) async fn remove(
    conn: &mut PgConnection,
    id: &str,
    window: Duration,
) -> DbResult<Option<GatewayRow>> {
    sqlx::query_as!(
        GatewayRow,
        r#"DELETE FROM gateways WHERE id = $1
         RETURNING id, address, revision, version, following_url, following_address, last_seen,
                   last_seen > now() - make_interval(secs => $2) AS "live!""#,
        id,
        window.as_secs_f64(),
    )
    .fetch_optional(conn)
    .await
    .during("removing a gateway")
}
