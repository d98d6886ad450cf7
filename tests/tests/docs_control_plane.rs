//! The curl examples of docs/control-plane.md, run as written, in order, against a real control plane set up as
//! `scripts/quickstart` sets one up (a resource `main`, a tenant `demo` routed to it): only the addresses and
//! tokens are the test's own.

use serde_json::json;
use switchyard_tests::docs::{
    CodeBlock, code_blocks, example_blocks, quickstart_tenant, run_shell_blocks,
};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, RedisServer};

const DOC: &str = include_str!("../../docs/control-plane.md");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_examples_work_as_written() {
    let cp = ControlPlane::start();
    let main = RedisServer::start();
    let next = RedisServer::start();
    quickstart_tenant(&cp, &main).await;
    cp.issue_secret("demo").await;

    // The shell variables of the quickstart section, then every endpoint's examples.
    let mut blocks = vec![setup_block()];
    blocks.extend(example_blocks(DOC, "## Endpoints", Some("## Code map")));
    assert!(blocks.len() >= 12, "{} blocks", blocks.len());
    run_shell_blocks(
        &blocks,
        &[
            ("http://127.0.0.1:8080", cp.url()),
            ("dev-admin-token-change-me", ADMIN_TOKEN.to_string()),
            (
                "dev-gateway-token-change-me",
                cp.gateway_token().to_string(),
            ),
            // The migration's destination: a Redis of the test's own.
            ("redis://127.0.0.1:6382", next.url()),
        ],
        &[],
    );

    // What the examples did.
    let acme = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert_eq!(acme["version"], 3, "put, put, rollback: {acme}");
    assert_eq!(acme["route"], json!({"type": "single", "target": "main"}));
    let credentials = cp
        .expect("GET", "/v1/tenants/acme/credentials", None, 200)
        .await;
    let revoked: Vec<_> = credentials["credentials"]
        .as_array()
        .expect("credentials")
        .iter()
        .filter(|c| !c["revoked_at"].is_null())
        .map(|c| (c["imported"].clone(), c["description"].clone()))
        .collect();
    assert_eq!(
        revoked,
        vec![(json!(true), json!(""))],
        "the imported password is revoked: {credentials}"
    );
    cp.expect("GET", "/v1/tenants/scratch", None, 404).await;
    cp.expect("GET", "/v1/resources/cache", None, 404).await;
    cp.expect("GET", "/v1/tenants/initech", None, 200).await;
    let migration = cp
        .expect("GET", "/v1/tenants/demo/migrations/1", None, 200)
        .await;
    assert_ne!(migration["state"], "double_write", "{migration}");
    let tokens = cp.expect("GET", "/v1/tokens", None, 200).await;
    assert!(tokens["tokens"][0]["revoked_at"].is_string(), "{tokens}");
    assert!(
        tokens["tokens"][1]["previous_valid_until"].is_string(),
        "{tokens}"
    );
    let team = cp.expect("GET", "/v1/tenants/team-a-web", None, 200).await;
    assert_eq!(team["ip_allow"], json!(["10.1.0.0/16"]), "{team}");
    let fleet = cp.expect("GET", "/v1/gateways", None, 200).await;
    assert_eq!(
        fleet["gateways"],
        json!([]),
        "the example's gateway is removed"
    );
}

/// The block that sets `CP`, `ADMIN` and `GW`.
fn setup_block() -> CodeBlock {
    code_blocks(DOC)
        .into_iter()
        .find(|b| b.heading == "## Quickstart" && b.text.starts_with("CP="))
        .expect("the block setting CP")
}
