//! The global revision row, and the NOTIFY that announces each new value.

use sqlx::{PgConnection, PgExecutor};

use crate::db::{DbResult, WithOperation};

/// The NOTIFY channel; the payload is the new revision in decimal.
pub(crate) const CHANNEL: &str = "switchyard_revision";

pub(crate) async fn current(db: impl PgExecutor<'_>) -> DbResult<i64> {
    sqlx::query_scalar!("SELECT value FROM revision")
        .fetch_one(db)
        .await
        .during("reading the revision")
}

/// The row lock taken here is held until commit, which orders revisions the way changes commit.
pub(crate) async fn bump(conn: &mut PgConnection) -> DbResult<i64> {
    sqlx::query_scalar!("UPDATE revision SET value = value + 1 RETURNING value")
        .fetch_one(conn)
        .await
        .during("bumping the revision")
}

pub(crate) async fn notify(conn: &mut PgConnection, revision: i64) -> DbResult<()> {
    sqlx::query!("SELECT pg_notify($1, $2)", CHANNEL, revision.to_string())
        .execute(conn)
        .await
        .during("notifying the new revision")?;
    Ok(())
}
