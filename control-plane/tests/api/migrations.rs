//! The migrations apply to an empty database, and again as a no-op.

use sqlx::PgPool;
use switchyard_control_plane::MIGRATOR;

#[sqlx::test(migrations = false)]
async fn apply_on_an_empty_database_then_are_a_no_op(pool: PgPool) {
    MIGRATOR.run(&pool).await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(applied, MIGRATOR.iter().count() as i64);
    sqlx::query("INSERT INTO tenants (name) VALUES ('kept')")
        .execute(&pool)
        .await
        .unwrap();

    MIGRATOR.run(&pool).await.unwrap();
    let again: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(again, applied);
    let tenants: i64 = sqlx::query_scalar("SELECT count(*) FROM tenants")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(tenants, 1, "the second run changed nothing");
    let revision: i64 = sqlx::query_scalar("SELECT value FROM revision")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(revision, 0);
}
