//! Live migration end to end: a real control plane on Postgres, a real gateway following it, a standalone Redis
//! as the old deployment, a 3-master Redis Cluster (or another Redis) as the new one, and a reference
//! redis-server that receives every command the gateway acknowledged. After `finish`, the new deployment must
//! hold exactly what the reference holds, key by key.
//!
//! `SWITCHYARD_MIGRATION_KEYS` sets the size of the main test: by default the 200,000 keys (under three
//! minutes on a loaded 2-core machine, most of it the final key-by-key comparison); 3,000 for a quick local run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_schemas::RouteTable;
use switchyard_schemas::placement::Placement;
use switchyard_tests::{
    ADMIN_TOKEN, ControlPlane, Gateway, RedisCluster, RedisServer, binary, connect,
};

const TYPES: [&str; 6] = ["string", "hash", "list", "set", "zset", "stream"];
const CLIENTS: usize = 20;

/// A key's type, a canonical form of its value, and when it expires (milliseconds since the epoch, as read).
type Contents = BTreeMap<Vec<u8>, (String, Vec<Vec<u8>>, Option<i64>)>;

/// Expiry times compared with this slack: copies take a moment, and the two sides are read at different times.
const EXPIRY_SLACK_MS: i64 = 10_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Every key of every connection (each one a whole server: a standalone or one cluster master).
fn contents(servers: &mut [redis::Connection]) -> Contents {
    let mut all = Contents::new();
    for con in servers {
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(con).unwrap();
            let mut value: Vec<Vec<u8>> = match kind.as_str() {
                "string" => vec![redis::cmd("GET").arg(&key).query(con).unwrap()],
                "hash" => {
                    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
                        redis::cmd("HGETALL").arg(&key).query(con).unwrap();
                    pairs
                        .into_iter()
                        .map(|(f, v)| [f, b"=".to_vec(), v].concat())
                        .collect()
                }
                "list" => redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(con)
                    .unwrap(),
                "set" => redis::cmd("SMEMBERS").arg(&key).query(con).unwrap(),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(con)
                    .unwrap(),
                "stream" => {
                    let entries: redis::Value = redis::cmd("XRANGE")
                        .arg(&key)
                        .arg("-")
                        .arg("+")
                        .query(con)
                        .unwrap();
                    vec![format!("{entries:?}").into_bytes()]
                }
                other => panic!("unexpected type {other}"),
            };
            if matches!(kind.as_str(), "hash" | "set") {
                value.sort();
            }
            let pttl: i64 = redis::cmd("PTTL").arg(&key).query(con).unwrap();
            let expires = (pttl >= 0).then(|| now_ms() + pttl);
            all.insert(key, (kind, value, expires));
        }
    }
    all
}

/// Asserts two deployments hold the same keys with the same values and TTLs, naming the first differences.
fn assert_same(expected: &Contents, actual: &Contents, what: &str) {
    let mut problems = Vec::new();
    for (key, value) in expected {
        let same = |got: &(String, Vec<Vec<u8>>, Option<i64>)| {
            let expiry = match (got.2, value.2) {
                (None, None) => true,
                (Some(a), Some(b)) => (a - b).abs() <= EXPIRY_SLACK_MS,
                _ => false,
            };
            got.0 == value.0 && got.1 == value.1 && expiry
        };
        match actual.get(key) {
            None => problems.push(format!("missing {}", String::from_utf8_lossy(key))),
            Some(got) if !same(got) => problems.push(format!(
                "differs {}: expected {value:?}, got {got:?}",
                String::from_utf8_lossy(key)
            )),
            _ => {}
        }
    }
    for key in actual.keys().filter(|k| !expected.contains_key(*k)) {
        problems.push(format!("extra {}", String::from_utf8_lossy(key)));
    }
    assert!(
        problems.is_empty(),
        "{what}: {} of {} keys wrong, e.g. {:?}",
        problems.len(),
        expected.len(),
        &problems[..problems.len().min(10)]
    );
}

fn key(kind: &str, i: usize) -> String {
    format!("k:{kind}:{i}")
}

/// Writes `count` keys of every type (a third with a TTL) to each connection, identically.
async fn populate(targets: &mut [redis::aio::MultiplexedConnection], count: usize) {
    for chunk in (0..count).collect::<Vec<_>>().chunks(500) {
        let mut pipe = redis::pipe();
        for &i in chunk {
            let kind = TYPES[i % TYPES.len()];
            let k = key(kind, i);
            match kind {
                "string" => pipe.cmd("SET").arg(&k).arg(format!("value-{i}")).ignore(),
                "hash" => pipe
                    .cmd("HSET")
                    .arg(&k)
                    .arg("a")
                    .arg(i)
                    .arg("b")
                    .arg("x")
                    .ignore(),
                "list" => pipe.cmd("RPUSH").arg(&k).arg(1).arg(2).arg(i).ignore(),
                "set" => pipe.cmd("SADD").arg(&k).arg("m1").arg(i).ignore(),
                "zset" => pipe
                    .cmd("ZADD")
                    .arg(&k)
                    .arg(1)
                    .arg("a")
                    .arg(i)
                    .arg("b")
                    .ignore(),
                _ => pipe.cmd("XADD").arg(&k).arg("1-1").arg("f").arg(i).ignore(),
            };
            if i % 3 == 0 {
                pipe.cmd("EXPIRE").arg(&k).arg(7200).ignore();
            }
        }
        for target in targets.iter_mut() {
            let _: () = pipe.query_async(target).await.unwrap();
        }
    }
}

/// 20 clients writing and deleting through the gateway; every acknowledged command is applied to the reference.
struct Writers {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<AtomicU64>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    async fn start(
        gateway: &Gateway,
        secret: &str,
        reference: &RedisServer,
        keys: usize,
    ) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicU64::new(0));
        let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for client in 0..CLIENTS {
            let mut through = gateway.client(Some(secret)).await;
            let mut reference_con = connect(&reference.url()).await;
            let (stop, acknowledged, errors) = (
                Arc::clone(&stop),
                Arc::clone(&acknowledged),
                Arc::clone(&errors),
            );
            tasks.push(tokio::spawn(async move {
                let mut seq = 0u64;
                // Each client owns the keys whose index is its number modulo CLIENTS, so the order of the
                // commands on one key is the order this client sent them in.
                let mine: Vec<usize> = (client..keys + 200).step_by(CLIENTS).collect();
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    let i = mine[(seq as usize * 7919) % mine.len()];
                    let kind = TYPES[i % TYPES.len()];
                    let k = key(kind, i);
                    let command = match (seq % 5, kind) {
                        (0, _) => redis::cmd("DEL").arg(&k).clone(),
                        (1, _) => redis::cmd("EXPIRE").arg(&k).arg(3600).clone(),
                        (_, "string") => redis::cmd("SET").arg(&k).arg(format!("w{seq}")).clone(),
                        (_, "hash") => redis::cmd("HSET")
                            .arg(&k)
                            .arg(format!("f{}", seq % 4))
                            .arg(seq)
                            .clone(),
                        (_, "list") => redis::cmd("RPUSH").arg(&k).arg(seq).clone(),
                        (_, "set") => redis::cmd("SADD").arg(&k).arg(seq % 50).clone(),
                        (_, "zset") => redis::cmd("ZADD")
                            .arg(&k)
                            .arg(seq)
                            .arg(format!("m{}", seq % 9))
                            .clone(),
                        // XADD with a generated ID is refused on a double-written route (its IDs are each
                        // node's clock), which docs/migration.md lists; XDEL is deterministic.
                        _ => redis::cmd("XDEL")
                            .arg(&k)
                            .arg(format!("1-{}", seq % 2))
                            .clone(),
                    };
                    let reply: redis::RedisResult<redis::Value> =
                        command.query_async(&mut through).await;
                    match reply {
                        Ok(_) => {
                            let _: redis::Value =
                                command.query_async(&mut reference_con).await.unwrap();
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => errors.lock().unwrap().push(format!("{k}: {e}")),
                    }
                }
            }));
        }
        Writers {
            stop,
            acknowledged,
            errors,
            tasks,
        }
    }

    /// Waits until at least `more` further commands were acknowledged.
    async fn progress(&self, more: u64) {
        let target = self.acknowledged.load(Ordering::Relaxed) + more;
        let started = Instant::now();
        while self.acknowledged.load(Ordering::Relaxed) < target {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "writers stalled"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        let errors = self.errors.lock().unwrap();
        assert!(
            errors.is_empty(),
            "clients saw errors: {:?}",
            &errors[..errors.len().min(10)]
        );
        self.acknowledged.load(Ordering::Relaxed)
    }
}

/// A control plane, one gateway following it, and a tenant `acme` on `old`.
struct Stack {
    cp: ControlPlane,
    gateway: Gateway,
    secret: String,
    _cache: tempfile_path::Path,
}

mod tempfile_path {
    /// A file path removed on drop.
    pub(crate) struct Path(pub std::path::PathBuf);
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Stack {
    async fn start(old: &RedisServer) -> Stack {
        Stack::on(json!(old.url())).await
    }

    /// A stack whose tenant starts on the resource at `old` (a URL).
    async fn on(old: Value) -> Stack {
        let cp = ControlPlane::start();
        cp.expect("POST", "/v1/tenants", Some(json!({"name": "acme"})), 201)
            .await;
        let credential = cp
            .expect("POST", "/v1/tenants/acme/credentials", Some(json!({})), 201)
            .await;
        let secret = credential["secret"].as_str().unwrap().to_string();
        let route = json!({"type": "single", "target": old});
        cp.expect(
            "PUT",
            "/v1/tenants/acme/route",
            Some(json!({"route": route})),
            200,
        )
        .await;
        let cache = tempfile_path::Path(std::env::temp_dir().join(format!(
            "switchyard-migration-cache-{}-{}.json",
            std::process::id(),
            switchyard_tests::allocate_port()
        )));
        let gateway = Gateway::builder().start_with_control_plane(&cp, &cache.0);
        Stack {
            cp,
            gateway,
            secret,
            _cache: cache,
        }
    }

    async fn migration(&self, id: i64) -> Value {
        self.cp
            .expect(
                "GET",
                &format!("/v1/tenants/acme/migrations/{id}"),
                None,
                200,
            )
            .await
    }

    /// Takes a step, retrying while the gateways have not converged on the migration's latest route yet.
    async fn step(&self, id: i64, action: &str) -> Value {
        let started = Instant::now();
        loop {
            let (status, body) = self
                .cp
                .call(
                    "POST",
                    &format!("/v1/tenants/acme/migrations/{id}/{action}"),
                    None,
                )
                .await;
            if status == 200 {
                return body;
            }
            assert!(
                status == 409 && body["error"] == "gateways_not_converged",
                "{action}: {status} {body}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "gateways never converged: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (generously: the machine is shared) until the migration reaches `state`.
    async fn wait_state(&self, id: i64, state: &str) -> Value {
        self.wait(id, |m| m["state"] == state).await
    }

    /// Waits (generously) until the migration is as `done` says.
    async fn wait(&self, id: i64, done: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let migration = self.migration(id).await;
            if done(&migration) {
                return migration;
            }
            assert!(
                started.elapsed() < Duration::from_secs(600),
                "the migration never got there: {migration}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the gateway serves the migration's latest route.
    /// Waits until the backfill's saved progress has scanned at least `keys` keys; answers how many it has.
    async fn wait_scanned(&self, id: i64, keys: u64) -> u64 {
        let started = Instant::now();
        loop {
            let migration = self.migration(id).await;
            let scanned = migration["progress"]["backfill"]["scanned"]
                .as_u64()
                .unwrap_or(0);
            if scanned >= keys {
                return scanned;
            }
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "backfill made no progress: {migration}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs verify and checks that it matched all `keys` and had nothing to repair.
    async fn verify_clean(&self, id: i64, keys: usize) {
        self.step(id, "verify").await;
        let verified = self.wait_state(id, "verified").await;
        let verify = &verified["progress"]["verify"];
        for counter in ["repaired", "removed", "unresolved", "failed"] {
            assert_eq!(verify[counter], 0, "{counter}: {verified}");
        }
        assert_eq!(verify["matched"], keys, "{verified}");
    }

    async fn wait_converged(&self, id: i64) {
        let started = Instant::now();
        while self.migration(id).await["converged"] != true {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "gateways never converged"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn create(&self, to: Value, ack: &str, limits: Value) -> i64 {
        let created = self
            .cp
            .expect(
                "POST",
                "/v1/tenants/acme/migrations",
                Some(json!({"to": to, "ack": ack, "limits": limits})),
                201,
            )
            .await;
        assert_eq!(created["state"], "double_write", "{created}");
        created["id"].as_i64().unwrap()
    }
}

fn masters(cluster: &RedisCluster) -> Vec<redis::Connection> {
    cluster
        .masters()
        .iter()
        .map(|m| cluster.client(m.port))
        .collect()
}

/// The main scenario: standalone to a 3-master cluster under 20 writing clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_to_cluster_under_writes_ends_identical() {
    let keys: usize = std::env::var("SWITCHYARD_MIGRATION_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200_000);
    let old = RedisServer::start();
    let reference = RedisServer::start();
    let cluster = RedisCluster::start(3, 0, None);
    let stack = Stack::start(&old).await;
    populate(
        &mut [connect(&old.url()).await, connect(&reference.url()).await],
        keys,
    )
    .await;
    let writers = Writers::start(&stack.gateway, &stack.secret, &reference, keys).await;
    writers.progress(200).await;

    let id = stack
        .create(json!(cluster.url()), "all", json!({"keys_per_sec": 0}))
        .await;
    stack.step(id, "backfill").await;
    let backfilled = stack.wait_state(id, "backfilled").await;
    let backfill = &backfilled["progress"]["backfill"];
    assert!(backfill["copied"].as_u64().unwrap() > 0, "{backfilled}");
    assert_eq!(backfill["failed"], 0, "{backfilled}");
    writers.progress(200).await;

    // As the runbook says: verify again while keys written continuously are left unresolved.
    for attempt in 1.. {
        stack.step(id, "verify").await;
        let verified = stack.wait_state(id, "verified").await;
        let verify = &verified["progress"]["verify"];
        assert_eq!(verify["failed"], 0, "{verified}");
        assert!(verify["matched"].as_u64().unwrap() > 0, "{verified}");
        if verify["unresolved"] == 0 {
            break;
        }
        assert!(
            attempt < 3,
            "still unresolved after {attempt} verifies: {verified}"
        );
    }

    stack.step(id, "cutover").await;
    stack.wait_converged(id).await;
    writers.progress(500).await;
    stack.step(id, "finish").await;
    stack.wait_converged(id).await;
    writers.progress(500).await;
    let acknowledged = writers.stop().await;
    assert!(acknowledged > 1_000);

    let expected = contents(&mut [reference.client()]);
    assert!(expected.len() > keys / 2);
    assert_same(
        &expected,
        &contents(&mut masters(&cluster)),
        "new deployment after finish",
    );
    // The route is the new deployment alone; the audit log shows every step.
    let route = stack
        .cp
        .expect("GET", "/v1/tenants/acme/route", None, 200)
        .await;
    assert_eq!(
        route["route"],
        json!({"type": "single", "target": cluster.url()})
    );
    let audit = stack
        .cp
        .expect("GET", "/v1/audit?tenant=acme", None, 200)
        .await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .filter(|a| a.starts_with("migration."))
        .collect();
    for action in [
        "migration.create",
        "migration.backfill",
        "migration.backfilled",
        "migration.verify",
        "migration.verified",
        "migration.cutover",
        "migration.finish",
    ] {
        assert!(actions.contains(&action), "{action} not in {actions:?}");
    }
}

/// Two fresh Redis servers as a ring-sharded table: the "one shard to several" shape.
fn two_shards(a: &RedisServer, b: &RedisServer) -> Value {
    json!({"type": "sharded", "shards": [
        {"name": "s1", "target": a.url()},
        {"name": "s2", "target": b.url()}]})
}

/// Writes `count` string keys through the gateway and to the reference.
async fn write_some(stack: &Stack, reference: &RedisServer, tag: &str, count: usize) {
    let mut through = stack.gateway.client(Some(&stack.secret)).await;
    let mut reference = connect(&reference.url()).await;
    for i in 0..count {
        let command = redis::cmd("SET").arg(format!("w:{tag}:{i}")).arg(i).clone();
        let _: () = command.query_async(&mut through).await.unwrap();
        let _: () = command.query_async(&mut reference).await.unwrap();
    }
}

/// Reports, as a gateway of its own, that its repair owes the old deployment `pending` keys of the tenant.
async fn owe_old(cp: &ControlPlane, pending: u64) {
    let report = json!({"gateway": "gw-behind", "interval_ms": 10000, "tenants": [], "divergence": [
        {"tenant": "acme", "resource": "old", "samples": 0, "differing": 0, "pending": pending,
         "catching_up": false, "repaired": 0}]});
    let response = reqwest::Client::new()
        .post(format!("{}/v1/gateways/observations", cp.url()))
        .bearer_auth(cp.gateway_token())
        .json(&report)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 204);
}

/// Abort at every step returns the tenant to the old deployment with all its data, the writes made during the
/// migration included (from cut_over, also those old missed as the secondary), and deletes nothing on new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_at_each_step_leaves_old_serving_everything() {
    let old = RedisServer::start();
    let reference = RedisServer::start();
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let stack = Stack::start(&old).await;
    populate(
        &mut [connect(&old.url()).await, connect(&reference.url()).await],
        600,
    )
    .await;
    let old_route = stack
        .cp
        .expect("GET", "/v1/tenants/acme/route", None, 200)
        .await["route"]
        .clone();
    for (n, abort_in) in ["double_write", "backfilled", "verified", "cut_over"]
        .into_iter()
        .enumerate()
    {
        let id = stack.create(two_shards(&a, &b), "all", json!({})).await;
        stack.wait_converged(id).await;
        let steps: &[(&str, &str)] = match abort_in {
            "double_write" => &[],
            "backfilled" => &[("backfill", "backfilled")],
            "verified" => &[("backfill", "backfilled"), ("verify", "verified")],
            _ => &[
                ("backfill", "backfilled"),
                ("verify", "verified"),
                ("cutover", "cut_over"),
            ],
        };
        for (action, state) in steps {
            stack.step(id, action).await;
            stack.wait_state(id, state).await;
        }
        stack.wait_converged(id).await;
        write_some(&stack, &reference, abort_in, 50).await;
        // The gateway double-wrote each key to the shard the table's placement names (the one backfill and
        // verify use), and only there.
        let placement = match serde_json::from_value(two_shards(&a, &b)).unwrap() {
            RouteTable::Sharded { hash, shards, .. } => Placement::new(&hash, &shards),
            _ => unreachable!(),
        };
        for i in 0..50 {
            let k = format!("w:{abort_in}:{i}");
            let owner = placement.shard_of(k.as_bytes());
            for (shard, server) in [&a, &b].into_iter().enumerate() {
                let exists: bool = redis::cmd("EXISTS")
                    .arg(&k)
                    .query(&mut server.client())
                    .unwrap();
                assert_eq!(
                    exists,
                    shard == owner,
                    "{k} on shard {shard} (owner {owner})"
                );
            }
        }
        if abort_in == "cut_over" {
            // Old, the secondary since cutover, misses writes no record will bring back (a write that failed
            // there on a gateway that restarted since, a restore from an older snapshot): a lost write, a stale
            // value, a key the tenant deleted. The rollback repairs old from new before returning to it.
            let mut old_con = old.client();
            let _: () = redis::pipe()
                .cmd("DEL")
                .arg("w:cut_over:1")
                .cmd("SET")
                .arg("w:cut_over:2")
                .arg("stale")
                .cmd("SET")
                .arg("w:cut_over:deleted")
                .arg("x")
                .query(&mut old_con)
                .unwrap();
        }
        let new_before = contents(&mut [a.client(), b.client()]);
        if abort_in == "cut_over" {
            // Another gateway's repair still owes old three keys, as its latest report says.
            owe_old(&stack.cp, 3).await;
        }
        let aborted = stack.step(id, "abort").await;
        let aborted = match abort_in {
            "cut_over" => {
                assert_eq!(aborted["state"], "rolling_back", "{aborted}");
                // The task has repaired old, and the route waits for the gateways' repair.
                let waiting = stack
                    .wait(id, |m| {
                        m["progress"]["rollback"]["gateway_repair"]["pending"] == 3
                    })
                    .await;
                assert_eq!(waiting["state"], "rolling_back", "{waiting}");
                tokio::time::sleep(Duration::from_secs(2)).await;
                assert_eq!(stack.migration(id).await["state"], "rolling_back");
                owe_old(&stack.cp, 0).await;
                let done = stack.wait_state(id, "aborted").await;
                let rollback = &done["progress"]["rollback"];
                assert_eq!(
                    (&rollback["repaired"], &rollback["removed"]),
                    (&json!(2), &json!(1)),
                    "{done}"
                );
                assert_eq!(rollback["gateway_repair"]["pending"], 0, "{done}");
                done
            }
            _ => aborted,
        };
        assert_eq!(aborted["state"], "aborted", "{aborted}");
        stack.wait_converged(id).await;
        // A finished or aborted migration takes no more steps.
        let (status, body) = stack
            .cp
            .call(
                "POST",
                &format!("/v1/tenants/acme/migrations/{id}/backfill"),
                None,
            )
            .await;
        assert_eq!(
            (status, body["error"].as_str()),
            (409, Some("migration_state"))
        );

        let route = stack
            .cp
            .expect("GET", "/v1/tenants/acme/route", None, 200)
            .await;
        assert_eq!(route["route"], old_route, "abort in {abort_in}");
        assert_same(
            &contents(&mut [reference.client()]),
            &contents(&mut [old.client()]),
            abort_in,
        );
        // Served from old again: a key written during the migration reads back through the gateway.
        let mut through = stack.gateway.client(Some(&stack.secret)).await;
        let value: String = redis::cmd("GET")
            .arg(format!("w:{abort_in}:7"))
            .query_async(&mut through)
            .await
            .unwrap();
        assert_eq!(value, "7");
        // Nothing was deleted on the new side either.
        let new_after = contents(&mut [a.client(), b.client()]);
        assert!(
            new_before.keys().all(|k| new_after.contains_key(k)),
            "abort in {abort_in} deleted keys"
        );
        assert_eq!(
            stack
                .cp
                .expect("GET", "/v1/tenants/acme/migrations", None, 200)
                .await["migrations"]
                .as_array()
                .unwrap()
                .len(),
            n + 1
        );
    }
}

/// The control plane is killed while backfill runs; the restarted one resumes from the saved cursor (it does not
/// scan everything again), and verify then finds nothing to repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_backfill_resumes_and_verifies_clean() {
    let keys = 3_000;
    let old = RedisServer::start();
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut stack = Stack::start(&old).await;
    populate(&mut [connect(&old.url()).await], keys).await;
    let id = stack
        .create(
            two_shards(&a, &b),
            "primary",
            json!({"keys_per_sec": 500, "batch": 100}),
        )
        .await;
    stack.step(id, "backfill").await;
    let scanned_at_kill = stack.wait_scanned(id, keys as u64 / 2).await;
    stack.cp.stop();
    stack.cp.restart();
    // `switchyard-ctl migrations watch` follows the resumed task to its end.
    let ctl = binary("switchyard-ctl", "SWITCHYARD_CTL_BIN");
    let (url, path) = (stack.cp.url(), id.to_string());
    let watched = tokio::task::spawn_blocking(move || {
        std::process::Command::new(ctl)
            .args(["--url", &url, "--admin-token", ADMIN_TOKEN])
            .args(["migrations", "watch", "acme", &path, "--interval", "0.2"])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let output = String::from_utf8_lossy(&watched.stdout);
    assert!(
        watched.status.success(),
        "{output}{}",
        String::from_utf8_lossy(&watched.stderr)
    );
    let last = output.lines().last().unwrap_or_default();
    assert!(
        last.contains("backfilled") && last.contains("100%") && last.contains("done"),
        "{output}"
    );
    let backfilled = stack.wait_state(id, "backfilled").await;
    let progress = &backfilled["progress"]["backfill"];
    let scanned = progress["scanned"].as_u64().unwrap();
    // From scratch it would be at least scanned_at_kill + keys.
    assert!(
        scanned < scanned_at_kill + keys as u64 * 4 / 5 && scanned >= keys as u64,
        "scanned {scanned} after a kill at {scanned_at_kill}: {backfilled}"
    );
    assert_eq!(progress["failed"], 0);
    stack.verify_clean(id, keys).await;
    stack.step(id, "cutover").await;
    stack.step(id, "finish").await;
    assert_same(
        &contents(&mut [old.client()]),
        &contents(&mut [a.client(), b.client()]),
        "after finish",
    );
}

/// Backfill from a 3-master cluster (three servers scanned at once, several pages in flight) is killed midway;
/// the restarted control plane resumes every server from its saved cursor (it neither starts over nor skips a
/// page that was still being copied), and verify then finds every key copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_parallel_backfill_resumes_and_copies_every_key() {
    let keys = 6_000;
    let old = RedisCluster::start(3, 0, None);
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let mut stack = Stack::on(json!(old.url())).await;
    populate(&mut [stack.gateway.client(Some(&stack.secret)).await], keys).await;
    let id = stack
        .create(
            two_shards(&a, &b),
            "primary",
            json!({"keys_per_sec": 3000, "batch": 100}),
        )
        .await;
    stack.step(id, "backfill").await;
    let scanned_at_kill = stack.wait_scanned(id, keys as u64 / 3).await;
    stack.cp.stop();
    stack.cp.restart();
    let backfilled = stack.wait_state(id, "backfilled").await;
    let progress = &backfilled["progress"]["backfill"];
    let scanned = progress["scanned"].as_u64().unwrap();
    // Started over, it would count at least scanned_at_kill + keys.
    assert!(
        scanned >= keys as u64 && scanned < scanned_at_kill + keys as u64,
        "scanned {scanned} after a kill at {scanned_at_kill}: {backfilled}"
    );
    // Pages copied before the kill but after the last save are copied again: BUSYKEY, counted as skipped.
    let (copied, skipped) = (progress["copied"].as_u64(), progress["skipped"].as_u64());
    assert_eq!(
        copied.zip(skipped).map(|(c, s)| c + s),
        Some(scanned),
        "{backfilled}"
    );
    assert_eq!(progress["failed"], 0);
    stack.verify_clean(id, keys).await;
    assert_same(
        &contents(&mut masters(&old)),
        &contents(&mut [a.client(), b.client()]),
        "after backfill",
    );
}

/// The new deployment is down for ten seconds during double-write (acknowledged by the primary alone, so
/// clients see no error): the gateway repairs the writes it missed once it is back, verify then finds the sides
/// equal and reports what the gateway's repair did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secondary_outage_is_repaired_by_the_gateway_and_verify_says_so() {
    let old = RedisServer::start();
    let data = std::env::temp_dir().join(format!(
        "switchyard-migration-outage-{}-{}",
        std::process::id(),
        switchyard_tests::allocate_port()
    ));
    std::fs::create_dir_all(&data).unwrap();
    let persistent = || {
        RedisServer::builder()
            .arg("--dir")
            .arg(data.to_str().unwrap())
    };
    let new = persistent().start();
    let port = new.port();
    let stack = Stack::start(&old).await;
    populate(&mut [connect(&old.url()).await], 1_000).await;
    let id = stack.create(json!(new.url()), "primary", json!({})).await;
    stack.step(id, "backfill").await;
    stack.wait_state(id, "backfilled").await;

    let _: () = redis::cmd("SAVE").query(&mut new.client()).unwrap();
    drop(new);
    let mut through = stack.gateway.client(Some(&stack.secret)).await;
    let outage = Instant::now();
    let mut written = 0;
    while outage.elapsed() < Duration::from_secs(10) {
        let _: () = redis::cmd("SET")
            .arg(key("string", written % 1_000))
            .arg(format!("during-outage-{written}"))
            .query_async(&mut through)
            .await
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(key("hash", 1 + written % 997))
            .query_async(&mut through)
            .await
            .unwrap();
        written += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let new = persistent().start_on(port);
    assert!(written > 100);

    // The gateway recorded what new missed and repairs it once new is back, without verify; its report says so.
    let divergence = stack
        .cp
        .poll(
            "/v1/tenants/acme/divergence",
            Duration::from_secs(120),
            |d| {
                d["secondaries"].as_array().is_some_and(|s| {
                    !s.is_empty()
                        && s.iter()
                            .all(|s| s["pending"] == 0 && s["repaired"].as_u64() > Some(0))
                })
            },
        )
        .await;
    stack.step(id, "verify").await;
    let verified = stack.wait_state(id, "verified").await;
    let verify = &verified["progress"]["verify"];
    assert_eq!(verify["unresolved"], 0, "{verified}");
    // Verify reports what the gateways' repair already did.
    assert!(
        verify["gateway_repair"]["repaired"].as_u64() > Some(0),
        "{verified} {divergence}"
    );
    assert_same(
        &contents(&mut [old.client()]),
        &contents(&mut [new.client()]),
        "after verify",
    );
    let _ = std::fs::remove_dir_all(&data);
}
