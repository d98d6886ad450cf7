//! The metric lists of the docs against what the processes really export: every family a gateway's and a
//! control plane's `/metrics` write (with a tenant served, a command run and a snapshot applied, so the
//! per-tenant and snapshot series are there) is named in docs/operations.md and docs/control-plane.md.

use std::collections::BTreeSet;

use serde_json::json;
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

const OPERATIONS: &str = include_str!("../../docs/operations.md");
const CONTROL_PLANE: &str = include_str!("../../docs/control-plane.md");

/// The metric families of a Prometheus text exposition, by their `# TYPE` lines.
fn families(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

fn undocumented(families: &BTreeSet<String>, doc: &str) -> Vec<String> {
    families
        .iter()
        .filter(|name| {
            // A name followed by a letter, digit or `_` in the doc is another metric's prefix, not this one.
            !doc.match_indices(name.as_str()).any(|(at, _)| {
                !doc[at + name.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
            })
        })
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_metric_is_documented() {
    let redis = RedisServer::start();
    let cp = ControlPlane::start();
    cp.create_tenant("demo", json!({"type": "single", "target": redis.url()}))
        .await;
    let secret = cp.issue_secret("demo").await;
    let dir = tempfile_dir();
    let gateway = Gateway::builder()
        .arg("--metrics-tenant-latency")
        .start_with_control_plane(&cp, &dir.join("snapshot.json"));
    let mut client = RawClient::connect(gateway.port());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let reply = client.request(&[b"AUTH", secret.as_bytes()]);
        if reply == b"+OK\r\n" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{reply:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    client.request(&[b"NOSUCHCOMMAND"]);

    let (status, exposition) = gateway.admin_get("/metrics");
    assert_eq!(status, 200);
    let gateway_families = families(&exposition);
    assert!(gateway_families.len() > 20, "{exposition}");
    let missing = undocumented(&gateway_families, OPERATIONS);
    assert!(missing.is_empty(), "not in docs/operations.md: {missing:?}");

    let exposition = reqwest::get(format!("{}/metrics", cp.url()))
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("the body");
    let cp_families = families(&exposition);
    assert!(cp_families.len() >= 7, "{exposition}");
    let missing = undocumented(&cp_families, CONTROL_PLANE);
    assert!(
        missing.is_empty(),
        "not in docs/control-plane.md: {missing:?}"
    );
}

/// A directory of this test's own for the gateway's snapshot cache.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("switchyard-docs-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the cache directory");
    dir
}
