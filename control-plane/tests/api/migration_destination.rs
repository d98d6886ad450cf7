//! A migration's destination while the migration is active: every change that makes a route reach one of its
//! databases (a route, a resource URL, a namespace) is refused (409 `destination_shared`) when the keys of the
//! tenant it brings there could be the migrating tenant's, and the steps that write to the destination or move the
//! tenant there check it again. The background tasks are not running (no worker in the bare router).

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, Reply, single};

const OLD: &str = "redis://127.0.0.1:7001";
const DESTINATION: &str = "redis://127.0.0.1:7002";
const ELSEWHERE: &str = "redis://127.0.0.1:7003";

async fn create_tenant(api: &Api, tenant: Value, route: &str) {
    let name = tenant["name"].as_str().unwrap().to_string();
    let reply = api.admin("POST", "/v1/tenants", Some(tenant)).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    let reply = api.put_route(&name, single(route)).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// Starts migrating `t1` (namespace `t1:`) from `OLD` to resource `dest`; answers the migration's id.
async fn migrate_t1(api: &Api) -> i64 {
    api.create_resource("dest", DESTINATION).await;
    create_tenant(api, json!({"name": "t1", "namespace": "t1:"}), OLD).await;
    let created = api
        .admin(
            "POST",
            "/v1/tenants/t1/migrations",
            Some(json!({"to": "dest"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    created.body["id"].as_i64().unwrap()
}

async fn step(api: &Api, id: i64, action: &str) -> Reply {
    let path = format!("/v1/tenants/t1/migrations/{id}/{action}");
    api.admin("POST", &path, None).await
}

/// Asserts a 409 `destination_shared` naming the migration, its tenant, `other` and the destination's database.
fn assert_shared(reply: &Reply, id: i64, other: &str) {
    assert_eq!(
        (reply.status, reply.error()),
        (409, "destination_shared"),
        "{}",
        reply.body
    );
    let message = reply.body["message"].as_str().unwrap();
    for part in [
        format!("migration {id} of tenant 't1'"),
        format!("'{other}'"),
        "127.0.0.1:7002/0".to_string(),
    ] {
        assert!(message.contains(&part), "{part} missing from {message}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn no_change_brings_colliding_keys_into_an_active_destination(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    let id = migrate_t1(&api).await;
    api.create_resource("side", ELSEWHERE).await;
    create_tenant(&api, json!({"name": "ops", "allow_admin": true}), "side").await;
    let tools = json!({"name": "tools", "namespace": "tools:", "allow_admin": true});
    create_tenant(&api, tools, ELSEWHERE).await;
    create_tenant(
        &api,
        json!({"name": "shop", "namespace": "shop:"}),
        ELSEWHERE,
    )
    .await;
    // Namespaces that overlap cannot be made through the API; a control plane of an earlier version stored some.
    create_tenant(
        &api,
        json!({"name": "legacy", "namespace": "legacy:"}),
        ELSEWHERE,
    )
    .await;
    sqlx::query!(
        "UPDATE tenants SET policy = jsonb_set(policy, '{namespace}', to_jsonb($2::text)) WHERE name = $1",
        "legacy",
        "t1:old:",
    )
    .execute(&pool)
    .await
    .unwrap();
    let revision = api.revision().await;

    // A route: an admin tenant without a namespace, a tenant whose namespace overlaps.
    assert_shared(&api.put_route("ops", single(DESTINATION)).await, id, "ops");
    let legacy = api.put_route("legacy", single(DESTINATION)).await;
    assert_shared(&legacy, id, "legacy");
    // A resource URL: another tenant's resource moved onto the destination, or the destination onto a tenant
    // (forced: the keys they stored stay behind, which the guard has tests of its own for).
    let onto = |url: &str| json!({"url": url, "force": true});
    let side = api
        .admin("PUT", "/v1/resources/side", Some(onto(DESTINATION)))
        .await;
    assert_shared(&side, id, "ops");
    let dest = api
        .admin("PUT", "/v1/resources/dest", Some(onto(ELSEWHERE)))
        .await;
    assert_eq!(
        (dest.status, dest.error()),
        (409, "destination_shared"),
        "{}",
        dest.body
    );
    assert_eq!(
        api.revision().await,
        revision,
        "a refused change was stored"
    );

    // Namespaces apart share the destination; such a tenant then cannot drop its namespace there.
    assert_eq!(api.put_route("shop", single("dest")).await.status, 200);
    assert_eq!(
        api.put_route("tools", single(DESTINATION)).await.status,
        200
    );
    let dropped = api
        .admin(
            "PATCH",
            "/v1/tenants/tools",
            Some(json!({"namespace": null, "force": true})),
        )
        .await;
    assert_shared(&dropped, id, "tools");

    // An aborted migration holds its destination to nothing more than the namespace rule.
    assert_eq!(step(&api, id, "abort").await.status, 200);
    assert_eq!(api.put_route("ops", single(DESTINATION)).await.status, 200);
}

#[sqlx::test(migrations = "../migrations")]
async fn steps_check_the_destination_again(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    let id = migrate_t1(&api).await;
    create_tenant(&api, json!({"name": "ops", "allow_admin": true}), ELSEWHERE).await;
    // As a control plane without the rule could leave it: the admin tenant in the destination.
    let share = || {
        sqlx::query!(
            "INSERT INTO tenant_databases (tenant_id, place) SELECT id, $2 FROM tenants WHERE name = $1",
            "ops",
            "127.0.0.1:7002/0",
        )
        .execute(&pool)
    };
    let state = |state: &'static str| {
        sqlx::query!(
            "UPDATE tenant_migrations SET state = $2 WHERE id = $1",
            id,
            state,
        )
        .execute(&pool)
    };
    share().await.unwrap();
    for (state_before, action) in [
        ("double_write", "backfill"),
        ("backfilled", "verify"),
        ("verified", "cutover"),
        ("cut_over", "finish"),
    ] {
        state(state_before).await.unwrap();
        let refused = step(&api, id, action).await;
        assert_shared(&refused, id, "ops");
        let message = refused.body["message"].as_str().unwrap();
        assert!(message.contains("abort"), "{message}");
    }
    // Moving the other tenant out is what lets the migration go on.
    assert_eq!(api.put_route("ops", single(ELSEWHERE)).await.status, 200);
    let finished = step(&api, id, "finish").await;
    assert_eq!(finished.body["state"], "finished", "{}", finished.body);

    // An abort leaves the destination, so a shared one never holds it back.
    let next = api
        .admin(
            "POST",
            "/v1/tenants/t1/migrations",
            Some(json!({"to": OLD})),
        )
        .await;
    assert_eq!(next.status, 201, "{}", next.body);
    let next = next.body["id"].as_i64().unwrap();
    sqlx::query!(
        "INSERT INTO tenant_databases (tenant_id, place) SELECT id, $2 FROM tenants WHERE name = $1",
        "ops",
        "127.0.0.1:7001/0",
    )
    .execute(&pool)
    .await
    .unwrap();
    let aborted = step(&api, next, "abort").await;
    assert_eq!(aborted.body["state"], "aborted", "{}", aborted.body);
}
