//! The migrations apply to an empty database, and again as a no-op.

use sqlx::PgPool;
use sqlx::migrate::Migrate;
use switchyard_control_plane::MIGRATOR;

/// How many migrations the database records as applied, as sqlx's migrator reads them.
async fn applied(pool: &PgPool) -> usize {
    let mut conn = pool.acquire().await.unwrap();
    conn.list_applied_migrations().await.unwrap().len()
}

#[sqlx::test(migrations = false)]
async fn apply_on_an_empty_database_then_are_a_no_op(pool: PgPool) {
    MIGRATOR.run(&pool).await.unwrap();
    let first = applied(&pool).await;
    assert_eq!(first, MIGRATOR.iter().count());
    sqlx::query!("INSERT INTO tenants (name) VALUES ('kept')")
        .execute(&pool)
        .await
        .unwrap();

    MIGRATOR.run(&pool).await.unwrap();
    assert_eq!(applied(&pool).await, first);
    let tenants = sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM tenants"#)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tenants, 1, "the second run changed nothing");
    let revision = sqlx::query_scalar!("SELECT value FROM revision")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(revision, 0);
}
