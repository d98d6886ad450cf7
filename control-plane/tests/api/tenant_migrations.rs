//! `/v1/tenants/{tenant}/migrations`: the state machine, its route versions, its 409s and its audit entries.
//! The background tasks are not running here (no worker in the bare router): their completion is simulated with
//! the one UPDATE a task makes when it ends; `tests/tests/migration.rs` runs them for real.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, Reply, details, single};

const OLD: &str = "redis://127.0.0.1:7001";
const NEW: &str = "redis://127.0.0.1:7002";

async fn step(api: &Api, id: i64, action: &str) -> Reply {
    api.admin(
        "POST",
        &format!("/v1/tenants/acme/migrations/{id}/{action}"),
        None,
    )
    .await
}

async fn route(api: &Api) -> Value {
    api.admin("GET", "/v1/tenants/acme/route", None).await.body["route"].clone()
}

async fn heartbeat(api: &Api, revision: i64) {
    let reply = api
        .gateway(
            "POST",
            "/v1/gateways/heartbeat",
            Some(json!({"id": "gw-1", "revision": revision})),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// What a background task does when it completes.
async fn task_done(api: &Api, id: i64, state: &str) {
    sqlx::query!(
        "UPDATE tenant_migrations SET state = $2 WHERE id = $1",
        id,
        state,
    )
    .execute(&api.state.pool)
    .await
    .unwrap();
}

fn assert_conflict(reply: &Reply, code: &str) {
    assert_eq!((reply.status, reply.error()), (409, code), "{}", reply.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn steps_in_order_with_conflicts(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    assert_eq!(api.put_route("acme", single(OLD)).await.status, 200);
    let before = api.revision().await;

    let created = api
        .admin(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": NEW, "ack": "all"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["state"], "double_write");
    let id = created.body["id"].as_i64().unwrap();
    let double_write = api.revision().await;
    assert_eq!(double_write, before + 1);
    assert_eq!(created.body["route_revision"], double_write);
    assert_eq!(
        route(&api).await,
        json!({"type": "double_write", "primary": single(OLD), "secondary": single(NEW), "ack": "all"})
    );
    // Explain shows the write to the destination too, and whose route this is.
    let explained = api
        .admin("GET", "/v1/tenants/acme/route/explain?key=k", None)
        .await;
    assert_eq!(explained.body["migration"], id, "{}", explained.body);
    assert_eq!(explained.body["read"], json!([OLD]));
    let writes: Vec<_> = explained.body["writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| (w["table"].clone(), w["write"].clone()))
        .collect();
    assert_eq!(
        writes,
        vec![
            (json!("primary"), json!([OLD])),
            (json!("secondary"), json!([NEW]))
        ]
    );

    // One active migration per tenant, and the route belongs to it.
    let second = api
        .admin(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": NEW})),
        )
        .await;
    assert_conflict(&second, "migration_active");
    assert_conflict(
        &api.put_route("acme", single(NEW)).await,
        "migration_active",
    );
    let rollback = api
        .admin(
            "POST",
            "/v1/tenants/acme/route/rollback",
            Some(json!({"version": 1})),
        )
        .await;
    assert_conflict(&rollback, "migration_active");

    // Steps out of order.
    for action in ["verify", "cutover", "finish"] {
        assert_conflict(&step(&api, id, action).await, "migration_state");
    }
    assert_eq!(step(&api, id, "jump").await.status, 404);
    assert_eq!(step(&api, id + 100, "backfill").await.status, 404);

    // Backfill waits for every live gateway to serve the double-write route.
    heartbeat(&api, double_write - 1).await;
    assert_conflict(&step(&api, id, "backfill").await, "gateways_not_converged");
    heartbeat(&api, double_write).await;
    let backfilling = step(&api, id, "backfill").await;
    assert_eq!(backfilling.status, 200, "{}", backfilling.body);
    assert_eq!(backfilling.body["state"], "backfilling");
    assert_eq!(backfilling.body["converged"], true);
    assert_conflict(&step(&api, id, "backfill").await, "migration_state");
    assert_conflict(&step(&api, id, "verify").await, "migration_state");

    task_done(&api, id, "backfilled").await;
    assert_eq!(step(&api, id, "verify").await.body["state"], "verifying");
    assert_conflict(&step(&api, id, "cutover").await, "migration_state");
    task_done(&api, id, "verified").await;

    let cut_over = step(&api, id, "cutover").await;
    assert_eq!(cut_over.body["state"], "cut_over", "{}", cut_over.body);
    assert_eq!(
        route(&api).await,
        json!({"type": "double_write", "primary": single(NEW), "secondary": single(OLD), "ack": "all"})
    );
    // Finish waits for the cutover route to be everywhere.
    assert_conflict(&step(&api, id, "finish").await, "gateways_not_converged");
    heartbeat(&api, api.revision().await).await;
    let finished = step(&api, id, "finish").await;
    assert_eq!(finished.body["state"], "finished", "{}", finished.body);
    assert_eq!(route(&api).await, single(NEW));
    assert_conflict(&step(&api, id, "abort").await, "migration_state");

    // Every step is audited, and the GET shows the migration.
    let audit = api.admin("GET", "/v1/audit?tenant=acme", None).await;
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for action in [
        "migration.create",
        "migration.backfill",
        "migration.verify",
        "migration.cutover",
        "migration.finish",
    ] {
        assert!(
            actions.contains(&action),
            "{action} missing from {actions:?}"
        );
    }
    let shown = api
        .admin("GET", &format!("/v1/tenants/acme/migrations/{id}"), None)
        .await;
    assert_eq!(shown.body["state"], "finished");
    assert_eq!(shown.body["from"], single(OLD));
    assert_eq!(shown.body["to"], single(NEW));

    // A finished migration frees the tenant; an abort restores the route it started from.
    let next = api
        .admin(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": OLD})),
        )
        .await;
    assert_eq!(next.status, 201, "{}", next.body);
    let next_id = next.body["id"].as_i64().unwrap();
    let aborted = step(&api, next_id, "abort").await;
    assert_eq!(aborted.body["state"], "aborted");
    assert_eq!(route(&api).await, single(NEW));
    let list = api.admin("GET", "/v1/tenants/acme/migrations", None).await;
    let ids: Vec<i64> = list.body["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![next_id, id]);
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_requests_change_nothing(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let create = |body: Value| {
        let api = api.clone();
        async move {
            api.admin("POST", "/v1/tenants/acme/migrations", Some(body))
                .await
        }
    };
    assert_conflict(&create(json!({"to": NEW})).await, "no_route");
    // A tenant owning several databases: only one would be copied.
    let mut databases = single(OLD);
    databases["databases"] = json!(2);
    assert_eq!(api.put_route("acme", databases).await.status, 200);
    assert_conflict(&create(json!({"to": NEW})).await, "databases_unsupported");
    assert_eq!(api.put_route("acme", single(OLD)).await.status, 200);
    let revision = api.revision().await;

    let unknown = create(json!({"to": "nowhere"})).await;
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert_eq!(unknown.body["details"][0]["path"], "/to/target");
    let nested = create(
        json!({"to": {"type": "double_write", "primary": single(OLD), "secondary": single(NEW)}}),
    )
    .await;
    assert_eq!(nested.status, 422, "{}", nested.body);
    let ack = create(json!({"to": NEW, "ack": "all_check_error"})).await;
    assert_eq!(
        (ack.status, ack.body["details"][0]["path"].as_str()),
        (422, Some("/ack"))
    );
    let batch = create(json!({"to": NEW, "limits": {"batch": 0}})).await;
    assert_eq!(batch.status, 422, "{}", batch.body);
    let huge_batch = create(json!({"to": NEW, "limits": {"batch": 10_001}})).await;
    assert_eq!(
        details(&huge_batch),
        vec!["/limits/batch: must be 1 to 10000"]
    );
    let huge_buckets = create(json!({"to": {"type": "sharded",
        "hash": {"algorithm": "crc16", "buckets": 4_294_967_295_u32},
        "shards": [{"name": "a", "target": NEW, "buckets": ["0-4294967294"]}]}}))
    .await;
    assert_eq!(
        details(&huge_buckets),
        vec!["/to/hash/buckets: must be at most 65536"]
    );
    let misspelt = create(json!({"to": NEW, "limit": {}})).await;
    assert_eq!(misspelt.status, 422, "{}", misspelt.body);
    let missing = api
        .admin(
            "POST",
            "/v1/tenants/nobody/migrations",
            Some(json!({"to": NEW})),
        )
        .await;
    assert_eq!(missing.status, 404);
    assert_eq!(
        api.revision().await,
        revision,
        "a refused request changed the revision"
    );

    // A whole table as the destination: one shard to several.
    let sharded = json!({"type": "sharded", "shards": [
        {"name": "a", "target": NEW}, {"name": "b", "target": "redis://127.0.0.1:7003"}]});
    let created = create(json!({"to": sharded, "limits": {"keys_per_sec": 100}})).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(
        created.body["to"]["shards"][1]["target"],
        "redis://127.0.0.1:7003"
    );
    assert_eq!(created.body["limits"]["keys_per_sec"], 100);
    assert_eq!(created.body["limits"]["batch"], 200);
}
