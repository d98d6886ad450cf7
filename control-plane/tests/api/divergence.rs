//! How far double-write secondaries are from their primaries, as gateways report it: each gateway's report
//! replaces its rows, the estimate is every fresh gateway's samples together (weighted by their samples), backlog
//! and repaired keys are summed, a report's later posts without entries keep the rows, entries of unknown tenants
//! are dropped, and a gateway that stops reporting drops out.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::Api;

async fn report(api: &Api, gateway: &str, divergence: Value) {
    let body =
        json!({"gateway": gateway, "interval_ms": 10000, "tenants": [], "divergence": divergence});
    let reply = api
        .gateway("POST", "/v1/gateways/observations", Some(body))
        .await;
    assert_eq!(reply.status, 204, "{}", reply.body);
}

fn entry(tenant: &str, resource: &str, counts: [u64; 4], catching_up: bool) -> Value {
    let [samples, differing, pending, repaired] = counts;
    json!({"tenant": tenant, "resource": resource, "samples": samples, "differing": differing,
           "pending": pending, "catching_up": catching_up, "repaired": repaired})
}

async fn divergence(api: &Api, tenant: &str) -> Value {
    let reply = api
        .admin("GET", &format!("/v1/tenants/{tenant}/divergence"), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body
}

#[sqlx::test(migrations = "../migrations")]
async fn each_gateways_latest_report_is_summed_per_secondary(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    api.create_tenant("acme").await;
    api.create_tenant("globex").await;
    let none = divergence(&api, "acme").await;
    assert_eq!(none, json!({"tenant": "acme", "secondaries": []}));

    report(
        &api,
        "gw-1",
        json!([
            entry("acme", "127.0.0.1:7002/0", [1000, 100, 40, 7], false),
            entry("acme", "127.0.0.1:7003/0", [0, 0, 3, 0], true),
            entry("globex", "127.0.0.1:7002/0", [500, 0, 0, 0], false),
            entry("nobody", "127.0.0.1:7002/0", [10, 10, 0, 0], false),
        ]),
    )
    .await;
    report(
        &api,
        "gw-2",
        json!([entry("acme", "127.0.0.1:7002/0", [250, 0, 2, 1], false)]),
    )
    .await;

    let acme = divergence(&api, "acme").await;
    let secondaries = acme["secondaries"].as_array().unwrap();
    assert_eq!(secondaries.len(), 2, "{acme}");
    let first = &secondaries[0];
    assert_eq!(first["resource"], "127.0.0.1:7002/0");
    // 100 differing among 1250 samples: the gateways' windows together, not the mean of their ratios (0.05).
    assert_eq!(first["estimate"], json!(0.08), "{acme}");
    assert_eq!(
        [
            &first["samples"],
            &first["differing"],
            &first["pending"],
            &first["repaired"]
        ],
        [&json!(1250), &json!(100), &json!(42), &json!(8)],
        "{acme}"
    );
    assert_eq!(first["catching_up"], false);
    let gateways: Vec<&str> = first["gateways"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["gateway"].as_str().unwrap())
        .collect();
    assert_eq!(gateways, ["gw-1", "gw-2"]);
    assert!(
        first["reported_at"].as_str().unwrap().ends_with('Z'),
        "{acme}"
    );
    // Not sampled (yet): no estimate, but the backlog and the catch-up.
    let second = &secondaries[1];
    assert_eq!(second.get("estimate"), None, "{acme}");
    assert_eq!(
        (&second["pending"], &second["catching_up"]),
        (&json!(3), &json!(true))
    );
    let globex = divergence(&api, "globex").await;
    assert_eq!(globex["secondaries"][0]["estimate"], json!(0.0), "{globex}");

    // A post without entries (a report's further usage) keeps gw-1's rows; its next report replaces them.
    report(&api, "gw-1", json!([])).await;
    assert_eq!(
        divergence(&api, "acme").await["secondaries"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    report(
        &api,
        "gw-1",
        json!([entry("acme", "127.0.0.1:7002/0", [1000, 0, 0, 47], false)]),
    )
    .await;
    let acme = divergence(&api, "acme").await;
    assert_eq!(acme["secondaries"].as_array().unwrap().len(), 1, "{acme}");
    assert_eq!(acme["secondaries"][0]["estimate"], json!(0.0), "{acme}");
    assert_eq!(acme["secondaries"][0]["repaired"], json!(48), "{acme}");

    // gw-2 stopped reporting 5 minutes ago: its figures no longer count; past the window, its rows go.
    sqlx::query!(
        "UPDATE secondary_divergence SET reported_at = now() - interval '5 minutes' WHERE gateway = 'gw-2'"
    )
    .execute(&pool)
    .await
    .unwrap();
    let acme = divergence(&api, "acme").await;
    assert_eq!(acme["secondaries"][0]["samples"], json!(1000), "{acme}");
    sqlx::query!(
        "UPDATE secondary_divergence SET reported_at = now() - interval '2 days' WHERE gateway = 'gw-2'"
    )
    .execute(&pool)
    .await
    .unwrap();
    report(&api, "gw-1", json!([])).await;
    let left: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM secondary_divergence WHERE gateway = 'gw-2'"#
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);

    // The rows go with their tenant.
    let deleted = api.admin("DELETE", "/v1/tenants/globex", None).await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    let left: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM secondary_divergence"#)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 1);
}
