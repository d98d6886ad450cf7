//! Migrating tenants that share databases through key namespaces (docs/migration.md, "Tenants sharing a
//! database"): a real control plane on Postgres, a gateway following it, and redis-servers holding several
//! tenants' keys. Backfill, verify and repair touch the migrating tenant's keys only, on both sides: every other
//! key keeps its exact DUMP payload, a stray key on the destination survives verify, and a destination where the
//! tenant's keys could meet another tenant's is refused before anything is written.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Ctl, Gateway, RedisServer, allocate_port};

/// Keys each tenant holds before its migration.
const KEYS: usize = 300;

/// Every key of `con` that `keep` selects, with its DUMP payload.
fn dumps(con: &mut redis::Connection, keep: impl Fn(&[u8]) -> bool) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.into_iter()
        .filter(|key| keep(key))
        .filter_map(|key| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(&key).query(con).expect("DUMP");
            Some((key, dump?))
        })
        .collect()
}

/// Asserts two sets of DUMP payloads are equal, naming the keys that differ.
fn assert_same(
    actual: &BTreeMap<Vec<u8>, Vec<u8>>,
    expected: &BTreeMap<Vec<u8>, Vec<u8>>,
    what: &str,
) {
    let names = |keys: Vec<&Vec<u8>>| -> Vec<String> {
        keys.into_iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    };
    let differ = names(
        expected
            .keys()
            .filter(|k| actual.get(*k) != expected.get(*k))
            .collect(),
    );
    let extra = names(
        actual
            .keys()
            .filter(|k| !expected.contains_key(*k))
            .collect(),
    );
    assert!(
        differ.is_empty() && extra.is_empty(),
        "{what}: differ or missing {differ:?}, extra {extra:?}"
    );
}

/// Every key of `con` under `prefix` with its type and value (hash fields and set members sorted): what verify
/// calls equal, since a hash whose fields came in another order on each side DUMPs differently.
fn values(con: &mut redis::Connection, prefix: &str) -> BTreeMap<Vec<u8>, (String, Vec<Vec<u8>>)> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    let mut all = BTreeMap::new();
    for key in keys
        .into_iter()
        .filter(|k| k.starts_with(prefix.as_bytes()))
    {
        let kind: String = redis::cmd("TYPE").arg(&key).query(con).expect("TYPE");
        let read = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).clone(),
            "hash" => redis::cmd("HGETALL").arg(&key).clone(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).clone(),
            _ => redis::cmd("SMEMBERS").arg(&key).clone(),
        };
        let mut value: Vec<Vec<u8>> = read.query(con).expect("a value");
        if kind == "hash" {
            let mut pairs: Vec<Vec<u8>> = value.chunks(2).map(|p| p.join(&b"="[..])).collect();
            pairs.sort();
            value = pairs;
        } else if kind == "set" {
            value.sort();
        }
        all.insert(key, (kind, value));
    }
    all
}

fn under(prefix: &'static str) -> impl Fn(&[u8]) -> bool {
    move |key| key.starts_with(prefix.as_bytes())
}

/// `KEYS` keys of four types under `prefix` (a third with a TTL), as the gateway stores a namespaced tenant's keys.
fn fill(con: &mut redis::Connection, prefix: &str) {
    let mut pipe = redis::pipe();
    for i in 0..KEYS {
        let key = format!("{prefix}k{i}");
        match i % 4 {
            0 => pipe.cmd("SET").arg(&key).arg(format!("v{i}")).ignore(),
            1 => pipe.cmd("HSET").arg(&key).arg("a").arg(i).ignore(),
            2 => pipe.cmd("RPUSH").arg(&key).arg(1).arg(i).ignore(),
            _ => pipe.cmd("SADD").arg(&key).arg(1).arg(i).ignore(),
        };
        if i % 3 == 0 {
            pipe.cmd("EXPIRE").arg(&key).arg(7200).ignore();
        }
    }
    let _: () = pipe.query(con).expect("fill");
}

fn single(server: &RedisServer) -> Value {
    json!({"type": "single", "target": server.url()})
}

/// Takes a step over the API, retrying while the gateway does not serve the migration's route yet.
async fn step(cp: &ControlPlane, tenant: &str, id: i64, action: &str) -> Value {
    let started = Instant::now();
    loop {
        let path = format!("/v1/tenants/{tenant}/migrations/{id}/{action}");
        let (status, body) = cp.call("POST", &path, None).await;
        if status == 200 {
            return body;
        }
        assert!(
            status == 409 && body["error"] == "gateways_not_converged",
            "{action}: {status} {body}"
        );
        assert!(started.elapsed() < Duration::from_secs(30), "{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a task step with `switchyard-ctl ... --watch` and answers the task's final counters.
fn task(ctl: &Ctl, action: &str, tenant: &str, id: &str) -> Value {
    ctl.ok(&[
        "migrations",
        action,
        tenant,
        id,
        "--watch",
        "--interval",
        "0.1",
    ]);
    let migration = ctl.json(&["migrations", "get", tenant, id]);
    let counters = match action {
        "backfill" => &migration["progress"]["backfill"],
        _ => &migration["progress"]["verify"],
    };
    assert_eq!(counters["failed"], 0, "{migration}");
    counters.clone()
}

/// Clients of a tenant writing through the gateway (strings set and deleted, hash fields, list pushes, set
/// members) on the tenant's existing keys and a few new ones, until stopped.
struct Writers {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<Vec<String>>>,
}

impl Writers {
    async fn start(gateway: &Gateway, secret: &str) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for client in 0..4usize {
            let mut con = gateway.client(Some(secret)).await;
            let (stop, acknowledged) = (Arc::clone(&stop), Arc::clone(&acknowledged));
            tasks.push(tokio::spawn(async move {
                let mut errors = Vec::new();
                let mut seq = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    // Client n owns the keys of type n: each key's commands come in one client's order.
                    let i = client + 4 * ((seq * 7919) % ((KEYS + 40) / 4));
                    let key = format!("k{i}");
                    let command = match (client, seq % 4) {
                        (0, 0) => redis::cmd("DEL").arg(&key).clone(),
                        (0, _) => redis::cmd("SET").arg(&key).arg(seq).clone(),
                        (1, _) => redis::cmd("HSET").arg(&key).arg(seq % 3).arg(seq).clone(),
                        (2, _) => redis::cmd("RPUSH").arg(&key).arg(seq).clone(),
                        _ => redis::cmd("SADD").arg(&key).arg(seq % 20).clone(),
                    };
                    match command.query_async::<redis::Value>(&mut con).await {
                        Ok(_) => {
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => errors.push(format!("{key}: {e}")),
                    }
                }
                errors
            }));
        }
        Writers {
            stop,
            acknowledged,
            tasks,
        }
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let errors = task.await.expect("a writer");
            assert!(errors.is_empty(), "clients saw errors: {errors:?}");
        }
        self.acknowledged.load(Ordering::Relaxed)
    }
}

/// Three namespaced tenants in one database: `t1` moves to a Redis of its own, `t2` into a Redis holding `t4`'s
/// keys and stray keys of no tenant, while its clients write; `t3` stays. Every key that is not the migrating
/// tenant's keeps its DUMP payload, on both sides, and each migration scans and copies its tenant's keys alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaced_tenants_move_out_of_a_shared_database_and_into_one() {
    let cp = ControlPlane::start();
    let (source, dedicated, shared) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    // `t1*:` holds a glob character: unescaped, its pattern `t1*:*` would match `t1x:`, t3's namespace.
    for (tenant, namespace, server) in [
        ("t1", "t1*:", &source),
        ("t2", "t2:", &source),
        ("t3", "t1x:", &source),
        ("t4", "t4:", &shared),
    ] {
        fill(&mut server.client(), namespace);
        let body = json!({"name": tenant, "namespace": namespace});
        cp.create_tenant_with(body, single(server)).await;
    }
    let t2_secret = cp.issue_secret("t2").await;
    // Keys of no tenant on the destination: outside t2's namespace however close to it.
    let _: () = redis::cmd("MSET")
        .arg("stray")
        .arg(1)
        .arg("t2")
        .arg(2)
        .arg("t2x:1")
        .arg(3)
        .query(&mut shared.client())
        .expect("MSET");
    let not_moving = |key: &[u8]| !key.starts_with(b"t1*:") && !key.starts_with(b"t2:");
    let source_before = dumps(&mut source.client(), not_moving);
    let shared_before = dumps(&mut shared.client(), |key| !key.starts_with(b"t2:"));
    assert_eq!(source_before.len(), KEYS);
    assert_eq!(shared_before.len(), KEYS + 3);

    let cache = std::env::temp_dir().join(format!("switchyard-mig-ns-{}.json", allocate_port()));
    let gateway = Gateway::builder().start_with_control_plane(&cp, &cache);
    let ctl = Ctl::new(&cp);

    // t1 to a Redis of its own, with switchyard-ctl as the runbook does it.
    let created = ctl.ok(&["migrations", "create", "t1", "--to", &dedicated.url()]);
    assert!(created.contains("migration 1 double_write"), "{created}");
    let backfill = task(&ctl, "backfill", "t1", "1");
    assert_eq!(backfill["scanned"], KEYS, "{backfill}");
    assert_eq!(backfill["copied"], KEYS, "{backfill}");
    // Estimated from a sample of the shared database: about a third of it, never all of it.
    let estimate = backfill["estimated_total"].as_u64().unwrap_or(0);
    assert!(
        (KEYS as u64 / 2..2 * KEYS as u64).contains(&estimate),
        "{backfill}"
    );
    let verify = task(&ctl, "verify", "t1", "1");
    assert_eq!(verify["matched"], KEYS, "{verify}");
    assert_eq!(verify["scanned"], 2 * KEYS, "{verify}");
    assert_eq!(verify["removed"], 0, "{verify}");
    ctl.ok(&["migrations", "cutover", "t1", "1"]);
    ctl.ok(&["migrations", "finish", "t1", "1"]);
    assert_same(
        &dumps(&mut dedicated.client(), |_| true),
        &dumps(&mut source.client(), under("t1*:")),
        "the dedicated Redis holds t1's keys, under its namespace, and nothing else",
    );

    // t2 into the shared Redis under writes. Migration ids are global: t2's first migration is 2.
    let writers = Writers::start(&gateway, &t2_secret).await;
    let body = json!({"to": shared.url(), "ack": "all", "limits": {"batch": 50}});
    let created = cp
        .expect("POST", "/v1/tenants/t2/migrations", Some(body), 201)
        .await;
    assert_eq!(created["id"], 2, "{created}");
    let missing = ctl.fails(2, &["migrations", "get", "t2", "1"]);
    assert!(
        missing.stderr.contains("tenant 't2' has no migration 1")
            && missing.stderr.contains("migrations list t2"),
        "{missing:?}"
    );
    let backfill = task(&ctl, "backfill", "t2", "2");
    assert!(
        backfill["scanned"].as_u64().unwrap_or(0) <= (KEYS + 40) as u64,
        "only t2's keys are scanned: {backfill}"
    );
    let verify = task(&ctl, "verify", "t2", "2");
    assert!(
        verify["scanned"].as_u64().unwrap_or(0) <= 2 * (KEYS + 40) as u64,
        "{verify}"
    );
    let acknowledged = writers.stop().await;
    assert!(acknowledged > 100, "the writers wrote during the migration");
    // Once the writes stop, a verify finds both sides equal, and leaves the stray keys alone.
    let verify = task(&ctl, "verify", "t2", "2");
    assert_eq!(verify["unresolved"], 0, "{verify}");
    assert_eq!(verify["removed"], 0, "{verify}");
    assert_same(
        &dumps(&mut shared.client(), |key| !key.starts_with(b"t2:")),
        &shared_before,
        "verify touched keys outside t2's namespace",
    );
    step(&cp, "t2", 2, "cutover").await;
    step(&cp, "t2", 2, "finish").await;

    let moved = values(&mut shared.client(), "t2:");
    assert!(moved.len() >= KEYS - 40, "{}", moved.len());
    assert!(
        moved == values(&mut source.client(), "t2:"),
        "t2's keys moved whole, under their namespace"
    );
    let after = dumps(&mut shared.client(), |key| !key.starts_with(b"t2:"));
    assert_same(&after, &shared_before, "the shared Redis' other keys");
    let after = dumps(&mut source.client(), not_moving);
    assert_same(&after, &source_before, "the source's other tenants' keys");
    let _ = std::fs::remove_file(cache);
}

/// Asks for a migration of `tenant` to `to`, which must be refused with a 409; answers the error.
async fn refused(cp: &ControlPlane, tenant: &str, to: &RedisServer) -> Value {
    let path = format!("/v1/tenants/{tenant}/migrations");
    cp.expect("POST", &path, Some(json!({"to": to.url()})), 409)
        .await
}

/// A destination where the migrating tenant's keys could meet another tenant's is refused before anything
/// starts: a tenant without a namespace owns its whole database, so it shares one with nobody, and nobody
/// without a namespace (an admin tenant included) may be in a namespaced tenant's destination. A namespace
/// change on the way is refused too, and so is one during a migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_destination_where_keys_could_collide_is_refused() {
    let cp = ControlPlane::start();
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let [a, b, c, d, e] = &servers[..] else {
        unreachable!("five servers")
    };
    cp.create_tenant("u1", single(a)).await;
    cp.create_tenant("u2", single(b)).await;
    let admin = json!({"name": "ops", "allow_admin": true});
    cp.create_tenant_with(admin, single(c)).await;
    cp.create_tenant_with(json!({"name": "n1", "namespace": "n1:"}), single(d))
        .await;
    cp.create_tenant_with(json!({"name": "n2", "namespace": "n2:"}), single(e))
        .await;

    let shared = refused(&cp, "u1", b).await;
    assert_eq!(shared["error"], "destination_shared", "{shared}");
    let message = shared["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("'u2'") && message.contains("/0"),
        "{shared}"
    );
    let shared = refused(&cp, "n1", c).await;
    assert_eq!(shared["error"], "destination_shared", "{shared}");
    assert!(
        shared["message"]
            .as_str()
            .unwrap_or_default()
            .contains("'ops'"),
        "{shared}"
    );
    // No migration was created by the refusals.
    let list = cp
        .expect("GET", "/v1/tenants/u1/migrations", None, 200)
        .await;
    assert_eq!(list["migrations"], json!([]));

    // A new namespace on the way is refused with the reason.
    let rename = json!({"to": e.url(), "namespace": "n1b:"});
    let answer = cp
        .expect("POST", "/v1/tenants/n1/migrations", Some(rename), 409)
        .await;
    assert_eq!(answer["error"], "namespace_change", "{answer}");
    // Namespaces that cannot overlap share a destination.
    let created = cp
        .expect(
            "POST",
            "/v1/tenants/n1/migrations",
            Some(json!({"to": e.url()})),
            201,
        )
        .await;
    // While it runs, the tenant's namespace stays.
    let patch = json!({"namespace": "n1b:"});
    let answer = cp
        .expect("PATCH", "/v1/tenants/n1", Some(patch.clone()), 409)
        .await;
    assert_eq!(answer["error"], "migration_active", "{answer}");
    let id = created["id"].as_i64().unwrap_or_default();
    let path = format!("/v1/tenants/n1/migrations/{id}/abort");
    cp.expect("POST", &path, None, 200).await;
    // Aborted, the change is the route guard's: the keys stored under n1: would no longer be found.
    let answer = cp.expect("PATCH", "/v1/tenants/n1", Some(patch), 409).await;
    assert_eq!(answer["error"], "keys_would_move", "{answer}");
    let forced = json!({"namespace": "n1b:", "force": true});
    cp.expect("PATCH", "/v1/tenants/n1", Some(forced), 200)
        .await;
}

/// The backfill's counters are there from its first batch on, not half a second later: a backfill limited to
/// one key a second shows its first page's keys at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backfill_progress_shows_from_the_first_key() {
    let cp = ControlPlane::start();
    let (source, destination) = (RedisServer::start(), RedisServer::start());
    for (tenant, namespace) in [("p", "p:"), ("q", "q:")] {
        fill(&mut source.client(), namespace);
        let body = json!({"name": tenant, "namespace": namespace});
        cp.create_tenant_with(body, single(&source)).await;
    }
    let limits = json!({"batch": 100, "keys_per_sec": 1});
    let body = json!({"to": destination.url(), "limits": limits});
    let created = cp
        .expect("POST", "/v1/tenants/p/migrations", Some(body), 201)
        .await;
    let id = created["id"].as_i64().unwrap_or_default();
    step(&cp, "p", id, "backfill").await;
    let started = Instant::now();
    let path = format!("/v1/tenants/p/migrations/{id}");
    loop {
        let migration = cp.expect("GET", &path, None, 200).await;
        let backfill = &migration["progress"]["backfill"];
        if backfill["scanned"].as_u64().unwrap_or(0) > 0 {
            assert!(backfill["copied"].as_u64().unwrap_or(0) > 0, "{migration}");
            let estimate = backfill["estimated_total"].as_u64().unwrap_or(0);
            assert!((1..2 * KEYS as u64).contains(&estimate), "{migration}");
            break;
        }
        // Its first page (about 50 keys) takes the task 50 s at one key a second: a save after the page shows.
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no progress yet: {migration}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cp.expect("POST", &format!("{path}/abort"), None, 200).await;
}
