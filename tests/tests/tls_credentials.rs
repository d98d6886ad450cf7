//! Client certificates as control-plane credentials: created over the REST API by the SHA-256 of their public
//! key, shipped to gateways in the snapshot, authenticating a mutual-TLS connection without AUTH, and revoked like
//! any credential.

use std::time::Duration;

use serde_json::json;
use switchyard_tests::{ControlPlane, Gateway, Pki, RedisServer, Validity};

#[tokio::test]
async fn a_client_certificate_credential_authenticates_at_every_gateway() {
    let cp = ControlPlane::start();
    let server = Pki::new("cp-server");
    let clients = Pki::new("cp-clients");
    let redis = RedisServer::start();
    let app = clients.issue("app", &["app"], Validity::Current);
    cp.expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
        .await;
    cp.expect("POST", "/v1/tenants", Some(json!({"name": "other"})), 201)
        .await;
    let route = json!({"route": {"type": "single", "target": redis.url()}, "comment": "tls"});
    cp.expect("PUT", "/v1/tenants/acme/route", Some(route), 200)
        .await;

    let credentials = "/v1/tenants/acme/credentials";
    let bad_pin = json!({"client_certificate": {"spki_sha256": "not-a-sha256"}});
    let (status, body) = cp.call("POST", credentials, Some(bad_pin)).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["details"][0]["path"],
        "/client_certificate/spki_sha256"
    );
    let both = json!({"password": "a-long-enough-password", "client_certificate": {"spki_sha256": app.spki_sha256}});
    let (status, body) = cp.call("POST", credentials, Some(both)).await;
    assert_eq!(
        (status, &body["details"][0]["path"]),
        (422, &json!("/client_certificate"))
    );

    let certificate = json!({"spki_sha256": app.spki_sha256});
    let request = json!({"description": "app", "client_certificate": certificate});
    let created = cp
        .expect("POST", credentials, Some(request.clone()), 201)
        .await;
    assert_eq!(created["client_certificate"], certificate);
    assert_eq!(created["imported"], true);
    assert!(created.get("secret").is_none(), "{created}");
    let listed = cp.expect("GET", credentials, None, 200).await;
    assert_eq!(listed["credentials"][0]["client_certificate"], certificate);
    // One certificate, one tenant.
    let (status, _) = cp
        .call("POST", "/v1/tenants/other/credentials", Some(request))
        .await;
    assert_eq!(status, 409);

    let cache =
        std::env::temp_dir().join(format!("switchyard-cache-tls-{}.json", std::process::id()));
    let gateway = Gateway::builder()
        .tls(
            &server.server("gateway", &["127.0.0.1"]),
            Some(&clients.ca_file()),
        )
        .start_with_control_plane(&cp, &cache);
    let url = format!("rediss://127.0.0.1:{}", gateway.tls_port());
    let client = server.client(&url, Some(&app));
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    // The gateway serves once it has the snapshot: until then the certificate names no tenant.
    let mut stored: Option<String> = None;
    for _ in 0..100 {
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query_async(&mut con)
            .await;
        if set.is_ok() {
            stored = redis::cmd("GET").arg("k").query(&mut redis.client()).ok();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        con = client.get_multiplexed_async_connection().await.unwrap();
    }
    assert_eq!(stored.as_deref(), Some("v"));

    // Revoked: the connection it authenticated closes, and a new one needs AUTH.
    let id = created["id"].as_i64().unwrap();
    cp.expect("DELETE", &format!("{credentials}/{id}"), None, 204)
        .await;
    let mut closed = false;
    for _ in 0..100 {
        let ping: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut con).await;
        if ping.is_err() {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "the revoked certificate's connection stays open");
    let mut again = client.get_multiplexed_async_connection().await.unwrap();
    let refused: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut again).await;
    assert_eq!(refused.unwrap_err().code(), Some("NOAUTH"));
    let _ = std::fs::remove_file(cache);
}
