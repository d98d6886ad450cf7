//! Every status the OpenAPI document lists for an operation is one that operation really answers, and every status
//! a case below provokes is documented: a table of requests, one (at least) per documented (operation, status),
//! run in order against one control plane. 401 and 403 are provoked for every operation that lists them (no token;
//! a gateway token, or a viewer's where a gateway's is admitted), the rest by the table. The router is built from the same list as the document, so every
//! route served is documented by construction; this test checks the other half: what each one answers.

use std::collections::{BTreeMap, BTreeSet};

use axum::body::Body;
use serde_json::json;
use sqlx::PgPool;
use switchyard_control_plane::openapi_document;

use crate::common::{ADMIN, Api, GATEWAY, single};

/// Who calls: an admin, a gateway, or nobody.
#[derive(Clone, Copy)]
enum Caller {
    Admin,
    Gateway,
}

/// (operationId, status, method, path, caller, body, If-Match). Paths may hold `{cred}`, `{mig}`, `{token}` and `{rev}`,
/// filled in from the fixture. Order matters: a case may rely on what an earlier one did, and the destructive
/// ones come last.
type Case = (
    &'static str,
    u16,
    &'static str,
    &'static str,
    Caller,
    Option<&'static str>,
    Option<&'static str>,
);

use Caller::{Admin as A, Gateway as G};

// One case a line reads as a table.
#[rustfmt::skip]
const CASES: &[Case] = &[
    ("health", 200, "GET", "/healthz", A, None, None),
    ("metrics", 200, "GET", "/metrics", A, None, None),
    ("openapi", 200, "GET", "/openapi.json", A, None, None),
    // Tenants
    ("listTenants", 200, "GET", "/v1/tenants", A, None, None),
    ("listTenants", 400, "GET", "/v1/tenants?limit=0", A, None, None),
    ("createTenant", 201, "POST", "/v1/tenants", A, Some(r#"{"name": "fresh"}"#), None),
    ("createTenant", 400, "POST", "/v1/tenants", A, Some("["), None),
    ("createTenant", 409, "POST", "/v1/tenants", A, Some(r#"{"name": "acme"}"#), None),
    ("createTenant", 422, "POST", "/v1/tenants", A, Some(r#"{"name": "-bad"}"#), None),
    ("getTenant", 200, "GET", "/v1/tenants/acme", A, None, None),
    ("getTenant", 400, "GET", "/v1/tenants/a%00b", A, None, None),
    ("getTenant", 404, "GET", "/v1/tenants/nobody", A, None, None),
    ("patchTenant", 200, "PATCH", "/v1/tenants/acme", A, Some(r#"{"description": "x"}"#), None),
    ("patchTenant", 400, "PATCH", "/v1/tenants/acme", A, Some("["), None),
    ("patchTenant", 404, "PATCH", "/v1/tenants/nobody", A, Some("{}"), None),
    ("patchTenant", 409, "PATCH", "/v1/tenants/acme", A, Some(r#"{"namespace": "shop:"}"#), None),
    ("patchTenant", 422, "PATCH", "/v1/tenants/acme", A, Some(r#"{"limits": {"max_connections": 0}}"#), None),
    ("deleteTenant", 400, "DELETE", "/v1/tenants/a%00b", A, None, None),
    ("deleteTenant", 404, "DELETE", "/v1/tenants/nobody", A, None, None),
    // Credentials
    ("listCredentials", 200, "GET", "/v1/tenants/acme/credentials", A, None, None),
    ("listCredentials", 400, "GET", "/v1/tenants/a%00b/credentials", A, None, None),
    ("listCredentials", 404, "GET", "/v1/tenants/nobody/credentials", A, None, None),
    ("createCredential", 201, "POST", "/v1/tenants/acme/credentials", A, Some("{}"), None),
    ("createCredential", 400, "POST", "/v1/tenants/acme/credentials", A, Some("["), None),
    ("createCredential", 404, "POST", "/v1/tenants/nobody/credentials", A, Some("{}"), None),
    ("createCredential", 409, "POST", "/v1/tenants/acme/credentials", A, Some(r#"{"password": "an-imported-password-01"}"#), None),
    ("createCredential", 422, "POST", "/v1/tenants/acme/credentials", A, Some(r#"{"password": "short"}"#), None),
    ("revokeCredential", 400, "DELETE", "/v1/tenants/acme/credentials/x", A, None, None),
    ("revokeCredential", 404, "DELETE", "/v1/tenants/acme/credentials/999999", A, None, None),
    // Resources
    ("listResources", 200, "GET", "/v1/resources", A, None, None),
    ("createResource", 201, "POST", "/v1/resources", A, Some(r#"{"name": "other", "url": "redis://127.0.0.1:7010"}"#), None),
    ("createResource", 400, "POST", "/v1/resources", A, Some("["), None),
    ("createResource", 409, "POST", "/v1/resources", A, Some(r#"{"name": "main", "url": "redis://127.0.0.1:7011"}"#), None),
    ("createResource", 422, "POST", "/v1/resources", A, Some(r#"{"name": "x", "url": "http://nope"}"#), None),
    ("getResource", 200, "GET", "/v1/resources/main", A, None, None),
    ("getResource", 400, "GET", "/v1/resources/a%00b", A, None, None),
    ("getResource", 404, "GET", "/v1/resources/none", A, None, None),
    ("putResource", 200, "PUT", "/v1/resources/spare", A, Some(r#"{"url": "redis://127.0.0.1:7012"}"#), None),
    ("putResource", 400, "PUT", "/v1/resources/spare", A, Some("["), None),
    ("putResource", 404, "PUT", "/v1/resources/none", A, Some(r#"{"url": "redis://127.0.0.1:7012"}"#), None),
    ("putResource", 422, "PUT", "/v1/resources/spare", A, Some(r#"{"url": "http://nope"}"#), None),
    // acme (no namespace) would share shop's database.
    ("putResource", 409, "PUT", "/v1/resources/main", A, Some(r#"{"url": "redis://127.0.0.1:7009"}"#), None),
    ("deleteResource", 400, "DELETE", "/v1/resources/a%00b", A, None, None),
    ("deleteResource", 404, "DELETE", "/v1/resources/none", A, None, None),
    ("deleteResource", 409, "DELETE", "/v1/resources/main", A, None, None),
    // Routes
    ("getRoute", 200, "GET", "/v1/tenants/acme/route", A, None, None),
    ("getRoute", 400, "GET", "/v1/tenants/a%00b/route", A, None, None),
    ("getRoute", 404, "GET", "/v1/tenants/fresh/route", A, None, None),
    ("putRoute", 200, "PUT", "/v1/tenants/acme/route", A, Some(r#"{"route": {"type": "single", "target": "main"}}"#), None),
    ("putRoute", 400, "PUT", "/v1/tenants/acme/route", A, Some("["), None),
    ("putRoute", 404, "PUT", "/v1/tenants/nobody/route", A, Some(r#"{"route": {"type": "single", "target": "main"}}"#), None),
    ("putRoute", 409, "PUT", "/v1/tenants/moving/route", A, Some(r#"{"route": {"type": "single", "target": "main"}}"#), None),
    ("putRoute", 412, "PUT", "/v1/tenants/acme/route", A, Some(r#"{"route": {"type": "single", "target": "main"}}"#), Some("1")),
    ("putRoute", 422, "PUT", "/v1/tenants/acme/route", A, Some(r#"{"route": {"type": "shardd"}}"#), None),
    ("listRouteVersions", 200, "GET", "/v1/tenants/acme/route/versions", A, None, None),
    ("listRouteVersions", 400, "GET", "/v1/tenants/acme/route/versions?limit=0", A, None, None),
    ("listRouteVersions", 404, "GET", "/v1/tenants/nobody/route/versions", A, None, None),
    ("getRouteVersion", 200, "GET", "/v1/tenants/acme/route/versions/1", A, None, None),
    ("getRouteVersion", 400, "GET", "/v1/tenants/acme/route/versions/x", A, None, None),
    ("getRouteVersion", 404, "GET", "/v1/tenants/acme/route/versions/99", A, None, None),
    ("explainRoute", 200, "GET", "/v1/tenants/acme/route/explain?key=k", A, None, None),
    ("explainRoute", 400, "GET", "/v1/tenants/acme/route/explain", A, None, None),
    ("explainRoute", 404, "GET", "/v1/tenants/fresh/route/explain?key=k", A, None, None),
    ("explainRouteKeys", 200, "POST", "/v1/tenants/acme/route/explain", A, Some(r#"{"keys": ["a", "b"]}"#), None),
    ("explainRouteKeys", 400, "POST", "/v1/tenants/acme/route/explain", A, Some("["), None),
    ("explainRouteKeys", 404, "POST", "/v1/tenants/fresh/route/explain", A, Some(r#"{"keys": ["a"]}"#), None),
    ("explainRouteKeys", 422, "POST", "/v1/tenants/acme/route/explain", A, Some(r#"{"keys": []}"#), None),
    ("rollbackRoute", 200, "POST", "/v1/tenants/acme/route/rollback", A, Some(r#"{"version": 1}"#), None),
    ("rollbackRoute", 400, "POST", "/v1/tenants/acme/route/rollback", A, Some("["), None),
    ("rollbackRoute", 404, "POST", "/v1/tenants/acme/route/rollback", A, Some(r#"{"version": 99}"#), None),
    ("rollbackRoute", 409, "POST", "/v1/tenants/moving/route/rollback", A, Some(r#"{"version": 1}"#), None),
    ("rollbackRoute", 412, "POST", "/v1/tenants/acme/route/rollback", A, Some(r#"{"version": 1}"#), Some("1")),
    ("rollbackRoute", 422, "POST", "/v1/tenants/acme/route/rollback", A, Some(r#"{"version": "one"}"#), None),
    // Import
    ("importTenants", 201, "POST", "/v1/import", A, Some(r#"{"tenants": [{"tenant": {"name": "imported"}}]}"#), None),
    ("importTenants", 400, "POST", "/v1/import", A, Some("["), None),
    ("importTenants", 409, "POST", "/v1/import", A, Some(r#"{"tenants": [{"tenant": {"name": "acme"}}]}"#), None),
    ("importTenants", 422, "POST", "/v1/import", A, Some(r#"{"tenants": [{"tenant": {"name": "-bad"}}]}"#), None),
    // Migrations
    ("listMigrations", 200, "GET", "/v1/tenants/moving/migrations", A, None, None),
    ("listMigrations", 400, "GET", "/v1/tenants/a%00b/migrations", A, None, None),
    ("listMigrations", 404, "GET", "/v1/tenants/nobody/migrations", A, None, None),
    ("createMigration", 201, "POST", "/v1/tenants/acme/migrations", A, Some(r#"{"to": "redis://127.0.0.1:7020"}"#), None),
    ("createMigration", 400, "POST", "/v1/tenants/moving/migrations", A, Some("["), None),
    ("createMigration", 404, "POST", "/v1/tenants/nobody/migrations", A, Some(r#"{"to": "redis://127.0.0.1:7020"}"#), None),
    ("createMigration", 409, "POST", "/v1/tenants/moving/migrations", A, Some(r#"{"to": "redis://127.0.0.1:7020"}"#), None),
    ("createMigration", 422, "POST", "/v1/tenants/moving/migrations", A, Some(r#"{"to": 5}"#), None),
    ("getMigration", 200, "GET", "/v1/tenants/moving/migrations/{mig}", A, None, None),
    ("getMigration", 400, "GET", "/v1/tenants/moving/migrations/x", A, None, None),
    ("getMigration", 404, "GET", "/v1/tenants/moving/migrations/999999", A, None, None),
    ("getMigrationReadiness", 200, "GET", "/v1/tenants/moving/migrations/{mig}/readiness", A, None, None),
    ("getMigrationReadiness", 400, "GET", "/v1/tenants/moving/migrations/x/readiness", A, None, None),
    ("getMigrationReadiness", 404, "GET", "/v1/tenants/moving/migrations/999999/readiness", A, None, None),
    ("getReadinessProbe", 404, "GET", "/v1/tenants/acme/readiness-probe", A, None, None),
    ("setReadinessProbe", 200, "PUT", "/v1/tenants/acme/readiness-probe", A, Some(r#"{"to": "redis://127.0.0.1:1"}"#), None),
    ("setReadinessProbe", 400, "PUT", "/v1/tenants/acme/readiness-probe", A, Some("["), None),
    ("setReadinessProbe", 404, "PUT", "/v1/tenants/nobody/readiness-probe", A, Some(r#"{"to": "redis://127.0.0.1:1"}"#), None),
    ("setReadinessProbe", 422, "PUT", "/v1/tenants/acme/readiness-probe", A, Some(r#"{"to": {"type": "single"}}"#), None),
    ("getReadinessProbe", 200, "GET", "/v1/tenants/acme/readiness-probe", A, None, None),
    ("getReadinessProbe", 400, "GET", "/v1/tenants/a%00b/readiness-probe", A, None, None),
    ("deleteReadinessProbe", 204, "DELETE", "/v1/tenants/acme/readiness-probe", A, None, None),
    ("deleteReadinessProbe", 400, "DELETE", "/v1/tenants/a%00b/readiness-probe", A, None, None),
    ("deleteReadinessProbe", 404, "DELETE", "/v1/tenants/acme/readiness-probe", A, None, None),
    ("migrationStep", 400, "POST", "/v1/tenants/moving/migrations/x/abort", A, None, None),
    ("migrationStep", 404, "POST", "/v1/tenants/moving/migrations/{mig}/jump", A, None, None),
    ("migrationStep", 409, "POST", "/v1/tenants/moving/migrations/{mig}/verify", A, None, None),
    ("migrationStep", 200, "POST", "/v1/tenants/moving/migrations/{mig}/abort", A, None, None),
    // Snapshot and gateways
    ("getSnapshot", 200, "GET", "/v1/snapshot", G, None, None),
    ("getSnapshot", 304, "GET", "/v1/snapshot?after={rev}", G, None, None),
    ("getSnapshot", 400, "GET", "/v1/snapshot?wait=forever", G, None, None),
    ("heartbeat", 200, "POST", "/v1/gateways/heartbeat", G, Some(r#"{"id": "gw-1", "revision": 1}"#), None),
    ("heartbeat", 400, "POST", "/v1/gateways/heartbeat", G, Some("["), None),
    ("heartbeat", 422, "POST", "/v1/gateways/heartbeat", G, Some(r#"{"id": ""}"#), None),
    ("listGateways", 200, "GET", "/v1/gateways", A, None, None),
    ("reportObservations", 204, "POST", "/v1/gateways/observations", G, Some(r#"{"gateway": "gw-1", "interval_ms": 10000, "tenants": [{"tenant": "acme", "hot_keys": [{"key": "k", "count": 3}]}]}"#), None),
    ("reportObservations", 400, "POST", "/v1/gateways/observations", G, Some("["), None),
    ("reportObservations", 422, "POST", "/v1/gateways/observations", G, Some(r#"{"gateway": "gw-1"}"#), None),
    ("getHotKeys", 200, "GET", "/v1/tenants/acme/hot-keys", A, None, None),
    ("getHotKeys", 400, "GET", "/v1/tenants/acme/hot-keys?limit=0", A, None, None),
    ("getHotKeys", 404, "GET", "/v1/tenants/nope/hot-keys", A, None, None),
    ("getFleetHotKeys", 200, "GET", "/v1/hot-keys", A, None, None),
    ("getFleetHotKeys", 400, "GET", "/v1/hot-keys?limit=2000", A, None, None),
    ("getBigKeys", 200, "GET", "/v1/tenants/acme/big-keys", A, None, None),
    ("getBigKeys", 400, "GET", "/v1/tenants/acme/big-keys?limit=x", A, None, None),
    ("getBigKeys", 404, "GET", "/v1/tenants/nope/big-keys", A, None, None),
    ("getSlowLog", 200, "GET", "/v1/tenants/acme/slowlog", A, None, None),
    ("getSlowLog", 400, "GET", "/v1/tenants/acme/slowlog?limit=x", A, None, None),
    ("getSlowLog", 404, "GET", "/v1/tenants/nope/slowlog", A, None, None),
    ("getUsage", 200, "GET", "/v1/usage", A, None, None),
    ("getUsage", 400, "GET", "/v1/usage?limit=0", A, None, None),
    ("getTenantUsage", 200, "GET", "/v1/tenants/acme/usage", A, None, None),
    ("getTenantUsage", 400, "GET", "/v1/tenants/acme/usage?minutes=x", A, None, None),
    ("getTenantUsage", 404, "GET", "/v1/tenants/nope/usage", A, None, None),
    ("getTenantKeyspace", 200, "GET", "/v1/tenants/acme/keyspace", A, None, None),
    ("getTenantKeyspace", 400, "GET", "/v1/tenants/a%00b/keyspace", A, None, None),
    ("getTenantKeyspace", 404, "GET", "/v1/tenants/nope/keyspace", A, None, None),
    ("getTenantDivergence", 200, "GET", "/v1/tenants/acme/divergence", A, None, None),
    ("getTenantDivergence", 400, "GET", "/v1/tenants/a%00b/divergence", A, None, None),
    ("getTenantDivergence", 404, "GET", "/v1/tenants/nope/divergence", A, None, None),
    ("deleteGateway", 400, "DELETE", "/v1/gateways/a%00b", A, None, None),
    ("deleteGateway", 404, "DELETE", "/v1/gateways/gw-none", A, None, None),
    ("deleteGateway", 204, "DELETE", "/v1/gateways/gw-1", A, None, None),
    // Audit
    ("listAudit", 200, "GET", "/v1/audit", A, None, None),
    ("listAudit", 400, "GET", "/v1/audit?limit=0", A, None, None),
    // Tokens
    ("createToken", 201, "POST", "/v1/tokens", A, Some(r#"{"name": "ops", "role": "operator"}"#), None),
    ("createToken", 400, "POST", "/v1/tokens", A, Some("["), None),
    ("createToken", 409, "POST", "/v1/tokens", A, Some(r#"{"name": "ops", "role": "viewer"}"#), None),
    ("createToken", 422, "POST", "/v1/tokens", A, Some(r#"{"name": "team", "role": "tenant-owner"}"#), None),
    ("listTokens", 200, "GET", "/v1/tokens", A, None, None),
    ("rotateToken", 200, "POST", "/v1/tokens/{token}/rotate", A, Some(r#"{"overlap_secs": 0}"#), None),
    ("rotateToken", 400, "POST", "/v1/tokens/x/rotate", A, Some("{}"), None),
    ("rotateToken", 404, "POST", "/v1/tokens/999999/rotate", A, Some("{}"), None),
    ("rotateToken", 422, "POST", "/v1/tokens/{token}/rotate", A, Some(r#"{"overlap_secs": 86401}"#), None),
    ("revokeToken", 400, "DELETE", "/v1/tokens/x", A, None, None),
    ("revokeToken", 404, "DELETE", "/v1/tokens/999999", A, None, None),
    ("whoAmI", 200, "GET", "/v1/whoami", A, None, None),
    // Destructive last.
    ("revokeCredential", 204, "DELETE", "/v1/tenants/acme/credentials/{cred}", A, None, None),
    ("deleteResource", 204, "DELETE", "/v1/resources/other", A, None, None),
    ("deleteTenant", 204, "DELETE", "/v1/tenants/fresh", A, None, None),
    ("revokeToken", 204, "DELETE", "/v1/tokens/{token}", A, None, None),
];

/// `template` with each `{param}` filled in with a value the fixture has.
fn concrete(template: &str) -> String {
    template
        .replace("{tenant}", "acme")
        .replace("{name}", "main")
        .replace("{id}", "1")
        .replace("{version}", "1")
        .replace("{action}", "abort")
}

/// Whether `path` (query aside) is an instance of `template`.
fn matches(template: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or(path);
    let (t, p): (Vec<_>, Vec<_>) = (template.split('/').collect(), path.split('/').collect());
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| t.starts_with('{') || t == p)
}

#[sqlx::test(migrations = "../migrations")]
async fn every_documented_status_is_answered(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:7000").await;
    api.create_resource("spare", "redis://127.0.0.1:7001").await;
    api.create_tenant("acme").await;
    assert_eq!(api.put_route("acme", single("main")).await.status, 200);
    let (credential, _) = api.issue_credential("acme").await;
    let imported = api
        .admin(
            "POST",
            "/v1/tenants/acme/credentials",
            Some(json!({"password": "an-imported-password-01"})),
        )
        .await;
    assert_eq!(imported.status, 201, "{}", imported.body);
    let shop = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "shop", "namespace": "shop:"})),
        )
        .await;
    assert_eq!(shop.status, 201, "{}", shop.body);
    assert_eq!(
        api.put_route("shop", single("redis://127.0.0.1:7009"))
            .await
            .status,
        200
    );
    api.create_tenant("moving").await;
    assert_eq!(
        api.put_route("moving", single("redis://127.0.0.1:7002"))
            .await
            .status,
        200
    );
    let migration = api
        .admin(
            "POST",
            "/v1/tenants/moving/migrations",
            Some(json!({"to": "redis://127.0.0.1:7003"})),
        )
        .await;
    assert_eq!(migration.status, 201, "{}", migration.body);
    let migration = migration.body["id"].as_i64().unwrap();

    let (_, viewer) = api
        .create_token(json!({"name": "viewer", "role": "viewer"}))
        .await;
    let (token, _) = api
        .create_token(json!({"name": "rotated", "role": "viewer"}))
        .await;

    // (operationId) -> (method, path template, documented statuses)
    let document = openapi_document();
    let mut documented: BTreeMap<String, (String, String, BTreeSet<u16>)> = BTreeMap::new();
    let mut gateways: BTreeSet<String> = BTreeSet::new();
    for (template, methods) in document["paths"].as_object().unwrap() {
        for (method, operation) in methods.as_object().unwrap() {
            if operation["security"][0].get("gateway").is_some() {
                gateways.insert(operation["operationId"].as_str().unwrap().to_string());
            }
            let statuses = operation["responses"]
                .as_object()
                .unwrap()
                .keys()
                .map(|s| s.parse().unwrap())
                .collect();
            documented.insert(
                operation["operationId"].as_str().unwrap().to_string(),
                (method.to_uppercase(), template.clone(), statuses),
            );
        }
    }

    let mut answered: BTreeMap<String, BTreeSet<u16>> = BTreeMap::new();
    // Without a token; with a gateway's where a role is needed, a viewer's on the gateways' endpoints.
    for (id, (method, template, statuses)) in &documented {
        let forbidden = match gateways.contains(id) {
            true => viewer.as_str(),
            false => GATEWAY,
        };
        for (status, token) in [(401, None), (403, Some(forbidden))] {
            if statuses.contains(&status) {
                let reply = api
                    .request(method, &concrete(template), token, &[], Some("{}".into()))
                    .await;
                assert_eq!(reply.status, status, "{id} {}", reply.body);
                answered.entry(id.clone()).or_default().insert(status);
            }
        }
    }
    for &(id, status, method, path, caller, body, if_match) in CASES {
        let (documented_method, template, _) = documented
            .get(id)
            .unwrap_or_else(|| panic!("no operation {id}"));
        let path = path
            .replace("{cred}", &credential.to_string())
            .replace("{mig}", &migration.to_string())
            .replace("{token}", &token.to_string())
            .replace("{rev}", &api.revision().await.to_string());
        assert!(
            documented_method == method && matches(template, &path),
            "{id}: {method} {path} is not {documented_method} {template}"
        );
        let token = match caller {
            Caller::Admin => ADMIN,
            Caller::Gateway => GATEWAY,
        };
        let headers: Vec<(&str, &str)> = if_match.map(|v| ("if-match", v)).into_iter().collect();
        let reply = api
            .request(method, &path, Some(token), &headers, body.map(Body::from))
            .await;
        assert_eq!(
            reply.status, status,
            "{id}: {method} {path}: {}",
            reply.body
        );
        if status >= 400 {
            assert!(reply.body["error"].is_string(), "{id}: {}", reply.body);
        }
        answered.entry(id.to_string()).or_default().insert(status);
    }
    // The health check's 503: the database gone.
    api.state.pool.close().await;
    let down = api.request("GET", "/healthz", None, &[], None).await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.body["status"], "database unavailable");
    answered
        .entry("health".to_string())
        .or_default()
        .insert(503);

    let documented: BTreeMap<String, BTreeSet<u16>> = documented
        .into_iter()
        .map(|(id, (_, _, statuses))| (id, statuses))
        .collect();
    assert_eq!(
        answered, documented,
        "the statuses answered (left) and documented (right) differ"
    );
}
