//! Tenants' usage end to end: a real gateway counts a tenant's traffic and its credential's connections and
//! reports them to a real control plane on Postgres, whose usage endpoints and credential listing show them.

use std::time::Duration;

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer};

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
    let url = format!("redis://acme:{secret}@127.0.0.1:{}", gateway.port());
    let client = redis::Client::open(url).expect("a client");
    let mut cons = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cons.len() < 2 {
        match client.get_multiplexed_async_connection().await {
            Ok(con) => cons.push(con),
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
