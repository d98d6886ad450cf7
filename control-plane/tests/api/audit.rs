//! `GET /v1/audit`

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, single};

#[sqlx::test(migrations = "../migrations")]
async fn every_change_is_recorded_once_without_secrets(pool: PgPool) {
    let api = Api::new(pool).await;
    let start = api.revision().await;
    api.create_resource("main", "redis://app:backend-password@127.0.0.1:6379")
        .await;
    api.create_tenant("acme").await;
    api.admin("PATCH", "/v1/tenants/acme", Some(json!({"disabled": true})))
        .await;
    let (id, secret) = api.issue_credential("acme").await;
    api.admin(
        "DELETE",
        &format!("/v1/tenants/acme/credentials/{id}"),
        None,
    )
    .await;
    api.put_route("acme", single("main")).await;
    api.admin(
        "POST",
        "/v1/tenants/acme/route/rollback",
        Some(json!({"version": 1})),
    )
    .await;
    api.put_route("acme", single("redis://127.0.0.1:1")).await;
    api.admin(
        "PUT",
        "/v1/resources/main",
        Some(json!({"url": "redis://127.0.0.1:2"})),
    )
    .await;
    api.admin("DELETE", "/v1/resources/main", None).await;
    api.create_tenant("beta").await;
    api.admin("DELETE", "/v1/tenants/beta", None).await;
    let expected = [
        "resource.create",
        "tenant.create",
        "tenant.update",
        "credential.create",
        "credential.revoke",
        "route.put",
        "route.rollback",
        "route.put",
        "resource.update",
        "resource.delete",
        "tenant.create",
        "tenant.delete",
    ];
    assert_eq!(
        api.revision().await,
        start + expected.len() as i64,
        "one revision per change"
    );

    let page = api.admin("GET", "/v1/audit", None).await;
    assert_eq!(page.status, 200);
    let entries = page.body["entries"].as_array().unwrap();
    let mut actions: Vec<&str> = entries
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    actions.reverse();
    assert_eq!(actions, expected);
    let revisions: Vec<i64> = entries
        .iter()
        .rev()
        .map(|e| e["revision"].as_i64().unwrap())
        .collect();
    assert_eq!(
        revisions,
        (start + 1..=start + expected.len() as i64).collect::<Vec<_>>()
    );
    for entry in entries {
        assert!(entry["actor"].as_str().unwrap().starts_with("admin:"));
        assert!(entry["at"].is_string());
    }
    let text = page.body.to_string();
    assert!(!text.contains(&secret), "the audit log holds no secret");
    assert!(
        !text.contains("backend-password"),
        "the audit log masks backend passwords"
    );
    assert!(text.contains("redis://app:***@127.0.0.1:6379"));

    let updated = entries
        .iter()
        .find(|e| e["action"] == "tenant.update")
        .unwrap();
    assert_eq!(updated["object"], "tenants/acme");
    assert_eq!(updated["before"]["disabled"], false);
    assert_eq!(updated["after"]["disabled"], true);
    let rollback = entries
        .iter()
        .find(|e| e["action"] == "route.rollback")
        .unwrap();
    assert_eq!(rollback["before"]["version"], 1);
    assert_eq!(rollback["after"]["version"], 2);

    let beta = api.admin("GET", "/v1/audit?tenant=beta", None).await;
    let actions: Vec<&Value> = beta.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| &e["action"])
        .collect();
    assert_eq!(actions, vec!["tenant.delete", "tenant.create"]);
    let future = api
        .admin("GET", "/v1/audit?since=2999-01-01T00:00:00Z", None)
        .await;
    assert_eq!(future.body["entries"], json!([]));
    let past = api
        .admin(
            "GET",
            "/v1/audit?since=2000-01-01T00:00:00%2B02:00&limit=2",
            None,
        )
        .await;
    assert_eq!(past.body["entries"].as_array().unwrap().len(), 2);
    let before = past.body["entries"][1]["id"].as_i64().unwrap();
    let older = api
        .admin(
            "GET",
            &format!("/v1/audit?before={before}&limit=1000"),
            None,
        )
        .await;
    assert_eq!(
        older.body["entries"].as_array().unwrap().len(),
        expected.len() - 2
    );

    // The log is append-only in the database too.
    let rewrite = sqlx::query!("UPDATE audit_log SET actor = 'someone else'")
        .execute(&api.state.pool)
        .await;
    assert!(rewrite.is_err());

    for bad in ["since=yesterday", "limit=0", "limit=5000"] {
        let reply = api.admin("GET", &format!("/v1/audit?{bad}"), None).await;
        assert_eq!(reply.status, 400, "{bad}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn filters_by_actor_action_and_time(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    api.create_tenant("acme").await;
    api.put_route("acme", single("main")).await;
    api.admin(
        "POST",
        "/v1/tenants/acme/route/rollback",
        Some(json!({"version": 1})),
    )
    .await;
    let actions = |query: &str| {
        let query = query.to_string();
        let api = &api;
        async move {
            let page = api.admin("GET", &format!("/v1/audit{query}"), None).await;
            assert_eq!(page.status, 200, "{query}: {}", page.body);
            page.body["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["action"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        actions("?action=route.").await,
        ["route.rollback", "route.put"]
    );
    assert_eq!(actions("?action=tenant.create").await, ["tenant.create"]);
    let everything = actions("").await;
    assert_eq!(everything.len(), 4);
    let page = api.admin("GET", "/v1/audit", None).await;
    let actor = page.body["entries"][0]["actor"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(actor.starts_with("admin:"), "{actor}");
    assert_eq!(actions(&format!("?actor={actor}")).await, everything);
    assert_eq!(actions("?actor=admin:00000000").await.len(), 0);
    let newest = page.body["entries"][0]["at"].as_str().unwrap().to_string();
    let until = |at: &str| format!("?until={}", at.replace('+', "%2B"));
    assert_eq!(
        actions(&until(&newest)).await.len(),
        3,
        "until is exclusive"
    );
    assert_eq!(actions(&until("2000-01-01T00:00:00Z")).await.len(), 0);
    let bad = api.admin("GET", "/v1/audit?until=yesterday", None).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body["message"].as_str().unwrap().starts_with("until "));
}
