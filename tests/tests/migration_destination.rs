//! A migration's destination while the migration is active (docs/migration.md, "Before you start"): a real control
//! plane on Postgres running the tasks against redis-servers. No route change brings a tenant whose keys could be
//! the migrating tenant's into the destination, and a destination shared past that rule (rows written by a control
//! plane without it) stops verify, cutover and finish before they touch the other tenant's keys.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, RedisServer};

/// Keys the migrating tenant holds on its source.
const KEYS: usize = 50;

fn single(server: &RedisServer) -> Value {
    json!({"type": "single", "target": server.url()})
}

/// The place the control plane names a redis-server's database 0 by.
fn place(server: &RedisServer) -> String {
    format!("127.0.0.1:{}/0", server.port())
}

/// A control plane, tenant `t1` (namespace `t1:`) with `KEYS` keys on `source` migrating to `destination`, and
/// the admin tenant `ops` (no namespace) on `other`.
struct Migrating {
    cp: ControlPlane,
    /// Only kept running: the tasks read it.
    _source: RedisServer,
    destination: RedisServer,
    other: RedisServer,
    /// The migration's id.
    id: i64,
}

impl Migrating {
    async fn start() -> Migrating {
        let cp = ControlPlane::start();
        let (source, destination, other) = (
            RedisServer::start(),
            RedisServer::start(),
            RedisServer::start(),
        );
        let mut pipe = redis::pipe();
        for i in 0..KEYS {
            pipe.cmd("SET").arg(format!("t1:k{i}")).arg(i).ignore();
        }
        let _: () = pipe.query(&mut source.client()).expect("fill");
        let t1 = json!({"name": "t1", "namespace": "t1:"});
        cp.create_tenant_with(t1, single(&source)).await;
        let admin = json!({"name": "ops", "allow_admin": true});
        cp.create_tenant_with(admin, single(&other)).await;
        let body = json!({"to": destination.url()});
        let created = cp
            .expect("POST", "/v1/tenants/t1/migrations", Some(body), 201)
            .await;
        let id = created["id"].as_i64().unwrap_or_default();
        Migrating {
            cp,
            _source: source,
            destination,
            other,
            id,
        }
    }

    fn parts(&self) -> (&ControlPlane, &RedisServer, &RedisServer, i64) {
        (&self.cp, &self.destination, &self.other, self.id)
    }
}

/// Moves `tenant` to `to` by hand, forced: these tenants' keys are the test's to place (the route guard would
/// refuse the move, which is not what is tested here).
async fn put_route(cp: &ControlPlane, tenant: &str, to: &RedisServer) -> (u16, Value) {
    let path = format!("/v1/tenants/{tenant}/route");
    cp.call(
        "PUT",
        &path,
        Some(json!({"route": single(to), "force": true})),
    )
    .await
}

/// Asserts a 409 `destination_shared` naming migration `id` of `t1`, tenant `other` and `database`.
fn assert_shared((status, body): (u16, Value), id: i64, other: &str, database: &str) {
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("destination_shared")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    for part in [
        format!("migration {id} of tenant 't1'"),
        format!("'{other}'"),
        database.to_string(),
    ] {
        assert!(message.contains(&part), "{part} missing from {message}");
    }
}

async fn step(cp: &ControlPlane, id: i64, action: &str) -> (u16, Value) {
    let path = format!("/v1/tenants/t1/migrations/{id}/{action}");
    cp.call("POST", &path, None).await
}

/// Takes a step and waits for its task to end in `done`.
async fn task(cp: &ControlPlane, id: i64, action: &str, done: &str) {
    let path = format!("/v1/tenants/t1/migrations/{id}");
    cp.expect("POST", &format!("{path}/{action}"), None, 200)
        .await;
    let started = Instant::now();
    loop {
        let migration = cp.expect("GET", &path, None, 200).await;
        if migration["state"] == done {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{migration}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// While `t1` (namespace `t1:`) migrates into a Redis, an admin tenant without a namespace and a tenant whose
/// namespace overlaps `t1:` (stored by a control plane of an earlier version: the API refuses to make one) cannot
/// route there, and the refusal names the migration, its tenant and the database; a tenant whose namespace is apart
/// can, and the migration's backfill and verify leave its key alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_brings_colliding_keys_into_an_active_destination() {
    let migrating = Migrating::start().await;
    let (cp, destination, other, id) = migrating.parts();
    for tenant in ["shop", "legacy"] {
        let body = json!({"name": tenant, "namespace": format!("{tenant}:")});
        cp.create_tenant_with(body, single(other)).await;
    }
    cp.sql(
        r#"UPDATE tenants SET policy = jsonb_set(policy, '{namespace}', '"t1:old:"') WHERE name = 'legacy'"#,
    );

    let database = place(destination);
    assert_shared(
        put_route(cp, "ops", destination).await,
        id,
        "ops",
        &database,
    );
    let legacy = put_route(cp, "legacy", destination).await;
    assert_shared(legacy, id, "legacy", &database);
    let (status, body) = put_route(cp, "shop", destination).await;
    assert_eq!(status, 200, "{body}");

    let _: () = redis::cmd("SET")
        .arg("shop:cart")
        .arg("kept")
        .query(&mut destination.client())
        .expect("SET");
    task(cp, id, "backfill", "backfilled").await;
    task(cp, id, "verify", "verified").await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut destination.client())
        .expect("KEYS");
    assert_eq!(keys.len(), KEYS + 1, "{keys:?}");
    let kept: Option<String> = redis::cmd("GET")
        .arg("shop:cart")
        .query(&mut destination.client())
        .expect("GET");
    assert_eq!(kept.as_deref(), Some("kept"));
}

/// The admin tenant `ops` routed into `t1`'s destination the way a control plane without the rule would (a new
/// route version and its database, straight into Postgres), and wrote keys there under `t1:`: verify (which would
/// overwrite one and delete the other), cutover and finish answer 409 `destination_shared`, the keys stay, and
/// once `ops` moves out the migration goes on. Abort, which leaves the destination, is never refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_refuse_a_destination_shared_past_the_rule() {
    let migrating = Migrating::start().await;
    let (cp, destination, other, id) = migrating.parts();
    task(cp, id, "backfill", "backfilled").await;
    task(cp, id, "verify", "verified").await;

    let database = place(destination);
    let share = || {
        cp.sql(&format!(
            "INSERT INTO route_versions (tenant_id, version, route, author)
               SELECT t.id, (SELECT max(version) + 1 FROM route_versions WHERE tenant_id = t.id),
                      '{{\"type\": \"single\", \"target\": \"{}\"}}', 'an earlier control plane'
               FROM tenants t WHERE t.name = 'ops';
             UPDATE tenant_databases SET place = '{database}'
               WHERE tenant_id = (SELECT id FROM tenants WHERE name = 'ops')",
            destination.url()
        ))
    };
    share();
    let ops_keys = [("t1:k0", "ops"), ("t1:ops-only", "ops")];
    for (key, value) in ops_keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .query(&mut destination.client())
            .expect("SET");
    }
    for action in ["verify", "cutover"] {
        let refused = step(cp, id, action).await;
        assert!(
            refused.1["message"]
                .as_str()
                .is_some_and(|m| m.contains("abort")),
            "{refused:?}"
        );
        assert_shared(refused, id, "ops", &database);
    }
    for (key, value) in ops_keys {
        let stored: Option<String> = redis::cmd("GET")
            .arg(key)
            .query(&mut destination.client())
            .expect("GET");
        assert_eq!(stored.as_deref(), Some(value), "{key}");
    }

    // Moved out through the API, `ops` lets the migration cut over; shared again, it holds finish back.
    let (status, body) = put_route(cp, "ops", other).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = step(cp, id, "cutover").await;
    assert_eq!(status, 200, "{body}");
    share();
    assert_shared(step(cp, id, "finish").await, id, "ops", &database);
    // From cut_over the abort repairs old from new first (rolling_back), then returns to old.
    task(cp, id, "abort", "aborted").await;
}
