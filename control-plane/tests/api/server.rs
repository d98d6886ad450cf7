//! The service over real TCP: migrations at start, and a graceful shutdown that answers waiting polls.

use std::time::{Duration, Instant};

use clap::Parser;
use sqlx::PgPool;
use switchyard_control_plane::{Config, serve};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::{ADMIN, GATEWAY};

async fn get(address: std::net::SocketAddr, path: &str, token: &str) -> String {
    let mut stream = TcpStream::connect(address).await.unwrap();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: cp\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

#[sqlx::test(migrations = false)]
async fn serves_migrates_and_shuts_down_gracefully(pool: PgPool) {
    let config = Config::try_parse_from([
        "switchyard-control-plane",
        "--database-url=unused: the test passes its pool",
        &format!("--admin-token={ADMIN}"),
        &format!("--gateway-token={GATEWAY}"),
    ])
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        serve(pool, listener, &config, async {
            let _ = stopped.await;
        })
        .await
    });

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
