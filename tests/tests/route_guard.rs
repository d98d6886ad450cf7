//! The control plane's route guard against real Redis: a change that moves keys is refused with the share it
//! would strand, and once forced strands that share as the gateway serves it; a resource that does not answer as
//! its URL says is refused with the reason.

use serde_json::{Value, json};
use switchyard_tests::{
    ControlPlane, Ctl, Gateway, RedisCluster, RedisServer, SentinelGroup, allocate_port,
};

const KEYS: usize = 4000;

fn ring(servers: &[RedisServer], b_weight: u32) -> Value {
    let shards: Vec<Value> = ["a", "b", "c"]
        .iter()
        .zip(servers)
        .map(|(name, server)| {
            let weight = if *name == "b" { b_weight } else { 1 };
            json!({"name": name, "target": server.url(), "weight": weight})
        })
        .collect();
    json!({"type": "sharded", "hash": {"algorithm": "ring"}, "shards": shards})
}

async fn put(cp: &ControlPlane, tenant: &str, body: Value) -> (u16, Value) {
    cp.call("PUT", &format!("/v1/tenants/{tenant}/route"), Some(body))
        .await
}

/// How many of the keys the gateway no longer finds.
async fn missing(gateway: &Gateway, secret: &str) -> usize {
    let mut con = gateway.client(Some(secret)).await;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("user:{i}")).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&keys)
        .query_async(&mut con)
        .await
        .unwrap();
    values.iter().filter(|v| v.is_none()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_change_is_refused_with_the_share_it_strands_and_forced_strands_that_share() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let cp = ControlPlane::start();
    let cache = std::env::temp_dir().join(format!("switchyard-guard-{}.json", std::process::id()));
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache);
    let secret = cp.create_tenant("shop", ring(&servers, 1)).await;
    let (_, health) = cp.get_text("/healthz").await;
    let health: Value = serde_json::from_str(&health).unwrap();
    cp.converged(1, health["revision"].as_i64().unwrap()).await;
    let mut con = gateway.client(Some(&secret)).await;
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        pipe.set(format!("user:{i}"), i).ignore();
    }
    let () = pipe.query_async(&mut con).await.unwrap();
    assert_eq!(missing(&gateway, &secret).await, 0);

    // Refused, with the share in the message and each move in the details; nothing changes.
    let (status, refused) = put(&cp, "shop", json!({"route": ring(&servers, 2)})).await;
    assert_eq!(
        (status, refused["error"].as_str()),
        (409, Some("keys_would_move")),
        "{refused}"
    );
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("of the tenant's keys would no longer be found (exact)"),
        "{message}"
    );
    assert!(
        refused["details"][0]["message"]
            .as_str()
            .unwrap()
            .contains("-> shard 'b'"),
        "{refused}"
    );
    let current = cp.expect("GET", "/v1/tenants/shop/route", None, 200).await;
    assert_eq!(current["version"], 1);

    // The CLI says the same, and its dry run with --force shows the share.
    let file = std::env::temp_dir().join(format!(
        "switchyard-guard-route-{}.json",
        std::process::id()
    ));
    std::fs::write(&file, ring(&servers, 2).to_string()).unwrap();
    let ctl = Ctl::new(&cp);
    let path = file.to_str().unwrap();
    let run = ctl.fails(3, &["routes", "set", "shop", "--file", path]);
    assert!(
        run.stderr.contains("keys_would_move") || run.stderr.contains("would no longer be found"),
        "{run:?}"
    );
    let dry = ctl.ok(&[
        "--dry-run",
        "routes",
        "set",
        "shop",
        "--file",
        path,
        "--force",
    ]);
    assert!(
        dry.contains("keys: ")
            && dry.contains("of the tenant's keys would no longer be found (exact)"),
        "{dry}"
    );

    // Forced: saved, and the answer carries the share, which is what the gateway then fails to find.
    let (status, forced) = put(
        &cp,
        "shop",
        json!({"route": ring(&servers, 2), "force": true}),
    )
    .await;
    assert_eq!(status, 200, "{forced}");
    let fraction = forced["keys"]["fraction"].as_f64().unwrap();
    assert_eq!(forced["keys"]["estimate"], "exact");
    assert!(fraction > 0.05 && fraction < 0.5, "{forced}");
    cp.converged(1, forced["revision"].as_i64().unwrap()).await;
    let lost = missing(&gateway, &secret).await as f64 / KEYS as f64;
    assert!(
        (lost - fraction).abs() < 0.03,
        "the guard said {fraction}, the gateway lost {lost}"
    );
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&cache);
}

/// A first route (it moves nothing) to `target`: its status and body.
async fn first_route(cp: &ControlPlane, tenant: &str, target: Value, force: bool) -> (u16, Value) {
    cp.expect("POST", "/v1/tenants", Some(json!({"name": tenant})), 201)
        .await;
    let body = json!({"route": {"type": "single", "target": target}, "force": force});
    put(cp, tenant, body).await
}

fn refusal(reply: &(u16, Value)) -> String {
    assert_eq!(reply.0, 422, "{}", reply.1);
    reply.1["details"][0]["message"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_resources_are_probed_and_refused_with_the_reason() {
    let cp = ControlPlane::start();
    let plain = RedisServer::start();
    let locked = RedisServer::builder().password("right-password").start();
    let replica = RedisServer::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(&plain.port().to_string())
        .start();
    let cluster = RedisCluster::start(3, 0, None);
    let sentinels = SentinelGroup::start(1, 1);
    let nothing = format!("redis://127.0.0.1:{}", allocate_port());

    let unreachable = refusal(&first_route(&cp, "t1", json!(nothing), false).await);
    assert!(unreachable.contains("connecting"), "{unreachable}");
    let not_cluster = format!("redis-cluster://127.0.0.1:{}", plain.port());
    let reason = refusal(&first_route(&cp, "t2", json!(not_cluster), false).await);
    assert!(reason.contains("not a Redis Cluster node"), "{reason}");
    let not_sentinel = format!("redis-sentinel://127.0.0.1:{}/mymaster", plain.port());
    let reason = refusal(&first_route(&cp, "t3", json!(not_sentinel), false).await);
    assert!(reason.contains("not a sentinel"), "{reason}");
    let wrong = format!("redis://:wrong-password@127.0.0.1:{}", locked.port());
    let reason = refusal(&first_route(&cp, "t4", json!(wrong), false).await);
    assert!(reason.contains("authentication failed"), "{reason}");
    let reason = refusal(&first_route(&cp, "t5", json!(replica.url()), false).await);
    assert!(reason.contains("is a replica"), "{reason}");
    let node = format!("redis://127.0.0.1:{}", cluster.masters()[0].port);
    let reason = refusal(&first_route(&cp, "t6", json!(node), false).await);
    assert!(reason.contains("is a Redis Cluster node"), "{reason}");
    // The password never appears, even in a refusal.
    let masked = first_route(
        &cp,
        "t7",
        json!(format!("redis://:sekrit@127.0.0.1:{}", allocate_port())),
        false,
    )
    .await;
    assert!(!masked.1.to_string().contains("sekrit"), "{}", masked.1);

    // What answers as its URL says passes: a plain Redis, the right password, a cluster, a sentinel group, a
    // replica read.
    let good = [
        plain.url(),
        format!("redis://:right-password@127.0.0.1:{}", locked.port()),
        cluster.url(),
        sentinels.url(),
    ];
    for (i, url) in good.iter().enumerate() {
        let reply = first_route(&cp, &format!("ok{i}"), json!(url), false).await;
        assert_eq!(reply.0, 200, "{url}: {}", reply.1);
    }
    let reads =
        json!({"read": {"resources": [replica.url()]}, "write": {"resources": [plain.url()]}});
    assert_eq!(first_route(&cp, "ok-reads", reads, false).await.0, 200);

    // A secondary added to a route moves no key, and is probed: at its place in the table.
    let secondary = json!({"write": {"resources": [plain.url(), nothing], "ack": "primary"}});
    let (status, body) = put(
        &cp,
        "ok0",
        json!({"route": {"type": "single", "target": secondary}}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["details"][0]["path"], "/route/target/write/resources/1",
        "{body}"
    );

    // Forced: a resource provisioned later is accepted as it is.
    let (status, body) = first_route(&cp, "later", json!(nothing), true).await;
    assert_eq!(status, 200, "{body}");
}

/// `resources update` and `tenants update` refuse what would strand a tenant's keys (exit 3, the refusal printed)
/// until `--force`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_forces_a_resource_url_and_a_namespace_that_strand_keys() {
    let (here, there) = (RedisServer::start(), RedisServer::start());
    let cp = ControlPlane::start();
    cp.expect(
        "POST",
        "/v1/resources",
        Some(json!({"name": "main", "url": here.url()})),
        201,
    )
    .await;
    cp.create_tenant_with(
        json!({"name": "shop", "namespace": "shop:"}),
        json!({"type": "single", "target": "main"}),
    )
    .await;
    let ctl = Ctl::new(&cp);

    let url = there.url();
    let moved = ctl.fails(3, &["resources", "update", "main", &url]);
    assert!(
        moved.stderr.contains("keys_would_move") && moved.stderr.contains("tenant 'shop'"),
        "{moved:?}"
    );
    ctl.ok(&["resources", "update", "main", &url, "--force"]);
    let stored = cp.expect("GET", "/v1/resources/main", None, 200).await;
    assert_eq!(stored["url"], url.as_str());

    let renamed = ctl.fails(3, &["tenants", "update", "shop", "--namespace", "store:"]);
    assert!(renamed.stderr.contains("keys_would_move"), "{renamed:?}");
    ctl.ok(&["tenants", "update", "shop", "--no-namespace", "--force"]);
    let tenant = cp.expect("GET", "/v1/tenants/shop", None, 200).await;
    assert!(
        tenant.get("namespace").is_none_or(Value::is_null),
        "{tenant}"
    );
}
