//! What the migration tests share: contents of deployments compared key by key, the writers, the stack of a
//! control plane and a gateway, and the steps taken through the API.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{ControlPlane, Gateway, RedisCluster, RedisServer, connect};

pub(crate) const TYPES: [&str; 6] = ["string", "hash", "list", "set", "zset", "stream"];
pub(crate) const CLIENTS: usize = 20;

/// A key's type, a canonical form of its value, and when it expires (milliseconds since the epoch, as read).
pub(crate) type Contents = BTreeMap<Vec<u8>, (String, Vec<Vec<u8>>, Option<i64>)>;

/// Expiry times compared with this slack: copies take a moment, and the two sides are read at different times.
pub(crate) const EXPIRY_SLACK_MS: i64 = 10_000;

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Every key of every connection (each one a whole server: a standalone or one cluster master).
pub(crate) fn contents(servers: &mut [redis::Connection]) -> Contents {
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
pub(crate) fn assert_same(expected: &Contents, actual: &Contents, what: &str) {
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

pub(crate) fn key(kind: &str, i: usize) -> String {
    format!("k:{kind}:{i}")
}

/// Writes `count` keys of every type (a third with a TTL) to each connection, identically.
pub(crate) async fn populate(targets: &mut [redis::aio::MultiplexedConnection], count: usize) {
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
pub(crate) struct Writers {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) acknowledged: Arc<AtomicU64>,
    pub(crate) errors: Arc<std::sync::Mutex<Vec<String>>>,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Writers {
    pub(crate) async fn start(
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
    pub(crate) async fn progress(&self, more: u64) {
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

    pub(crate) async fn stop(self) -> u64 {
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
pub(crate) struct Stack {
    pub(crate) cp: ControlPlane,
    pub(crate) gateway: Gateway,
    pub(crate) secret: String,
    _cache: tempfile_path::Path,
}

pub(crate) mod tempfile_path {
    /// A file path removed on drop.
    pub(crate) struct Path(pub std::path::PathBuf);
    impl Drop for Path {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

impl Stack {
    pub(crate) async fn start(old: &RedisServer) -> Stack {
        Stack::on(json!(old.url())).await
    }

    /// A stack whose tenant starts on the resource at `old` (a URL).
    pub(crate) async fn on(old: Value) -> Stack {
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

    pub(crate) async fn migration(&self, id: i64) -> Value {
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
    pub(crate) async fn step(&self, id: i64, action: &str) -> Value {
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
    pub(crate) async fn wait_state(&self, id: i64, state: &str) -> Value {
        self.wait(id, |m| m["state"] == state).await
    }

    /// Waits (generously) until the migration is as `done` says.
    pub(crate) async fn wait(&self, id: i64, done: impl Fn(&Value) -> bool) -> Value {
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
    pub(crate) async fn wait_scanned(&self, id: i64, keys: u64) -> u64 {
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
    pub(crate) async fn verify_clean(&self, id: i64, keys: usize) {
        self.step(id, "verify").await;
        let verified = self.wait_state(id, "verified").await;
        let verify = &verified["progress"]["verify"];
        for counter in ["repaired", "removed", "unresolved", "failed"] {
            assert_eq!(verify[counter], 0, "{counter}: {verified}");
        }
        assert_eq!(verify["matched"], keys, "{verified}");
    }

    pub(crate) async fn wait_converged(&self, id: i64) {
        let started = Instant::now();
        while self.migration(id).await["converged"] != true {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "gateways never converged"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) async fn create(&self, to: Value, ack: &str, limits: Value) -> i64 {
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

pub(crate) fn masters(cluster: &RedisCluster) -> Vec<redis::Connection> {
    cluster
        .masters()
        .iter()
        .map(|m| cluster.client(m.port))
        .collect()
}

/// Two fresh Redis servers as a ring-sharded table: the "one shard to several" shape.
pub(crate) fn two_shards(a: &RedisServer, b: &RedisServer) -> Value {
    json!({"type": "sharded", "shards": [
        {"name": "s1", "target": a.url()},
        {"name": "s2", "target": b.url()}]})
}
