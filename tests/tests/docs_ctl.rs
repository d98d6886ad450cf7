//! The examples of docs/ctl.md, run as written, in order, against a real control plane with the quickstart's
//! admin token: a session (tenant, resource, credential, route, explain, audit), a migration through every step
//! with `--watch`, and a dry run. Only the addresses and the token are the test's own; `~` is a directory of the
//! test's. The route editor's and the completions' blocks are left out (they open an editor, and write to
//! /etc).

use switchyard_tests::docs::{code_blocks, run_shell_blocks};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, RedisServer, binary};

const DOC: &str = include_str!("../../docs/ctl.md");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_examples_work_as_written() {
    let cp = ControlPlane::start();
    let (main, next) = (RedisServer::start(), RedisServer::start());
    let blocks: Vec<_> = code_blocks(DOC)
        .into_iter()
        .filter(|b| {
            b.language == "sh"
                && ["## A session", "### Migrations", "## Dry runs"].contains(&&*b.heading)
        })
        .collect();
    assert_eq!(blocks.len(), 3, "{blocks:#?}");
    let ctl = binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let path = format!(
        "{}:{}",
        ctl.parent().expect("the binaries' directory").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let home =
        std::env::temp_dir().join(format!("switchyard-docs-ctl-home-{}", std::process::id()));
    std::fs::create_dir_all(&home).expect("a home directory");
    let output = run_shell_blocks(
        &blocks,
        &[
            (
                "redis-server --port 6390 --save '' --daemonize yes",
                String::new(),
            ),
            (
                "redis-server --port 6391 --save '' --daemonize yes",
                String::new(),
            ),
            ("redis://127.0.0.1:6390", main.url()),
            ("redis://127.0.0.1:6391", next.url()),
            ("http://127.0.0.1:8080", cp.url()),
            ("dev-admin-token-change-me", ADMIN_TOKEN.to_string()),
        ],
        &[("PATH", path), ("HOME", home.display().to_string())],
    );
    let _ = std::fs::remove_dir_all(&home);
    // The secret is printed once; the migration reached every state the example names.
    assert!(output.contains("sy_"), "{output}");
    for state in ["backfilled", "verified"] {
        assert!(output.contains(&format!("migration 1 {state}")), "{output}");
    }
    // The dry run says what it would do to the keys: shop's keys are on shop-next since the migration.
    assert!(
        output.contains("keys: 100.0% of the tenant's keys would no longer be found (exact)")
            && output.contains("  100.0% shop-next -> shop-main"),
        "{output}"
    );
    let migration = cp
        .expect("GET", "/v1/tenants/shop/migrations/1", None, 200)
        .await;
    assert_eq!(migration["state"], "finished", "{migration}");
    let audit = cp.expect("GET", "/v1/audit?tenant=shop", None, 200).await;
    assert!(audit.to_string().contains("migration.finish"), "{audit}");
}
