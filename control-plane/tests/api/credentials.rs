//! `/v1/tenants/{tenant}/credentials`

use serde_json::json;
use sqlx::PgPool;
use switchyard_schemas::credential_digest;

use crate::common::{Api, details};

#[sqlx::test(migrations = "../migrations")]
async fn issue_list_revoke(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let issued = api
        .admin(
            "POST",
            "/v1/tenants/acme/credentials",
            Some(json!({"description": "app v2"})),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let secret = issued.body["secret"].as_str().unwrap();
    assert!(secret.starts_with("sy_"), "{secret}");
    assert_eq!(secret.len(), 3 + 64, "256 bits, hex");
    assert_eq!(issued.body["imported"], false);
    let id = issued.body["id"].as_i64().unwrap();

    // Stored as its digest only.
    let stored = sqlx::query_scalar!("SELECT digest FROM credentials WHERE id = $1", id)
        .fetch_one(&api.state.pool)
        .await
        .unwrap();
    assert_eq!(stored, credential_digest(secret));

    let (_, second) = api.issue_credential("acme").await;
    assert_ne!(second, secret, "secrets are random");

    let listed = api.admin("GET", "/v1/tenants/acme/credentials", None).await;
    assert_eq!(listed.status, 200);
    let text = listed.body.to_string();
    assert!(
        !text.contains(secret) && !text.contains(&stored),
        "no secret or digest: {text}"
    );
    assert_eq!(listed.body["credentials"].as_array().unwrap().len(), 2);
    assert_eq!(listed.body["credentials"][0]["description"], "app v2");

    let path = format!("/v1/tenants/acme/credentials/{id}");
    assert_eq!(api.admin("DELETE", &path, None).await.status, 204);
    let again = api.admin("DELETE", &path, None).await;
    assert_eq!((again.status, again.error()), (404, "not_found"));
    let listed = api.admin("GET", "/v1/tenants/acme/credentials", None).await;
    assert!(listed.body["credentials"][0]["revoked_at"].is_string());
    assert!(listed.body["credentials"][1]["revoked_at"].is_null());
}

#[sqlx::test(migrations = "../migrations")]
async fn imports_long_passwords_only_once(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    api.create_tenant("other").await;
    let revision = api.revision().await;

    let short = api
        .admin(
            "POST",
            "/v1/tenants/acme/credentials",
            Some(json!({"password": "tooshort"})),
        )
        .await;
    assert_eq!(short.status, 422);
    assert_eq!(
        details(&short),
        vec!["/password: an imported password must be at least 16 characters"]
    );
    assert!(!short.body.to_string().contains("tooshort"));

    let password = "old-proxy-password-1234";
    let imported = api
        .admin(
            "POST",
            "/v1/tenants/acme/credentials",
            Some(json!({"password": password})),
        )
        .await;
    assert_eq!(imported.status, 201, "{}", imported.body);
    assert_eq!(imported.body["imported"], true);
    assert!(
        imported.body.get("secret").is_none(),
        "an imported password is not echoed"
    );

    // A password selects its tenant, so no other credential may have it.
    let reused = api
        .admin(
            "POST",
            "/v1/tenants/other/credentials",
            Some(json!({"password": password})),
        )
        .await;
    assert_eq!((reused.status, reused.error()), (409, "credential_exists"));
    assert!(!reused.body.to_string().contains(password));

    let no_tenant = api
        .admin("POST", "/v1/tenants/nobody/credentials", Some(json!({})))
        .await;
    assert_eq!(no_tenant.status, 404);
    assert_eq!(
        api.admin("GET", "/v1/tenants/nobody/credentials", None)
            .await
            .status,
        404
    );
    let bad_id = api
        .admin("DELETE", "/v1/tenants/acme/credentials/abc", None)
        .await;
    assert_eq!((bad_id.status, bad_id.error()), (400, "bad_request"));

    assert_eq!(api.revision().await, revision + 1, "only the import counts");
}
