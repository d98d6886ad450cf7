//! The examples of docs/tenant-policies.md, run as written: the curl block against a real control plane, and the
//! routes file by a real gateway in front of a real Redis.

use serde_json::Value;
use switchyard_schemas::api::Tenant;
use switchyard_schemas::policy::TrackingPolicy;
use switchyard_schemas::{CommandRules, TenantPolicy};
use switchyard_tests::docs::{code_block, code_blocks, run_shell_blocks};
use switchyard_tests::{ADMIN_TOKEN, ControlPlane, Gateway, RawClient, RedisServer};

const DOC: &str = include_str!("../../docs/tenant-policies.md");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_curl_examples_work_as_written() {
    let cp = ControlPlane::start();
    let blocks: Vec<_> = code_blocks(DOC)
        .into_iter()
        .filter(|b| b.heading == "## Editing policies" && b.language == "sh")
        .collect();
    run_shell_blocks(
        &blocks,
        &[],
        &[
            ("CP", cp.url()),
            ("ADMIN", format!("Authorization: Bearer {ADMIN_TOKEN}")),
        ],
    );
    let shop = cp.expect("GET", "/v1/tenants/shop", None, 200).await;
    let shop: Tenant = serde_json::from_value(shop).expect("a tenant");
    let expected = TenantPolicy {
        namespace: Some("shop:".into()),
        commands: CommandRules {
            allow: vec!["@read".into(), "@connection".into(), "set".into()],
            deny: Vec::new(),
        },
        ip_allow: vec!["127.0.0.0/8".into()],
        ip_deny: vec!["127.0.0.66".into()],
        tracking: TrackingPolicy {
            slowlog_log_slower_than: Some(5000),
            big_key_bytes: Some(100_000),
            ..TrackingPolicy::default()
        },
        ..TenantPolicy::default()
    };
    assert_eq!(shop.policy, expected);
}

#[test]
fn the_routes_file_example_serves_as_described() {
    let redis = RedisServer::start();
    let example = code_block(DOC, "## Editing policies", "json")
        .replace("redis://127.0.0.1:6379", &redis.url());
    let routes: Value = serde_json::from_str(&example).expect("the example is JSON");
    let gateway = Gateway::start(&routes);
    let mut shop = RawClient::connect(gateway.port());
    shop.roundtrip(b"AUTH shop-password-0123456789\r\n", b"+OK\r\n");
    shop.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    let denied = shop.request(&[b"KEYS", b"*"]);
    assert!(denied.starts_with(b"-NOPERM"), "{denied:?}");
    let mut blog = RawClient::connect(gateway.port());
    blog.roundtrip(b"AUTH blog-password-0123456789\r\n", b"+OK\r\n");
    let refused = blog.request(&[b"SET", b"k", b"v"]);
    assert!(refused.starts_with(b"-READONLY"), "{refused:?}");
    blog.roundtrip(b"GET k\r\n", b"$-1\r\n"); // shop's k is shop:k
    let stored: Option<String> = redis::cmd("GET")
        .arg("shop:k")
        .query(&mut redis.client())
        .expect("GET");
    assert_eq!(stored.as_deref(), Some("v"));
}
