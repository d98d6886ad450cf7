//! The migration worker's side of moving a tenant to a `rediss` resource: backfill and verify from a plain
//! standalone Redis to a TLS one that requires client certificates, with the resource URL's TLS options, and a
//! clear task error when the URL's CA or server name does not match the server.
//!
//! No gateway takes part (the control plane steps a migration on when no gateway is live): this is the control
//! plane's own connections to the resources.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{CertFiles, ControlPlane, Pki, RedisServer, Validity};

const KEYS: usize = 300;

async fn migration(cp: &ControlPlane, tenant: &str, id: i64) -> Value {
    cp.expect(
        "GET",
        &format!("/v1/tenants/{tenant}/migrations/{id}"),
        None,
        200,
    )
    .await
}

/// Waits until `done` holds of the migration, which it returns.
async fn wait_until(
    cp: &ControlPlane,
    tenant: &str,
    id: i64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = Instant::now();
    loop {
        let migration = migration(cp, tenant, id).await;
        if done(&migration) {
            return migration;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{tenant}: {migration}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A tenant on `from`, migrating to `to`, with its backfill started; returns the migration's id.
async fn backfill(cp: &ControlPlane, tenant: &str, from: &RedisServer, to: &str) -> i64 {
    cp.expect("POST", "/v1/tenants", Some(json!({"name": tenant})), 201)
        .await;
    cp.expect(
        "PUT",
        &format!("/v1/tenants/{tenant}/route"),
        Some(json!({"route": {"type": "single", "target": from.url()}})),
        200,
    )
    .await;
    let created = cp
        .expect(
            "POST",
            &format!("/v1/tenants/{tenant}/migrations"),
            Some(json!({"to": to, "ack": "primary"})),
            201,
        )
        .await;
    let id = created["id"].as_i64().expect("migration id");
    cp.expect(
        "POST",
        &format!("/v1/tenants/{tenant}/migrations/{id}/backfill"),
        None,
        200,
    )
    .await;
    id
}

/// Database `db` of `server` over TLS: each tenant migrates into a database of its own, since tenants without a
/// key namespace may not share a destination.
fn rediss(server: &RedisServer, host: &str, db: u32, params: &[(&str, String)]) -> String {
    let query: Vec<String> = params.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!(
        "rediss://{host}:{}/{db}?{}",
        server.tls_port(),
        query.join("&")
    )
}

fn client_cert(files: &CertFiles) -> [(&'static str, String); 2] {
    [
        ("tlsCertFile", files.cert.display().to_string()),
        ("tlsKeyFile", files.key.display().to_string()),
    ]
}

#[tokio::test]
async fn backfills_and_verifies_into_a_tls_redis() {
    let pki = Pki::new("migration-tls");
    let old = RedisServer::builder().start();
    let new = RedisServer::builder().tls(&pki, true).start();
    let worker = pki.issue("worker", &["switchyard-worker"], Validity::Current);
    let mut source = old.client();
    for i in 0..KEYS {
        let () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(format!("value {i}"))
            .query(&mut source)
            .expect("SET");
    }
    let cp = ControlPlane::start();
    let ca = ("tlsCaFile", pki.ca_file().display().to_string());

    // The CA and the client certificate, the name checked against 127.0.0.1.
    let mut params = vec![ca.clone()];
    params.extend(client_cert(&worker));
    let id = backfill(&cp, "full", &old, &rediss(&new, "127.0.0.1", 0, &params)).await;
    let done = wait_until(&cp, "full", id, |m| m["state"] == "backfilled").await;
    assert_eq!(done["progress"]["backfill"]["copied"], KEYS, "{done}");
    let mut copied = new.client();
    let value: String = redis::cmd("GET")
        .arg("key:7")
        .query(&mut copied)
        .expect("GET");
    assert_eq!(value, "value 7");
    cp.expect(
        "POST",
        &format!("/v1/tenants/full/migrations/{id}/verify"),
        None,
        200,
    )
    .await;
    let verified = wait_until(&cp, "full", id, |m| m["state"] == "verified").await;
    let verify = &verified["progress"]["verify"];
    assert_eq!(verify["matched"], KEYS, "{verified}");
    assert_eq!(verify["unresolved"], 0, "{verified}");

    // tlsVerify=none needs no CA; tlsVerify=ca takes a certificate that does not name the server.
    let mut params = vec![("tlsVerify", "none".to_string())];
    params.extend(client_cert(&worker));
    let none = backfill(
        &cp,
        "unchecked",
        &old,
        &rediss(&new, "127.0.0.1", 1, &params),
    )
    .await;
    let mut params = vec![
        ca.clone(),
        ("tlsVerify", "ca".to_string()),
        ("tlsServerName", "redis.elsewhere.example".to_string()),
    ];
    params.extend(client_cert(&worker));
    let chain = backfill(
        &cp,
        "chain-only",
        &old,
        &rediss(&new, "localhost", 2, &params),
    )
    .await;
    for (tenant, id) in [("unchecked", none), ("chain-only", chain)] {
        wait_until(&cp, tenant, id, |m| m["state"] == "backfilled").await;
    }

    // A CA that did not sign the server's certificate, and a name it does not list: the task stops with the
    // reason, naming the resource and the server.
    let stranger = Pki::new("not-redis-ca");
    let mut params = vec![("tlsCaFile", stranger.ca_file().display().to_string())];
    params.extend(client_cert(&worker));
    let unknown = backfill(
        &cp,
        "wrong-ca",
        &old,
        &rediss(&new, "127.0.0.1", 3, &params),
    )
    .await;
    let mut params = vec![
        ca.clone(),
        ("tlsServerName", "redis.elsewhere.example".to_string()),
    ];
    params.extend(client_cert(&worker));
    let misnamed = backfill(
        &cp,
        "wrong-name",
        &old,
        &rediss(&new, "127.0.0.1", 4, &params),
    )
    .await;
    let server = format!("127.0.0.1:{}", new.tls_port());
    for (tenant, id, reason) in [
        (
            "wrong-ca",
            unknown,
            "invalid peer certificate: UnknownIssuer",
        ),
        (
            "wrong-name",
            misnamed,
            "invalid peer certificate: certificate not valid for name",
        ),
    ] {
        let failed = wait_until(&cp, tenant, id, |m| m["error"].is_string()).await;
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("new deployment: resource rediss://127.0.0.1:")
                && error.contains(&format!("{server}: TLS handshake: {reason}")),
            "{tenant}: {error}"
        );
        assert_eq!(failed["state"], "backfilling", "{failed}");
    }
}
