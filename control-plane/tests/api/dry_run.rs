//! `?dry_run=true` on admin changes: every check runs and the answer is the change's, but nothing is written.

use serde_json::json;
use sqlx::PgPool;

use crate::common::{Api, details, single};

#[sqlx::test(migrations = "../migrations")]
async fn a_dry_run_checks_and_answers_but_writes_nothing(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    assert_eq!(api.put_route("acme", single("main")).await.status, 200);
    let revision = api.revision().await;
    let audit = api.admin("GET", "/v1/audit", None).await.body;

    let put = api
        .admin(
            "PUT",
            "/v1/tenants/acme/route?dry_run=true",
            Some(
                json!({"route": single("redis://127.0.0.1:6380"), "comment": "dry", "force": true}),
            ),
        )
        .await;
    assert_eq!(put.status, 200, "{}", put.body);
    // What the change would do to the keys, as the guard measured it.
    assert_eq!(put.body["keys"]["fraction"], 1.0, "{}", put.body);
    assert_eq!(put.body["version"], 2);
    assert_eq!(put.body["revision"], revision + 1);
    let created = api
        .admin(
            "POST",
            "/v1/tenants?dry_run=true",
            Some(json!({"name": "beta"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["name"], "beta");
    let rollback = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/rollback?dry_run=1",
            Some(json!({"version": 1})),
        )
        .await;
    assert_eq!(rollback.status, 200, "{}", rollback.body);

    // The checks are the change's own: what would fail, fails.
    let invalid = api
        .admin(
            "PUT",
            "/v1/tenants/acme/route?dry_run=true",
            Some(json!({"route": single("nowhere")})),
        )
        .await;
    assert_eq!(invalid.status, 422);
    assert_eq!(
        details(&invalid),
        ["/route/target: unknown resource 'nowhere'"]
    );
    let in_use = api
        .admin("DELETE", "/v1/resources/main?dry_run=true", None)
        .await;
    assert_eq!(in_use.status, 409, "{}", in_use.body);
    let stale = api
        .admin_with(
            "PUT",
            "/v1/tenants/acme/route?dry_run=true",
            &[("if-match", "\"7\"")],
            Some(json!({"route": single("main")})),
        )
        .await;
    assert_eq!(stale.status, 412);

    assert_eq!(api.revision().await, revision);
    assert_eq!(api.admin("GET", "/v1/audit", None).await.body, audit);
    assert_eq!(api.admin("GET", "/v1/tenants/beta", None).await.status, 404);
    let route = api.admin("GET", "/v1/tenants/acme/route", None).await;
    assert_eq!(route.body["version"], 1);

    // Anything but true or false is refused; a read does not take the parameter.
    let unclear = api
        .admin("DELETE", "/v1/tenants/acme?dry_run=maybe", None)
        .await;
    assert_eq!(unclear.status, 400, "{}", unclear.body);
    assert_eq!(api.admin("GET", "/v1/tenants/acme", None).await.status, 200);
    let read = api.admin("GET", "/v1/audit?dry_run=true", None).await;
    assert_eq!(read.status, 400, "{}", read.body);
    // dry_run=false is an ordinary change.
    let real = api
        .admin(
            "POST",
            "/v1/tenants?dry_run=false",
            Some(json!({"name": "gamma"})),
        )
        .await;
    assert_eq!(real.status, 201);
    assert_eq!(api.revision().await, revision + 1);
}
