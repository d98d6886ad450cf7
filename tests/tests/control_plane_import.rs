//! `POST /v1/import` end to end: a thousand tenants imported at once are what a real gateway serves.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{ControlPlane, Gateway, RedisServer};

const TENANTS: usize = 1000;

/// An imported password: what the clients of the old proxy already use.
fn password(i: usize) -> String {
    format!("imported-password-{i:05}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_imported_tenants_are_served() {
    let redis = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!("switchyard-import-{}.json", std::process::id()));
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache);

    // Half the tenants bring their password, half get one issued; each has a database of its own in one Redis.
    let tenants: Vec<_> = (0..TENANTS)
        .map(|i| {
            let credential = if i % 2 == 0 {
                json!({"password": password(i)})
            } else {
                json!({})
            };
            json!({
                "tenant": {"name": format!("imported-{i}"), "limits": {"max_connections": 10}},
                "credentials": [credential],
                "route": {"type": "single", "target": format!("{}/{}", redis.url(), i % 16)},
            })
        })
        .collect();
    let before = cp.expect("GET", "/v1/gateways", None, 200).await["revision"]
        .as_i64()
        .unwrap();
    let imported = cp
        .expect("POST", "/v1/import", Some(json!({"tenants": tenants})), 201)
        .await;
    let revision = imported["revision"].as_i64().unwrap();
    assert_eq!(revision, before + 1, "one revision for the whole import");

    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fleet = cp.expect("GET", "/v1/gateways", None, 200).await;
        if fleet["gateways"][0]["revision"].as_i64() >= Some(revision) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gateway did not reach the import: {fleet}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for (i, tenant) in imported["tenants"].as_array().unwrap().iter().enumerate() {
        let secret = match tenant["credentials"][0]["secret"].as_str() {
            Some(issued) => issued.to_string(),
            None => password(i),
        };
        let mut con = switchyard_tests::connect(&gateway.url(Some(&secret))).await;
        let () = redis::cmd("SET")
            .arg(format!("key-{i}"))
            .arg(format!("imported-{i}"))
            .query_async(&mut con)
            .await
            .unwrap_or_else(|e| panic!("tenant {i}: {e}"));
    }
    let mut direct = redis.client();
    for i in 0..TENANTS {
        let () = redis::cmd("SELECT").arg(i % 16).query(&mut direct).unwrap();
        let value: Option<String> = redis::cmd("GET")
            .arg(format!("key-{i}"))
            .query(&mut direct)
            .unwrap();
        assert_eq!(
            value.as_deref(),
            Some(format!("imported-{i}").as_str()),
            "tenant {i}'s route"
        );
    }
    let _ = std::fs::remove_file(cache);
}
