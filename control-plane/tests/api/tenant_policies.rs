//! A tenant's policies (`namespace`, `read_only`, `commands`, `ip_allow`, `ip_deny`, `blocked_keys`): kept through
//! create, patch, show, the audit log, an import and the snapshot; refused with a 422 naming the field when
//! malformed, and with a 409 when a namespace starts another tenant's, or when a tenant without a namespace would
//! share a database with namespaced ones.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, details, single};

fn policies() -> Value {
    json!({
        "namespace": "{shop}:",
        "read_only": true,
        "commands": {"allow": ["@read", "config|get"], "deny": ["keys"]},
        "ip_allow": ["10.0.0.0/8", "2001:db8::/32"],
        "ip_deny": ["10.1.2.3"],
        "blocked_keys": ["hot:*", "big"]
    })
}

/// The paths of a 422's details.
fn paths(reply: &crate::common::Reply) -> Vec<String> {
    details(reply)
        .iter()
        .map(|d| {
            d.split_once(": ")
                .map_or(d.as_str(), |(path, _)| path)
                .to_string()
        })
        .collect()
}

/// The policy fields of a tenant body.
fn policy_of(tenant: &Value) -> Value {
    let fields = [
        "namespace",
        "read_only",
        "commands",
        "ip_allow",
        "ip_deny",
        "blocked_keys",
    ];
    fields
        .iter()
        .filter_map(|f| Some((f.to_string(), tenant.get(*f)?.clone())))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[sqlx::test(migrations = "../migrations")]
async fn create_patch_show_audit_and_snapshot(pool: PgPool) {
    let api = Api::new(pool).await;
    let mut body = policies();
    body["name"] = json!("shop");
    let created = api.admin("POST", "/v1/tenants", Some(body)).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(policy_of(&created.body), policies());
    let shown = api.admin("GET", "/v1/tenants/shop", None).await;
    assert_eq!(policy_of(&shown.body), policies());

    // Each field given replaces the tenant's; a null namespace removes it; defaults are left out.
    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"namespace": null, "read_only": false, "blocked_keys": ["big"]})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let mut expected = policies();
    let fields = expected.as_object_mut().unwrap();
    fields.remove("namespace");
    fields.remove("read_only");
    fields.insert("blocked_keys".into(), json!(["big"]));
    assert_eq!(policy_of(&patched.body), expected);

    // A patch that changes nothing makes no revision.
    let revision = api.revision().await;
    let again = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"blocked_keys": ["big"]})),
        )
        .await;
    assert_eq!(again.status, 200);
    assert_eq!(api.revision().await, revision);

    let audit = api.admin("GET", "/v1/audit?tenant=shop", None).await;
    let update = &audit.body["entries"][0];
    assert_eq!(update["action"], "tenant.update");
    assert_eq!(policy_of(&update["before"]), policies());
    assert_eq!(policy_of(&update["after"]), expected);

    // The snapshot carries them at the tenant's top level.
    api.put_route("shop", single("redis://127.0.0.1:6379"))
        .await;
    let snapshot = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(policy_of(&snapshot.body["tenants"][0]), expected);
}

#[sqlx::test(migrations = "../migrations")]
async fn malformed_policies_are_refused_with_their_paths(pool: PgPool) {
    let api = Api::new(pool).await;
    let revision = api.revision().await;
    let bad = json!({
        "name": "shop",
        "namespace": "a b",
        "commands": {"allow": ["@nope"], "deny": ["get", "flushal"]},
        "ip_allow": ["10.0.0.1/8"],
        "ip_deny": ["localhost"],
        "blocked_keys": [""]
    });
    let refused = api.admin("POST", "/v1/tenants", Some(bad)).await;
    assert_eq!(refused.status, 422, "{}", refused.body);
    assert_eq!(
        paths(&refused),
        [
            "/namespace",
            "/commands/allow/0",
            "/commands/deny/1",
            "/ip_allow/0",
            "/ip_deny/0",
            "/blocked_keys/0"
        ]
    );
    assert_eq!(api.revision().await, revision);

    api.create_tenant("shop").await;
    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"namespace": "{a}{b}"})),
        )
        .await;
    assert_eq!(patched.status, 422, "{}", patched.body);
    assert_eq!(paths(&patched), ["/namespace"]);
    let typo = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"read_onyl": true})),
        )
        .await;
    assert_eq!(typo.status, 422, "{}", typo.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn namespaces_never_overlap(pool: PgPool) {
    let api = Api::new(pool).await;
    let create = |name: &str, namespace: &str| json!({"name": name, "namespace": namespace});
    assert_eq!(
        api.admin("POST", "/v1/tenants", Some(create("a", "app:")))
            .await
            .status,
        201
    );
    let revision = api.revision().await;
    for (name, namespace) in [("b", "app:"), ("c", "app:x:"), ("d", "ap")] {
        let refused = api
            .admin("POST", "/v1/tenants", Some(create(name, namespace)))
            .await;
        assert_eq!(
            (refused.status, refused.error()),
            (409, "namespace_overlaps"),
            "{namespace}: {}",
            refused.body
        );
    }
    api.create_tenant("e").await;
    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/e",
            Some(json!({"namespace": "app:e:"})),
        )
        .await;
    assert_eq!(
        (patched.status, patched.error()),
        (409, "namespace_overlaps")
    );
    assert_eq!(api.revision().await, revision + 1); // tenant e only
    // Its own namespace does not overlap itself; a sibling does not overlap.
    let kept = api
        .admin(
            "PATCH",
            "/v1/tenants/a",
            Some(json!({"namespace": "app:", "read_only": true})),
        )
        .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let sibling = api
        .admin("PATCH", "/v1/tenants/e", Some(json!({"namespace": "apq:"})))
        .await;
    assert_eq!(sibling.status, 200, "{}", sibling.body);

    // An import: overlaps among its own tenants are a 422, with existing tenants a 409; nothing is made.
    let import = |namespaces: &[&str]| {
        let tenants: Vec<Value> = namespaces
            .iter()
            .enumerate()
            .map(|(i, ns)| json!({"tenant": {"name": format!("i{i}"), "namespace": ns}}))
            .collect();
        json!({ "tenants": tenants })
    };
    let revision = api.revision().await;
    let within = api
        .admin("POST", "/v1/import", Some(import(&["x:", "y:", "x:1"])))
        .await;
    assert_eq!(within.status, 422, "{}", within.body);
    assert_eq!(paths(&within), ["/tenants/2/tenant/namespace"]);
    let existing = api
        .admin("POST", "/v1/import", Some(import(&["x:", "apq:1"])))
        .await;
    assert_eq!(
        (existing.status, existing.error()),
        (409, "namespace_overlaps")
    );
    assert_eq!(api.revision().await, revision);
    let fine = api
        .admin("POST", "/v1/import", Some(import(&["x:", "y:"])))
        .await;
    assert_eq!(fine.status, 201, "{}", fine.body);
    assert_eq!(fine.body["tenants"][1]["tenant"]["namespace"], "y:");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tenant_without_a_namespace_never_shares_a_database_with_namespaced_ones(pool: PgPool) {
    let api = Api::new(pool).await;
    let refused = |reply: &crate::common::Reply| {
        assert_eq!(
            (reply.status, reply.error()),
            (409, "namespace_overlaps"),
            "{}",
            reply.body
        );
        reply.body["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    api.create_resource("main", "redis://127.0.0.1:6379/0")
        .await;
    for tenant in [
        json!({"name": "shop", "namespace": "shop:"}),
        json!({"name": "blog", "namespace": "blog:"}),
        json!({"name": "news", "namespace": "news:"}),
        json!({"name": "plain"}),
        json!({"name": "ops", "allow_admin": true}),
    ] {
        let created = api.admin("POST", "/v1/tenants", Some(tenant)).await;
        assert_eq!(created.status, 201, "{}", created.body);
    }
    for tenant in ["shop", "news"] {
        assert_eq!(api.put_route(tenant, single("main")).await.status, 200);
    }

    // Without a namespace, into the database a namespaced tenant uses (named inline, with a password and TLS:
    // the same database), refused; the next database is another one.
    let revision = api.revision().await;
    let message = refused(
        &api.put_route("plain", single("rediss://secret-password@127.0.0.1:6379"))
            .await,
    );
    assert!(
        message.contains("'plain' has no key namespace")
            && message.contains("'news' uses database")
            && message.contains("127.0.0.1:6379/0"),
        "{message}"
    );
    assert_eq!(api.revision().await, revision);
    let two = json!({"type": "single", "target": "redis://127.0.0.1:6379/1", "databases": 2});
    assert_eq!(api.put_route("plain", two).await.status, 200);
    // Admin tenants share any database, by design.
    assert_eq!(api.put_route("ops", single("main")).await.status, 200);

    // The reverse: a namespaced tenant into a database of a tenant without one (its second database).
    let message = refused(
        &api.put_route("blog", single("redis://127.0.0.1:6379/2"))
            .await,
    );
    assert!(
        message.contains("'plain' uses database 127.0.0.1:6379/2"),
        "{message}"
    );
    // A double-write table's secondary counts too (a migration into that database).
    let moving = json!({"type": "double_write", "primary": single("redis://127.0.0.1:6379/3"),
                        "secondary": single("redis://127.0.0.1:6379/1")});
    refused(&api.put_route("blog", moving).await);

    // Policy changes: losing admin, or a namespace, puts a tenant under the rule; gaining one lets it share (namespace
    // changes forced past the guard: these tenants have routes).
    let patch = |tenant: &str, body: Value| {
        let api = api.clone();
        let path = format!("/v1/tenants/{tenant}");
        async move { api.admin("PATCH", &path, Some(body)).await }
    };
    refused(&patch("ops", json!({"allow_admin": false})).await);
    refused(&patch("shop", json!({"namespace": null, "force": true})).await);
    assert_eq!(patch("shop", json!({"read_only": true})).await.status, 200);
    assert_eq!(
        patch("plain", json!({"namespace": "plain:", "force": true}))
            .await
            .status,
        200
    );
    assert_eq!(
        api.put_route("blog", single("redis://127.0.0.1:6379/2"))
            .await
            .status,
        200
    );
    refused(&patch("plain", json!({"namespace": null, "force": true})).await);

    // A resource whose new URL would bring a tenant without a namespace into a namespaced one's database (even
    // forced past the guard: its keys stay in database 9).
    api.create_resource("spare", "redis://127.0.0.1:6379/9")
        .await;
    api.create_tenant("bare").await;
    assert_eq!(api.put_route("bare", single("spare")).await.status, 200);
    let moved = api
        .admin(
            "PUT",
            "/v1/resources/spare",
            Some(json!({"url": "redis://127.0.0.1:6379/2", "force": true})),
        )
        .await;
    let message = refused(&moved);
    assert!(message.contains("'bare'"), "{message}");
    let kept = api.admin("GET", "/v1/resources/spare", None).await;
    assert_eq!(
        kept.body["url"], "redis://127.0.0.1:6379/9",
        "{}",
        kept.body
    );

    // An import, against existing tenants and among its own; nothing is made.
    let revision = api.revision().await;
    let import =
        |tenants: Value| api.admin("POST", "/v1/import", Some(json!({ "tenants": tenants })));
    refused(&import(json!([{"tenant": {"name": "i0"}, "route": single("main")}])).await);
    refused(
        &import(json!([
            {"tenant": {"name": "i1", "namespace": "i1:"}, "route": single("redis://127.0.0.1:6379/7")},
            {"tenant": {"name": "i2"}, "route": single("redis://127.0.0.1:6379/7")}
        ]))
        .await,
    );
    assert_eq!(api.revision().await, revision);
    assert_eq!(api.admin("GET", "/v1/tenants/i1", None).await.status, 404);
}

/// `near_cache`: set whole, shown and carried in the snapshot with its defaults left out, replaced by a `PATCH`,
/// removed by `null`; its bounds refused with a 422 naming the field.
#[sqlx::test(migrations = "../migrations")]
async fn a_near_cache_is_checked_stored_and_removed(pool: PgPool) {
    let api = Api::new(pool).await;
    let cache = json!({"max_bytes": 1048576, "keys": "all", "max_value_bytes": 512});
    let created = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "shop", "near_cache": cache})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["near_cache"], cache);
    api.put_route("shop", single("redis://127.0.0.1:6379"))
        .await;
    let snapshot = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(snapshot.body["tenants"][0]["near_cache"], cache);

    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"near_cache": {"max_bytes": 65536}})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.body["near_cache"], json!({"max_bytes": 65536}));

    let revision = api.revision().await;
    for (bad, path) in [
        (json!({"max_bytes": 0}), "/near_cache/max_bytes"),
        (json!({"max_bytes": 1000}), "/near_cache/max_value_bytes"),
        (
            json!({"max_bytes": 1048576, "max_value_bytes": 0}),
            "/near_cache/max_value_bytes",
        ),
    ] {
        let refused = api
            .admin(
                "PATCH",
                "/v1/tenants/shop",
                Some(json!({"near_cache": bad})),
            )
            .await;
        assert_eq!(refused.status, 422, "{}", refused.body);
        assert_eq!(paths(&refused), [path], "{}", refused.body);
    }
    let unknown = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"near_cache": {"max_bytes": 65536, "keys": "cold"}})),
        )
        .await;
    assert_eq!(unknown.status, 422, "{}", unknown.body);
    assert_eq!(api.revision().await, revision);

    let removed = api
        .admin(
            "PATCH",
            "/v1/tenants/shop",
            Some(json!({"near_cache": null})),
        )
        .await;
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert!(removed.body.get("near_cache").is_none(), "{}", removed.body);
}
