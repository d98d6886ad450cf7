//! Every endpoint admits exactly the callers it should.

use sqlx::PgPool;
use switchyard_control_plane::{Access, operations};

use crate::common::{ADMIN, Api, GATEWAY};

fn concrete(path: &str) -> String {
    path.replace("{tenant}", "acme")
        .replace("{name}", "main")
        .replace("{id}", "1")
        .replace("{version}", "1")
}

#[sqlx::test(migrations = "../migrations")]
async fn tokens_are_required_where_they_should_be(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;
    let operations = operations();
    assert!(operations.len() >= 25, "{} endpoints", operations.len());
    for operation in &operations {
        let method = operation.method.as_str();
        let path = concrete(operation.path);
        let call = |token| api.request(method, &path, token, &[], Some("{}".into()));
        let label = format!("{method} {path}");
        let anonymous = call(None).await;
        let wrong = call(Some("not-a-token-but-long-enough")).await;
        let gateway = call(Some(GATEWAY)).await;
        match operation.access {
            Access::Public => assert_ne!(anonymous.status, 401, "{label}"),
            Access::Gateway => {
                assert_eq!(anonymous.status, 401, "{label}");
                assert_eq!(wrong.status, 401, "{label}");
                assert_ne!(gateway.status, 401, "{label}");
            }
            _ => {
                for reply in [&anonymous, &wrong] {
                    assert_eq!(reply.status, 401, "{label}");
                    assert_eq!(reply.error(), "unauthorized", "{label}");
                    assert_eq!(reply.header("www-authenticate"), Some("Bearer"));
                }
                // A valid token of the wrong kind: retrying with the same token cannot help.
                assert_eq!(gateway.status, 403, "{label}");
                assert_eq!(gateway.error(), "forbidden", "{label}");
                assert_eq!(gateway.header("www-authenticate"), None, "{label}");
            }
        }
    }
    assert_eq!(
        api.revision().await,
        revision,
        "an unauthorized call changed something"
    );
    for operation in &operations {
        let method = operation.method.as_str();
        let path = concrete(operation.path);
        let label = format!("{method} {path}");
        let admin = api
            .request(method, &path, Some(ADMIN), &[], Some("{}".into()))
            .await;
        assert_ne!(admin.status, 401, "{label}");
        // Every documented endpoint is routed (a 404 here is about the data, with the JSON error shape).
        assert_ne!(admin.status, 405, "{label}");
        assert!(
            admin.status != 404 || admin.error() == "not_found",
            "{label}"
        );
        assert!(admin.status < 500, "{label}: {}", admin.body);
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn unknown_paths_are_json_404s(pool: PgPool) {
    let api = Api::new(pool).await;
    let reply = api.admin("GET", "/v1/nothing-here", None).await;
    assert_eq!((reply.status, reply.error()), (404, "not_found"));
}
