//! Route tables end to end: sharding checked on the backends themselves, multi-key split and merge, CROSSSLOT,
//! double-write with each ack mode, read failover. Double-write and read failover run for clients speaking RESP2
//! and RESP3.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use switchyard_schemas::placement::Placement;
use switchyard_schemas::{HashSpec, RouteTable};
use switchyard_tests::{
    Gateway, RawClient, RedisServer, assert_speaks, each_protocol, each_protocol_async, null_reply,
    open_tenant,
};

fn sharded(backends: &[RedisServer], hash: Value) -> Value {
    let buckets = hash["buckets"].as_u64();
    let shards: Vec<Value> = backends
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let mut shard = json!({"name": format!("s{i}"), "target": b.url()});
            if let Some(n) = buckets {
                let per = n / backends.len() as u64;
                let last = if i + 1 == backends.len() {
                    n - 1
                } else {
                    per * (i as u64 + 1) - 1
                };
                shard["buckets"] = json!([format!("{}-{}", per * i as u64, last)]);
            }
            shard
        })
        .collect();
    json!({"type": "sharded", "hash": hash, "shards": shards})
}

fn placement(route: &Value) -> Placement {
    match serde_json::from_value::<RouteTable>(route.clone()).unwrap() {
        RouteTable::Sharded { hash, shards, .. } => Placement::new(&hash, &shards),
        _ => Placement::new(&HashSpec::Ring, &[]),
    }
}

fn keys_on(backend: &RedisServer) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query(&mut backend.client())
        .unwrap()
}

fn start_n(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_on_the_shard_placement_says() {
    for (n, hash) in [
        (3, json!({"algorithm": "ring"})),
        (4, json!({"algorithm": "ring"})),
        (3, json!({"algorithm": "crc16", "buckets": 16384})),
        (4, json!({"algorithm": "camellia", "buckets": 64})),
    ] {
        let backends = start_n(n);
        let route = sharded(&backends, hash.clone());
        let gateway = Gateway::start(&open_tenant(route.clone()));
        let mut con = gateway.client(None).await;
        let keys: Vec<String> = (0..10_000).map(|i| format!("key:{i}")).collect();
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("SET").arg(key).arg(key).ignore();
        }
        let () = pipe.query_async(&mut con).await.unwrap();
        let placement = placement(&route);
        for (i, backend) in backends.iter().enumerate() {
            let stored = keys_on(backend);
            let expected = keys
                .iter()
                .filter(|k| placement.shard_of(k.as_bytes()) == i)
                .count();
            assert_eq!(stored.len(), expected, "{hash}: shard {i}");
            assert!(
                stored.iter().all(|k| placement.shard_of(k.as_bytes()) == i),
                "{hash}: a key on the wrong shard"
            );
            // camellia's hash is Java's String.hashCode: compatible, not evenly spread, so only placement counts.
            if hash["algorithm"] == "camellia" {
                continue;
            }
            let even = keys.len() / n;
            assert!(
                stored.len().abs_diff(even) * 10 <= even,
                "{hash}: shard {i} holds {} of {}",
                stored.len(),
                keys.len()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_key_commands_split_and_merge_in_key_order() {
    let backends = start_n(3);
    let gateway = Gateway::start(&open_tenant(sharded(
        &backends,
        json!({"algorithm": "ring"}),
    )));
    let mut con = gateway.client(None).await;
    let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
    let mut mset = redis::cmd("MSET");
    for key in &keys {
        mset.arg(key).arg(format!("v-{key}"));
    }
    mset.arg("k5").arg("last-wins");
    let () = mset.query_async(&mut con).await.unwrap();
    assert!(
        backends.iter().all(|b| !keys_on(b).is_empty()),
        "the keys spread over every shard"
    );

    let mut asked: Vec<String> = keys.clone();
    asked.extend(["k7".to_string(), "missing".to_string(), "k7".to_string()]);
    let values: Vec<Option<String>> = redis::cmd("MGET")
        .arg(&asked)
        .query_async(&mut con)
        .await
        .unwrap();
    for (key, value) in asked.iter().zip(&values) {
        let expected = match key.as_str() {
            "missing" => None,
            "k5" => Some("last-wins".to_string()),
            _ => Some(format!("v-{key}")),
        };
        assert_eq!(value, &expected, "{key}");
    }
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&asked)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(exists, 102, "EXISTS counts duplicates, as Redis does");
    let touched: i64 = redis::cmd("TOUCH")
        .arg(&keys[..10])
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(touched, 10);
    let deleted: i64 = redis::cmd("DEL")
        .arg(&asked)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(deleted, 100, "DEL counts each deleted key once");
    let dbsize: i64 = redis::cmd("DBSIZE").query_async(&mut con).await.unwrap();
    assert_eq!(dbsize, 0);
}

#[test]
fn keys_that_must_be_together_get_crossslot() {
    let backends = start_n(3);
    let route = sharded(&backends, json!({"algorithm": "crc16", "buckets": 16384}));
    let placement = placement(&route);
    let gateway = Gateway::start(&open_tenant(route));
    // Two keys on different shards, and two with one hash tag.
    let a = "a";
    let b = (0..)
        .map(|i| format!("b{i}"))
        .find(|k| placement.shard_of(k.as_bytes()) != placement.shard_of(a.as_bytes()))
        .unwrap();
    let mut client = RawClient::connect(gateway.port());
    let crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    client.roundtrip(format!("SET {a} 1\r\n").as_bytes(), b"+OK\r\n");
    client.roundtrip(format!("RENAME {a} {b}\r\n").as_bytes(), crossslot);
    client.roundtrip(format!("MSETNX {a} 1 {b} 2\r\n").as_bytes(), crossslot);
    client.roundtrip(format!("SMOVE {a} {b} m\r\n").as_bytes(), crossslot);
    client.roundtrip(b"SET {user1}.a 1\r\n", b"+OK\r\n");
    client.roundtrip(b"RENAME {user1}.a {user1}.b\r\n", b"+OK\r\n");
    client.roundtrip(b"MSETNX {user1}.c 1 {user1}.d 2\r\n", b":1\r\n");
    client.roundtrip(b"PING\r\n", b"+PONG\r\n");
}

fn double_write(primary: &RedisServer, secondary: &RedisServer, ack: &str) -> Value {
    json!({"type": "single", "target": {"write": {"resources": [primary.url(), secondary.url()], "ack": ack}}})
}

/// The `switchyard_double_write_failures_total` lines of the gateway's metrics that count failures to `secondary`.
fn double_write_failures(gateway: &Gateway, secondary: &str) -> Vec<String> {
    let (_, metrics) = gateway.admin_get("/metrics");
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("switchyard_double_write_failures_total") && l.contains(secondary)
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn double_write_leaves_identical_copies() {
    each_protocol_async(double_write_leaves_identical_copies_speaking).await;
}

async fn double_write_leaves_identical_copies_speaking(protocol: u8) {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::start(&open_tenant(double_write(&primary, &secondary, "primary")));
    let url = gateway.url_speaking(None, protocol);
    let mut tasks = Vec::new();
    for client in 0..20 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut con = switchyard_tests::connect(&url).await;
            assert_speaks(&mut con, protocol, &format!("c{client}:speaks")).await;
            for i in 0..500 {
                let key = format!("c{client}:k{}", i % 50);
                let _: redis::Value = match i % 6 {
                    0 => {
                        redis::cmd("SET")
                            .arg(&key)
                            .arg(i)
                            .query_async(&mut con)
                            .await
                    }
                    1 => {
                        redis::cmd("INCR")
                            .arg(format!("c{client}:counter"))
                            .query_async(&mut con)
                            .await
                    }
                    2 => {
                        redis::cmd("RPUSH")
                            .arg(format!("c{client}:list"))
                            .arg(i)
                            .query_async(&mut con)
                            .await
                    }
                    3 => {
                        redis::cmd("HSET")
                            .arg(format!("c{client}:hash"))
                            .arg(&key)
                            .arg(i)
                            .query_async(&mut con)
                            .await
                    }
                    // A double in RESP3: the secondaries' replies of that shape are checked as well.
                    4 => {
                        redis::cmd("ZINCRBY")
                            .arg(format!("c{client}:zset"))
                            .arg(1.5)
                            .arg(&key)
                            .query_async(&mut con)
                            .await
                    }
                    _ => redis::cmd("DEL").arg(&key).query_async(&mut con).await,
                }
                .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let dump = |server: &RedisServer| -> HashMap<String, Vec<u8>> {
        let mut con = server.client();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
        keys.into_iter()
            .map(|k| {
                let value: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut con).unwrap();
                (k, value)
            })
            .collect()
    };
    // Secondaries complete in the background: give them a moment to catch up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while dump(&primary) != dump(&secondary) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (a, b) = (dump(&primary), dump(&secondary));
    assert!(a.len() > 100, "the workload wrote data ({} keys)", a.len());
    assert!(a == b, "primary and secondary differ");
    let failures = double_write_failures(&gateway, &format!("127.0.0.1:{}/0", secondary.port()));
    assert!(
        failures.iter().all(|l| l.ends_with(" 0")),
        "no secondary write failed: {failures:?}"
    );
}

#[test]
fn a_secondary_that_is_down_never_fails_primary_ack_writes() {
    each_protocol(a_secondary_that_is_down_never_fails_primary_ack_writes_speaking);
}

fn a_secondary_that_is_down_never_fails_primary_ack_writes_speaking(protocol: u8) {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::start(&open_tenant(double_write(&primary, &secondary, "primary")));
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    client.roundtrip(b"SET before 1\r\n", b"+OK\r\n");
    let resource = format!("127.0.0.1:{}/0", secondary.port());
    drop(secondary);
    for i in 0..20 {
        client.roundtrip(format!("SET k{i} v\r\n").as_bytes(), b"+OK\r\n");
    }
    client.roundtrip(b"GET missing\r\n", null_reply(protocol));
    let failures = double_write_failures(&gateway, &resource);
    let line = failures
        .first()
        .unwrap_or_else(|| panic!("no failure counter for {resource}"));
    let failures: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(failures >= 20, "{line}");
    assert!(gateway.log().contains("double-write to a secondary failed"));
    assert!(
        !gateway.log().contains("k19"),
        "values and keys stay out of the log"
    );
}

/// Pipelined writes on a double-written route travel to each copy as one run: every write reaches the secondary,
/// and a write that fails there (and only there) is counted, once, while the others of its run are applied.
#[test]
fn pipelined_double_writes_reach_the_secondary_and_count_each_failure() {
    each_protocol(pipelined_double_writes_reach_the_secondary_and_count_each_failure_speaking);
}

fn pipelined_double_writes_reach_the_secondary_and_count_each_failure_speaking(protocol: u8) {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::start(&open_tenant(double_write(&primary, &secondary, "primary")));
    // Only the secondary holds a list at k2: INCR k2 fails there and nowhere else.
    let _: i64 = redis::cmd("RPUSH")
        .arg("k2")
        .arg("x")
        .query(&mut secondary.client())
        .unwrap();
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    client.roundtrip(b"INCR k0\r\n", b":1\r\n");
    // A read in the run (the primary's alone) and a write whose reply has a RESP3 shape (a double).
    client.send(b"INCR k1\r\nZINCRBY z 1 m\r\nINCR k2\r\nGET missing\r\nINCR k3\r\n");
    let score: &[u8] = if protocol == 3 {
        b",1\r\n"
    } else {
        b"$1\r\n1\r\n"
    };
    for expected in [b":1\r\n", score, b":1\r\n", null_reply(protocol), b":1\r\n"] {
        assert_eq!(
            String::from_utf8_lossy(&client.read_reply()),
            String::from_utf8_lossy(expected)
        );
    }
    let mut copy = secondary.client();
    switchyard_tests::wait_for("the secondary to apply k3", Duration::from_secs(5), || {
        redis::cmd("GET")
            .arg("k3")
            .query::<Option<i64>>(&mut copy)
            .unwrap()
            == Some(1)
    });
    let k1: i64 = redis::cmd("GET").arg("k1").query(&mut copy).unwrap();
    assert_eq!(k1, 1);
    let score: f64 = redis::cmd("ZSCORE")
        .arg("z")
        .arg("m")
        .query(&mut copy)
        .unwrap();
    assert_eq!(score, 1.0);
    let resource = format!("127.0.0.1:{}/0", secondary.port());
    let failures = double_write_failures(&gateway, &resource);
    let line = failures
        .first()
        .unwrap_or_else(|| panic!("no failure counter for {resource}"));
    assert!(line.ends_with(" 1"), "{line}");
    assert!(gateway.log().contains("WRONGTYPE"), "{}", gateway.log());
}

#[test]
fn ack_all_check_error_reports_a_failed_secondary() {
    each_protocol(ack_all_check_error_reports_a_failed_secondary_speaking);
}

fn ack_all_check_error_reports_a_failed_secondary_speaking(protocol: u8) {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::start(&open_tenant(double_write(
        &primary,
        &secondary,
        "all_check_error",
    )));
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    // Every copy's reply is waited for: a null from each.
    client.roundtrip(b"SET k v XX GET\r\n", b"$1\r\nv\r\n");
    client.roundtrip(b"SET fresh v XX GET\r\n", null_reply(protocol));
    let port = secondary.port();
    drop(secondary);
    client.send(b"SET k w\r\n");
    let line = String::from_utf8(client.read_line()).unwrap();
    assert!(
        line.starts_with(&format!("-ERR backend 127.0.0.1:{port} ")),
        "{line}"
    );
    // The primary took the write all the same.
    let value: String = redis::cmd("GET")
        .arg("k")
        .query(&mut primary.client())
        .unwrap();
    assert_eq!(value, "w");
}

#[test]
fn random_writes_are_refused_under_double_write() {
    each_protocol(random_writes_are_refused_under_double_write_speaking);
}

fn random_writes_are_refused_under_double_write_speaking(protocol: u8) {
    let primary = RedisServer::start();
    let secondary = RedisServer::start();
    let gateway = Gateway::start(&open_tenant(double_write(&primary, &secondary, "all")));
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    client.roundtrip(b"SADD s a b c\r\n", b":3\r\n");
    client.roundtrip(
        b"SPOP s\r\n",
        b"-ERR SPOP is refused on a double-written route: its effect is random and the copies would diverge\r\n",
    );
    client.roundtrip(b"SCARD s\r\n", b":3\r\n");
    // XADD generates its entry ID on each node unless the client names it, and `~` trims by node layout.
    client.roundtrip(
        b"XADD st * f v\r\n",
        b"-ERR XADD is refused on a double-written route: its effect is random and the copies would diverge\r\n",
    );
    client.roundtrip(
        b"XADD st MAXLEN ~ 10 1-1 f v\r\n",
        b"-ERR XADD is refused on a double-written route: its effect is random and the copies would diverge\r\n",
    );
    client.roundtrip(b"XADD st 1-1 f v\r\n", b"$3\r\n1-1\r\n");
    client.roundtrip(b"XADD st MAXLEN = 1 2-0 f w\r\n", b"$3\r\n2-0\r\n");
    client.roundtrip(b"XADD none NOMKSTREAM 1-1 f v\r\n", null_reply(protocol));
    for server in [&primary, &secondary] {
        let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
            .arg("st")
            .arg("-")
            .arg("+")
            .query(&mut server.client())
            .unwrap();
        assert_eq!(
            entries,
            vec![("2-0".to_string(), vec![("f".to_string(), "w".to_string())])]
        );
    }
}

#[test]
fn ordered_reads_fail_over_when_the_first_read_resource_dies() {
    each_protocol(ordered_reads_fail_over_when_the_first_read_resource_dies_speaking);
}

fn ordered_reads_fail_over_when_the_first_read_resource_dies_speaking(protocol: u8) {
    let writer = RedisServer::start();
    let replica_a = RedisServer::start();
    let replica_b = RedisServer::start();
    for (server, value) in [(&writer, "w"), (&replica_a, "a"), (&replica_b, "b")] {
        let () = redis::cmd("SET")
            .arg("who")
            .arg(value)
            .query(&mut server.client())
            .unwrap();
    }
    let route = json!({"type": "single", "target": {
        "read": {"resources": [replica_a.url(), replica_b.url()], "policy": "ordered"},
        "write": {"resources": [writer.url()]}}});
    let gateway = Gateway::start(&open_tenant(route));
    let mut client = RawClient::connect_speaking(gateway.port(), protocol);
    client.roundtrip(b"GET who\r\n", b"$1\r\na\r\n");
    client.roundtrip(b"GET missing\r\n", null_reply(protocol));
    client.roundtrip(b"SET k v\r\n", b"+OK\r\n");
    let exists: i64 = redis::cmd("EXISTS")
        .arg("k")
        .query(&mut writer.client())
        .unwrap();
    assert_eq!(exists, 1, "writes go to the write set");
    drop(replica_a);
    // The first read after the death may fail (it was in flight); after that, reads move to the next resource.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        client.send(b"GET who\r\n");
        if client.read_line() == b"$1\r\n" {
            client.expect(b"b\r\n");
            break;
        }
        assert!(Instant::now() < deadline, "reads did not fail over");
        std::thread::sleep(Duration::from_millis(50));
    }
    client.roundtrip(b"GET missing\r\n", null_reply(protocol));
}

#[test]
fn explain_prints_the_placement_the_data_path_uses() {
    let backends = start_n(3);
    let route = sharded(&backends, json!({"algorithm": "ring"}));
    let placement = placement(&route);
    let dir = std::env::temp_dir().join(format!("switchyard-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("routes.json");
    std::fs::write(&file, open_tenant(route).to_string()).unwrap();
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(
        exe.parent()
            .unwrap()
            .parent()
            .unwrap()
            .join("switchyard-gateway"),
    )
    .args(["explain", "--routes"])
    .arg(&file)
    .args(["--tenant", "t", "alpha", "beta", "{tag}x"])
    .output()
    .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    for (line, key) in text.lines().zip(["alpha", "beta", "{tag}x"]) {
        let shard = placement.shard_of(key.as_bytes());
        assert!(
            line.starts_with(&format!("{key}\tshard=s{shard}\t")),
            "{line}"
        );
        assert!(
            line.contains(&format!("127.0.0.1:{}/0", backends[shard].port())),
            "{line}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_visits_every_shard_and_returns_each_key_once() {
    let backends = start_n(4);
    let gateway = Gateway::start(&open_tenant(sharded(
        &backends,
        json!({"algorithm": "ring"}),
    )));
    let mut con = gateway.client(None).await;
    let mut mset = redis::cmd("MSET");
    for i in 0..1000 {
        mset.arg(format!("item:{i}")).arg(i);
    }
    mset.arg("other").arg(1);
    let () = mset.query_async(&mut con).await.unwrap();
    assert!(
        backends.iter().all(|b| !keys_on(b).is_empty()),
        "the keys spread over every shard"
    );

    let mut seen = Vec::new();
    let mut cursor: u64 = 0;
    let mut calls = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("item:*")
            .arg("COUNT")
            .arg(50)
            .query_async(&mut con)
            .await
            .unwrap();
        seen.extend(keys);
        calls += 1;
        assert!(calls < 1000, "SCAN never finished");
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let unique: std::collections::HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), 1000, "every item key, and only those");
    assert_eq!(seen.len(), 1000, "each key exactly once");
    let mut client = RawClient::connect(gateway.port());
    client.roundtrip(b"SCAN notanumber\r\n", b"-ERR invalid cursor\r\n");
}
