//! `GET /v1/snapshot`: content, conditional answers and long-poll across replicas.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;
use switchyard_schemas::{OutputBufferLimit, Snapshot, TenantLimits, credential_digest};

use std::sync::atomic::Ordering;

use crate::common::{Api, Reply, single};

fn parse(body: &serde_json::Value) -> Snapshot {
    serde_json::from_value(body.clone()).expect("a snapshot")
}

/// A long-poll for anything after `revision`, answered with the time it was answered.
fn poll(api: &Api, revision: i64) -> tokio::task::JoinHandle<(Reply, Instant)> {
    let api = api.clone();
    tokio::spawn(async move {
        let reply = api
            .gateway(
                "GET",
                &format!("/v1/snapshot?after={revision}&wait=20s"),
                None,
            )
            .await;
        (reply, Instant::now())
    })
}

/// Returns once `count` polls wait on `api`.
pub(crate) async fn until_waiting(api: &Api, count: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.state.metrics.long_polls_waiting.load(Ordering::Relaxed) < count {
        assert!(Instant::now() < deadline, "the polls never started waiting");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn carries_what_gateways_serve(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_resource("main", "redis://:pw@127.0.0.1:6379/2")
        .await;
    api.create_tenant("acme").await;
    api.create_tenant("routeless").await;
    let (id, secret) = api.issue_credential("acme").await;
    let (revoked, revoked_secret) = api.issue_credential("acme").await;
    api.admin(
        "PATCH",
        "/v1/tenants/acme",
        Some(json!({"limits": {"max_connections": 7}})),
    )
    .await;
    let route = json!({"type": "single", "target": {"read": {"resources": ["main", "redis://127.0.0.1:6380"]},
                                                   "write": {"resources": ["main"]}}});
    assert_eq!(api.put_route("acme", route).await.status, 200);

    let reply = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    let snapshot = parse(&reply.body);
    assert_eq!(snapshot.revision, api.revision().await);
    assert_eq!(
        reply.header("etag"),
        Some(format!("\"{}\"", snapshot.revision).as_str())
    );
    assert_eq!(
        snapshot.tenants.len(),
        1,
        "a tenant without a route is left out"
    );
    let acme = &snapshot.tenants[0];
    assert_eq!(acme.name, "acme");
    assert_eq!(acme.route_version, 1);
    assert_eq!(acme.limits.max_connections, Some(7));
    let digests: Vec<_> = acme
        .credentials
        .iter()
        .map(|c| (c.id, c.digest.clone()))
        .collect();
    assert_eq!(
        digests,
        vec![
            (id, credential_digest(&secret)),
            (revoked, credential_digest(&revoked_secret))
        ]
    );
    assert!(!reply.body.to_string().contains(&secret), "no clear secret");
    assert_eq!(
        serde_json::to_value(&acme.route).unwrap(),
        json!({"type": "single", "target": {
            "read": {"resources": ["redis://:pw@127.0.0.1:6379/2", "redis://127.0.0.1:6380"], "policy": "primary"},
            "write": {"resources": ["redis://:pw@127.0.0.1:6379/2"], "ack": "primary"}}}),
        "names are replaced by their URLs"
    );

    // Revoking removes the digest from the next snapshot.
    let path = format!("/v1/tenants/acme/credentials/{revoked}");
    assert_eq!(api.admin("DELETE", &path, None).await.status, 204);
    let next = parse(&api.gateway("GET", "/v1/snapshot", None).await.body);
    assert_eq!(next.revision, snapshot.revision + 1);
    let digests: Vec<_> = next.tenants[0].credentials.iter().map(|c| c.id).collect();
    assert_eq!(digests, vec![id]);

    // A resource's new URL reaches the snapshot (forced: nothing listens there, and the tenant's keys stay
    // behind).
    api.admin(
        "PUT",
        "/v1/resources/main",
        Some(json!({"url": "redis://127.0.0.1:7777", "force": true})),
    )
    .await;
    let after_update = api.gateway("GET", "/v1/snapshot", None).await;
    assert!(
        after_update
            .body
            .to_string()
            .contains("redis://127.0.0.1:7777")
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn carries_each_tenants_limits(pool: PgPool) {
    let api = Api::new(pool).await;
    let limits = json!({
        "max_ops_per_sec": 100,
        "script_timeout_ms": 300,
        "output_buffer_limit": {"hard_bytes": 1_048_576, "soft_bytes": 524_288, "soft_seconds": 10},
        "pubsub_output_buffer_limit": {"hard_bytes": 0, "soft_bytes": 65_536, "soft_seconds": 5},
    });
    let created = api
        .admin(
            "POST",
            "/v1/tenants",
            Some(json!({"name": "acme", "limits": limits})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.body);
    api.create_tenant("plain").await;
    for tenant in ["acme", "plain"] {
        let route = single("redis://127.0.0.1:6379");
        assert_eq!(api.put_route(tenant, route).await.status, 200);
    }

    let reply = api.gateway("GET", "/v1/snapshot", None).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.body["tenants"][0]["limits"], limits);
    assert_eq!(reply.body["tenants"][1]["limits"], json!({}));
    let snapshot = parse(&reply.body);
    assert_eq!(
        snapshot.tenants[0].limits,
        TenantLimits {
            max_connections: None,
            max_ops_per_sec: Some(100),
            output_buffer_limit: Some(OutputBufferLimit {
                hard_bytes: 1_048_576,
                soft_bytes: 524_288,
                soft_seconds: 10,
            }),
            pubsub_output_buffer_limit: Some(OutputBufferLimit {
                hard_bytes: 0,
                soft_bytes: 65_536,
                soft_seconds: 5,
            }),
            script_timeout_ms: Some(300),
        }
    );
    assert_eq!(snapshot.tenants[1].limits, TenantLimits::default());

    // A change of the limits reaches the next snapshot.
    let patched = api
        .admin(
            "PATCH",
            "/v1/tenants/plain",
            Some(json!({"limits": {"pubsub_output_buffer_limit":
                {"hard_bytes": 4096, "soft_bytes": 0, "soft_seconds": 0}}})),
        )
        .await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    let next = parse(&api.gateway("GET", "/v1/snapshot", None).await.body);
    assert_eq!(next.revision, snapshot.revision + 1);
    assert_eq!(next.tenants[0].limits, snapshot.tenants[0].limits);
    assert_eq!(
        next.tenants[1].limits,
        TenantLimits {
            pubsub_output_buffer_limit: Some(OutputBufferLimit {
                hard_bytes: 4096,
                soft_bytes: 0,
                soft_seconds: 0,
            }),
            ..TenantLimits::default()
        }
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn answers_conditionally(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;

    let stale = api
        .gateway("GET", &format!("/v1/snapshot?after={}", revision - 1), None)
        .await;
    assert_eq!(stale.status, 200);

    let started = Instant::now();
    let current = api
        .gateway("GET", &format!("/v1/snapshot?after={revision}"), None)
        .await;
    assert_eq!(current.status, 304);
    assert_eq!(
        current.header("etag"),
        Some(format!("\"{revision}\"").as_str())
    );
    let waited = api
        .gateway(
            "GET",
            &format!("/v1/snapshot?after={revision}&wait=300ms"),
            None,
        )
        .await;
    assert_eq!(waited.status, 304);
    assert!(started.elapsed() >= Duration::from_millis(300));

    let etag = format!("\"{revision}\"");
    let by_etag = api
        .request(
            "GET",
            "/v1/snapshot",
            Some(crate::common::GATEWAY),
            &[("if-none-match", &etag)],
            None,
        )
        .await;
    assert_eq!(by_etag.status, 304);

    for bad in ["wait=forever", "after=x", "colour=red"] {
        let reply = api
            .gateway("GET", &format!("/v1/snapshot?{bad}"), None)
            .await;
        assert_eq!((reply.status, reply.error()), (400, "bad_request"), "{bad}");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn long_poll_wakes_within_100ms_of_a_change_on_another_replica(pool: PgPool) {
    let waiter = Api::new(pool.clone()).await;
    let writer = Api::replica(&pool).await;
    writer.create_tenant("acme").await;
    assert_eq!(
        writer
            .put_route("acme", single("redis://127.0.0.1:6379"))
            .await
            .status,
        200
    );

    for round in 0..3 {
        let revision = waiter.revision().await;
        let poll = poll(&waiter, revision);
        // Make the change only once the poll is really waiting.
        until_waiting(&waiter, 1).await;
        let description = format!("round {round}");
        let changed = writer
            .admin(
                "PATCH",
                "/v1/tenants/acme",
                Some(json!({"description": description})),
            )
            .await;
        let committed = Instant::now();
        assert_eq!(changed.status, 200);
        let (reply, answered) = poll.await.unwrap();
        assert_eq!(reply.status, 200, "{}", reply.body);
        assert_eq!(parse(&reply.body).revision, revision + 1);
        let latency = answered.saturating_duration_since(committed);
        eprintln!("round {round}: the poll woke {latency:?} after the change committed");
        assert!(
            latency < Duration::from_millis(100),
            "woke {latency:?} after the change"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn shutdown_answers_waiting_polls_at_once(pool: PgPool) {
    let api = Api::new(pool).await;
    let revision = api.revision().await;
    let poll = poll(&api, revision);
    until_waiting(&api, 1).await;
    let stopped = Instant::now();
    api.state.stop();
    let (reply, _) = poll.await.unwrap();
    assert_eq!(reply.status, 304);
    assert!(stopped.elapsed() < Duration::from_secs(1));
}

#[sqlx::test(migrations = "../migrations")]
async fn polls_woken_together_share_one_snapshot_read(pool: PgPool) {
    let api = Api::new(pool).await;
    api.create_tenant("acme").await;
    let revision = api.revision().await;
    let polls: Vec<_> = (0..4).map(|_| poll(&api, revision)).collect();
    until_waiting(&api, 4).await;
    let loaded = api.state.metrics.snapshots_loaded.load(Ordering::Relaxed);
    api.admin("PATCH", "/v1/tenants/acme", Some(json!({"disabled": true})))
        .await;
    for poll in polls {
        let (reply, _) = poll.await.unwrap();
        assert_eq!(reply.status, 200);
        assert_eq!(parse(&reply.body).revision, revision + 1);
        assert!(parse(&reply.body).tenants.is_empty());
    }
    let loads = api.state.metrics.snapshots_loaded.load(Ordering::Relaxed) - loaded;
    assert_eq!(loads, 1, "one database read for four polls");
}

/// A load reads every tenant: while changes stream in, the next load waits several times the last one's
/// duration, so serving gateways cannot take all the control plane's time from the writes.
#[sqlx::test(migrations = "../migrations")]
async fn loads_are_spaced_by_their_cost(pool: PgPool) {
    let api = Api::new(pool).await;
    let tenants: Vec<_> = (0..2000)
        .map(|i| json!({"tenant": {"name": format!("t{i}")}, "route": single("redis://127.0.0.1:1")}))
        .collect();
    let reply = api
        .admin("POST", "/v1/import", Some(json!({"tenants": tenants})))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.body);

    let started = Instant::now();
    let first = api.gateway("GET", "/v1/snapshot", None).await;
    let first_took = started.elapsed();
    assert_eq!(first.status, 200);
    api.create_tenant("one-more").await;
    let started = Instant::now();
    let second = api.gateway("GET", "/v1/snapshot", None).await;
    let second_took = started.elapsed();
    assert_eq!(
        parse(&second.body).revision,
        parse(&first.body).revision + 1
    );
    assert!(
        second_took >= first_took * 2,
        "the second load waited {second_took:?} after one of {first_took:?}"
    );
    assert_eq!(
        api.state.metrics.snapshots_loaded.load(Ordering::Relaxed),
        2
    );
}
