//! TLS on the data path: clients to the gateway's TLS listener (with and without client certificates), the
//! gateway to TLS Redis nodes, certificate failures named in the error, and certificates rotated on SIGHUP.
//! Every certificate is made by the test (`Pki`); every server is a real redis-server with a TLS port.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use serde_json::{Value, json};
use switchyard_tests::{Gateway, Pki, RedisServer, Validity, wait_for};

const PASSWORD: &str = "tls-tenant-secret";

fn tenant(name: &str, password: &str, target: String) -> Value {
    json!({"name": name, "passwords": [password], "route": {"type": "single", "target": target}})
}

/// A `rediss://` URL for `redis`'s TLS port, trusting `ca`, with extra parameters.
fn rediss(redis: &RedisServer, ca: &Path, extra: &str) -> String {
    format!(
        "rediss://127.0.0.1:{}?tlsCaFile={}{extra}",
        redis.tls_port(),
        ca.display()
    )
}

/// A gateway whose TLS listener has a certificate from `pki` for 127.0.0.1.
fn tls_gateway(pki: &Pki, client_ca: Option<&Path>, tenants: Vec<Value>) -> Gateway {
    let files = pki.server("gateway", &["127.0.0.1", "localhost"]);
    Gateway::builder()
        .tls(&files, client_ca)
        .start(&json!({ "tenants": tenants }))
}

fn url(gateway: &Gateway, password: &str) -> String {
    format!("rediss://:{password}@127.0.0.1:{}", gateway.tls_port())
}

/// The local port of each connection `redis` serves, from its CLIENT LIST.
fn local_ports(redis: &RedisServer) -> Vec<u16> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut redis.client())
        .unwrap();
    list.lines()
        .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("laddr=")))
        .filter_map(|addr| addr.rsplit_once(':')?.1.parse().ok())
        .collect()
}

#[tokio::test]
async fn tls_clients_reach_tls_redis_through_the_gateway() {
    let pki = Pki::new("data");
    let redis = RedisServer::builder().tls(&pki, false).start();
    let gateway = tls_gateway(
        &pki,
        None,
        vec![tenant("t", PASSWORD, rediss(&redis, &pki.ca_file(), ""))],
    );
    let client = pki.client(&url(&gateway, PASSWORD), None);
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = con.set("k", "v").await.unwrap();
    // Larger than what the sockets buffer: written over many rounds of the socket taking part of it.
    let big = "x".repeat(32 << 20);
    let _: () = con.set("big", &big).await.unwrap();
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.set(format!("p{i}"), i).ignore();
    }
    pipe.get("p999").get("big");
    let (last, got): (i64, String) = pipe.query_async(&mut con).await.unwrap();
    assert_eq!((last, got.len()), (999, big.len()));
    // Transactions and blocking commands ride dedicated connections, which speak TLS as well.
    let (n,): (i64,) = redis::pipe()
        .atomic()
        .incr("counter", 2)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(n, 2);
    let mut blocked = client.get_multiplexed_async_connection().await.unwrap();
    let waiter = tokio::spawn(async move {
        let popped: Option<(String, String)> = blocked.blpop("queue", 5.0).await.unwrap();
        popped
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _: () = con.rpush("queue", "job").await.unwrap();
    assert_eq!(
        waiter.await.unwrap(),
        Some(("queue".to_string(), "job".to_string()))
    );

    // The data is on the node, and the gateway reached it on its TLS port only.
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut redis.client())
        .unwrap();
    assert_eq!(value, "v");
    let ports = local_ports(&redis);
    assert!(ports.contains(&redis.tls_port()), "{ports:?}");
    assert_eq!(
        ports.iter().filter(|&&p| p == redis.port()).count(),
        1,
        "only this check's own connection uses the plain port: {ports:?}"
    );

    // redis-cli, as operators use it.
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(pki.ca_file())
        .args(["-p", &gateway.tls_port().to_string(), "--user", "default"])
        .args(["--pass", PASSWORD, "--no-auth-warning", "GET", "k"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "v", "{out:?}");
}

#[tokio::test]
async fn mutual_tls_to_the_gateway_and_to_redis() {
    let pki = Pki::new("mtls");
    let clients = Pki::new("clients");
    let strangers = Pki::new("strangers");
    let redis = RedisServer::builder().tls(&pki, true).start();
    let gateway_cert = pki.issue("gateway-client", &["switchyard"], Validity::Current);
    let with_cert = rediss(
        &redis,
        &pki.ca_file(),
        &format!(
            "&tlsCertFile={}&tlsKeyFile={}",
            gateway_cert.cert.display(),
            gateway_cert.key.display()
        ),
    );
    let gateway = tls_gateway(
        &pki,
        Some(&clients.ca_file()),
        vec![
            tenant("t", PASSWORD, with_cert),
            tenant(
                "nocert",
                "nocert-secret",
                rediss(&redis, &pki.ca_file(), ""),
            ),
        ],
    );
    let app = clients.issue("app", &["app"], Validity::Current);
    let mut con = pki
        .client(&url(&gateway, PASSWORD), Some(&app))
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = con.set("k", "v").await.unwrap();
    let got: String = con.get("k").await.unwrap();
    assert_eq!(got, "v");

    // Without a certificate, or with one the gateway's CA did not sign, there is no connection.
    for certificate in [None, Some(&strangers.issue("x", &["x"], Validity::Current))] {
        let refused = pki
            .client(&url(&gateway, PASSWORD), certificate)
            .get_multiplexed_async_connection()
            .await;
        assert!(refused.is_err(), "connected with {certificate:?}");
    }
    assert!(gateway.metric("switchyard_client_tls_handshake_failures_total") >= 2);

    // A node that requires client certificates refuses a resource that has none, and the error says TLS.
    let mut nocert = pki
        .client(&url(&gateway, "nocert-secret"), Some(&app))
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let error = con_error(&mut nocert).await;
    assert!(
        error.starts_with(&format!(
            "backend 127.0.0.1:{} unavailable: TLS",
            redis.tls_port()
        )),
        "{error}"
    );
}

/// The error a GET gets, as redis-rs shows it (its code and text).
async fn con_error(con: &mut redis::aio::MultiplexedConnection) -> String {
    let started = Instant::now();
    let result: redis::RedisResult<Option<String>> = con.get("k").await;
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "a TLS failure never hangs"
    );
    let error = result.expect_err("an error");
    error
        .detail()
        .map_or_else(|| error.to_string(), str::to_string)
}

#[tokio::test]
async fn certificate_failures_name_the_peer_and_the_reason() {
    let pki = Pki::new("failures");
    let other = Pki::new("other");
    let redis = RedisServer::builder().tls(&pki, false).start();
    let expired_files = pki.issue("expired", &["127.0.0.1"], Validity::Expired);
    let expired = RedisServer::builder()
        .tls_with(&pki, &expired_files, false)
        .start();
    let gateway = tls_gateway(
        &pki,
        None,
        vec![
            tenant(
                "wrong-ca",
                "pw-wrong-ca-1234",
                rediss(&redis, &other.ca_file(), ""),
            ),
            tenant(
                "wrong-name",
                "pw-wrong-name-12",
                rediss(&redis, &pki.ca_file(), "&tlsServerName=redis.example"),
            ),
            tenant(
                "chain-only",
                "pw-chain-only-12",
                rediss(
                    &redis,
                    &pki.ca_file(),
                    "&tlsServerName=redis.example&tlsVerify=ca",
                ),
            ),
            tenant(
                "expired",
                "pw-expired-12345",
                rediss(&expired, &pki.ca_file(), ""),
            ),
        ],
    );
    let node = |redis: &RedisServer| {
        format!(
            "backend 127.0.0.1:{} unavailable: TLS handshake failed",
            redis.tls_port()
        )
    };
    let cases = [
        (
            "pw-wrong-ca-1234",
            format!("{}: certificate signed by an unknown CA", node(&redis)),
        ),
        (
            "pw-wrong-name-12",
            format!(
                "{}: hostname mismatch: the certificate is for localhost, 127.0.0.1, not redis.example",
                node(&redis)
            ),
        ),
        (
            "pw-expired-12345",
            format!("{}: certificate expired", node(&expired)),
        ),
    ];
    for (password, expected) in cases {
        let mut con = pki
            .client(&url(&gateway, password), None)
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        assert_eq!(con_error(&mut con).await, expected);
    }
    // tlsVerify=ca checks the chain, not the name.
    let mut con = pki
        .client(&url(&gateway, "pw-chain-only-12"), None)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = con.set("k", "v").await.unwrap();
}

#[tokio::test]
async fn sighup_rotates_the_listener_certificate_without_dropping_connections() {
    let old = Pki::new("old");
    let new = Pki::new("new");
    let redis = RedisServer::start();
    let files = old.server("gateway", &["127.0.0.1"]);
    let gateway = Gateway::builder()
        .tls(&files, None)
        .start(&json!({"tenants": [tenant("t", PASSWORD, redis.url())]}));
    let mut before = old
        .client(&url(&gateway, PASSWORD), None)
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = before.set("k", "1").await.unwrap();

    // The new CA's certificate replaces the old one in the same files.
    let rotated = new.server("rotated", &["127.0.0.1"]);
    std::fs::copy(&rotated.cert, &files.cert).unwrap();
    std::fs::copy(&rotated.key, &files.key).unwrap();
    gateway.signal("HUP");
    wait_for(
        "the new certificate to be served",
        Duration::from_secs(10),
        || {
            let client = new.client(&url(&gateway, PASSWORD), None);
            client.get_connection().is_ok()
        },
    );
    let _: () = before.incr("k", 1).await.unwrap();
    let value: i64 = before.get("k").await.unwrap();
    assert_eq!(
        value, 2,
        "the connection made before the rotation still serves"
    );
    assert!(
        old.client(&url(&gateway, PASSWORD), None)
            .get_connection()
            .is_err(),
        "a client that trusts only the old CA is refused the new certificate"
    );

    // A broken file on SIGHUP keeps the certificate in use.
    std::fs::write(&files.key, "not a key").unwrap();
    gateway.signal("HUP");
    wait_for(
        "the failed reload to be logged",
        Duration::from_secs(10),
        || gateway.log().contains("TLS files not reloaded"),
    );
    assert!(
        new.client(&url(&gateway, PASSWORD), None)
            .get_connection()
            .is_ok()
    );
}

#[test]
fn certificate_expiry_is_exported_and_warned_about() {
    let pki = Pki::new("expiry");
    let redis = RedisServer::builder().tls(&pki, false).start();
    let soon = pki.issue("soon", &["127.0.0.1"], Validity::EndsInDays(5));
    let gateway = Gateway::builder()
        .tls(&soon, None)
        .start(&json!({"tenants": [tenant("t", PASSWORD, rediss(&redis, &pki.ca_file(), ""))]}));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let listener = gateway.metric(&format!(
        "switchyard_tls_certificate_expiry_timestamp_seconds{{role=\"listener\",source=\"{}\"}}",
        soon.cert.display()
    ));
    assert!(
        (now + 4 * 86_400..=now + 5 * 86_400 + 60).contains(&listener),
        "{listener} vs now {now}"
    );
    let log = gateway.log();
    let warning = log
        .lines()
        .find(|line| line.contains("TLS certificate expires in"))
        .unwrap_or_else(|| panic!("no expiry warning in {log}"));
    assert!(warning.contains("listener"), "{warning}");
    // A backend's certificate shows once the gateway has met it.
    let mut con = pki
        .client(&url(&gateway, PASSWORD), None)
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let backend = gateway.metric(&format!(
        "switchyard_tls_certificate_expiry_timestamp_seconds{{role=\"backend\",source=\"127.0.0.1:{}\"}}",
        redis.tls_port()
    ));
    assert!(backend > now + 300 * 86_400, "{backend}");
}

/// A tenant told by its client certificate: over mutual TLS the certificate authenticates the connection, as a
/// password would, and a client without one (the listener's `optional` mode) still authenticates with AUTH.
#[test]
fn a_client_certificate_selects_its_tenant() {
    let pki = Pki::new("server");
    let clients = Pki::new("certified");
    let certified = RedisServer::start();
    let other = RedisServer::start();
    let app = clients.issue("app", &["app"], Validity::Current);
    let unknown = clients.issue("unknown", &["unknown"], Validity::Current);
    let routes = |pins: Vec<&str>| {
        let certificates: Vec<Value> = pins.iter().map(|p| json!({"spki_sha256": p})).collect();
        json!({"tenants": [
            {"name": "certified", "passwords": [], "client_certificates": certificates,
             "route": {"type": "single", "target": certified.url()}},
            tenant("other", PASSWORD, other.url()),
        ]})
    };
    let files = pki.server("gateway", &["127.0.0.1"]);
    let gateway = Gateway::builder()
        .tls(&files, Some(&clients.ca_file()))
        .arg("--tls-auth-clients")
        .arg("optional")
        .start(&routes(vec![&app.spki_sha256]));
    let anonymous = format!("rediss://127.0.0.1:{}", gateway.tls_port());

    let mut con = pki.client(&anonymous, Some(&app)).get_connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("mine")
        .query(&mut con)
        .unwrap();
    let stored: String = redis::cmd("GET")
        .arg("k")
        .query(&mut certified.client())
        .unwrap();
    assert_eq!(stored, "mine");
    let name: String = redis::cmd("CLIENT").arg("INFO").query(&mut con).unwrap();
    assert!(name.contains("user=certified"), "{name}");

    // A certificate the CA signed but no tenant names, or none at all: the connection needs AUTH.
    for certificate in [Some(&unknown), None] {
        let mut con = pki
            .client(&anonymous, certificate)
            .get_connection()
            .unwrap();
        let refused: redis::RedisResult<Option<String>> =
            redis::cmd("GET").arg("k").query(&mut con);
        assert_eq!(refused.unwrap_err().code(), Some("NOAUTH"));
        // The pin is public: it is no password.
        let pin: redis::RedisResult<()> = redis::cmd("AUTH").arg(&app.spki_sha256).query(&mut con);
        assert_eq!(pin.unwrap_err().code(), Some("WRONGPASS"));
        let _: () = redis::cmd("AUTH").arg(PASSWORD).query(&mut con).unwrap();
        let _: () = redis::cmd("SET")
            .arg("k")
            .arg("theirs")
            .query(&mut con)
            .unwrap();
    }
    let theirs: String = redis::cmd("GET")
        .arg("k")
        .query(&mut other.client())
        .unwrap();
    assert_eq!(theirs, "theirs");

    // Revoked (the certificate leaves the tenant): its connection is closed, as a revoked password's is.
    gateway.reload(&routes(vec![&unknown.spki_sha256]));
    wait_for(
        "the revoked certificate's connection to close",
        Duration::from_secs(10),
        || redis::cmd("PING").query::<String>(&mut con).is_err(),
    );
    let mut again = pki.client(&anonymous, Some(&app)).get_connection().unwrap();
    let refused: redis::RedisResult<String> = redis::cmd("PING").query(&mut again);
    assert_eq!(refused.unwrap_err().code(), Some("NOAUTH"));
}

/// A client that opens a TLS connection and never finishes the handshake holds a place of a connection that has
/// not authenticated, for the AUTH timeout at most: stalled handshakes cannot pile up.
#[test]
fn stalled_handshakes_are_capped_and_timed_out() {
    let pki = Pki::new("stalled");
    let redis = RedisServer::start();
    let gateway = Gateway::builder()
        .tls(&pki.server("gateway", &["127.0.0.1"]), None)
        .arg("--max-unauthenticated-clients")
        .arg("2")
        .arg("--max-unauthenticated-per-address")
        .arg("2")
        .arg("--auth-timeout-ms")
        .arg("1000")
        .start(&json!({"tenants": [tenant("t", PASSWORD, redis.url())]}));
    let stalled: Vec<std::net::TcpStream> = (0..2)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", gateway.tls_port())).unwrap())
        .collect();
    let client = pki.client(&url(&gateway, PASSWORD), None);
    wait_for(
        "the stalled handshakes to take both places",
        Duration::from_secs(5),
        || client.get_connection().is_err(),
    );
    assert!(gateway.metric("switchyard_client_connections_rejected_total") >= 1);
    // Past the AUTH timeout they are closed, and their places free.
    let started = Instant::now();
    let mut buf = [0u8; 1];
    for mut socket in stalled {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(std::io::Read::read(&mut socket, &mut buf).unwrap_or(0), 0);
    }
    assert!(started.elapsed() < Duration::from_secs(3));
    let mut con = client.get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    assert_eq!(
        gateway.metric("switchyard_client_tls_handshake_failures_total"),
        2
    );
}

/// Without `tlsCaFile`, a resource's nodes are checked against the system's trust store, which `SSL_CERT_FILE`
/// names here.
#[tokio::test]
async fn the_system_trust_store_is_the_default() {
    let pki = Pki::new("system");
    let redis = RedisServer::builder().tls(&pki, false).start();
    let target = format!("rediss://127.0.0.1:{}", redis.tls_port());
    let gateway = Gateway::builder()
        .env("SSL_CERT_FILE", &pki.ca_file().display().to_string())
        .start(&json!({"tenants": [tenant("t", PASSWORD, target)]}));
    let mut con = gateway.client(Some(PASSWORD)).await;
    let _: () = con.set("k", "v").await.unwrap();
    let stored: String = redis::cmd("GET")
        .arg("k")
        .query(&mut redis.client())
        .unwrap();
    assert_eq!(stored, "v");
}
