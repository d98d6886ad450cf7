//! The global revision row.

use sqlx::{PgConnection, PgExecutor};

use crate::revision::CHANNEL;

pub async fn current(db: impl PgExecutor<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar("SELECT value FROM revision")
        .fetch_one(db)
        .await
}

/// The row lock taken here is held until commit, which orders revisions the way changes commit.
pub async fn bump(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar("UPDATE revision SET value = value + 1 RETURNING value")
        .fetch_one(conn)
        .await
}

pub async fn notify(conn: &mut PgConnection, revision: i64) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(revision.to_string())
        .execute(conn)
        .await?;
    Ok(())
}
