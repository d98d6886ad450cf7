//! Tenants' usage: gateways' reports add up by minute and gateway into rates, the overview ranks tenants, a
//! credential's connections and last AUTH show in its tenant's listing, and the window is pruned.

use serde_json::{Value, json};
use sqlx::PgPool;
use switchyard_schemas::credential_digest;

use crate::common::Api;

/// Waits, if need be, for a minute to start, so that the reports that follow fall in one minute.
async fn minute_to_spare() {
    let second = chrono::Utc::now().timestamp() % 60;
    if second > 50 {
        tokio::time::sleep(std::time::Duration::from_secs((61 - second) as u64)).await;
    }
}

async fn report(api: &Api, gateway: &str, usage: Value) {
    let body = json!({"gateway": gateway, "interval_ms": 10000, "tenants": [], "usage": usage});
    let reply = api
        .gateway("POST", "/v1/gateways/observations", Some(body))
        .await;
    assert_eq!(reply.status, 204, "{}", reply.body);
}

#[sqlx::test(migrations = "../migrations")]
async fn reports_add_up_into_rates_connections_and_last_use(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    api.create_tenant("acme").await;
    api.create_tenant("globex").await;
    let (id, secret) = api.issue_credential("acme").await;
    let (unused, _) = api.issue_credential("acme").await;
    let digest = credential_digest(&secret);
    minute_to_spare().await;
    let now_ms = chrono::Utc::now().timestamp_millis();
    report(
        &api,
        "gw-1",
        json!([
            {"tenant": "acme", "commands": 6000, "errors": 60, "bytes_in": 10000, "bytes_out": 20000,
             "connections": 3, "p99_us": 250,
             "credentials": [{"digest": digest, "connections": 3, "last_auth_ms": now_ms}]},
            {"tenant": "globex", "commands": 10, "errors": 0, "bytes_in": 1, "bytes_out": 1, "connections": 9},
            // A tenant the control plane does not know (deleted meanwhile) is dropped, not an error.
            {"tenant": "ghost", "commands": 1, "errors": 0, "bytes_in": 1, "bytes_out": 1, "connections": 1}
        ]),
    )
    .await;
    report(
        &api,
        "gw-2",
        json!([{"tenant": "acme", "commands": 1000, "errors": 0, "bytes_in": 0, "bytes_out": 0,
                "connections": 1, "p99_us": 1000}]),
    )
    .await;
    // A second report of gw-1 in the same minute: its rate is over the 20 s both cover.
    report(
        &api,
        "gw-1",
        json!([{"tenant": "acme", "commands": 6000, "errors": 60, "bytes_in": 10000, "bytes_out": 20000,
                "connections": 3}]),
    )
    .await;

    let usage = api.admin("GET", "/v1/tenants/acme/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.body);
    assert_eq!(
        (&usage.body["window_s"], &usage.body["resolution_s"]),
        (&json!(86400), &json!(60))
    );
    let points = usage.body["points"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{}", usage.body);
    let point = &points[0];
    assert_eq!(point["ops_per_sec"], json!(700.0), "{point}");
    assert_eq!(point["errors_per_sec"], json!(6.0), "{point}");
    assert_eq!(point["bytes_out_per_sec"], json!(2000.0), "{point}");
    assert_eq!(point["connections"], json!(4), "{point}");
    assert_eq!(point["p99_us"], json!(1000), "{point}");

    let overview = api.admin("GET", "/v1/usage?limit=1", None).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    let first = |list: &str| overview.body[list][0]["tenant"].clone();
    assert_eq!(first("by_ops"), json!("acme"), "{}", overview.body);
    assert_eq!(first("by_errors"), json!("acme"));
    assert_eq!(first("by_connections"), json!("globex"));
    assert_eq!(overview.body["by_ops"].as_array().unwrap().len(), 1);
    assert_eq!(overview.body["by_ops"][0]["ops_per_sec"], json!(700.0));
    assert_eq!(overview.body["total"][0]["connections"], json!(13));

    let listed = api.admin("GET", "/v1/tenants/acme/credentials", None).await;
    let credential = |id: i64| {
        listed.body["credentials"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == json!(id))
            .cloned()
            .unwrap()
    };
    let used = credential(id);
    assert_eq!(used["connections"], json!(3), "{used}");
    assert_eq!(used["last_used"]["gateway"], json!("gw-1"), "{used}");
    let at =
        chrono::DateTime::parse_from_rfc3339(used["last_used"]["at"].as_str().unwrap()).unwrap();
    assert!((at.timestamp_millis() - now_ms).abs() < 5, "{used}");
    let never = credential(unused);
    assert_eq!(never["connections"], json!(0), "{never}");
    assert!(never.get("last_used").is_none(), "{never}");

    // The connections close: the gateway says so once; the last use stays.
    report(
        &api,
        "gw-1",
        json!([{"tenant": "acme", "commands": 0, "errors": 0, "bytes_in": 0, "bytes_out": 0,
                "connections": 0, "credentials": [{"digest": digest, "connections": 0}]}]),
    )
    .await;
    let listed = api.admin("GET", "/v1/tenants/acme/credentials", None).await;
    assert_eq!(listed.body["credentials"][0]["connections"], json!(0));
    assert_eq!(
        listed.body["credentials"][0]["last_used"]["gateway"],
        json!("gw-1")
    );

    for bad in ["/v1/usage?limit=0", "/v1/tenants/acme/usage?minutes=1441"] {
        assert_eq!(api.admin("GET", bad, None).await.status, 400, "{bad}");
    }
    assert_eq!(
        api.admin("GET", "/v1/tenants/nope/usage", None)
            .await
            .status,
        404
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn usage_older_than_the_window_is_pruned(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    api.create_tenant("acme").await;
    let row = json!([{"tenant": "acme", "commands": 60, "errors": 0, "bytes_in": 0, "bytes_out": 0,
                      "connections": 1}]);
    report(&api, "gw-1", row.clone()).await;
    sqlx::query!("UPDATE tenant_usage SET minute = minute - interval '1 day'")
        .execute(&pool)
        .await
        .unwrap();
    let usage = api.admin("GET", "/v1/tenants/acme/usage", None).await;
    assert_eq!(usage.body["points"], json!([]), "{}", usage.body);
    report(&api, "gw-1", row).await;
    let kept: i64 = sqlx::query_scalar!(r#"SELECT count(*) AS "n!" FROM tenant_usage"#)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1, "the day-old row is gone, this minute's is kept");
    let usage = api
        .admin("GET", "/v1/tenants/acme/usage?minutes=5", None)
        .await;
    assert_eq!(usage.body["points"].as_array().map(Vec::len), Some(1));
    assert_eq!(usage.body["window_s"], json!(300));
}

/// A near cache's counts add up over the minute's reports and gateways; its bytes are each gateway's last report
/// of the minute, summed; a tenant no gateway reported a near cache of has none in its points.
#[sqlx::test(migrations = "../migrations")]
async fn near_cache_figures_add_up_by_minute_with_each_gateways_last_bytes(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    api.create_tenant("acme").await;
    api.create_tenant("globex").await;
    minute_to_spare().await;
    let entry = |tenant: &str, hits: u64, misses: u64, bytes: u64| {
        json!({"tenant": tenant, "commands": hits + misses, "errors": 0, "bytes_in": 0, "bytes_out": 0,
               "connections": 1,
               "near_cache": {"hits": hits, "misses": misses, "invalidations": 1, "evictions": 2,
                              "bytes": bytes}})
    };
    let plain = json!({"tenant": "globex", "commands": 5, "errors": 0, "bytes_in": 0, "bytes_out": 0,
                       "connections": 1});
    report(&api, "gw-1", json!([entry("acme", 60, 20, 5000), plain])).await;
    report(&api, "gw-1", json!([entry("acme", 20, 0, 4000)])).await;
    report(&api, "gw-2", json!([entry("acme", 10, 10, 1000)])).await;

    let usage = api.admin("GET", "/v1/tenants/acme/usage", None).await;
    assert_eq!(usage.status, 200, "{}", usage.body);
    let near = &usage.body["points"][0]["near_cache"];
    assert_eq!(
        near,
        &json!({"hits": 90, "misses": 30, "invalidations": 3, "evictions": 6, "bytes": 5000,
                "hit_ratio": 0.75}),
        "{}",
        usage.body
    );
    let plain = api.admin("GET", "/v1/tenants/globex/usage", None).await;
    assert_eq!(plain.body["points"].as_array().map(Vec::len), Some(1));
    assert!(
        plain.body["points"][0].get("near_cache").is_none(),
        "{}",
        plain.body
    );
    let overview = api.admin("GET", "/v1/usage", None).await;
    assert_eq!(overview.body["total"][0]["near_cache"]["hits"], json!(90));
}
