//! Tenant policies edited over the control plane's REST API reach a gateway and apply to clients that stay
//! connected through every change: two namespaced tenants share one database of one Redis; one of them is made
//! read-only, has a key blocked, a command category denied and its address refused, and back.

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

/// Patches `tenant` with `body` and waits until the gateway serves the change.
async fn patch(cp: &ControlPlane, tenant: &str, body: Value) {
    cp.expect("PATCH", &format!("/v1/tenants/{tenant}"), Some(body), 200)
        .await;
    let fleet = cp.expect("GET", "/v1/gateways", None, 200).await;
    let revision = fleet["revision"].as_i64().expect("revision");
    cp.converged(1, revision).await;
}

/// A client authenticated as `tenant`, once the gateway serves it.
fn client(gateway: &Gateway, tenant: &str, secret: &str) -> RawClient {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut client = RawClient::connect(gateway.port());
        if client.request(&[b"AUTH", tenant.as_bytes(), secret.as_bytes()]) == b"+OK\r\n" {
            return client;
        }
        assert!(std::time::Instant::now() < deadline, "{tenant} cannot AUTH");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn starts_with(reply: &[u8], prefix: &str) -> bool {
    reply.starts_with(prefix.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_from_the_control_plane_apply_to_connected_clients() {
    let backend = RedisServer::start();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!(
        "switchyard-policies-cache-{}.json",
        std::process::id()
    ));
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache);
    let route = json!({"type": "single", "target": backend.url()});
    let a_secret = cp
        .create_tenant_with(json!({"name": "a", "namespace": "a:"}), route.clone())
        .await;
    let b_secret = cp
        .create_tenant_with(json!({"name": "b", "namespace": "b:"}), route)
        .await;
    let mut a = client(&gateway, "a", &a_secret);
    let mut b = client(&gateway, "b", &b_secret);

    // One key name, two tenants, two keys on the backend.
    a.roundtrip(b"SET k from-a\r\n", b"+OK\r\n");
    b.roundtrip(b"SET k from-b\r\n", b"+OK\r\n");
    let mut direct = backend.client();
    let stored: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&["a:k", "b:k", "k"][..])
        .query(&mut direct)
        .expect("MGET");
    assert_eq!(stored, [Some("from-a".into()), Some("from-b".into()), None]);

    patch(&cp, "a", json!({"read_only": true})).await;
    let refused = a.request(&[b"SET", b"k", b"x"]);
    assert!(starts_with(&refused, "-READONLY"), "{refused:?}");
    a.roundtrip(b"GET k\r\n", b"$6\r\nfrom-a\r\n");
    b.roundtrip(b"SET k still-b\r\n", b"+OK\r\n");
    patch(&cp, "a", json!({"read_only": false})).await;
    a.roundtrip(b"SET hot:1 v\r\n", b"+OK\r\n");

    patch(&cp, "a", json!({"blocked_keys": ["hot:*"]})).await;
    let blocked = a.request(&[b"GET", b"hot:1"]);
    assert!(
        starts_with(&blocked, "-ERR") && String::from_utf8_lossy(&blocked).contains("hot:1"),
        "{blocked:?}"
    );
    a.roundtrip(b"GET k\r\n", b"$6\r\nfrom-a\r\n");
    b.roundtrip(b"SET hot:1 b\r\n", b"+OK\r\n"); // another tenant's key of the same name is not blocked
    patch(&cp, "a", json!({"blocked_keys": []})).await;
    a.roundtrip(b"GET hot:1\r\n", b"$1\r\nv\r\n");

    patch(&cp, "a", json!({"commands": {"deny": ["@dangerous"]}})).await;
    let denied = a.request(&[b"SORT", b"l"]);
    assert!(starts_with(&denied, "-NOPERM"), "{denied:?}");
    a.roundtrip(b"GET k\r\n", b"$6\r\nfrom-a\r\n");
    patch(&cp, "a", json!({"commands": {}})).await;
    a.roundtrip(b"SORT l\r\n", b"*0\r\n");

    // An address list that leaves 127.0.0.1 out closes the connection and refuses new ones; putting it back in
    // lets them in again.
    patch(&cp, "a", json!({"ip_allow": ["10.0.0.0/8"]})).await;
    a.send(b"GET k\r\n");
    a.expect_closed();
    let mut again = RawClient::connect(gateway.port());
    let refused = again.request(&[b"AUTH", b"a", a_secret.as_bytes()]);
    assert!(starts_with(&refused, "-"), "{refused:?}");
    b.roundtrip(b"GET k\r\n", b"$7\r\nstill-b\r\n");
    patch(&cp, "a", json!({"ip_allow": ["127.0.0.0/8"]})).await;
    let mut a = client(&gateway, "a", &a_secret);
    a.roundtrip(b"GET k\r\n", b"$6\r\nfrom-a\r\n");
    let _ = std::fs::remove_file(&cache);
}
