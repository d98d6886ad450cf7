//! Live migration end to end: a real control plane on Postgres, a real gateway following it, a standalone Redis
//! as the old deployment, a 3-master Redis Cluster (or another Redis) as the new one, and a reference
//! redis-server that receives every command the gateway acknowledged. After `finish`, the new deployment must
//! hold exactly what the reference holds, key by key.
//!
//! `SWITCHYARD_MIGRATION_KEYS` sets the size of the main test: by default the 200,000 keys (under three
//! minutes on a loaded 2-core machine, most of it the final key-by-key comparison); 3,000 for a quick local run.

use std::time::{Duration, Instant};

use serde_json::json;
use switchyard_tests::{ADMIN_TOKEN, RedisCluster, RedisServer, binary, connect};

mod aborts;
mod harness;

use harness::*;

/// The main scenario: standalone to a 3-master cluster under 20 writing clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_to_cluster_under_writes_ends_identical() {
    let keys: usize = std::env::var("SWITCHYARD_MIGRATION_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let old = RedisServer::start();
    let reference = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let stack = Stack::start(&old).await;
    populate(
        &mut [connect(&old.url()).await, connect(&reference.url()).await],
        keys,
    )
    .await;
    let writers = Writers::start(&stack.gateway, &stack.secret, &reference, keys).await;
    writers.progress(200).await;

    let id = stack
        .create(json!(cluster.url()), "all", json!({"keys_per_sec": 0}))
        .await;
    stack.step(id, "backfill").await;
    let backfilled = stack.wait_state(id, "backfilled").await;
    let backfill = &backfilled["progress"]["backfill"];
    assert!(backfill["copied"].as_u64().unwrap() > 0, "{backfilled}");
    assert_eq!(backfill["failed"], 0, "{backfilled}");
    writers.progress(200).await;

    // As the runbook says: verify again while keys written continuously are left unresolved.
    for attempt in 1.. {
        stack.step(id, "verify").await;
        let verified = stack.wait_state(id, "verified").await;
        let verify = &verified["progress"]["verify"];
        assert_eq!(verify["failed"], 0, "{verified}");
        assert!(verify["matched"].as_u64().unwrap() > 0, "{verified}");
        if verify["unresolved"] == 0 {
            break;
        }
        assert!(
            attempt < 3,
            "still unresolved after {attempt} verifies: {verified}"
        );
    }

    stack.step(id, "cutover").await;
    stack.wait_converged(id).await;
    writers.progress(500).await;
    stack.step(id, "finish").await;
    stack.wait_converged(id).await;
    writers.progress(500).await;
    let acknowledged = writers.stop().await;
    assert!(acknowledged > 1_000);

    let expected = contents(&mut [reference.client()]);
    assert!(expected.len() > keys / 2);
    assert_same(
        &expected,
        &contents(&mut masters(&cluster)),
        "new deployment after finish",
    );
    // The route is the new deployment alone; the audit log shows every step.
    let route = stack
        .cp
        .expect("GET", "/v1/tenants/acme/route", None, 200)
        .await;
    assert_eq!(
        route["route"],
        json!({"type": "single", "target": cluster.url()})
    );
    let audit = stack
        .cp
        .expect("GET", "/v1/audit?tenant=acme", None, 200)
        .await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("migration."))
        .collect();
    for action in [
        "migration.create",
        "migration.backfill",
        "migration.backfilled",
        "migration.verify",
        "migration.verified",
        "migration.cutover",
        "migration.finish",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
}

/// The control plane is killed while backfill runs; the restarted one resumes from the saved cursor (it does not
/// scan everything again), and verify then finds nothing to repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_backfill_resumes_and_verifies_clean() {
    let keys = 3_000;
    let old = RedisServer::start();
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut stack = Stack::start(&old).await;
    populate(&mut [connect(&old.url()).await], keys).await;
    let id = stack
        .create(
            two_shards(&a, &b),
            "primary",
            json!({"keys_per_sec": 500, "batch": 100}),
        )
        .await;
    stack.step(id, "backfill").await;
    let scanned_at_kill = stack.wait_scanned(id, keys as u64 / 2).await;
    stack.cp.stop();
    stack.cp.restart();
    // `switchyard-ctl migrations watch` follows the resumed task to its end.
    let ctl = binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let (url, path) = (stack.cp.url(), id.to_string());
    let watched = tokio::task::spawn_blocking(move || {
        std::process::Command::new(ctl)
            .args(["--url", &url, "--admin-token", ADMIN_TOKEN])
            .args(["migrations", "watch", "acme", &path, "--interval", "0.2"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let output = String::from_utf8_lossy(&watched.stdout);
    assert!(
        watched.status.success(),
        "{output}{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    let last = output.lines().last().unwrap_or_default();
    assert!(
        last.contains("backfilled") && last.contains("100%") && last.contains("done"),
        "{output}"
    );
    let backfilled = stack.wait_state(id, "backfilled").await;
    let progress = &backfilled["progress"]["backfill"];
    let scanned = progress["scanned"].as_u64().unwrap();
    // From scratch it would be at least scanned_at_kill + keys.
    assert!(
        scanned < scanned_at_kill + keys as u64 * 4 / 5 && scanned >= keys as u64,
        "scanned {scanned} after a kill at {scanned_at_kill}: {backfilled}"
    );
    assert_eq!(progress["failed"], 0);
    stack.verify_clean(id, keys).await;
    stack.step(id, "cutover").await;
    stack.step(id, "finish").await;
    assert_same(
        &contents(&mut [old.client()]),
        &contents(&mut [a.client(), b.client()]),
        "after finish",
    );
}

/// Backfill from a 3-master cluster (three servers scanned at once, several pages in flight) is killed midway;
/// the restarted control plane resumes every server from its saved cursor (it neither starts over nor skips a
/// page that was still being copied), and verify then finds every key copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_parallel_backfill_resumes_and_copies_every_key() {
    let keys = 6_000;
    let old = RedisCluster::start(3, 0, None);
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut stack = Stack::on(json!(old.url())).await;
    populate(&mut [stack.gateway.client(Some(&stack.secret)).await], keys).await;
    let id = stack
        .create(
            two_shards(&a, &b),
            "primary",
            json!({"keys_per_sec": 3000, "batch": 100}),
        )
        .await;
    stack.step(id, "backfill").await;
    let scanned_at_kill = stack.wait_scanned(id, keys as u64 / 3).await;
    stack.cp.stop();
    stack.cp.restart();
    let backfilled = stack.wait_state(id, "backfilled").await;
    let progress = &backfilled["progress"]["backfill"];
    let scanned = progress["scanned"].as_u64().unwrap();
    // Started over, it would count at least scanned_at_kill + keys.
    assert!(
        scanned >= keys as u64 && scanned < scanned_at_kill + keys as u64,
        "scanned {scanned} after a kill at {scanned_at_kill}: {backfilled}"
    );
    // Pages copied before the kill but after the last save are copied again: BUSYKEY, counted as skipped.
    let (copied, skipped) = (progress["copied"].as_u64(), progress["skipped"].as_u64());
    assert_eq!(
        copied.zip(skipped).map(|(c, s)| c + s),
        Some(scanned),
        "{backfilled}"
    );
    assert_eq!(progress["failed"], 0);
    stack.verify_clean(id, keys).await;
    assert_same(
        &contents(&mut masters(&old)),
        &contents(&mut [a.client(), b.client()]),
        "after backfill",
    );
}

/// The new deployment is down for ten seconds during double-write (acknowledged by the primary alone, so
/// clients see no error): the gateway repairs the writes it missed once it is back, verify then finds the sides
/// equal and reports what the gateway's repair did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_outage_is_repaired_by_the_gateway_and_verify_says_so() {
    let old = RedisServer::start();
    let data = std::env::temp_dir().join(format!(
        "switchyard-migration-outage-{}-{}",
        std::process::id(),
        switchyard_tests::allocate_port()
    ));
    std::fs::create_dir_all(&data).unwrap();
    let persistent = || {
        RedisServer::builder()
            .arg("--dir")
            .arg(data.to_str().unwrap())
    };
    let new = persistent().start();
    let port = new.port();
    let stack = Stack::start(&old).await;
    populate(&mut [connect(&old.url()).await], 1_000).await;
    let id = stack.create(json!(new.url()), "primary", json!({})).await;
    stack.step(id, "backfill").await;
    stack.wait_state(id, "backfilled").await;

    let _: () = redis::cmd("SAVE").query(&mut new.client()).unwrap();
    drop(new);
    let mut through = stack.gateway.client(Some(&stack.secret)).await;
    let outage = Instant::now();
    let mut written = 0;
    while outage.elapsed() < Duration::from_secs(10) {
        let _: () = redis::cmd("SET")
            .arg(key("string", written % 1_000))
            .arg(format!("during-outage-{written}"))
            .query_async(&mut through)
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(key("hash", 1 + written % 997))
            .query_async(&mut through)
            .await
            .unwrap();
        written += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new = persistent().start_on(port);
    assert!(written > 100);

    // The gateway recorded what new missed and repairs it once new is back, without verify; its report says so.
    let divergence = stack
        .cp
        .poll(
            "/v1/tenants/acme/divergence",
            Duration::from_secs(120),
            |d| {
                d["secondaries"].as_array().is_some_and(|s| {
                    !s.is_empty()
                        && s.iter()
                            .all(|s| s["pending"] == 0 && s["repaired"].as_u64() > Some(0))
                })
            },
        )
        .await;
    stack.step(id, "verify").await;
    let verified = stack.wait_state(id, "verified").await;
    let verify = &verified["progress"]["verify"];
    assert_eq!(verify["unresolved"], 0, "{verified}");
    // Verify reports what the gateways' repair already did.
    assert!(
        verify["gateway_repair"]["repaired"].as_u64() > Some(0),
        "{verified} {divergence}"
    );
    assert_same(
        &contents(&mut [old.client()]),
        &contents(&mut [new.client()]),
        "after verify",
    );
    let _ = std::fs::remove_dir_all(&data);
}
