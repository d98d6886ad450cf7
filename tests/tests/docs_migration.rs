//! The runbook of docs/migration.md, run as written from the first step to `finish` against a real control plane
//! set up as `scripts/quickstart` sets one up (tenant `demo` on resource `main`, a Redis holding its keys), with
//! `switchyard-ctl migrations watch` waiting for each task. Only the addresses and the token are the test's own,
//! and the test starts the destination Redis the runbook's first line starts.

use serde_json::json;
use switchyard_tests::docs::{example_blocks, quickstart_tenant, run_shell_blocks};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, RedisCluster, RedisServer, binary};

const DOC: &str = include_str!("../../docs/migration.md");

/// `PATH` with the built `switchyard-ctl` first, as the examples call it.
fn path_with_ctl() -> String {
    let ctl = binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let bin_dir = ctl.parent().expect("the binaries' directory");
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runbook_moves_a_tenant_as_written() {
    let cp = ControlPlane::start();
    let main = RedisServer::start();
    let next = RedisServer::start();
    let mut old = main.client();
    for i in 0..50 {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(i)
            .query(&mut old)
            .expect("SET");
    }
    quickstart_tenant(&cp, &main).await;

    let blocks: Vec<_> = example_blocks(DOC, "## Commands", Some("## What clients see"))
        .into_iter()
        // Alternatives, not next steps: step 1 with a sharded destination, abort (after finish it is a 409), and
        // the readiness probe (run by the next test).
        .filter(|b| {
            !b.text.contains(r#""type": "sharded""#)
                && !["### Rollback", "### Readiness without a migration"].contains(&&*b.heading)
        })
        .collect();
    assert_eq!(blocks.len(), 8, "{blocks:#?}");
    let path = path_with_ctl();
    let output = run_shell_blocks(
        &blocks,
        &[
            (
                "redis-server --port 6382 --save '' --daemonize yes",
                String::new(),
            ),
            ("redis://127.0.0.1:6382", next.url()),
            ("http://127.0.0.1:8080", cp.url()),
            ("dev-admin-token-change-me", ADMIN_TOKEN.to_string()),
        ],
        &[("PATH", path)],
    );
    assert!(output.contains("migration 1 backfilled"), "{output}");
    assert!(output.contains("migration 1 verified"), "{output}");

    let migration = cp
        .expect("GET", "/v1/tenants/demo/migrations/1", None, 200)
        .await;
    assert_eq!(migration["state"], "finished", "{migration}");
    let route = cp.expect("GET", "/v1/tenants/demo/route", None, 200).await;
    assert_eq!(route["route"], json!({"type": "single", "target": "next"}));
    let moved: Option<String> = redis::cmd("GET")
        .arg("key:7")
        .query(&mut next.client())
        .expect("GET");
    assert_eq!(moved.as_deref(), Some("7"));
}

/// The readiness probe's example of docs/migration.md, run as written against the quickstart's tenant and a real
/// Redis Cluster: set, get, delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readiness_probe_example_works_as_written() {
    let cp = ControlPlane::start();
    let main = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    quickstart_tenant(&cp, &main).await;
    let blocks: Vec<_> = example_blocks(
        DOC,
        "### Readiness without a migration",
        Some("## Watching progress"),
    )
    .into_iter()
    .filter(|b| b.language == "sh")
    .collect();
    assert_eq!(blocks.len(), 1, "{blocks:#?}");
    let path = path_with_ctl();
    // The runbook's first block exports the control plane's address and token; here the test's own.
    let output = run_shell_blocks(
        &blocks,
        &[("redis-cluster://127.0.0.1:7000", cluster.url())],
        &[
            ("PATH", path),
            ("SWITCHYARD_URL", cp.url()),
            ("SWITCHYARD_ADMIN_TOKEN", ADMIN_TOKEN.to_string()),
        ],
    );
    assert!(output.contains("readiness: ready"), "{output}");
    assert!(output.contains("deleted"), "{output}");
    let (status, _) = cp
        .call("GET", "/v1/tenants/demo/readiness-probe", None)
        .await;
    assert_eq!(status, 404, "the example ends with the probe deleted");
}
