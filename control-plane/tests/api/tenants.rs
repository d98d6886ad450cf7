//! `/v1/tenants`

use serde_json::json;
use sqlx::PgPool;

use crate::common::{Api, details};

#[sqlx::test(migrations = "../migrations")]
async fn create_show_list_patch_delete(pool: PgPool) {
    let api = Api::new(pool).await;
    let created = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "acme", "description": "Acme Corp", "limits": {"max_connections": 100}})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["name"], "acme");
    assert_eq!(created.body["disabled"], false);
    assert_eq!(created.body["limits"], json!({"max_connections": 100}));
    assert_eq!(created.body["route_version"], json!(null));

    let shown = api.admin("GET", "/v1/tenants/acme", None).await;
    assert_eq!(shown.status, 200);
    assert_eq!(shown.body, created.body);

    api.create_tenant("beta").await;
    let listed = api.admin("GET", "/v1/tenants", None).await;
    let names: Vec<_> = listed.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["acme", "beta"]);

    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(
                json!({"disabled": true, "allow_admin": true, "limits": {"max_ops_per_sec": 5000}}),
            ),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["disabled"], true);
    assert_eq!(patched.body["allow_admin"], true);
    assert_eq!(patched.body["description"], "Acme Corp");
    // limits are replaced as a whole.
    assert_eq!(patched.body["limits"], json!({"max_ops_per_sec": 5000}));

    assert_eq!(
        api.admin("DELETE", "/v1/tenants/acme", None).await.status,
        204
    );
    assert_eq!(api.admin("GET", "/v1/tenants/acme", None).await.status, 404);
    assert_eq!(
        api.admin("DELETE", "/v1/tenants/acme", None).await.status,
        404
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn rejects_bad_input_without_changing_anything(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;

    let duplicate = api
        .admin("POST", "/v1/tenants", Some(json!({"name": "acme"})))
        .await;
    assert_eq!(
        (duplicate.status, duplicate.error()),
        (409, "tenant_exists")
    );

    let bad_name = api
        .admin("POST", "/v1/tenants", Some(json!({"name": "no spaces"})))
        .await;
    assert_eq!(bad_name.status, 422);
    assert_eq!(details(&bad_name).len(), 1);
    assert!(details(&bad_name)[0].starts_with("/name: "));

    let unknown_field = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "x", "colour": "red"})),
        )
        .await;
    assert_eq!(unknown_field.status, 422);
    assert!(details(&unknown_field)[0].starts_with("/colour: unknown field"));

    let wrong_type = api
        .admin("POST", "/v1/tenants", Some(json!({"name": 5})))
        .await;
    assert_eq!(wrong_type.status, 422);
    assert!(details(&wrong_type)[0].starts_with("/name: invalid type"));

    let not_json = api
        .request(
            "POST",
            "/v1/tenants",
            Some(crate::common::ADMIN),
            &[],
            Some("{nope".into()),
        )
        .await;
    assert_eq!((not_json.status, not_json.error()), (400, "bad_request"));
    assert_eq!(not_json.body["details"], json!([]));

    let zero_limit = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"limits": {"max_connections": 0}})),
        )
        .await;
    assert_eq!(zero_limit.status, 422);
    assert_eq!(
        details(&zero_limit),
        vec!["/limits/max_connections: must be greater than 0"]
    );

    // Changing nothing is not a change.
    let same = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"disabled": false})),
        )
        .await;
    assert_eq!(same.status, 200);
    assert_eq!(
        api.admin("PATCH", "/v1/tenants/acme", Some(json!({})))
            .await
            .status,
        200
    );
    let same_url = api.admin("GET", "/v1/tenants/acme", None).await;
    assert_eq!(same.body, same_url.body);

    let missing = api
        .admin(
            "PATCH",
            "/v1/tenants/nobody",
            Some(json!({"disabled": true})),
        )
        .await;
    assert_eq!((missing.status, missing.error()), (404, "not_found"));

    assert_eq!(
        api.revision().await,
        revision,
        "a rejected change moved the revision"
    );
}

/// Postgres cannot store a NUL in text: one in a path, a body or a query is the client's mistake (400 with the
/// usual error body), never a 500.
#[sqlx::test(migrations = "../migrations")]
async fn nul_characters_are_400_not_500(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;
    let bad_request = |reply: &crate::common::Reply| {
        assert_eq!(
            (reply.status, reply.error()),
            (400, "bad_request"),
            "{}",
            reply.body
        );
        assert!(reply.body["message"].is_string(), "{}", reply.body);
        reply.body["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    for (method, path) in [
        ("GET", "/v1/tenants/a%00b"),
        ("DELETE", "/v1/tenants/acme%00"),
        ("GET", "/v1/tenants/%00/route"),
        ("GET", "/v1/tenants/acme%00/credentials"),
        ("GET", "/v1/resources/main%00"),
    ] {
        bad_request(&api.admin(method, path, None).await);
    }
    let patch = api
        .admin(
            "PATCH",
            "/v1/tenants/a%00",
            Some(json!({"description": "x"})),
        )
        .await;
    bad_request(&patch);

    let name = api
        .admin("POST", "/v1/tenants", Some(json!({"name": "a\u{0}b"})))
        .await;
    assert_eq!(
        bad_request(&name),
        "/name: text must not contain NUL (\\u0000)"
    );
    let description = api
        .admin(
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"description": "x\u{0}"})),
        )
        .await;
    assert_eq!(
        bad_request(&description),
        "/description: text must not contain NUL (\\u0000)"
    );
    let resource = api
        .admin(
            "POST",
            "/v1/resources",
            Some(json!({"name": "main", "url": "redis://h:1", "description": ["\u{0}"]})),
        )
        .await;
    assert_eq!(
        bad_request(&resource),
        "/description/0: text must not contain NUL (\\u0000)"
    );
    let comment = api
        .admin(
            "PUT",
            "/v1/tenants/acme/route",
            Some(json!({"route": {"type": "single", "target": "redis://h:1"}, "comment": "\u{0}"})),
        )
        .await;
    assert_eq!(
        bad_request(&comment),
        "/comment: text must not contain NUL (\\u0000)"
    );
    let credential = api
        .admin(
            "POST",
            "/v1/tenants/acme/credentials",
            Some(json!({"password": "0123456789abcdef\u{0}"})),
        )
        .await;
    bad_request(&credential);
    bad_request(&api.admin("GET", "/v1/audit?tenant=%00", None).await);

    assert_eq!(api.revision().await, revision);
}

/// The names in a `GET /v1/tenants` answer, and its `next_after`.
async fn listed(api: &Api, query: &str) -> (Vec<String>, serde_json::Value) {
    let reply = api.admin("GET", &format!("/v1/tenants{query}"), None).await;
    assert_eq!(reply.status, 200, "{query}: {}", reply.body);
    let names = reply.body["tenants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    (names, reply.body["next_after"].clone())
}

#[sqlx::test(migrations = "../migrations")]
async fn search_by_prefix_and_page_by_name(pool: PgPool) {
    let api = Api::new(pool).await;
    // Byte order puts upper case first; "shop" and "shop-" test the prefix's bounds.
    for name in [
        "shop-b", "Shop", "shop", "shop-a", "shopper", "sho", "zeta", "shop-c",
    ] {
        api.create_tenant(name).await;
    }
    let (all, next) = listed(&api, "").await;
    assert_eq!(
        all,
        [
            "Shop", "sho", "shop", "shop-a", "shop-b", "shop-c", "shopper", "zeta"
        ]
    );
    assert_eq!(next, json!(null), "no limit: no next page");

    let (shops, _) = listed(&api, "?prefix=shop-").await;
    assert_eq!(shops, ["shop-a", "shop-b", "shop-c"]);

    // Paging through "shop": full pages name where the next starts; the last one does not.
    let (first, next) = listed(&api, "?prefix=shop&limit=2").await;
    assert_eq!(
        (first, next.clone()),
        (vec!["shop".into(), "shop-a".into()], json!("shop-a"))
    );
    let (second, next) = listed(&api, "?prefix=shop&limit=2&after=shop-a").await;
    assert_eq!(
        (second, next),
        (vec!["shop-b".into(), "shop-c".into()], json!("shop-c"))
    );
    let (third, next) = listed(&api, "?prefix=shop&limit=2&after=shop-c").await;
    assert_eq!((third, next), (vec!["shopper".into()], json!(null)));

    let (none, next) = listed(&api, "?prefix=nobody&limit=5").await;
    assert_eq!((none.len(), next), (0, json!(null)));

    for bad in [
        "?limit=0",
        "?limit=1001",
        "?limit=x",
        "?prefix=%00",
        "?colour=red",
    ] {
        let reply = api.admin("GET", &format!("/v1/tenants{bad}"), None).await;
        assert_eq!(reply.status, 400, "{bad}: {}", reply.body);
    }
}
