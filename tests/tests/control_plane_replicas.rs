//! A gateway given several control-plane replicas over one database: when the one it follows dies, or stops
//! answering, it moves to another, and changes made there reach it within seconds, as deltas.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RawClient, RedisServer};

fn single(server: &RedisServer) -> Value {
    json!({"type": "single", "target": server.url()})
}

/// `switchyard_control_plane_following` for `replica`.
fn following(replica: &ControlPlane) -> String {
    format!(
        r#"switchyard_control_plane_following{{url="{}",address=""}}"#,
        replica.url()
    )
}

/// The revision the gateway serves, as its admin port lists it.
fn served_revision(gateway: &Gateway) -> Option<i64> {
    let (_, body) = gateway.admin_get("/tenants");
    serde_json::from_str::<Value>(&body).ok()?["revision"].as_i64()
}

/// Moves the tenant's route to `server` through `replica`; returns how long it took the gateway to serve it.
async fn move_route(replica: &ControlPlane, gateway: &Gateway, server: &RedisServer) -> Duration {
    let body = replica
        .expect(
            "PUT",
            "/v1/tenants/acme/route",
            // Forced: the keys are the test's own, written where each step expects them.
            Some(json!({"route": single(server), "force": true})),
            200,
        )
        .await;
    let revision = body["revision"].as_i64().expect("revision");
    let changed = Instant::now();
    while served_revision(gateway) < Some(revision) {
        assert!(
            changed.elapsed() < Duration::from_secs(10),
            "the gateway never served revision {revision}:\n{}",
            gateway.log()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    changed.elapsed()
}

/// What a `SET` through the gateway reached: the value of `key` on `server`.
fn landed(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.client())
        .expect("GET from the backend")
}

/// Waits until `GET /v1/gateways` on `asked` shows the gateway following `followed`.
async fn follows_in_heartbeats(asked: &ControlPlane, followed: &ControlPlane) {
    let url = followed.url();
    asked
        .poll("/v1/gateways", Duration::from_secs(5), |fleet| {
            fleet["gateways"][0]["following"] == json!({"url": url})
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_another_replica_when_its_own_dies_or_goes_silent() {
    let (first, second, third) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    let mut a = ControlPlane::start();
    let b = a.replica();
    let secret = a.create_tenant("acme", single(&first)).await;
    let cache = std::env::temp_dir().join(format!(
        "switchyard-replicas-cache-{}.json",
        std::process::id()
    ));
    let gateway = Gateway::builder().start_with_replicas(&[&a, &b], &cache);
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(format!("AUTH acme {secret}\r\n").as_bytes(), b"+OK\r\n");
    client.roundtrip(b"SET k 1\r\n", b"+OK\r\n");
    assert_eq!(landed(&first, "k").as_deref(), Some("1"));
    // It follows the first URL given, and says so in its heartbeats.
    assert_eq!(gateway.metric(&following(&a)), 1);
    follows_in_heartbeats(&a, &a).await;
    assert_eq!(gateway.metric(&following(&b)), 0);
    assert_eq!(
        gateway.metric("switchyard_control_plane_failovers_total"),
        0
    );
    let deltas = r#"switchyard_snapshots_applied_total{kind="delta"}"#;

    // The replica it follows is killed: a change made on the other reaches it within 5 s, as a delta (one
    // history across replicas), and it reports it there.
    a.stop();
    let took = move_route(&b, &gateway, &second).await;
    println!("a change on the other replica reached the gateway {took:?} after the kill");
    assert!(took < Duration::from_secs(5), "took {took:?}");
    client.roundtrip(b"SET k 2\r\n", b"+OK\r\n");
    assert_eq!(landed(&second, "k").as_deref(), Some("2"));
    assert_eq!(gateway.metric(&following(&a)), 0);
    assert_eq!(gateway.metric(&following(&b)), 1);
    assert_eq!(
        gateway.metric("switchyard_control_plane_failovers_total"),
        1
    );
    assert_eq!(gateway.metric(deltas), 1, "{}", gateway.log());
    let revision = served_revision(&gateway).expect("a revision");
    b.converged(1, revision).await;
    follows_in_heartbeats(&b, &b).await;
    assert!(
        gateway
            .log()
            .contains(&format!("control plane failed, following {} now", b.url())),
        "{}",
        gateway.log()
    );

    // The first replica comes back; the second stops answering without closing anything (SIGSTOP: the kernel
    // still accepts its connections), so only silence tells: the gateway goes back to the first.
    a.restart();
    b.signal("STOP");
    let took = move_route(&a, &gateway, &third).await;
    b.signal("CONT");
    println!("a change reached the gateway {took:?} after its replica went silent");
    assert!(took < Duration::from_secs(8), "took {took:?}");
    client.roundtrip(b"SET k 3\r\n", b"+OK\r\n");
    assert_eq!(landed(&third, "k").as_deref(), Some("3"));
    assert_eq!(gateway.metric(&following(&a)), 1);
    assert_eq!(
        gateway.metric("switchyard_control_plane_failovers_total"),
        2
    );
    assert_eq!(gateway.metric(deltas), 2, "{}", gateway.log());
    let _ = std::fs::remove_file(&cache);
}
