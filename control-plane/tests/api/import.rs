//! `POST /v1/import`: one revision, one audit entry, the single endpoints' checks, all or nothing.

use serde_json::{Value, json};
use sqlx::PgPool;
use switchyard_schemas::credential_digest;

use crate::common::{Api, details, single};

/// The password a tenant brings from the old proxy.
fn password(name: &str) -> String {
    format!("imported-password-of-{name}")
}

fn tenant(name: &str) -> Value {
    json!({
        "tenant": {"name": name, "limits": {"max_connections": 5}},
        "credentials": [{"password": password(name), "description": "from the old proxy"}, {}],
        "route": single("main"),
        "comment": "imported",
    })
}

#[sqlx::test(migrations = "../migrations")]
async fn imports_tenants_in_one_revision(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    let before = api.revision().await;
    let body = json!({"tenants": [tenant("alpha"), {"tenant": {"name": "beta"}}]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 201, "{}", reply.body);
    assert_eq!(reply.body["revision"], before + 1, "one revision for all");
    assert_eq!(api.revision().await, before + 1);

    let alpha = &reply.body["tenants"][0];
    assert_eq!(alpha["tenant"]["name"], "alpha");
    assert_eq!(alpha["tenant"]["limits"]["max_connections"], 5);
    assert_eq!(alpha["tenant"]["route_version"], 1);
    assert_eq!(alpha["route"]["comment"], "imported");
    let credentials = alpha["credentials"].as_array().unwrap();
    assert_eq!(credentials[0]["imported"], true);
    assert!(credentials[0].get("secret").is_none(), "{alpha}");
    let secret = credentials[1]["secret"].as_str().unwrap();
    assert!(secret.starts_with("sy_"), "{secret}");
    let beta = &reply.body["tenants"][1];
    assert_eq!(beta["tenant"]["route_version"], Value::Null);
    assert!(beta.get("route").is_none(), "{beta}");

    // What the single endpoints show, and what gateways are served.
    let shown = api.admin("GET", "/v1/tenants/alpha/route", None).await;
    assert_eq!(shown.body["route"], single("main"), "{}", shown.body);
    let snapshot = api.gateway("GET", "/v1/snapshot", None).await;
    let served = &snapshot.body["tenants"];
    assert_eq!(served.as_array().unwrap().len(), 1, "beta has no route yet");
    let digests: Vec<&str> = served[0]["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["digest"].as_str().unwrap())
        .collect();
    let (imported, issued) = (
        credential_digest(&password("alpha")),
        credential_digest(secret),
    );
    assert_eq!(digests, [imported.as_str(), issued.as_str()]);
    assert_eq!(served[0]["route"]["target"], "redis://127.0.0.1:6379");

    // One audit entry, naming every tenant and never a secret.
    let audit = api.admin("GET", "/v1/audit", None).await;
    let entries = audit.body["entries"].as_array().unwrap();
    let imports: Vec<&Value> = entries.iter().filter(|e| e["action"] == "import").collect();
    assert_eq!(imports.len(), 1, "{}", audit.body);
    assert_eq!(imports[0]["revision"], before + 1);
    let recorded = imports[0]["after"].to_string();
    assert!(recorded.contains("\"alpha\"") && recorded.contains("\"beta\""));
    assert!(!recorded.contains(secret) && !recorded.contains(&password("alpha")));
}

#[sqlx::test(migrations = "../migrations")]
async fn every_problem_is_named_by_its_place_in_the_body(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    let before = api.revision().await;
    let empty = api
        .admin("POST", "/v1/import", Some(json!({"tenants": []})))
        .await;
    assert_eq!(details(&empty), ["/tenants: must list at least one tenant"]);
    let mut bad_limits = tenant("b");
    bad_limits["tenant"]["limits"] = json!({"script_timeout_ms": 0});
    let mut bad_route = tenant("c");
    bad_route["route"] = json!({"type": "single"});
    let body = json!({"tenants": [tenant("a"), bad_limits, tenant("a")]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    let found = details(&reply);
    assert!(
        found
            .iter()
            .any(|d| d == "/tenants/1/tenant/limits/script_timeout_ms: must be greater than 0")
            && found.contains(
                &"/tenants/2/tenant/name: tenant 0 of this import has the same name".into()
            ),
        "{found:?}"
    );

    let body = json!({"tenants": [tenant("a"), bad_route]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        details(&reply)
            .iter()
            .all(|d| d.starts_with("/tenants/1/route")),
        "{}",
        reply.body
    );

    // Checked while writing: a short password, a limit the database refuses, an unknown resource. Nothing of
    // the import stays.
    let mut zero = tenant("z");
    zero["tenant"]["limits"] = json!({"max_connections": 0});
    let body = json!({"tenants": [tenant("y"), zero]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert!(
        details(&reply)[0].starts_with("/tenants/1/tenant/limits/max_connections: "),
        "{}",
        reply.body
    );
    let mut short = tenant("d");
    short["credentials"][1] = json!({"password": "short"});
    let reply = api
        .admin("POST", "/v1/import", Some(json!({"tenants": [short]})))
        .await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert_eq!(
        details(&reply),
        ["/tenants/0/credentials/1/password: an imported password must be at least 16 characters"]
    );
    let mut unknown = tenant("e");
    unknown["route"] = single("missing");
    let body = json!({"tenants": [tenant("x"), unknown]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 422, "{}", reply.body);
    assert_eq!(
        details(&reply),
        ["/tenants/1/route/target: unknown resource 'missing'"]
    );
    assert_eq!(api.revision().await, before, "no change was made");
    let listed = api.admin("GET", "/v1/tenants", None).await;
    assert_eq!(listed.body["tenants"], json!([]), "all or nothing");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_conflict_anywhere_imports_nothing(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:6379").await;
    api.create_tenant("taken").await;
    let before = api.revision().await;
    let body = json!({"tenants": [tenant("fresh"), tenant("taken")]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert_eq!(reply.error(), "tenant_exists");
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .starts_with("/tenants/1/tenant: "),
        "{}",
        reply.body
    );
    let fresh = api.admin("GET", "/v1/tenants/fresh", None).await;
    assert_eq!(fresh.status, 404, "the first tenant was rolled back");
    assert_eq!(api.revision().await, before);

    // The same imported password twice selects no single tenant.
    let mut two = tenant("two");
    two["credentials"][0]["password"] = password("one").into();
    let body = json!({"tenants": [tenant("one"), two]});
    let reply = api.admin("POST", "/v1/import", Some(body)).await;
    assert_eq!(reply.status, 409, "{}", reply.body);
    assert!(
        reply.body["message"]
            .as_str()
            .unwrap()
            .starts_with("/tenants/1/credentials/0: "),
        "{}",
        reply.body
    );
    assert_eq!(api.revision().await, before);
}
