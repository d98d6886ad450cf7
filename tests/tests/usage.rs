//! Tenants' usage end to end: a real gateway counts a tenant's traffic and its credential's connections and
//! reports them to a real control plane on Postgres, whose usage endpoints and credential listing show them; a
//! tenant's near cache figures arrive with its usage.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer};

/// A client of `tenant` through `gateway`, and `n` connections of it, once the gateway knows the tenant's secret.
async fn connect(
    gateway: &Gateway,
    tenant: &str,
    secret: &str,
    n: usize,
) -> (redis::Client, Vec<MultiplexedConnection>) {
    let url = format!("redis://{tenant}:{secret}@127.0.0.1:{}", gateway.port());
    let client = redis::Client::open(url).expect("a client");
    let mut cons = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cons.len() < n {
        match client.get_multiplexed_async_connection().await {
            Ok(con) => cons.push(con),
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (client, cons)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_traffic_and_its_credentials_use_reach_the_control_plane() {
    let redis = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!("switchyard-usage-{}.json", std::process::id()));
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("300")
        .arg("--gateway-id")
        .arg("gw-usage")
        .arg("--metrics-tenant-latency")
        .start_with_control_plane(&cp, &cache);
    let secret = cp
        .create_tenant("acme", json!({"type": "single", "target": redis.url()}))
        .await;
    let (client, mut cons) = connect(&gateway, "acme", &secret, 2).await;
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("SET").arg(format!("k{i}")).arg("v");
    }
    let _: Vec<String> = pipe.query_async(&mut cons[0]).await.expect("the SETs");
    let error: redis::RedisResult<i64> =
        redis::cmd("INCR").arg("k1").query_async(&mut cons[1]).await;
    assert!(error.is_err());

    let within = Duration::from_secs(10);
    let commands = |answer: &Value| -> f64 {
        answer["points"].as_array().map_or(0.0, |points| {
            points
                .iter()
                .filter_map(|p| p["ops_per_sec"].as_f64())
                .sum()
        })
    };
    let usage = cp
        .poll("/v1/tenants/acme/usage", within, |answer| {
            let errors = answer["points"][0]["errors_per_sec"]
                .as_f64()
                .unwrap_or(0.0);
            commands(answer) > 0.0 && errors > 0.0 && answer["points"][0]["connections"] == 2
        })
        .await;
    assert!(usage["points"][0]["p99_us"].as_u64().is_some(), "{usage}");
    assert!(
        usage["points"][0]["bytes_in_per_sec"].as_f64() > Some(0.0),
        "{usage}"
    );
    let overview = cp
        .poll("/v1/usage", within, |answer| {
            answer["by_ops"][0]["tenant"] == "acme"
        })
        .await;
    assert_eq!(
        overview["by_connections"][0]["connections"], 2,
        "{overview}"
    );

    let path = "/v1/tenants/acme/credentials";
    let listed = cp
        .poll(path, within, |answer| {
            answer["credentials"][0]["connections"] == 2
        })
        .await;
    let credential = &listed["credentials"][0];
    assert_eq!(credential["last_used"]["gateway"], "gw-usage", "{listed}");
    assert!(credential["last_used"]["at"].is_string(), "{listed}");

    // The command line shows the same.
    let ctl = Ctl::new(&cp);
    let top = ctl.ok(&["tenants", "top", "--by", "connections"]);
    let row = top.lines().nth(1).unwrap_or_default();
    assert!(
        top.starts_with("TENANT") && row.starts_with("acme"),
        "{top}"
    );
    assert_eq!(row.split_whitespace().nth(3), Some("2"), "{top}");
    let credentials = ctl.ok(&["credentials", "list", "acme"]);
    assert!(credentials.contains("gw-usage"), "{credentials}");

    // The clients leave: the gateway says so once, and the listing counts none.
    drop(cons);
    drop(client);
    cp.poll(path, within, |answer| {
        answer["credentials"][0]["connections"] == 0
    })
    .await;
    let _ = std::fs::remove_file(&cache);
}

/// A tenant with the near cache reads a key again and again: its usage points carry the cache's hits, misses and
/// hit ratio; a tenant without it has no `near_cache` in its points.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_near_cache_hits_reach_the_control_plane() {
    let redis = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!(
        "switchyard-usage-near-cache-{}.json",
        std::process::id()
    ));
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("300")
        .start_with_control_plane(&cp, &cache);
    let route = json!({"type": "single", "target": redis.url()});
    let near_cache = json!({"max_bytes": 1 << 20, "keys": "all"});
    let shop = cp
        .create_tenant_with(
            json!({"name": "shop", "near_cache": near_cache}),
            route.clone(),
        )
        .await;
    let plain = cp.create_tenant("plain", route).await;
    let (_shop, mut shop) = connect(&gateway, "shop", &shop, 1).await;
    let (_plain, mut plain) = connect(&gateway, "plain", &plain, 1).await;
    for con in [&mut shop[0], &mut plain[0]] {
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(con)
            .await
            .expect("SET");
    }
    // The first reads miss and fill the cache (a fill is asynchronous): read until the gateway counts hits.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gateway.metric("switchyard_near_cache_hits_total{tenant=\"shop\"}") < 50 {
        assert!(std::time::Instant::now() < deadline, "no near cache hit");
        for con in [&mut shop[0], &mut plain[0]] {
            let value: String = redis::cmd("GET")
                .arg("k")
                .query_async(con)
                .await
                .expect("GET");
            assert_eq!(value, "v");
        }
    }

    let within = Duration::from_secs(10);
    let sum = |answer: &Value, field: &str| -> u64 {
        answer["points"].as_array().map_or(0, |points| {
            points
                .iter()
                .filter_map(|p| p["near_cache"][field].as_u64())
                .sum()
        })
    };
    let usage = cp
        .poll("/v1/tenants/shop/usage", within, |answer| {
            sum(answer, "hits") >= 50
        })
        .await;
    assert!(sum(&usage, "misses") >= 1, "{usage}");
    let points = usage["points"].as_array().expect("points");
    let last = points
        .iter()
        .rev()
        .find(|p| p["near_cache"].is_object())
        .expect("a minute with the near cache");
    let ratio = last["near_cache"]["hit_ratio"].as_f64().unwrap_or(0.0);
    assert!(ratio > 0.5 && ratio < 1.0, "{usage}");
    assert!(last["near_cache"]["bytes"].as_u64() > Some(0), "{usage}");
    let plain = cp
        .poll("/v1/tenants/plain/usage", within, |answer| {
            answer["points"][0]["ops_per_sec"].as_f64() > Some(0.0)
        })
        .await;
    let cached = plain["points"]
        .as_array()
        .is_none_or(|points| points.iter().any(|p| p.get("near_cache").is_some()));
    assert!(!cached, "{plain}");
    let _ = std::fs::remove_file(&cache);
}
