//! The runbook of docs/migration.md, run as written from the first step to `finish` against a real control plane
//! set up as `scripts/quickstart` sets one up (tenant `demo` on resource `main`, a Redis holding its keys), with
//! `switchyard-ctl migrations watch` waiting for each task. Only the addresses and the token are the test's own,
//! and the test starts the destination Redis the runbook's first line starts.

use serde_json::json;
use switchyard_tests::docs::{example_blocks, quickstart_tenant, run_shell_blocks};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, RedisServer, binary};

const DOC: &str = include_str!("../../docs/migration.md");

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
        // Alternatives, not next steps: step 1 with a sharded destination, and abort (after finish it is a 409).
        .filter(|b| !b.text.contains(r#""type": "sharded""#) && b.heading != "### Rollback")
        .collect();
    assert_eq!(blocks.len(), 8, "{blocks:#?}");
    let ctl = binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let bin_dir = ctl.parent().expect("the binaries' directory");
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
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
