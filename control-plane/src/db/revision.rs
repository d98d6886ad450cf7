//! The global revision row, and the NOTIFY that announces each new value.

use sqlx::{PgConnection, PgExecutor};

/// The NOTIFY channel; the payload is the new revision in decimal.
pub(crate) const CHANNEL: &str = "switchyard_revision";

pub(crate) async fn current(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT value FROM revision")
        .fetch_one(db)
        .await
}

/// The row lock taken here is held until commit, which orders revisions the way changes commit.
pub(crate) async fn bump(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar("UPDATE revision SET value = value + 1 RETURNING value")
        .fetch_one(conn)
        .await
}

pub(crate) async fn notify(conn: &mut PgConnection, revision: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(revision.to_string())
        .execute(conn)
        .await?;
    Ok(())
}
