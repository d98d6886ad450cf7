//! What the near cache's tests share: a tenant with the cache, its clients, the waits for a key to be cached or
//! a change to be seen, and the stale-read checker.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_tests::{Gateway, RawClient, RedisServer, command_calls, wait_for};

pub(crate) const PASSWORD: &str = "s3cret-near-cache";
/// How long a direct write may take to reach the cache (Redis' invalidation, on loopback): the tests poll this
/// long at most, and the checker allows it.
pub(crate) const INVALIDATION_DELAY: Duration = Duration::from_millis(500);

pub(crate) fn routes(backend: &RedisServer, tenant: Value) -> Value {
    routed(json!(backend.url()), tenant)
}

/// The routes of the tenant `demo` (its fields in `tenant`) with `target` as its one target.
pub(crate) fn routed(target: Value, tenant: Value) -> Value {
    let mut tenant = tenant;
    tenant["name"] = json!("demo");
    tenant["passwords"] = json!([PASSWORD]);
    tenant["route"] = json!({"type": "single", "target": target});
    json!({ "tenants": [tenant] })
}

pub(crate) fn every_key(max_bytes: u64) -> Value {
    json!({"near_cache": {"max_bytes": max_bytes, "keys": "all"}})
}

pub(crate) fn gateway(backend: &RedisServer, tenant: Value) -> Gateway {
    Gateway::builder()
        .arg("--workers")
        .arg("1")
        .start(&routes(backend, tenant))
}

pub(crate) fn authed(gateway: &Gateway, protocol: u8) -> RawClient {
    let mut client = RawClient::connect(gateway.port());
    assert_eq!(client.request(&[b"AUTH", PASSWORD.as_bytes()]), b"+OK\r\n");
    if protocol == 3 {
        assert!(client.request(&[b"HELLO", b"3"]).starts_with(b"%"));
    }
    client
}

pub(crate) fn bulk(value: &str) -> Vec<u8> {
    format!("${}\r\n{value}\r\n", value.len()).into_bytes()
}

/// `SET key value` straight on Redis, not through the gateway.
pub(crate) fn set(redis: &mut redis::Connection, key: &str, value: &str) {
    let _: () = redis::cmd("SET").arg(key).arg(value).query(redis).unwrap();
}

/// A backend, a gateway caching every key of the tenant, a client of Redis itself and one of the gateway, with
/// `k` set to `v1` and cached.
pub(crate) fn with_k_cached() -> (RedisServer, Gateway, redis::Connection, RawClient) {
    let backend = RedisServer::start();
    let gateway = gateway(&backend, every_key(1 << 20));
    let mut redis = backend.client();
    let mut client = authed(&gateway, 2);
    client.roundtrip(b"SET k v1\r\n", b"+OK\r\n");
    until_cached(&mut client, &mut redis, "k", &bulk("v1"));
    (backend, gateway, redis, client)
}

/// Reads `key` through the gateway until the reply is `expected` and Redis saw no `GET` for it (neither the
/// client's nor a fill's): the cache answered.
pub(crate) fn until_cached(
    client: &mut RawClient,
    redis: &mut redis::Connection,
    key: &str,
    expected: &[u8],
) {
    until_cached_as(
        client,
        std::slice::from_mut(redis),
        &[b"GET", key.as_bytes()],
        expected,
    );
}

/// Sends `args` through the gateway until the reply is `expected` and none of the nodes `redis` saw the
/// command (neither the client's nor a fill's): the cache answered.
pub(crate) fn until_cached_as(
    client: &mut RawClient,
    redis: &mut [redis::Connection],
    args: &[&[u8]],
    expected: &[u8],
) {
    let command = String::from_utf8_lossy(args[0]).to_lowercase();
    let mut calls = || -> u64 { redis.iter_mut().map(|r| command_calls(r, &command)).sum() };
    let what = String::from_utf8_lossy(&args.join(&b' ')).into_owned();
    wait_for(&format!("{what} cached"), Duration::from_secs(10), || {
        let before = calls();
        let reply = client.request(args);
        reply == expected && calls() == before
    });
}

/// Reads `key` through the gateway until it is `expected`, within the invalidation delay; then it stays so.
pub(crate) fn seen_within_delay(client: &mut RawClient, key: &str, expected: &[u8]) {
    seen_as_within_delay(client, &[b"GET", key.as_bytes()], expected);
}

/// Sends `args` through the gateway until the reply is `expected`, within the invalidation delay; then it stays
/// so.
pub(crate) fn seen_as_within_delay(client: &mut RawClient, args: &[&[u8]], expected: &[u8]) {
    let deadline = Instant::now() + INVALIDATION_DELAY;
    loop {
        let reply = client.request(args);
        if reply == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{:?}: still {:?} after {INVALIDATION_DELAY:?}",
            String::from_utf8_lossy(&args.join(&b' ')),
            String::from_utf8_lossy(&reply)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for _ in 0..20 {
        assert_eq!(client.request(args), expected);
    }
}

/// The id of the gateway's tracking connection on `redis`, once it has one.
pub(crate) fn tracking_client(redis: &mut redis::Connection) -> Option<String> {
    let list: String = redis::cmd("CLIENT").arg("LIST").query(redis).unwrap();
    list.lines()
        .find(|line| {
            line.split(' ').any(|field| {
                field
                    .strip_prefix("flags=")
                    .is_some_and(|f| f.contains('t'))
            })
        })
        .and_then(|line| line.split(' ').find_map(|f| f.strip_prefix("id=")))
        .map(str::to_string)
}

/// One acknowledged write of a key's history.
struct Acked {
    value: u64,
    at: Instant,
    /// The gateway with the cache it was written through (which drops the key before the write is sent), by
    /// its index in `Checker::cached`; `None`: around the caches (straight to Redis, or through a gateway
    /// without one: a cache learns of it by Redis' invalidation, within the delay). A write through one gateway
    /// reaches another's cache that way too.
    via: Option<usize>,
}

/// How the checker's keys hold their values, and how readers read them.
#[derive(Clone, Copy)]
pub(crate) enum Shape {
    /// A string: `SET`, read with `GET`.
    String,
    /// A hash's field `v` (beside a field `other` that never changes): `HSET`, read in turn with `HGET`,
    /// `HGETALL` and `HMGET`.
    Hash,
}

impl Shape {
    fn write(self, con: &mut redis::Connection, key: &str, value: u64) -> redis::RedisResult<()> {
        match self {
            Shape::String => redis::cmd("SET").arg(key).arg(value).query(con),
            Shape::Hash => redis::cmd("HSET")
                .arg(key)
                .arg("v")
                .arg(value)
                .arg("other")
                .arg("x")
                .query::<i64>(con)
                .map(drop),
        }
    }

    /// The key's value, read the `turn`th way.
    fn read(self, con: &mut redis::Connection, key: &str, turn: usize) -> redis::RedisResult<u64> {
        match (self, turn % 3) {
            (Shape::String, _) => redis::cmd("GET").arg(key).query(con),
            (Shape::Hash, 0) => redis::cmd("HGET").arg(key).arg("v").query(con),
            (Shape::Hash, 1) => {
                let all: std::collections::HashMap<String, String> =
                    redis::cmd("HGETALL").arg(key).query(con)?;
                Ok(all.get("v").and_then(|v| v.parse().ok()).unwrap_or(0))
            }
            (Shape::Hash, _) => {
                let (value, _): (u64, String) = redis::cmd("HMGET")
                    .arg(key)
                    .arg("v")
                    .arg("other")
                    .query(con)?;
                Ok(value)
            }
        }
    }
}

/// A stale-read checker: writers around the caches (`direct`: Redis itself, or a gateway without a cache) and
/// through the gateways with one (`cached`: one worker each), and readers through the latter, on a few hot keys
/// whose values only grow (each key's writes are serialized). A read must return a value at least as new as
/// every write acknowledged through its own gateway before it began, and as every other write acknowledged
/// `INVALIDATION_DELAY` before it began. Half the keys are written only around the caches (only Redis'
/// invalidations keep them fresh), the others both ways.
pub(crate) struct Checker {
    pub(crate) direct: String,
    pub(crate) cached: Vec<String>,
    pub(crate) keys: Vec<String>,
    pub(crate) shape: Shape,
    /// Whether requests may fail (a failover under way): a failed write is not counted as acknowledged (nor
    /// as not done: values only grow either way), a failed read checks nothing.
    pub(crate) failures_allowed: bool,
    /// Whether reads the cache does not answer go to replicas (which apply a write a moment after their master
    /// acknowledged it, as they would without the cache): every write is then allowed the invalidation delay.
    pub(crate) replica_reads: bool,
}

impl Checker {
    /// Runs the writers and readers while `meanwhile` runs, and at least `at_least`; returns the reads checked.
    pub(crate) fn run(&self, at_least: Duration, meanwhile: impl FnOnce()) -> u64 {
        let keys = self.keys.len();
        let histories: Arc<Vec<Mutex<Vec<Acked>>>> =
            Arc::new((0..keys).map(|_| Mutex::new(Vec::new())).collect());
        let mut setup = redis::Client::open(self.direct.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        for key in &self.keys {
            self.shape.write(&mut setup, key, 0).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        let gateways = self.cached.len();
        for writer in 0..4 * gateways {
            let direct = writer % 2 == 0;
            let via = (!direct).then_some(writer / 2 % gateways);
            let url = match via {
                None => self.direct.clone(),
                Some(gateway) => self.cached[gateway].clone(),
            };
            let (histories, stop) = (Arc::clone(&histories), Arc::clone(&stop));
            let (names, shape, failures) = (self.keys.clone(), self.shape, self.failures_allowed);
            threads.push(std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut turn = writer;
                while !stop.load(Ordering::Relaxed) {
                    let key = match direct {
                        true => turn % keys,
                        false => keys / 2 + turn % (keys - keys / 2),
                    };
                    turn += 1;
                    let mut history = histories[key].lock().unwrap();
                    let value = history.last().map_or(1, |last| last.value + 1);
                    match shape.write(&mut con, &names[key], value) {
                        Ok(()) => history.push(Acked {
                            value,
                            at: Instant::now(),
                            via,
                        }),
                        Err(e) if failures => eprintln!("write failed: {e}"),
                        Err(e) => panic!("write of {}: {e}", names[key]),
                    }
                    drop(history);
                    std::thread::sleep(Duration::from_millis(5));
                }
            }));
        }
        for reader in 0..4 * gateways {
            let gateway = reader % gateways;
            let url = self.cached[gateway].clone();
            let (histories, stop, reads) = (
                Arc::clone(&histories),
                Arc::clone(&stop),
                Arc::clone(&reads),
            );
            let (names, shape, failures) = (self.keys.clone(), self.shape, self.failures_allowed);
            let lagging = self.replica_reads;
            threads.push(std::thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                let mut turn = reader;
                while !stop.load(Ordering::Relaxed) {
                    let key = turn % keys;
                    turn += 1;
                    let began = Instant::now();
                    // The newest write every read must see: acknowledged through its gateway before the read
                    // began, or any other way the invalidation delay before.
                    let floor = histories[key]
                        .lock()
                        .unwrap()
                        .iter()
                        .rev()
                        .find(|w| {
                            (w.via == Some(gateway) && !lagging)
                                || w.at + INVALIDATION_DELAY <= began
                        })
                        .map_or(0, |w| w.value);
                    let value = match shape.read(&mut con, &names[key], turn / keys) {
                        Ok(value) => value,
                        Err(e) if failures => {
                            eprintln!("read failed: {e}");
                            continue;
                        }
                        Err(e) => panic!("read of {}: {e}", names[key]),
                    };
                    assert!(
                        value >= floor,
                        "{}: read {value}, but {floor} was acknowledged before the read began",
                        names[key]
                    );
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        let started = Instant::now();
        meanwhile();
        std::thread::sleep(at_least.saturating_sub(started.elapsed()));
        stop.store(true, Ordering::Relaxed);
        for thread in threads {
            thread
                .join()
                .expect("a reader saw a stale value (or a writer failed)");
        }
        reads.load(Ordering::Relaxed)
    }
}

/// The checker on one Redis with `shape`d keys named `name:0..4` (see `Checker`), with a gateway caching every
/// key; asserts that it checked the cache.
pub(crate) fn check_one_redis(shape: Shape, name: &str) {
    let backend = RedisServer::start();
    let gateway = gateway(&backend, every_key(1 << 20));
    let checker = Checker {
        direct: backend.url(),
        cached: vec![gateway.url(Some(PASSWORD))],
        keys: (0..4).map(|key| format!("{name}:{key}")).collect(),
        shape,
        failures_allowed: false,
        replica_reads: false,
    };
    let reads = checker.run(Duration::from_secs(6), || {});
    assert_checked(&gateway, reads);
}

/// Asserts that a checker's `reads` were answered from the cache often enough to check it.
pub(crate) fn assert_checked(gateway: &Gateway, reads: u64) {
    let hits = gateway.metric("switchyard_near_cache_hits_total{tenant=\"demo\"}");
    assert!(
        hits > 100,
        "only {hits} hits in {reads} reads: the checker did not check the cache"
    );
}
