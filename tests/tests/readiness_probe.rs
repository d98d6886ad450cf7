//! Readiness without a migration, end to end: a tenant on a standalone Redis with a readiness probe towards a
//! 3-master Redis Cluster, a real gateway following a real control plane. The gateway checks the tenant's
//! commands against the cluster's placement (sending nothing there) and the control plane answers the probe as
//! it answers a migration's readiness; no migration exists, and deleting the probe ends it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_schemas::placement::{crc16, hash_tag};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisCluster, RedisServer};

const PROBE: &str = "/v1/tenants/acme/readiness-probe";

/// Waits until the one gateway serves the control plane's current revision.
async fn converged(cp: &ControlPlane) {
    let health = cp.expect("GET", "/healthz", None, 200).await;
    cp.converged(1, health["revision"].as_i64().unwrap()).await;
}

async fn wait_probe(cp: &ControlPlane, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = cp.expect("GET", PROBE, None, 200).await;
        if done(&probe) {
            return probe;
        }
        assert!(Instant::now() < deadline, "never {what}: {probe}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Cross-slot MULTI/EXEC and MGET, twice each.
async fn cross_slot_traffic(client: &mut redis::aio::MultiplexedConnection) {
    for _ in 0..2 {
        let () = redis::pipe()
            .atomic()
            .set("user:1001", "a")
            .set("user:2002", "b")
            .query_async(client)
            .await
            .expect("a standalone Redis runs a transaction over any keys");
        let values: Vec<Option<String>> = redis::cmd("MGET")
            .arg("user:1001")
            .arg("user:2002")
            .query_async(client)
            .await
            .unwrap();
        assert_eq!(values.len(), 2);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_counts_what_would_fail_on_its_destination_until_deleted() {
    let old = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let cp = ControlPlane::start();
    let secret = cp
        .create_tenant("acme", json!({"type": "single", "target": old.url()}))
        .await;
    let cache = std::env::temp_dir().join(format!(
        "switchyard-readiness-probe-{}.json",
        std::process::id()
    ));
    let gateway = Gateway::builder()
        .arg("--tracking-report-interval-ms")
        .arg("200")
        .start_with_control_plane(&cp, &cache);
    let slot = |key: &str| crc16(hash_tag(key.as_bytes())) % 16384;
    assert_ne!(
        slot("user:1001"),
        slot("user:2002"),
        "the test needs two slots"
    );
    let (status, _) = cp.call("GET", PROBE, None).await;
    assert_eq!(status, 404, "no probe yet");

    let set = cp
        .expect("PUT", PROBE, Some(json!({"to": cluster.url()})), 200)
        .await;
    assert_eq!(
        (&set["ready"], &set["checked"], &set["to"]["type"]),
        (&json!(true), &json!(0), &json!("single")),
        "{set}"
    );
    converged(&cp).await;
    let mut client = gateway.client(Some(&secret)).await;
    cross_slot_traffic(&mut client).await;

    let probe = wait_probe(&cp, "counted", |p| {
        p["counts"]["transactions"] == 2 && p["counts"]["split"] == 2
    })
    .await;
    assert_eq!(
        (&probe["ready"], &probe["commands_checked"]),
        (&json!(false), &json!(true)),
        "{probe}"
    );
    assert_eq!(
        probe["counts"]["unsupported"], 0,
        "the cluster knows them all"
    );
    let examples = probe["examples"].as_array().unwrap();
    let example = |kind: &str| {
        examples
            .iter()
            .find(|e| e["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind} example: {probe}"))
            .clone()
    };
    assert_eq!(
        example("transaction"),
        json!({"kind": "transaction", "command": "set", "keys": ["user:#", "user:#"], "count": 2})
    );
    assert_eq!(
        example("split"),
        json!({"kind": "split", "command": "mget", "keys": ["user:#", "user:#"], "count": 2})
    );
    let migrations = cp
        .expect("GET", "/v1/tenants/acme/migrations", None, 200)
        .await;
    assert_eq!(migrations["migrations"], json!([]), "no migration exists");
    let shown = Ctl::new(&cp).ok(&["tenants", "readiness-probe", "get", "acme"]);
    assert!(
        shown.contains("NOT READY") && shown.contains("transactions 2"),
        "{shown}"
    );

    Ctl::new(&cp).ok(&["tenants", "readiness-probe", "delete", "acme"]);
    let (status, _) = cp.call("GET", PROBE, None).await;
    assert_eq!(status, 404, "deleted");
    converged(&cp).await;
    cross_slot_traffic(&mut client).await;
    // Set again: counts start afresh, and what ran without a probe was not counted.
    Ctl::new(&cp).ok(&[
        "tenants",
        "readiness-probe",
        "set",
        "acme",
        "--to",
        &cluster.url(),
    ]);
    converged(&cp).await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let fresh = cp.expect("GET", PROBE, None, 200).await;
    assert_eq!(
        (&fresh["ready"], &fresh["checked"], &fresh["examples"]),
        (&json!(true), &json!(0), &json!([])),
        "{fresh}"
    );
    let _ = std::fs::remove_file(&cache);
}
