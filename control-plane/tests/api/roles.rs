//! Every role against every endpoint: a table of (operation, the roles it admits), run with a token of each role
//! (and a tenant-owner on a tenant it does not own). The table is written out here rather than read from the
//! code's `Access`, so that a change of who may do what shows up as a change of this table. Changes run with
//! `?dry_run=true`: every check runs, nothing is written, and the fixture stays the same for every role.

use serde_json::{Value, json};
use sqlx::PgPool;
use switchyard_control_plane::operations;

use crate::common::{ADMIN, Api, GATEWAY, single};

/// Who calls: a token of each role, the start-up admin token, and a gateway token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Bootstrap,
    Admin,
    Operator,
    Viewer,
    /// A tenant-owner of `acme`, on `acme`.
    Owner,
    /// The same tenant-owner, on `globex`.
    Stranger,
    Gateway,
}

use Who::{Admin as A, Gateway as G, Operator as O, Owner as T, Viewer as V};

/// (operationId, who is admitted, besides the start-up admin token). `Stranger` is admitted where `Owner` is, on
/// the endpoints that are not about one tenant (the tenant list, whoami).
#[rustfmt::skip]
const TABLE: &[(&str, &[Who])] = &[
    ("health", &[A, O, V, T, G]),
    ("metrics", &[A, O, V, T, G]),
    ("openapi", &[A, O, V, T, G]),
    ("createTenant", &[A, O]),
    ("listTenants", &[A, O, V, T]),
    ("getTenant", &[A, O, V, T]),
    ("patchTenant", &[A, O, T]),
    ("deleteTenant", &[A, O]),
    ("createCredential", &[A, O, T]),
    ("listCredentials", &[A, O, V, T]),
    ("revokeCredential", &[A, O, T]),
    ("createResource", &[A, O]),
    ("listResources", &[A, O, V]),
    ("getResource", &[A, O, V]),
    ("putResource", &[A, O]),
    ("deleteResource", &[A, O]),
    ("getRoute", &[A, O, V, T]),
    ("putRoute", &[A, O]),
    ("listRouteVersions", &[A, O, V, T]),
    ("getRouteVersion", &[A, O, V, T]),
    ("explainRoute", &[A, O, V, T]),
    ("explainRouteKeys", &[A, O, V, T]),
    ("rollbackRoute", &[A, O]),
    ("importTenants", &[A, O]),
    ("createMigration", &[A, O]),
    ("listMigrations", &[A, O, V]),
    ("getMigration", &[A, O, V]),
    ("getMigrationReadiness", &[A, O, V]),
    ("setReadinessProbe", &[A, O]),
    ("getReadinessProbe", &[A, O, V, T]),
    ("deleteReadinessProbe", &[A, O]),
    ("migrationStep", &[A, O]),
    ("getSnapshot", &[A, O, G]),
    ("heartbeat", &[A, O, G]),
    ("listGateways", &[A, O, V]),
    ("deleteGateway", &[A, O]),
    ("reportObservations", &[A, O, G]),
    ("getHotKeys", &[A, O, V, T]),
    ("getFleetHotKeys", &[A, O, V]),
    ("getBigKeys", &[A, O, V, T]),
    ("getSlowLog", &[A, O, V, T]),
    ("getUsage", &[A, O, V]),
    ("getTenantUsage", &[A, O, V, T]),
    ("getTenantKeyspace", &[A, O, V, T]),
    ("getTenantDivergence", &[A, O, V, T]),
    ("listAudit", &[A, O, V]),
    ("createToken", &[A]),
    ("listTokens", &[A]),
    ("rotateToken", &[A]),
    ("revokeToken", &[A]),
    ("whoAmI", &[A, O, V, T]),
];

fn concrete(template: &str, tenant: &str) -> String {
    template
        .replace("{tenant}", tenant)
        .replace("{name}", "main")
        .replace("{id}", "1")
        .replace("{version}", "1")
        .replace("{action}", "abort")
}

/// A body each endpoint takes, so that what decides the answer is the role, not a 400 or 422 first.
fn body(id: &str) -> Value {
    match id {
        "createTenant" => json!({"name": "fresh"}),
        "createCredential" | "patchTenant" | "rotateToken" => json!({}),
        "createResource" => json!({"name": "other", "url": "redis://127.0.0.1:7010"}),
        "putResource" => json!({"url": "redis://127.0.0.1:7000"}),
        "putRoute" => json!({"route": single("main")}),
        "explainRouteKeys" => json!({"keys": ["a"]}),
        "rollbackRoute" => json!({"version": 1}),
        "importTenants" => json!({"tenants": [{"tenant": {"name": "imported"}}]}),
        "createMigration" => json!({"to": "redis://127.0.0.1:7020"}),
        "heartbeat" => json!({"id": "gw-1", "revision": 1}),
        "reportObservations" => json!({"gateway": "gw-1", "interval_ms": 10000, "tenants": []}),
        "createToken" => json!({"name": "fresh", "role": "viewer"}),
        _ => json!({}),
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn every_role_against_every_endpoint(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://127.0.0.1:7000").await;
    for tenant in ["acme", "globex"] {
        api.create_tenant(tenant).await;
        assert_eq!(api.put_route(tenant, single("main")).await.status, 200);
        api.issue_credential(tenant).await;
    }
    let token = |name: &str, role: &str| json!({"name": name, "role": role});
    let (_, admin) = api.create_token(token("root", "admin")).await;
    let (_, operator) = api.create_token(token("ops", "operator")).await;
    let (_, viewer) = api.create_token(token("watch", "viewer")).await;
    let (_, owner) = api
        .create_token(json!({"name": "acme-team", "role": "tenant-owner", "tenants": ["acme"]}))
        .await;
    let revision = api.revision().await;

    let operations = operations();
    let listed: Vec<&str> = TABLE.iter().map(|(id, _)| *id).collect();
    for operation in &operations {
        assert!(
            listed.contains(&operation.id()),
            "{} is not in the table",
            operation.id()
        );
    }
    assert_eq!(
        listed.len(),
        operations.len(),
        "the table lists an endpoint that does not exist"
    );

    for operation in &operations {
        let (id, admitted) = TABLE
            .iter()
            .find(|(id, _)| *id == operation.id())
            .expect("listed");
        let method = operation.method.as_str();
        for who in [Who::Bootstrap, A, O, V, T, Who::Stranger, G] {
            let (secret, tenant) = match who {
                Who::Bootstrap => (ADMIN, "acme"),
                A => (admin.as_str(), "acme"),
                O => (operator.as_str(), "acme"),
                V => (viewer.as_str(), "acme"),
                T => (owner.as_str(), "acme"),
                Who::Stranger => (owner.as_str(), "globex"),
                G => (GATEWAY, "acme"),
            };
            let mut path = concrete(operation.path, tenant);
            if method != "GET" {
                path.push_str("?dry_run=true");
            }
            let reply = api.with_token(secret, method, &path, Some(body(id))).await;
            let expected = match who {
                Who::Bootstrap => true,
                Who::Stranger => admitted.contains(&T) && !operation.path.contains("{tenant}"),
                _ => admitted.contains(&who),
            };
            let label = format!("{who:?} {method} {path}: {}", reply.body);
            assert_ne!(reply.status, 401, "{label}");
            if expected {
                assert_ne!(reply.status, 403, "{label}");
                assert!(reply.status < 500, "{label}");
            } else {
                assert_eq!(reply.status, 403, "{label}");
                assert_eq!(reply.error(), "forbidden", "{label}");
                // The refusal names the roles that would do.
                let message = reply.body["message"].as_str().unwrap_or_default();
                assert!(message.contains("the role"), "{label}");
            }
        }
    }
    assert_eq!(
        api.revision().await,
        revision,
        "a dry run or a refusal changed something"
    );
}

/// A 403 says which role would be needed, and which one the token has.
#[sqlx::test(migrations = "../migrations")]
async fn refusals_name_the_role_needed(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    api.create_tenant("globex").await;
    let (_, viewer) = api
        .create_token(json!({"name": "watch", "role": "viewer"}))
        .await;
    let (_, owner) = api
        .create_token(json!({"name": "acme-team", "role": "tenant-owner", "tenant_prefix": "acme"}))
        .await;
    let (_, operator) = api
        .create_token(json!({"name": "ops", "role": "operator"}))
        .await;
    let cases = [
        (
            &viewer,
            "POST",
            "/v1/tenants",
            json!({"name": "x"}),
            "this endpoint needs the role admin or operator; the token 'token:watch' has the role viewer",
        ),
        (
            &operator,
            "GET",
            "/v1/tokens",
            json!({}),
            "this endpoint needs the role admin; the token 'token:ops' has the role operator",
        ),
        (
            &owner,
            "GET",
            "/v1/tenants/globex",
            json!({}),
            "the token 'token:acme-team' has the role tenant-owner, and tenant 'globex' is not one of its tenants; any tenant needs the role admin, operator or viewer",
        ),
        (
            &owner,
            "PATCH",
            "/v1/tenants/acme",
            json!({"limits": {"max_connections": 1}}),
            "changing 'limits' needs the role admin or operator; the token 'token:acme-team' has the role tenant-owner and may change none of its tenants' fields",
        ),
        (
            &viewer,
            "GET",
            "/v1/snapshot",
            json!({}),
            "this endpoint needs a gateway token, or the role admin or operator; the token 'token:watch' has the role viewer",
        ),
    ];
    for (token, method, path, body, message) in cases {
        let reply = api.with_token(token, method, path, Some(body)).await;
        assert_eq!((reply.status, reply.error()), (403, "forbidden"), "{path}");
        assert_eq!(reply.body["message"], message, "{path}");
    }
}
