//! The service over real TCP: migrations at start, and a graceful shutdown that answers waiting polls.

use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::PgPool;
use switchyard_control_plane::{Config, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use serde_json::json;

use crate::common::{ADMIN, Api, GATEWAY, single};

async fn get(address: std::net::SocketAddr, path: &str, token: &str) -> String {
    raw(address, "GET", path, token).await
}

/// One request over its own connection, as bytes on the wire; the whole response (head and body) as text.
async fn raw(address: std::net::SocketAddr, method: &str, path: &str, token: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: cp\r\nAuthorization: Bearer {token}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// Serves `pool` on a loopback port until the returned sender is sent to (or dropped).
fn start(
    pool: PgPool,
) -> (
    std::net::SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let config = Config::try_parse_from([
        "switchyard-control-plane",
        "--database-url=unused: the test passes its pool",
        &format!("--admin-token={ADMIN}"),
        &format!("--gateway-token={GATEWAY}"),
    ])
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        serve(pool, listener, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    (address, stop, server)
}

#[sqlx::test(migrations = false)]
async fn serves_migrates_and_shuts_down_gracefully(pool: PgPool) {
    let (address, stop, server) = start(pool);

    // The empty database was migrated before the first request is answered.
    let health = get(address, "/healthz", "").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(
        health.ends_with(r#"{"status":"ok","revision":0}"#),
        "{health}"
    );
    let tenants = get(address, "/v1/tenants", ADMIN).await;
    assert!(tenants.ends_with(r#"{"tenants":[]}"#), "{tenants}");

    let poll = tokio::spawn(get(address, "/v1/snapshot?after=0&wait=60s", GATEWAY));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !get(address, "/metrics", "")
        .await
        .contains("switchyard_cp_long_polls_waiting 1")
    {
        assert!(Instant::now() < deadline, "the poll never started waiting");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stopping = Instant::now();
    stop.send(()).unwrap();
    let answer = poll.await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 304"), "{answer}");
    server.await.unwrap().unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(5),
        "{:?}",
        stopping.elapsed()
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn the_databases_of_routes_stored_by_an_earlier_version_are_recorded_at_start(pool: PgPool) {
    let api = Api::new(pool.clone()).await;
    let shop = json!({"name": "shop", "namespace": "shop:"});
    assert_eq!(
        api.admin("POST", "/v1/tenants", Some(shop)).await.status,
        201
    );
    api.create_tenant("plain").await;
    let main = single("redis://127.0.0.1:6379/0");
    assert_eq!(api.put_route("shop", main.clone()).await.status, 200);
    // As a control plane without the table left it: the route, and no database recorded.
    sqlx::query!("DELETE FROM tenant_databases")
        .execute(&pool)
        .await
        .unwrap();
    let (address, stop, server) = start(pool);
    // Answered once the service is up, after what it does before.
    let health = get(address, "/healthz", "").await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let refused = api.put_route("plain", main).await;
    assert_eq!(
        (refused.status, refused.error()),
        (409, "namespace_overlaps"),
        "{}",
        refused.body
    );
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
}

/// The body of a raw response, parsed, after checking the status line and that it is JSON.
fn json_error(response: &str, status: u16) -> serde_json::Value {
    assert!(
        response.starts_with(&format!("HTTP/1.1 {status} ")),
        "{response}"
    );
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{response}"
    );
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {response}"))
}

#[sqlx::test(migrations = false)]
async fn every_error_on_the_wire_is_json(pool: PgPool) {
    let (address, _stop, _server) = start(pool);
    // Polled: the first answer waits for the migrations.
    assert!(
        get(address, "/healthz", "")
            .await
            .starts_with("HTTP/1.1 200")
    );

    let missing = json_error(&get(address, "/v1/no-such-thing", ADMIN).await, 404);
    assert_eq!(missing["error"], "not_found");

    for (method, path, token, allow) in [
        ("POST", "/healthz", "", "GET HEAD"),
        ("DELETE", "/v1/tenants", ADMIN, "GET HEAD POST"),
        ("PUT", "/v1/gateways/heartbeat", GATEWAY, "POST"),
    ] {
        let response = raw(address, method, path, token).await;
        let body = json_error(&response, 405);
        assert_eq!(body["error"], "method_not_allowed", "{method} {path}");
        let allowed = response
            .lines()
            .find_map(|line| {
                line.to_ascii_lowercase()
                    .strip_prefix("allow: ")
                    .map(str::to_string)
            })
            .unwrap_or_else(|| panic!("no Allow header: {response}"));
        let mut allowed: Vec<String> = allowed
            .split(',')
            .map(|m| m.trim().to_ascii_uppercase())
            .collect();
        allowed.sort();
        assert_eq!(allowed.join(" "), allow, "{method} {path}");
    }

    // A gateway token is a valid token, of the wrong kind for an admin endpoint: 403, not "log in again".
    let wrong_kind = json_error(&get(address, "/v1/tenants", GATEWAY).await, 403);
    assert_eq!(wrong_kind["error"], "forbidden");
    assert!(
        wrong_kind["message"]
            .as_str()
            .unwrap()
            .contains("needs the role admin, operator, viewer or tenant-owner; the token given is a gateway token"),
        "{wrong_kind}"
    );
    let unknown = get(address, "/v1/tenants", "not-a-token-but-long-enough").await;
    assert_eq!(json_error(&unknown, 401)["error"], "unauthorized");
    assert!(unknown.contains("www-authenticate: Bearer"), "{unknown}");
}
