//! `/v1/resources`

use serde_json::json;
use sqlx::PgPool;

use crate::common::{Api, details, single};

#[sqlx::test(migrations = "../migrations")]
async fn create_show_update_delete(pool: PgPool) {
    let api = Api::new(pool).await;
    let created = api
        .admin(
            "POST",
            "/v1/resources",
            Some(
                json!({"name": "main", "url": "redis://127.0.0.1:6379", "description": "primary"}),
            ),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["used_by"], json!([]));
    let shown = api.admin("GET", "/v1/resources/main", None).await;
    assert_eq!(shown.body, created.body);
    assert_eq!(
        api.admin("GET", "/v1/resources/none", None).await.status,
        404
    );

    let updated = api
        .admin(
            "PUT",
            "/v1/resources/main",
            Some(json!({"url": "redis-cluster://127.0.0.1:7000,127.0.0.1:7001"})),
        )
        .await;
    assert_eq!(updated.status, 200, "{}", updated.body);
    assert_eq!(
        updated.body["url"],
        "redis-cluster://127.0.0.1:7000,127.0.0.1:7001"
    );
    let missing = api
        .admin(
            "PUT",
            "/v1/resources/none",
            Some(json!({"url": "redis://127.0.0.1:1"})),
        )
        .await;
    assert_eq!(missing.status, 404);

    let listed = api.admin("GET", "/v1/resources", None).await;
    assert_eq!(listed.body["resources"].as_array().unwrap().len(), 1);

    assert_eq!(
        api.admin("DELETE", "/v1/resources/main", None).await.status,
        204
    );
    assert_eq!(
        api.admin("DELETE", "/v1/resources/main", None).await.status,
        404
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn rejects_bad_names_and_urls_without_leaking_passwords(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    let revision = api.revision().await;

    let duplicate = api
        .admin(
            "POST",
            "/v1/resources",
            Some(json!({"name": "main", "url": "redis://127.0.0.1:1"})),
        )
        .await;
    assert_eq!(
        (duplicate.status, duplicate.error()),
        (409, "resource_exists")
    );

    let url_name = api
        .admin(
            "POST",
            "/v1/resources",
            Some(json!({"name": "redis://x", "url": "redis://127.0.0.1:1"})),
        )
        .await;
    assert_eq!(url_name.status, 422);
    assert!(details(&url_name)[0].starts_with("/name: "));

    let bad_url = api
        .admin(
            "POST",
            "/v1/resources",
            Some(json!({"name": "b", "url": "redis://hunter2hunter2@127.0.0.1:notaport"})),
        )
        .await;
    assert_eq!(bad_url.status, 422);
    assert!(details(&bad_url)[0].starts_with("/url: bad host"));
    assert!(
        !bad_url.body.to_string().contains("hunter2"),
        "{}",
        bad_url.body
    );

    let bad_update = api
        .admin(
            "PUT",
            "/v1/resources/main",
            Some(json!({"url": "http://127.0.0.1"})),
        )
        .await;
    assert_eq!(bad_update.status, 422);

    // Putting what is already there is not a change.
    let same = api
        .admin(
            "PUT",
            "/v1/resources/main",
            Some(json!({"url": "redis://127.0.0.1:6379"})),
        )
        .await;
    assert_eq!(same.status, 200);

    assert_eq!(api.revision().await, revision);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_resource_in_use_cannot_be_deleted_or_broken(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    api.create_tenant("acme").await;
    assert_eq!(api.put_route("acme", single("main")).await.status, 200);
    let shown = api.admin("GET", "/v1/resources/main", None).await;
    assert_eq!(shown.body["used_by"], json!(["acme"]));
    let revision = api.revision().await;

    let in_use = api.admin("DELETE", "/v1/resources/main", None).await;
    assert_eq!((in_use.status, in_use.error()), (409, "resource_in_use"));
    assert!(in_use.body["message"].as_str().unwrap().contains("acme"));

    // The database itself refuses, not only the handler.
    let direct = sqlx::query!("DELETE FROM resources WHERE name = 'main'")
        .execute(&api.state.pool)
        .await
        .unwrap_err();
    let constraint = direct.as_database_error().and_then(|e| e.constraint());
    assert_eq!(constraint, Some("route_resource_refs_resource_id_fkey"));

    // A route writes to it, so it cannot become a read-only replica resource.
    let broken = api
        .admin(
            "PUT",
            "/v1/resources/main",
            Some(json!({"url": "redis-cluster-slaves://127.0.0.1:7000"})),
        )
        .await;
    assert_eq!(broken.status, 422, "{}", broken.body);
    assert!(
        details(&broken)[0].contains("tenant 'acme'"),
        "{:?}",
        details(&broken)
    );
    assert_eq!(api.revision().await, revision);

    // Once no current route uses it (history does not count), it can go.
    assert_eq!(
        api.put_route("acme", single("redis://127.0.0.1:6380"))
            .await
            .status,
        200
    );
    assert_eq!(
        api.admin("DELETE", "/v1/resources/main", None).await.status,
        204
    );

    // Deleting the tenant whose route used a resource frees it too.
    api.create_resource("second", "redis://127.0.0.1:6381")
        .await;
    assert_eq!(api.put_route("acme", single("second")).await.status, 200);
    let in_use = api.admin("DELETE", "/v1/resources/second", None).await;
    assert_eq!(in_use.status, 409);
    assert_eq!(
        api.admin("DELETE", "/v1/tenants/acme", None).await.status,
        204
    );
    let freed = api.admin("DELETE", "/v1/resources/second", None).await;
    assert_eq!(freed.status, 204);
}

/// Answers show a resource URL's passwords masked, like the audit log; the snapshot gateways pull keeps the real
/// ones; a URL sent back masked keeps the stored password.
#[sqlx::test(migrations = "../migrations")]
async fn answers_mask_passwords_and_a_masked_update_keeps_them(pool: PgPool) {
    let api = Api::new(pool).await;
    let real = "redis-sentinel://app:s3cret@127.0.0.1:26379/m?sentinelPassword=sp&db=1";
    let masked = "redis-sentinel://app:***@127.0.0.1:26379/m?sentinelPassword=***&db=1";
    let created = api
        .admin(
            "POST",
            "/v1/resources",
            Some(json!({"name": "main", "url": real})),
        )
        .await;
    assert_eq!(
        (created.status, created.body["url"].as_str()),
        (201, Some(masked))
    );
    let shown = api.admin("GET", "/v1/resources/main", None).await;
    assert_eq!(shown.body["url"], masked);
    let listed = api.admin("GET", "/v1/resources", None).await;
    assert_eq!(listed.body["resources"][0]["url"], masked);

    api.create_tenant("acme").await;
    let inline = "redis://app:inline-pw@127.0.0.1:6380";
    let route = json!({"type": "sharded", "shards": [
        {"name": "a", "target": "main"}, {"name": "b", "target": inline}]});
    let put = api.put_route("acme", route).await;
    assert_eq!(put.status, 200, "{}", put.body);
    assert_eq!(
        put.body["route"]["shards"][1]["target"],
        "redis://app:***@127.0.0.1:6380"
    );
    let current = api.admin("GET", "/v1/tenants/acme/route", None).await;
    assert_eq!(
        current.body["route"]["shards"][1]["target"],
        "redis://app:***@127.0.0.1:6380"
    );
    let version = api
        .admin("GET", "/v1/tenants/acme/route/versions/1", None)
        .await;
    assert_eq!(version.body["route"], current.body["route"]);
    for key in ["k1", "k2", "k3", "k4"] {
        let explained = api
            .admin(
                "GET",
                &format!("/v1/tenants/acme/route/explain?key={key}"),
                None,
            )
            .await;
        let write = explained.body["write"][0].as_str().unwrap_or_default();
        assert!(write == "main" || write.contains("app:***@"), "{write}");
    }

    // Edited as shown (another db, forced: the keys stay in db 1), sent back with the mask: the stored passwords
    // stay.
    let edited = api
        .admin(
            "PUT",
            "/v1/resources/main",
            Some(json!({"url": masked.replace("db=1", "db=2"), "force": true})),
        )
        .await;
    assert_eq!(edited.status, 200, "{}", edited.body);
    assert_eq!(edited.body["url"], masked.replace("db=1", "db=2"));
    // The route read back (masked) and put again keeps the inline password too.
    let again = api.put_route("acme", current.body["route"].clone()).await;
    assert_eq!(again.status, 200, "{}", again.body);
    let snapshot = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(snapshot.status, 200, "{}", snapshot.body);
    let shards = &snapshot.body["tenants"][0]["route"]["shards"];
    assert_eq!(shards[0]["target"], real.replace("db=1", "db=2"));
    assert_eq!(shards[1]["target"], inline);

    // A mask with no stored password behind it is refused, never stored as the password.
    api.create_resource("plain", "redis://127.0.0.1:6379").await;
    let nothing_to_keep = api
        .admin(
            "PUT",
            "/v1/resources/plain",
            Some(json!({"url": "redis://***@127.0.0.1:6379"})),
        )
        .await;
    assert_eq!(nothing_to_keep.status, 422, "{}", nothing_to_keep.body);
    assert_eq!(nothing_to_keep.body["details"][0]["path"], "/url");
    let unknown_inline = api
        .put_route(
            "acme",
            json!({"type": "single", "target": "redis://***@10.0.0.1:1"}),
        )
        .await;
    assert_eq!(unknown_inline.status, 422, "{}", unknown_inline.body);

    let audit = api.admin("GET", "/v1/audit", None).await;
    assert!(!audit.body.to_string().contains("s3cret"), "{}", audit.body);
    assert!(
        !audit.body.to_string().contains("inline-pw"),
        "{}",
        audit.body
    );
}
