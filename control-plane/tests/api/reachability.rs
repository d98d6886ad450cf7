//! Whether gateways reach the resources: each gateway's report replaces its views, a registered resource shows
//! every fresh view of its URL's location (passwords and another database apart), a report's later posts without
//! resources keep the views, and a gateway that stops reporting drops out.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::common::Api;

async fn report(api: &Api, gateway: &str, resources: Value) {
    let body =
        json!({"gateway": gateway, "interval_ms": 10000, "tenants": [], "resources": resources});
    let reply = api
        .gateway("POST", "/v1/gateways/observations", Some(body))
        .await;
    assert_eq!(reply.status, 204, "{}", reply.body);
}

async fn reachability(api: &Api, name: &str) -> Value {
    let reply = api
        .admin("GET", &format!("/v1/resources/{name}"), None)
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.body["reachability"].clone()
}

#[sqlx::test(migrations = "../migrations")]
async fn each_gateways_latest_view_shows_while_fresh(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    api.create_resource("main", "redis://:secret@127.0.0.1:7001/2")
        .await;
    api.create_resource("other-db", "redis://127.0.0.1:7001/3")
        .await;
    api.create_resource(
        "cache",
        "redis-sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster?sentinelPassword=sp",
    )
    .await;
    let since = chrono::Utc::now().timestamp_millis() - 60_000;
    report(
        &api,
        "gw-1",
        json!([
            {"location": "127.0.0.1:7001/2", "up": true, "since_ms": since},
            {"location": "127.0.0.1:26379,127.0.0.1:26380/mymaster", "up": true, "since_ms": since}
        ]),
    )
    .await;
    report(
        &api,
        "gw-2",
        json!([{"location": "127.0.0.1:7001/2", "up": false, "since_ms": since + 1000,
                "last_error": "connection refused", "last_error_ms": since + 1000}]),
    )
    .await;

    let main = reachability(&api, "main").await;
    assert_eq!(
        (&main["up"], &main["down"]),
        (&json!(1), &json!(1)),
        "{main}"
    );
    let down = &main["gateways"][1];
    assert_eq!(down["gateway"], "gw-2", "{main}");
    assert_eq!(down["last_error"], "connection refused", "{main}");
    assert!(
        down["last_error_at"].as_str().unwrap().ends_with('Z'),
        "{main}"
    );
    assert_eq!(reachability(&api, "cache").await["up"], 1);
    // Another database of the same node is another location, that no gateway reported.
    assert_eq!(reachability(&api, "other-db").await, Value::Null);
    let listed = api.admin("GET", "/v1/resources", None).await;
    let names: Vec<(&str, bool)> = listed.body["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["reachability"].is_object()))
        .collect();
    assert_eq!(
        names,
        [("cache", true), ("main", true), ("other-db", false)],
        "{}",
        listed.body
    );

    // A post without resources (a report's further usage) keeps gw-1's views; its next report replaces them.
    report(&api, "gw-1", json!([])).await;
    assert_eq!(reachability(&api, "cache").await["up"], 1);
    report(
        &api,
        "gw-1",
        json!([{"location": "127.0.0.1:7001/2", "up": true, "since_ms": since}]),
    )
    .await;
    assert_eq!(reachability(&api, "cache").await, Value::Null);

    // gw-2 stopped reporting 5 minutes ago: its view no longer counts.
    sqlx::query!(
        "UPDATE resource_reachability SET reported_at = now() - interval '5 minutes' WHERE gateway = 'gw-2'"
    )
        .execute(&pool)
        .await
        .unwrap();
    let main = reachability(&api, "main").await;
    assert_eq!(
        (&main["up"], &main["down"]),
        (&json!(1), &json!(0)),
        "{main}"
    );
    // Past the window, its rows go at the next report.
    sqlx::query!(
        "UPDATE resource_reachability SET reported_at = now() - interval '2 days' WHERE gateway = 'gw-2'"
    )
        .execute(&pool)
        .await
        .unwrap();
    report(&api, "gw-1", json!([])).await;
    let left: i64 = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM resource_reachability WHERE gateway = 'gw-2'"#
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(left, 0);
}
