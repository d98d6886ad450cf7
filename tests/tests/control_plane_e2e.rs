//! The whole product: a real control plane on Postgres feeding two real gateways in front of real Redis servers.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

fn single(server: &RedisServer) -> Value {
    json!({"type": "single", "target": server.url()})
}

struct Stack {
    cp: ControlPlane,
    gateways: Vec<Gateway>,
    caches: Vec<std::path::PathBuf>,
}

fn start_stack(gateways: usize) -> Stack {
    let cp = ControlPlane::start();
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let caches: Vec<_> = (0..gateways)
        .map(|_| {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            std::env::temp_dir().join(format!("switchyard-cache-{}-{n}.json", std::process::id()))
        })
        .collect();
    let gateways = caches
        .iter()
        .map(|cache| Gateway::builder().start_with_control_plane(&cp, cache))
        .collect();
    Stack {
        cp,
        gateways,
        caches,
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for cache in &self.caches {
            let _ = std::fs::remove_file(cache);
        }
    }
}

async fn wait_until(mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "condition not met within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn get_via(gateway: &Gateway, secret: &str, key: &str) -> redis::RedisResult<Option<String>> {
    let mut con = redis::Client::open(gateway.url(Some(secret)))?
        .get_multiplexed_async_connection()
        .await?;
    redis::cmd("GET").arg(key).query_async(&mut con).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_changes_reach_every_gateway_without_reconnects() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let stack = start_stack(2);
    let cp = &stack.cp;
    let secret = cp.create_tenant("acme", single(&old)).await;
    let revision = cp.expect("GET", "/v1/tenants/acme/route", None, 200).await;
    assert!(revision["version"].as_i64() == Some(1), "{revision}");

    // Both gateways serve the tenant; the clients stay connected through every change below.
    let mut clients = Vec::new();
    for gateway in &stack.gateways {
        let mut client = RawClient::connect(gateway.port());
        wait_until(async || {
            client.send(format!("AUTH acme {secret}\r\n").as_bytes());
            client.read_line() == b"+OK\r\n"
        })
        .await;
        client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
        client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
        clients.push(client);
    }

    // Single -> double-write: both gateways apply it, and writes land in both backends.
    let double = json!({"type": "single", "target": {"write": {"resources": [old.url(), new.url()], "ack": "all"}}});
    let mut trials = Vec::new();
    for trial in 0..20 {
        let route = if trial % 2 == 0 {
            double.clone()
        } else {
            single(&old)
        };
        let body = cp
            .expect(
                "PUT",
                "/v1/tenants/acme/route",
                Some(json!({"route": route})),
                200,
            )
            .await;
        // Timed from the PUT returning to every gateway reporting the new revision.
        let revision = body["revision"].as_i64().expect("revision");
        trials.push(cp.converged(2, revision).await);
        if trial % 2 == 0 {
            for (i, client) in clients.iter_mut().enumerate() {
                client.roundtrip(format!("SET trial{trial}-{i} x\r\n").as_bytes(), b"+OK\r\n");
                let copied: Option<String> = redis::cmd("GET")
                    .arg(format!("trial{trial}-{i}"))
                    .query(&mut new.client())
                    .unwrap();
                assert_eq!(
                    copied.as_deref(),
                    Some("x"),
                    "gateway {i} double-wrote after convergence"
                );
            }
        }
    }
    trials.sort();
    let p99 = trials[trials.len() - 1];
    println!(
        "route propagation over 20 changes: median {:?}, max {:?}",
        trials[10], p99
    );
    assert!(p99 < Duration::from_secs(2), "propagation took {p99:?}");
    let fleet = cp.expect("GET", "/v1/gateways", None, 200).await;
    assert_eq!(fleet["converged"], json!(true), "{fleet}");
    assert_eq!(
        fleet["gateways"][0]["version"],
        env!("CARGO_PKG_VERSION"),
        "{fleet}"
    );
    // Both gateways list alike what they serve (their admin port's /tenants), and show no credential.
    let listed: Vec<Value> = stack
        .gateways
        .iter()
        .map(|gateway| {
            let (status, body) = gateway.admin_get("/tenants");
            assert_eq!(status, 200, "{body}");
            let digest = switchyard_schemas::credential_digest(&secret);
            assert!(!body.contains(&secret) && !body.contains(&digest), "{body}");
            let mut listing: Value = serde_json::from_str(&body).expect("JSON");
            listing
                .as_object_mut()
                .expect("object")
                .remove("generation");
            listing
        })
        .collect();
    assert_eq!(listed[0], listed[1]);
    let acme = &listed[0]["tenants"][0];
    assert_eq!(acme["name"], "acme", "{acme}");
    assert_eq!(acme["credentials"], 1, "{acme}");
    let old_display = format!("127.0.0.1:{}/0", old.port());
    assert_eq!(acme["shards"][0]["write"], json!([old_display]), "{acme}");

    // An invalid route is refused by the control plane and never reaches a gateway.
    let invalid = json!({"type": "sharded", "shards": [{"name": "a", "target": "redis://127.0.0.1:1"}, {"name": "a", "target": "redis://127.0.0.1:2"}]});
    let (status, body) = cp
        .call(
            "PUT",
            "/v1/tenants/acme/route",
            Some(json!({"route": invalid})),
        )
        .await;
    assert_eq!(status, 422, "{body}");
    for client in &mut clients {
        client.roundtrip(b"GET k\r\n", b"$1\r\nv\r\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_keep_serving_without_the_control_plane() {
    let backend = RedisServer::start();
    let mut stack = start_stack(1);
    let secret = stack.cp.create_tenant("acme", single(&backend)).await;
    wait_until(async || get_via(&stack.gateways[0], &secret, "k").await.is_ok()).await;

    stack.cp.stop();
    let mut con = switchyard_tests::connect(&stack.gateways[0].url(Some(&secret))).await;
    let () = redis::cmd("SET")
        .arg("k")
        .arg("still")
        .query_async(&mut con)
        .await
        .unwrap();

    // A gateway restarted while the control plane is down serves from its cache file.
    let port = stack.gateways[0].port();
    let cache = stack.caches[0].clone();
    stack.gateways.clear();
    let restarted = Gateway::builder()
        .port(port)
        .start_with_control_plane(&stack.cp, &cache);
    assert_eq!(
        get_via(&restarted, &secret, "k").await.unwrap().as_deref(),
        Some("still")
    );
    assert!(
        restarted.log().contains("serving the cached snapshot"),
        "{}",
        restarted.log()
    );
    assert_eq!(restarted.admin_get("/readyz").0, 200);

    // Without a cache, it starts not ready and says so to clients.
    let bare_cache =
        std::env::temp_dir().join(format!("switchyard-no-cache-{}", std::process::id()));
    let _ = std::fs::remove_file(&bare_cache);
    let bare = Gateway::builder().start_with_control_plane(&stack.cp, &bare_cache);
    assert_eq!(bare.admin_get("/readyz").0, 503);
    let waiting = r#"switchyard_failed_requests_total{side="gateway",retry_safe="true"}"#;
    let before = bare.metric(waiting);
    let mut client = RawClient::connect(bare.port());
    client.roundtrip(
        b"PING\r\n",
        b"-ERR the gateway has no routes yet (waiting for the control plane)\r\n",
    );
    assert_eq!(bare.metric(waiting), before + 1);

    // When the control plane is back, the bare gateway catches up.
    stack.cp.restart();
    wait_until(async || {
        get_via(&bare, &secret, "k").await.ok().flatten().as_deref() == Some("still")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_and_disabling_close_exactly_the_right_connections() {
    let backend = RedisServer::start();
    let stack = start_stack(1);
    let cp = &stack.cp;
    let gateway = &stack.gateways[0];
    let first = cp.create_tenant("acme", single(&backend)).await;
    let second = cp.issue_secret("acme").await;
    let other = cp.create_tenant("globex", single(&backend)).await;
    let connect = async |tenant: &str, secret: &str| {
        let mut client = RawClient::connect(gateway.port());
        wait_until(async || {
            client.send(format!("AUTH {tenant} {secret}\r\n").as_bytes());
            client.read_line() == b"+OK\r\n"
        })
        .await;
        client
    };
    let mut acme_first = connect("acme", &first).await;
    let mut acme_second = connect("acme", &second).await;
    let mut globex = connect("globex", &other).await;

    let credentials = cp
        .expect("GET", "/v1/tenants/acme/credentials", None, 200)
        .await;
    let first_id = credentials["credentials"][0]["id"]
        .as_i64()
        .expect("credential id");
    let revoked = Instant::now();
    cp.expect(
        "DELETE",
        &format!("/v1/tenants/acme/credentials/{first_id}"),
        None,
        204,
    )
    .await;
    acme_first.expect_closed();
    assert!(
        revoked.elapsed() < Duration::from_secs(1),
        "closed after {:?}",
        revoked.elapsed()
    );
    acme_second.roundtrip(b"PING\r\n", b"+PONG\r\n");
    globex.roundtrip(b"PING\r\n", b"+PONG\r\n");
    let mut retry = RawClient::connect(gateway.port());
    retry.roundtrip(
        format!("AUTH acme {first}\r\n").as_bytes(),
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );

    cp.expect(
        "PATCH",
        "/v1/tenants/acme",
        Some(json!({"disabled": true})),
        200,
    )
    .await;
    acme_second.expect_closed();
    globex.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

/// A tenant whose last credential is revoked is reachable by no one: it must not become the tenant that clients
/// get without AUTH (only a routes file's explicit `"passwords": []` makes one).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_without_credentials_is_unreachable() {
    let backend = RedisServer::start();
    let stack = start_stack(1);
    let cp = &stack.cp;
    let gateway = &stack.gateways[0];
    let secret = cp.create_tenant("acme", single(&backend)).await;
    let mut owner = RawClient::connect(gateway.port());
    wait_until(async || {
        owner.send(format!("AUTH acme {secret}\r\n").as_bytes());
        owner.read_line() == b"+OK\r\n"
    })
    .await;
    owner.roundtrip(b"SET secret-key v\r\n", b"+OK\r\n");

    let credentials = cp
        .expect("GET", "/v1/tenants/acme/credentials", None, 200)
        .await;
    let id = credentials["credentials"][0]["id"]
        .as_i64()
        .expect("credential id");
    cp.expect(
        "DELETE",
        &format!("/v1/tenants/acme/credentials/{id}"),
        None,
        204,
    )
    .await;
    let fleet = cp.expect("GET", "/v1/gateways", None, 200).await;
    cp.converged(1, fleet["revision"].as_i64().expect("revision"))
        .await;

    let mut stranger = RawClient::connect(gateway.port());
    stranger.roundtrip(
        b"GET secret-key\r\n",
        b"-NOAUTH Authentication required.\r\n",
    );
    stranger.roundtrip(
        b"AUTH acme anything\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_tenants_never_see_each_others_data() {
    let backends: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let stack = start_stack(2);
    let mut secrets = Vec::new();
    for t in 0..50 {
        let backend = &backends[t % 5];
        let db = t / 5;
        let route = json!({"type": "single", "target": format!("{}/{db}", backend.url())});
        let name = format!("tenant{t}");
        secrets.push((name.clone(), stack.cp.create_tenant(&name, route).await));
        let mut direct = backend.client();
        let () = redis::cmd("SELECT").arg(db).query(&mut direct).unwrap();
        let () = redis::cmd("SET")
            .arg("owner")
            .arg(&name)
            .query(&mut direct)
            .unwrap();
    }
    let last = stack.cp.expect("GET", "/v1/gateways", None, 200).await["revision"]
        .as_i64()
        .unwrap();
    stack.cp.converged(2, last).await;

    let mut tasks = Vec::new();
    for (t, (name, secret)) in secrets.iter().enumerate() {
        for c in 0..20 {
            let url = stack.gateways[c % 2].url(Some(secret));
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                let mut con = switchyard_tests::connect(&url).await;
                for i in 0..10 {
                    let owner: String = redis::cmd("GET")
                        .arg("owner")
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    assert_eq!(
                        owner, name,
                        "tenant {t} client {c} read another tenant's data"
                    );
                    let () = redis::cmd("SET")
                        .arg(format!("c{c}"))
                        .arg(i)
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    let listed: String = redis::cmd("CLIENT")
                        .arg("LIST")
                        .query_async(&mut con)
                        .await
                        .unwrap();
                    assert!(
                        listed.lines().all(|l| l.contains(&format!("user={name} "))),
                        "CLIENT LIST shows other tenants"
                    );
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    for (t, backend) in backends.iter().enumerate() {
        for db in 0..10 {
            let mut direct = backend.client();
            let () = redis::cmd("SELECT").arg(db).query(&mut direct).unwrap();
            let size: i64 = redis::cmd("DBSIZE").query(&mut direct).unwrap();
            assert_eq!(
                size, 21,
                "backend {t} db {db}: the owner key and 20 client keys"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_limits_from_the_control_plane_are_enforced() {
    let backend = RedisServer::start();
    let stack = start_stack(1);
    let cp = &stack.cp;
    let gateway = &stack.gateways[0];
    let secret = cp.create_tenant("acme", single(&backend)).await;
    let other = cp.create_tenant("globex", single(&backend)).await;
    let limits = json!({"limits": {"max_connections": 2, "max_ops_per_sec": 50}});
    let revision = cp
        .expect("PATCH", "/v1/tenants/acme", Some(limits), 200)
        .await;
    let last = cp.expect("GET", "/v1/gateways", None, 200).await["revision"]
        .as_i64()
        .unwrap();
    cp.converged(1, last.max(revision["revision"].as_i64().unwrap_or(0)))
        .await;

    let auth = format!("AUTH acme {secret}\r\n");
    let mut first = RawClient::connect(gateway.port());
    first.roundtrip(auth.as_bytes(), b"+OK\r\n");
    let mut second = RawClient::connect(gateway.port());
    second.roundtrip(auth.as_bytes(), b"+OK\r\n");
    let mut third = RawClient::connect(gateway.port());
    third.roundtrip(auth.as_bytes(), b"-ERR max number of clients reached\r\n");
    third.expect_closed();
    // Another tenant is not counted against acme's limit.
    let mut globex = RawClient::connect(gateway.port());
    globex.roundtrip(format!("AUTH globex {other}\r\n").as_bytes(), b"+OK\r\n");

    // 50 ops/s with a one-second burst: a pipeline of 200 commands is cut off after about 50.
    first.send(&b"PING\r\n".repeat(200));
    let mut refused = 0;
    for _ in 0..200 {
        match first.read_line().as_slice() {
            b"+PONG\r\n" => {}
            b"-ERR tenant 'acme' rate limit exceeded\r\n" => refused += 1,
            other => panic!("unexpected reply {:?}", String::from_utf8_lossy(other)),
        }
    }
    assert!((100..=160).contains(&refused), "{refused} of 200 refused");
    globex.send(&b"PING\r\n".repeat(200));
    for _ in 0..200 {
        globex.expect(b"+PONG\r\n");
    }
    let (_, metrics) = gateway.admin_get("/metrics");
    assert!(
        metrics.contains(&format!(
            "switchyard_rate_limited_total{{tenant=\"acme\"}} {refused}"
        )),
        "{metrics}"
    );
    // Refused as asked: the client's side, and nothing of them ran.
    let refused_here =
        gateway.metric(r#"switchyard_failed_requests_total{side="client",retry_safe="true"}"#);
    assert_eq!(refused_here, refused);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_that_breaks_the_rules_is_never_served() {
    let mut stack = start_stack(0);
    stack.cp.stop();
    // A cached snapshot whose route has two shards with one name: the gateway checks it as the control plane would.
    let invalid = json!({"revision": 7, "tenants": [{"name": "acme", "disabled": false, "allow_admin": false,
        "limits": {}, "credentials": [{"id": 1, "digest": "00"}], "route_version": 1,
        "route": {"type": "sharded", "shards": [{"name": "a", "target": "redis://127.0.0.1:1"},
                                                {"name": "a", "target": "redis://127.0.0.1:2"}]}}]});
    let cache = std::env::temp_dir().join(format!(
        "switchyard-invalid-cache-{}.json",
        std::process::id()
    ));
    std::fs::write(&cache, invalid.to_string()).unwrap();
    let gateway = Gateway::builder().start_with_control_plane(&stack.cp, &cache);
    assert_eq!(
        gateway.admin_get("/readyz").0,
        503,
        "an invalid snapshot must not make the gateway ready"
    );
    assert!(
        gateway.log().contains("the cached snapshot is unusable"),
        "{}",
        gateway.log()
    );
    assert!(
        gateway.log().contains("/tenants/0/route/shards/1/name"),
        "{}",
        gateway.log()
    );
    let _ = std::fs::remove_file(&cache);
}
