//! API tokens: created with a secret shown once, rotated with an overlap, revoked on every replica at once, named
//! in the audit log; what a viewer and a tenant-owner see.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::{Api, single};

#[sqlx::test(migrations = "../migrations")]
async fn a_token_is_shown_once_and_stored_as_a_digest(pool: PgPool) {
    let api = Api::new(pool).await;
    let created = api
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "ci", "role": "operator"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let token = created.body["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("syt_") && token.len() == 68, "{token}");
    assert_eq!(created.body["name"], "ci");
    assert_eq!(created.body["role"], "operator");
    assert!(
        created.body["created_by"]
            .as_str()
            .unwrap()
            .starts_with("admin:")
    );
    let listed = api.admin("GET", "/v1/tokens", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.body["tokens"][0]["name"], "ci");
    assert!(
        listed.body["tokens"][0].get("token").is_none(),
        "{}",
        listed.body
    );
    let digest = switchyard_schemas::credential_digest(&token);
    let stored: Vec<String> = sqlx::query_scalar!("SELECT digest FROM api_tokens")
        .fetch_all(&api.state.pool)
        .await
        .unwrap();
    assert_eq!(stored, vec![digest.clone()]);
    let audit = api.admin("GET", "/v1/audit?action=token.", None).await;
    let text = audit.body.to_string();
    assert!(!text.contains(&token) && !text.contains(&digest), "{text}");
    assert_eq!(audit.body["entries"][0]["object"], "tokens/1");

    // The token works, as what it is.
    let me = api.with_token(&token, "GET", "/v1/whoami", None).await;
    assert_eq!(me.status, 200);
    assert_eq!(
        me.body,
        json!({"actor": "token:ci", "role": "operator", "bootstrap": false})
    );

    // Names are never reused, revoked or not; roles and scopes are checked.
    let again = api
        .admin(
            "POST",
            "/v1/tokens",
            Some(json!({"name": "ci", "role": "viewer"})),
        )
        .await;
    assert_eq!((again.status, again.error()), (409, "token_exists"));
    for (body, path) in [
        (json!({"name": "-x", "role": "viewer"}), "/name"),
        (json!({"name": "x", "role": "root"}), "/role"),
        (json!({"name": "x", "role": "tenant-owner"}), "/tenants"),
        (
            json!({"name": "x", "role": "viewer", "tenants": ["acme"]}),
            "/tenants",
        ),
        (
            json!({"name": "x", "role": "operator", "policies": ["ip_allow"]}),
            "/policies",
        ),
        (
            json!({"name": "x", "role": "tenant-owner", "tenants": ["a b"]}),
            "/tenants/0",
        ),
        (
            json!({"name": "x", "role": "tenant-owner", "tenant_prefix": ""}),
            "/tenant_prefix",
        ),
        (
            json!({"name": "x", "role": "tenant-owner", "tenants": ["a"], "policies": ["namespace"]}),
            "/policies/0",
        ),
    ] {
        let reply = api.admin("POST", "/v1/tokens", Some(body.clone())).await;
        assert_eq!(reply.status, 422, "{body}: {}", reply.body);
        assert_eq!(
            reply.body["details"][0]["path"], path,
            "{body}: {}",
            reply.body
        );
    }
}

/// Polls `api` with `token` until it is refused; returns how long that took.
async fn refused_within(api: &Api, token: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let reply = api.with_token(token, "GET", "/v1/whoami", None).await;
        if reply.status == 401 {
            return started.elapsed();
        }
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert!(started.elapsed() < limit, "still admitted after {limit:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn rotation_keeps_the_old_secret_for_the_overlap(pool: PgPool) {
    let api = Api::new(pool).await;
    let (id, old) = api
        .create_token(json!({"name": "deploy", "role": "operator"}))
        .await;
    let rotated = api
        .admin(
            "POST",
            &format!("/v1/tokens/{id}/rotate"),
            Some(json!({"overlap_secs": 2})),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    let new = rotated.body["token"].as_str().unwrap().to_string();
    assert_ne!(new, old);
    assert!(
        rotated.body["previous_valid_until"].is_string(),
        "{}",
        rotated.body
    );
    assert!(rotated.body["rotated_at"].is_string(), "{}", rotated.body);
    // Both work during the overlap, as the same token.
    for token in [&old, &new] {
        let me = api.with_token(token, "GET", "/v1/whoami", None).await;
        assert_eq!(
            (me.status, me.body["actor"].clone()),
            (200, json!("token:deploy"))
        );
    }
    // The old one stops at the end of the overlap (2 s), the new one goes on.
    let waited = refused_within(&api, &old, Duration::from_secs(5)).await;
    assert!(
        waited > Duration::from_millis(1500),
        "refused after {waited:?}"
    );
    assert_eq!(
        api.with_token(&new, "GET", "/v1/whoami", None).await.status,
        200
    );
    let listed = api.admin("GET", "/v1/tokens", None).await;
    assert!(
        listed.body["tokens"][0]
            .get("previous_valid_until")
            .is_none(),
        "{}",
        listed.body
    );

    // Without an overlap the old secret stops at once; a second rotation drops an overlapping secret too.
    let rotate = |overlap: Value| {
        let api = api.clone();
        async move {
            let reply = api
                .admin("POST", &format!("/v1/tokens/{id}/rotate"), Some(overlap))
                .await;
            assert_eq!(reply.status, 200, "{}", reply.body);
            reply.body["token"].as_str().unwrap().to_string()
        }
    };
    let third = rotate(json!({})).await;
    assert_eq!(
        api.with_token(&new, "GET", "/v1/whoami", None).await.status,
        200,
        "default overlap"
    );
    let fourth = rotate(json!({"overlap_secs": 0})).await;
    for gone in [&new, &third] {
        assert_eq!(
            api.with_token(gone, "GET", "/v1/whoami", None).await.status,
            401
        );
    }
    assert_eq!(
        api.with_token(&fourth, "GET", "/v1/whoami", None)
            .await
            .status,
        200
    );
    let too_long = api
        .admin(
            "POST",
            &format!("/v1/tokens/{id}/rotate"),
            Some(json!({"overlap_secs": 86401})),
        )
        .await;
    assert_eq!(too_long.status, 422, "{}", too_long.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn revocation_is_effective_on_another_replica_within_a_second(pool: PgPool) {
    let first = Api::new(pool.clone()).await;
    let second = Api::replica(&pool).await;
    let (id, token) = first
        .create_token(json!({"name": "laptop", "role": "viewer"}))
        .await;
    assert_eq!(
        second
            .with_token(&token, "GET", "/v1/tenants", None)
            .await
            .status,
        200
    );
    let (_, rotating) = first
        .create_token(json!({"name": "rotating", "role": "viewer"}))
        .await;
    assert_eq!(
        second
            .with_token(&rotating, "GET", "/v1/tenants", None)
            .await
            .status,
        200
    );
    let revoked = first
        .admin("DELETE", &format!("/v1/tokens/{id}"), None)
        .await;
    assert_eq!(revoked.status, 204, "{}", revoked.body);
    let waited = refused_within(&second, &token, Duration::from_secs(1)).await;
    assert!(waited < Duration::from_secs(1), "{waited:?}");
    let refused = second.with_token(&token, "GET", "/v1/tenants", None).await;
    assert_eq!((refused.status, refused.error()), (401, "unauthorized"));
    let listed = second.admin("GET", "/v1/tokens", None).await;
    assert!(
        listed.body["tokens"][0]["revoked_at"].is_string(),
        "{}",
        listed.body
    );
    let twice = first
        .admin("DELETE", &format!("/v1/tokens/{id}"), None)
        .await;
    assert_eq!(twice.status, 404);
    // A rotation without overlap, on the other replica, too.
    let rotated = first
        .admin(
            "POST",
            "/v1/tokens/2/rotate",
            Some(json!({"overlap_secs": 0})),
        )
        .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    refused_within(&second, &rotating, Duration::from_secs(1)).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn the_audit_log_names_the_token(pool: PgPool) {
    let api = Api::new(pool).await;
    let (_, operator) = api
        .create_token(json!({"name": "ops-alice", "role": "operator"}))
        .await;
    let created = api
        .with_token(
            &operator,
            "POST",
            "/v1/tenants",
            Some(json!({"name": "acme"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let audit = api
        .admin("GET", "/v1/audit?actor=token:ops-alice", None)
        .await;
    assert_eq!(audit.status, 200);
    let entries = audit.body["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{}", audit.body);
    assert_eq!(entries[0]["action"], "tenant.create");
    assert_eq!(entries[0]["actor"], "token:ops-alice");
    // The token's own creation is the start-up admin's.
    let creation = api
        .admin("GET", "/v1/audit?action=token.create", None)
        .await;
    assert!(
        creation.body["entries"][0]["actor"]
            .as_str()
            .unwrap()
            .starts_with("admin:")
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_viewer_never_sees_a_secret(pool: PgPool) {
    let api = Api::new(pool).await;
    let backend_password = "backend-password-0123456789";
    api.create_resource(
        "main",
        &format!("redis://:{backend_password}@127.0.0.1:7000"),
    )
    .await;
    api.create_tenant("acme").await;
    assert_eq!(
        api.put_route(
            "acme",
            single(&format!("redis://:{backend_password}@127.0.0.1:7001"))
        )
        .await
        .status,
        200
    );
    let (_, credential) = api.issue_credential("acme").await;
    let (_, other) = api
        .create_token(json!({"name": "other", "role": "admin"}))
        .await;
    let (_, viewer) = api
        .create_token(json!({"name": "watch", "role": "viewer"}))
        .await;
    let secrets = [
        backend_password.to_string(),
        "the-tenants-own-session-secret".to_string(),
        credential.clone(),
        switchyard_schemas::credential_digest(&credential),
        other.clone(),
        switchyard_schemas::credential_digest(&other),
    ];
    // A slow command whose value is a secret of the tenant's: a viewer sees the command and its key only.
    let value = "the-tenants-own-session-secret";
    let entry = json!({"id": 1, "timestamp": 1_700_000_000, "duration_us": 20_000, "args": ["SET", "session:1", value],
        "key": "session:1", "client_addr": "127.0.0.1:5000", "client_name": "", "run": 1});
    let report = json!({"gateway": "gw-1", "interval_ms": 10000, "tenants": [{"tenant": "acme", "slowlog": [entry]}]});
    assert_eq!(
        api.gateway("POST", "/v1/gateways/observations", Some(report))
            .await
            .status,
        204
    );
    let slow = api
        .with_token(&viewer, "GET", "/v1/tenants/acme/slowlog", None)
        .await;
    assert_eq!(
        slow.body["entries"][0]["args"],
        json!(["SET", "session:1", "(redacted)"]),
        "{}",
        slow.body
    );
    let whole = api.admin("GET", "/v1/tenants/acme/slowlog", None).await;
    assert_eq!(whole.body["entries"][0]["args"][2], value, "{}", whole.body);
    let migration = api
        .admin(
            "POST",
            "/v1/tenants/acme/migrations",
            Some(json!({"to": "main"})),
        )
        .await;
    assert_eq!(migration.status, 201, "{}", migration.body);
    // Every GET a viewer may make.
    let paths = [
        "/v1/tenants",
        "/v1/tenants/acme",
        "/v1/tenants/acme/credentials",
        "/v1/resources",
        "/v1/resources/main",
        "/v1/tenants/acme/route",
        "/v1/tenants/acme/route/versions",
        "/v1/tenants/acme/route/versions/1",
        "/v1/tenants/acme/route/explain?key=k",
        "/v1/tenants/acme/migrations",
        "/v1/tenants/acme/migrations/1",
        "/v1/tenants/acme/migrations/1/readiness",
        "/v1/gateways",
        "/v1/audit",
        "/v1/hot-keys",
        "/v1/tenants/acme/hot-keys",
        "/v1/tenants/acme/big-keys",
        "/v1/tenants/acme/slowlog",
        "/v1/whoami",
    ];
    for path in paths {
        let reply = api.with_token(&viewer, "GET", path, None).await;
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        let text = reply.body.to_string();
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{path} shows a secret: {text}"
            );
        }
    }
    // What would show one is refused.
    for (method, path) in [
        ("GET", "/v1/snapshot"),
        ("GET", "/v1/tokens"),
        ("POST", "/v1/tenants/acme/credentials"),
    ] {
        let reply = api.with_token(&viewer, method, path, Some(json!({}))).await;
        assert_eq!(reply.status, 403, "{method} {path}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tenant_owner_sees_and_changes_only_its_tenants(pool: PgPool) {
    let api = Api::new(pool).await;
    for tenant in ["team-a-web", "team-a-jobs", "acme", "team-b-web"] {
        api.create_tenant(tenant).await;
    }
    let (_, owner) = api
        .create_token(
            json!({"name": "team-a", "role": "tenant-owner", "tenants": ["acme"],
            "tenant_prefix": "team-a-", "policies": ["ip_allow", "blocked_keys"]}),
        )
        .await;
    let names = |reply: &crate::common::Reply| -> Vec<String> {
        reply.body["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let listed = api.with_token(&owner, "GET", "/v1/tenants", None).await;
    assert_eq!(names(&listed), ["acme", "team-a-jobs", "team-a-web"]);
    let page = api
        .with_token(&owner, "GET", "/v1/tenants?prefix=team-&limit=1", None)
        .await;
    assert_eq!(names(&page), ["team-a-jobs"]);
    assert_eq!(page.body["next_after"], "team-a-jobs");
    let me = api.with_token(&owner, "GET", "/v1/whoami", None).await;
    assert_eq!(
        me.body,
        json!({"actor": "token:team-a", "role": "tenant-owner", "bootstrap": false, "tenants": ["acme"],
               "tenant_prefix": "team-a-", "policies": ["blocked_keys", "ip_allow"]})
    );

    // Its credentials: issued, listed, revoked; another tenant's: refused.
    let issued = api
        .with_token(
            &owner,
            "POST",
            "/v1/tenants/team-a-web/credentials",
            Some(json!({})),
        )
        .await;
    assert_eq!(issued.status, 201, "{}", issued.body);
    let id = issued.body["id"].as_i64().unwrap();
    let revoked = api
        .with_token(
            &owner,
            "DELETE",
            &format!("/v1/tenants/team-a-web/credentials/{id}"),
            None,
        )
        .await;
    assert_eq!(revoked.status, 204, "{}", revoked.body);
    let other = api
        .with_token(
            &owner,
            "POST",
            "/v1/tenants/team-b-web/credentials",
            Some(json!({})),
        )
        .await;
    assert_eq!(other.status, 403, "{}", other.body);

    // The policies its token lists, and nothing else.
    let allowed = api
        .with_token(
            &owner,
            "PATCH",
            "/v1/tenants/acme",
            Some(json!({"ip_allow": ["10.0.0.0/8"], "blocked_keys": ["k"]})),
        )
        .await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(allowed.body["ip_allow"], json!(["10.0.0.0/8"]));
    for body in [
        json!({"ip_deny": ["10.0.0.1"]}),
        json!({"ip_allow": [], "namespace": "a:"}),
        json!({"description": "mine"}),
        json!({"limits": {}}),
        json!({"allow_admin": true}),
    ] {
        let refused = api
            .with_token(&owner, "PATCH", "/v1/tenants/acme", Some(body.clone()))
            .await;
        assert_eq!(refused.status, 403, "{body}: {}", refused.body);
        assert!(
            refused.body["message"]
                .as_str()
                .unwrap()
                .contains("needs the role admin or operator"),
            "{}",
            refused.body
        );
    }
    let tenant = api.admin("GET", "/v1/tenants/acme", None).await;
    assert_eq!(tenant.body["ip_allow"], json!(["10.0.0.0/8"]));
    assert!(tenant.body.get("namespace").is_none() && tenant.body["description"] == "");
    // Audited as the token.
    let audit = api.admin("GET", "/v1/audit?actor=token:team-a", None).await;
    let actions: Vec<&str> = audit.body["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        ["tenant.update", "credential.revoke", "credential.create"]
    );
}
